"""verify/profile.py's analysis on a recorded trace, without a GPU: the kernel-name map
(verify/kernel_groups.yaml), the decode step as the long reply minus the short one, per-token and
per-step division, GPU-busy against wall time and % of the byte floor.

The traces are built from tests/fixtures/profile/hand-built-gemma4-kernels.json: kernel names in
the form vLLM's kernels take on the H200, with made-up durations (a hand-built fixture, not a
measurement). The roofline is hand-built too, in the shape `build.py roofline --json` prints.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from forge.errors import ForgeError
from forge.schema import SchemaError
from tests.build_cli import run_build
from verify import profile, profile_report
from verify.kernel_groups import load_kernel_map

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "profile"
KERNELS = json.loads((FIXTURES / "hand-built-gemma4-kernels.json").read_text())
ROOFLINE_FILE = FIXTURES / "hand-built-roofline.json"
SHORT_STEPS, LONG_STEPS = 4, 30


def chrome_trace(steps: int, with_prefill: bool = True, gap_us: float = 0.5, side_us: float = 0.0) -> dict:
    """The Chrome trace of one reply: the prefill's kernels once, then `steps` decode steps, each
    launch `gap_us` after the last ended (plus host-side events the parser must skip). With
    side_us, a kernel that long runs on a second stream beside each launch of the step's first kernel."""
    events, clock = [], 1000.0
    prefill = KERNELS["prefill_only"] if with_prefill else []
    rows = prefill + KERNELS["decode_step"] * steps
    for at, row in enumerate(rows):
        beside = side_us and at >= len(prefill) and row is KERNELS["decode_step"][0]
        for _ in range(row["launches"]):
            if beside:
                events.append({"ph": "X", "cat": "kernel", "name": "fused_moe_kernel", "ts": clock,
                               "dur": side_us, "pid": 0, "tid": "stream 9"})
            events.append({"ph": "X", "cat": row["cat"], "name": row["name"], "ts": clock,
                           "dur": row["us"], "pid": 0, "tid": "stream 7"})
            clock += row["us"] + gap_us
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 1000.0,
                   "dur": 5.0e5, "pid": 1, "tid": 1})
    return {"traceEvents": events}


def step_us(group: str | None = None) -> float:
    return sum(r["us"] * r["launches"] for r in KERNELS["decode_step"]
               if group is None or r["group"] == group)


def recorded_profile(k: int = 0, wall_ms_per_step: float | None = 3.6, side_us: float = 0.0) -> dict:
    """profile.json as the GPU run writes it: short and long replies, profiled and timed."""
    per_step = k + 1
    tokens = {"short": 1 + per_step * (SHORT_STEPS - 1), "long": 1 + per_step * (LONG_STEPS - 1)}
    steps = {"short": SHORT_STEPS, "long": LONG_STEPS}
    profiles = {label: {"tokens": tokens[label], "steps": steps[label],
                        **profile_report.kernel_table(chrome_trace(steps[label], side_us=side_us))}
                for label in ("short", "long")}
    data = {"kind": "vllm-forge decode profile", "recipe": "gemma-4-26b-a4b-it", "target": "h200",
            "family": "gemma4", "k": k, "dummy": True, "shape": "26b-a4b", "layers": 30,
            "control": "agree", "machine": {"device": "hand-built", "vllm": "0.25.0", "torch": "-"},
            "profiles": profiles, "roofline": None}
    if wall_ms_per_step is not None:
        # Wall: 50 ms of prefill and fixed cost, then wall_ms_per_step for each step.
        data["wall"] = {label: {"tokens": tokens[label], "steps": steps[label],
                                "wall_s": [(50 + wall_ms_per_step * steps[label]) / 1e3 + d
                                           for d in (0.0, 0.001, -0.001)],
                                "tpot_s": [wall_ms_per_step / 1e3 / per_step, None]}
                        for label in ("short", "long")}
    return data


@pytest.fixture(scope="module")
def gemma4():
    return load_kernel_map("gemma4")


# ------------------------------------------------------------------------------------------
# The kernel-name map

def test_every_fixture_kernel_lands_in_its_group(gemma4):
    wrong = {r["name"][:60]: (gemma4.group_of(r["name"]), r["group"])
             for r in KERNELS["decode_step"] + KERNELS["prefill_only"]
             if gemma4.group_of(r["name"]) != r["group"]}
    assert wrong == {}


def test_quantize_kernels_naming_e4m3_are_not_fp8_gemms(gemma4):
    # Their template arguments name Float8_e4m3fn, as the cutlass GEMMs' name float_e4m3_t.
    name = "void vllm::dynamic_per_token_scaled_fp8_quant_kernel_strided<c10::BFloat16, c10::Float8_e4m3fn>()"
    assert gemma4.group_of(name) == "activation_quant"
    assert gemma4.group_of("void cutlass::device_kernel<float_e4m3_t>()") == "fp8_gemm"


def test_runner_kernels_are_bookkeeping_but_a_triton_norm_is_not(gemma4):
    assert gemma4.group_of("_combine_sampled_and_draft_tokens_kernel") == "sampling"
    assert gemma4.group_of("_gemma_rms_norm_kernel") == "norms_elementwise"


def test_a_kernel_no_group_knows_goes_to_other(gemma4):
    assert gemma4.group_of("some_new_kernel_of_a_later_release") == "other"
    assert gemma4.names[-1] == "other"


def _write_map(tmp_path: Path, groups: str) -> Path:
    path = tmp_path / "kernel_groups.yaml"
    path.write_text(f"gemma4:\n  source: test\n  groups:\n{groups}")
    return path


OTHER_GROUP = "    - {name: other, label: rest}\n"


@pytest.mark.parametrize("groups, message", [
    ("    - {name: gemm, label: g, patterns: ['nvjet']}\n",
     "gemma4.groups[0]: the last group must be 'other'"),
    ("    - {name: gemm, label: g, bytes: [weights], patterns: ['x']}\n" + OTHER_GROUP,
     "gemma4.groups[0].bytes: 'weights' is not a roofline byte group"),
    ("    - {name: gemm, label: g, patterns: ['nvjet(']}\n" + OTHER_GROUP,
     "gemma4.groups[0].patterns[0]: not a regular expression"),
    ("    - {name: a, label: a, bytes: [lm_head], patterns: [x]}\n"
     "    - {name: b, label: b, bytes: [lm_head], patterns: [y]}\n" + OTHER_GROUP,
     "(b).bytes: 'lm_head' is already counted by 'a'"),
    ("    - {name: gemm, patterns: ['x']}\n" + OTHER_GROUP, "gemma4.groups[0].label: required"),
])
def test_a_broken_map_is_refused_naming_file_and_field(tmp_path, groups, message):
    path = _write_map(tmp_path, groups)
    with pytest.raises(SchemaError) as error:
        load_kernel_map("gemma4", path)
    assert str(path) in str(error.value) and message in str(error.value)


def test_a_family_without_a_map_is_named(tmp_path):
    path = _write_map(tmp_path, OTHER_GROUP)
    with pytest.raises(SchemaError, match=r"qwen3: no kernel map for this family \(known: gemma4\)"):
        load_kernel_map("qwen3", path)


# The map on the H200's recorded profiles (vLLM 0.27.1, 26B-A4B shapes, online FP8, Inductor):
# every kernel name both steps ran, as the GPU host's profiler recorded them.

RESULTS = ROOT / "benchmarks" / "results"
RECORDED_PROFILES = {"plain": RESULTS / "h200-0.27.1-profile-26b-a4b-l30-plain" / "profile.json",
                "k4": RESULTS / "h200-0.27.1-profile-26b-a4b-l30-k4" / "profile.json"}


def _recorded_names(which: str) -> set[str]:
    profiles = json.loads(RECORDED_PROFILES[which].read_text())["profiles"]
    return {r["name"] for reply in ("short", "long") for r in profiles[reply]["kernels"]}


def _is_fused_quantize(name: str) -> bool:
    # Inductor's kernels fusing the norm/activation with the FP8 scale's absmax and the quantize
    return (name.startswith("triton_") and "fused" in name
            and all(op in name for op in ("abs", "max", "reciprocal")))


@pytest.mark.parametrize("which", list(RECORDED_PROFILES))
def test_inductor_fused_quantize_kernels_are_activation_quant_not_fp8_gemm(gemma4, which):
    fused = sorted(n for n in _recorded_names(which) if _is_fused_quantize(n))
    assert fused, "the recorded profile holds no fused quantize kernel: the test tests nothing"
    # `cutlass_scaled_mm` is in their names (their output feeds it); the GEMM is not theirs.
    assert any("cutlass_scaled_mm" in n for n in fused)
    assert {n: gemma4.group_of(n) for n in fused} == {n: "activation_quant" for n in fused}


@pytest.mark.parametrize("which", list(RECORDED_PROFILES))
def test_fp8_gemm_holds_the_cutlass_device_kernels_only(gemma4, which):
    names = _recorded_names(which)
    fp8 = sorted(n for n in names if gemma4.group_of(n) == "fp8_gemm")
    assert fp8 and all(n.startswith("void cutlass::device_kernel<") for n in fp8), fp8
    # ... and every cutlass device kernel is there (FP8 GEMMs: the attention backend is Triton).
    assert {n for n in names if n.startswith("void cutlass::device_kernel<")} == set(fp8)


@pytest.mark.parametrize("which", list(RECORDED_PROFILES))
def test_split_k_reductions_go_with_their_bf16_gemms(gemma4, which):
    split = [n for n in _recorded_names(which) if "splitKreduce" in n]
    assert split and {gemma4.group_of(n) for n in split} == {"bf16_gemm"}


@pytest.mark.parametrize("which", list(RECORDED_PROFILES))
def test_recorded_profiles_leave_only_a_tiny_gather_in_other(gemma4, which):
    data = json.loads(RECORDED_PROFILES[which].read_text())
    analysis = profile_report.analyse(data, gemma4)
    other = analysis["groups"]["other"]
    # The one kernel the map leaves to `other`: an ATen gather (the spec step's bookkeeping).
    assert all("gather_kernel" in k["name"] for k in analysis["other_kernels"])
    assert other["us_per_step"] < 0.01 * analysis["kernel_us_per_step"]


@pytest.mark.parametrize("which", list(RECORDED_PROFILES))
def test_recorded_group_sums_add_up_to_the_profiles_gpu_total(gemma4, which):
    data = json.loads(RECORDED_PROFILES[which].read_text())
    short, long = data["profiles"]["short"], data["profiles"]["long"]
    analysis = profile_report.analyse(data, gemma4)
    total = sum(g["us_total"] for g in analysis["groups"].values())
    # kernel_us is the GPU host's own sum of each reply's kernel table
    assert total == pytest.approx(long["kernel_us"] - short["kernel_us"])
    steps = long["steps"] - short["steps"]
    assert analysis["kernel_us_per_step"] == pytest.approx(total / steps)


# ------------------------------------------------------------------------------------------
# Traces -> the decode step

def test_kernel_table_counts_gpu_events_only_and_their_union():
    overlapping = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "a", "ts": 0.0, "dur": 10.0},
        {"ph": "X", "cat": "kernel", "name": "b", "ts": 5.0, "dur": 10.0},  # overlaps a
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 30.0, "dur": 2.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0.0, "dur": 100.0},
        {"ph": "i", "cat": "kernel", "name": "marker", "ts": 50.0}]}
    table = profile_report.kernel_table(overlapping)
    assert table["kernel_us"] == 22.0  # 10 + 10 + 2: each event's own time
    assert table["busy_us"] == 17.0  # 0..15 and 30..32: overlaps once
    assert table["span_us"] == 32.0
    assert [r["name"] for r in table["kernels"]] == ["a", "b", "Memset (Device)"]


def test_decode_step_is_the_long_reply_minus_the_short_one(gemma4):
    analysis = profile_report.analyse(recorded_profile(), gemma4)
    assert analysis["steps"] == LONG_STEPS - SHORT_STEPS
    assert analysis["kernel_us_per_step"] == pytest.approx(step_us())  # prefill cancelled
    for group in ("fp8_gemm", "moe", "bf16_gemm", "attention", "activation_quant", "other"):
        assert analysis["groups"][group]["us_per_step"] == pytest.approx(step_us(group)), group
    assert analysis["groups"]["attention"]["launches_per_step"] == pytest.approx(65)


def test_nothing_is_dropped_and_other_is_reported(gemma4):
    analysis = profile_report.analyse(recorded_profile(), gemma4)
    assert sum(g["us_per_step"] for g in analysis["groups"].values()) == pytest.approx(step_us())
    assert analysis["other_us_per_step"] == pytest.approx(3.0)
    text = profile_report.render_markdown(recorded_profile(), analysis)
    assert "Kernel time in `other` (no group matched): 3.0 µs/step:\n- 3.0 µs, 1x: `void at::native::" in text
    assert [k["name"][:40] for k in analysis["other_kernels"]] == ["void at::native::(anonymous namespace)::"]


def test_plain_step_per_token_equals_per_step(gemma4):
    analysis = profile_report.analyse(recorded_profile(k=0), gemma4)
    assert analysis["tokens_per_step"] == 1
    assert analysis["kernel_us_per_token"] == pytest.approx(analysis["kernel_us_per_step"])


def test_spec_step_divides_by_its_tokens_and_its_steps(gemma4):
    analysis = profile_report.analyse(recorded_profile(k=4), gemma4)
    assert analysis["tokens"] == 5 * (LONG_STEPS - SHORT_STEPS)
    assert analysis["tokens_per_step"] == 5
    assert analysis["kernel_us_per_step"] == pytest.approx(step_us())
    assert analysis["kernel_us_per_token"] == pytest.approx(step_us() / 5)
    assert analysis["groups"]["bf16_gemm"]["us_per_token"] == pytest.approx((343.0 + 75.0) / 5)
    assert analysis["label"] == "spec step (k=4)"


def test_gpu_busy_against_wall(gemma4):
    analysis = profile_report.analyse(recorded_profile(wall_ms_per_step=3.6), gemma4)
    assert analysis["wall_us_per_step"] == pytest.approx(3600)  # the 50 ms fixed cost cancels
    assert analysis["busy_pct"] == pytest.approx(100 * step_us() / 3600)
    assert analysis["profiled_busy_pct"] < 100  # the trace's launch gaps are idle
    assert analysis["tpot_us"] == pytest.approx(3600)  # the run without metrics left out
    assert "(engine TPOT 3.600 ms); GPU busy" in profile_report.render_markdown(recorded_profile(), analysis)


def test_kernels_side_by_side_on_streams_count_once_in_the_busy_time(gemma4):
    # Qwen's step runs kernels on two streams at once (§15): their sum outgrew the wall time.
    # Each side kernel is shorter than the one beside it (6.1 µs), so it adds no busy time.
    side = 5.0
    launches = KERNELS["decode_step"][0]["launches"]
    data = recorded_profile(wall_ms_per_step=3.6, side_us=side)
    analysis = profile_report.analyse(data, gemma4, profile_report.read_roofline(ROOFLINE_FILE))
    assert analysis["kernel_us_per_step"] == pytest.approx(step_us() + side * launches)
    assert analysis["busy_us_per_step"] == pytest.approx(step_us(), abs=1e-6)
    assert analysis["busy_pct"] == pytest.approx(100 * step_us() / 3600)
    assert analysis["groups"]["moe"]["us_per_step"] == pytest.approx(step_us("moe") + side * launches)
    floor = analysis["floor"]
    assert floor["pct_of_floor_kernels"] == pytest.approx(100 * floor["step_floor_us"] / step_us())
    text = profile_report.render_markdown(data, analysis)
    assert (f"(GPU busy {step_us() / 1e3:.3f} ms/step: kernels ran side by side on streams, their sum is "
            f"{(step_us() + side * launches) / step_us():.2f}x the busy time)") in text
    assert "side by side" not in profile_report.render_markdown(recorded_profile(), profile_report.analyse(
        recorded_profile(), gemma4))


def test_without_wall_runs_busy_is_not_invented(gemma4):
    analysis = profile_report.analyse(recorded_profile(wall_ms_per_step=None), gemma4)
    assert analysis["busy_pct"] is None and analysis["wall_us_per_step"] is None
    assert "wall time not measured" in profile_report.render_markdown(recorded_profile(), analysis)


def test_a_long_reply_no_longer_than_the_short_one_is_refused(gemma4):
    data = recorded_profile()
    data["profiles"]["long"] = data["profiles"]["short"]
    with pytest.raises(ForgeError, match="no more tokens/steps than the short one"):
        profile_report.analyse(data, gemma4)


def test_a_short_profile_without_events_falls_back_to_the_long_reply_and_says_so(gemma4):
    data = recorded_profile()
    data["profiles"]["short"].update(profile_report.kernel_table({"traceEvents": []}))
    analysis = profile_report.analyse(data, gemma4)
    assert analysis["steps"] == LONG_STEPS
    prefill = sum(r["us"] * r["launches"] for r in KERNELS["prefill_only"])
    assert analysis["kernel_us_per_step"] == pytest.approx(step_us() + prefill / LONG_STEPS)
    assert "prefill included" in profile_report.render_markdown(data, analysis)


def test_a_profile_without_gpu_events_says_so(gemma4):
    data = recorded_profile()
    for label in ("short", "long"):
        data["profiles"][label].update(profile_report.kernel_table({"traceEvents": []}))
    with pytest.raises(ForgeError, match=r"no decode kernel time \(0 GPU events in the long one\)"):
        profile_report.analyse(data, gemma4)


# ------------------------------------------------------------------------------------------
# The byte floor

def test_percent_of_floor_per_group(gemma4):
    roofline = profile_report.read_roofline(ROOFLINE_FILE)
    assert roofline["bandwidth_bytes_s"] == pytest.approx(4.8e12)
    analysis = profile_report.analyse(recorded_profile(), gemma4, roofline)
    bf16 = analysis["groups"]["bf16_gemm"]  # the lm_head and the router's GEMMs
    assert bf16["floor_bytes"] == 1476395008 + 21626880
    assert bf16["floor_us"] == pytest.approx((1476395008 + 21626880) / 4.8e6)  # 312.1 µs
    assert bf16["pct_of_floor"] == pytest.approx(100 * bf16["floor_us"] / (343.0 + 75.0))  # ~75%
    fp8 = analysis["groups"]["fp8_gemm"]
    assert fp8["floor_bytes"] == 700000000 + 535265280  # attention + dense_mlp
    assert fp8["pct_of_floor"] == pytest.approx(100 * fp8["floor_us"] / step_us("fp8_gemm"))
    assert analysis["groups"]["activation_quant"]["pct_of_floor"] is None  # no bytes of its own


def test_step_floor_and_byte_groups_no_kernel_group_counts(gemma4, tmp_path):
    data = json.loads(ROOFLINE_FILE.read_text())
    data["groups"]["per_layer_embedding"] = 1000  # a byte group no kernel group claims
    (tmp_path / "roofline.json").write_text(json.dumps(data))
    roofline = profile_report.read_roofline(tmp_path / "roofline.json")
    analysis = profile_report.analyse(recorded_profile(wall_ms_per_step=3.6), gemma4, roofline)
    floor = analysis["floor"]
    assert floor["step_floor_us"] == pytest.approx(868.88776)
    assert floor["pct_of_floor_kernels"] == pytest.approx(100 * 868.88776 / step_us())
    assert floor["pct_of_floor_wall"] == pytest.approx(100 * 868.88776 / 3600)
    assert floor["unmatched_byte_groups"] == ["per_layer_embedding"]
    text = profile_report.render_markdown(recorded_profile(), analysis)
    assert "Byte groups no kernel group counts: per_layer_embedding." in text


def roofline_of_build_py(tmp_path: Path, recipe: str, vllm: str) -> tuple[dict, dict]:
    """The boundary as it runs: build.py roofline's own --json output (context 350), written to a
    file and read by the report: (what the report read, what the command printed)."""
    proc = run_build("roofline", "--recipe", recipe, "--target", "h200", "--vllm", vllm, "--context", "350",
                     "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "roofline.json").write_text(proc.stdout)
    return profile_report.read_roofline(tmp_path / "roofline.json"), json.loads(proc.stdout)


def test_the_roofline_commands_json_meets_the_kernel_map(gemma4, tmp_path):
    roofline, reported = roofline_of_build_py(tmp_path, "gemma-4-26b-a4b-it", "0.25.0")
    assert roofline["bandwidth_bytes_s"] == pytest.approx(reported["bandwidth_gb_s"] * 1e9)
    analysis = profile_report.analyse(recorded_profile(), gemma4, roofline)
    assert analysis["floor"]["unmatched_byte_groups"] == []  # every byte has its kernel group
    floors = sum(g.get("floor_us") or 0 for g in analysis["groups"].values())
    assert floors == pytest.approx(analysis["floor"]["step_floor_us"])  # counted once each
    groups = reported["groups"]
    assert analysis["groups"]["moe"]["floor_us"] == pytest.approx(
        groups["experts"] / (reported["bandwidth_gb_s"] * 1e3))
    assert analysis["groups"]["attention"]["floor_bytes"] == groups["kv_cache"] > 0


@pytest.mark.parametrize("change, message", [
    ({"groups": {"lm_head": -1}}, "groups.lm_head: must be a whole number of bytes"),
    ({"floor_ms": 0}, "floor_ms: must be a positive number"),
    ({"bytes_per_token": "4e9"}, "bytes_per_token: must be a positive whole number"),
])
def test_a_broken_roofline_is_refused_naming_the_field(tmp_path, change, message):
    data = {**json.loads(ROOFLINE_FILE.read_text()), **change}
    path = tmp_path / "roofline.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ForgeError) as error:
        profile_report.read_roofline(path)
    assert str(path) in str(error.value) and message in str(error.value)


# ------------------------------------------------------------------------------------------
# The CLI: --report on recorded JSON; the GPU run's engine from the recipe

def _write_profiles(tmp_path: Path) -> list[Path]:
    paths = []
    for k in (0, 4):
        path = tmp_path / f"k{k}" / "profile.json"
        path.parent.mkdir()
        path.write_text(json.dumps(recorded_profile(k=k)))
        paths.append(path)
    return paths


def test_report_writes_tables_with_the_floor(tmp_path, capsys):
    paths = _write_profiles(tmp_path)
    md = tmp_path / "profile.md"
    code = profile.main(["--report", *map(str, paths), "--roofline", str(ROOFLINE_FILE),
                         "--md", str(md)])
    assert code == 0
    text = md.read_text()
    assert "## plain step" in text and "## spec step (k=4)" in text
    assert "| bf16_gemm: " in text and "| 75% |" in text  # lm_head + router at ~75% of their floor
    assert "% of floor" in capsys.readouterr().out


def test_report_compares_the_spec_step_with_the_plain_one(tmp_path):
    plain = recorded_profile(k=0, wall_ms_per_step=3.6)
    spec = recorded_profile(k=4, wall_ms_per_step=6.3)
    # The spec step's lm_head work grows (the drafter's lm_head on every draft position).
    spec["profiles"]["long"]["kernels"][0:0] = [{"name": "nvjet_tst_128x8_64x6_1x1_v_bz_TNT",
                                                 "count": 4 * 26, "us": 26 * 500.0}]
    paths = []
    for name, data in (("plain", plain), ("spec", spec)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(data))
    out = tmp_path / "figures.json"
    assert profile.main(["--report", *map(str, paths), "--md", str(tmp_path / "p.md"),
                         "--json", str(out)]) == 0
    text = (tmp_path / "p.md").read_text()
    ratio = (step_us() + 500) / step_us()
    assert f"A spec step costs {ratio:.2f}x the plain step in GPU kernel time, 1.75x in wall time." in text
    assert "| bf16_gemm | 418.0 | 918.0 | +500.0 |" in text
    figures = json.loads(out.read_text())
    assert [f["k"] for f in figures] == [0, 4]


def test_report_plot_writes_a_png(tmp_path):
    """matplotlib is a test requirement (requirements-dev.txt): the plot is drawn for real.
    Before, CI had no matplotlib and ran only the branch that refuses --plot."""
    import matplotlib

    paths = _write_profiles(tmp_path)
    png = tmp_path / "profile.png"
    code = profile.main(["--report", *map(str, paths), "--plot", str(png)])
    assert matplotlib.__version__ and code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob("*.partial"))


def test_report_plot_without_matplotlib_is_one_line(tmp_path):
    """A Python that cannot import matplotlib (sys.modules["matplotlib"] = None: Python's own way
    to make an import fail): --plot is refused in one line, nothing drawn."""
    paths = _write_profiles(tmp_path)
    png = tmp_path / "profile.png"
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from verify import profile\n"
            f"raise SystemExit(profile.main(['--report', *{[str(p) for p in paths]!r}, '--plot', "
            f"{str(png)!r}]))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and "--plot needs matplotlib" in done.stderr
    assert done.stderr.count("\n") == 1 and not png.exists()


@pytest.mark.parametrize("how", [["verify/profile.py"], ["-m", "verify.profile"]])
def test_runs_as_a_script_and_as_a_module(tmp_path, how):
    # As a script, Python puts verify/ (not the root) first on sys.path: the script swaps them,
    # so forge imports and this file does not shadow the standard library's `profile`.
    path = _write_profiles(tmp_path)[0]
    result = subprocess.run([sys.executable, *how, "--report", str(path)], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "## plain step" in result.stdout


def test_prompt_length_sets_the_context():
    ids = profile.first_prompt(True, 1000)
    assert len(ids) == 1000 and ids[0] == 2 and 2 not in ids[1:]  # BOS once
    assert profile.first_prompt(True, 10) == profile.first_prompt(True)[:10]


def test_a_context_longer_than_the_engine_allows_is_refused_before_the_gpu(capsys):
    code = profile.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--dummy",
                         "--prompt-tokens", "4000", "--k", "4", "--max-model-len", "4096"])
    assert code == 2
    assert "take 4150 tokens: more than --max-model-len 4096" in capsys.readouterr().err


def test_a_run_cut_at_max_seconds_writes_what_it_has_and_exits_124(tmp_path):
    # The watchdog as the GPU run starts it, in a process of its own (it ends that process).
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from verify.profile import Recorder, start_watchdog\n"
        f"recorder = Recorder(Path({str(tmp_path / 'profile.json')!r}), {{'phase': 'engine start'}})\n"
        "recorder.write()\n"
        "start_watchdog(recorder, 0.5)\n"
        "recorder.data['wall'] = {'long': {'wall_s': [0.4]}}\n"
        "time.sleep(30)\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 124, result.stderr
    written = json.loads((tmp_path / "profile.json").read_text())
    assert written["cut"] == "--max-seconds 0.5 reached during: engine start"
    assert written["wall"] == {"long": {"wall_s": [0.4]}}  # measured before the cut: kept
    assert "reached during: engine start" in result.stdout


def test_vllm_profiler_mode_asks_the_engine_for_its_torch_profiler(tmp_path):
    args = profile.parse_args(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--dummy",
                               "--profiler", "vllm", "--out", str(tmp_path)])
    config = profile.engine_plan(args, tmp_path)[1]["engine_kwargs"]["profiler_config"]
    assert config["profiler"] == "torch" and config["torch_profiler_dir"] == str(tmp_path / "vllm-traces")
    assert config["torch_profiler_with_stack"] is False  # no Python stacks: less overhead


def test_an_unknown_shape_is_refused_before_the_gpu(capsys):
    with pytest.raises(SystemExit):
        profile.parse_args(["--recipe", "gemma-4-26b-a4b-it", "--dummy", "--shape", "70b"])
    assert "unknown shape '70b'" in capsys.readouterr().err


def test_decode_tokens_are_whole_spec_steps():
    assert profile.decode_tokens(128, 0) == 128
    assert profile.decode_tokens(128, 4) == 130  # 26 steps of 5
    assert profile.decode_tokens(130, 4) == 130


def test_engine_is_the_recipes_as_bench_builds_it(tmp_path):
    args = profile.parse_args(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--dummy",
                               "--layers", "30", "--k", "4", "--attention-backend", "TRITON_ATTN",
                               "--out", str(tmp_path)])
    _, spec = profile.engine_plan(args, tmp_path)
    kwargs, env = spec["engine_kwargs"], spec["env"]
    assert kwargs["quantization"] == "fp8" and kwargs["load_format"] == "dummy"
    assert kwargs["speculative_config"]["num_speculative_tokens"] == 4
    assert kwargs["attention_backend"] == "TRITON_ATTN"
    assert profile.dummy_layers(spec) == 30
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # the profiler's process runs the kernels
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == "1" and env["VLLM_FORGE_CONTROL"] == "agree"
    plain = profile.engine_plan(profile.parse_args(
        ["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--dummy", "--k", "0",
         "--layers", "6", "--out", str(tmp_path / "plain")]), tmp_path / "plain")[1]
    assert "speculative_config" not in plain["engine_kwargs"]
    assert plain["engine_kwargs"]["quantization"] == "fp8" and profile.dummy_layers(plain) == 6


def test_a_baseline_must_be_a_plain_step(tmp_path, capsys):
    paths = _write_profiles(tmp_path)  # k=0, k=4
    assert profile.main(["--report", str(paths[1]), "--baseline", str(paths[1])]) == 2
    assert f"{paths[1]}: --baseline must be a plain step's profile (k=0), not k=4" in capsys.readouterr().err
    assert profile.main(["--report", str(paths[1]), "--baseline", str(paths[0]),
                         "--md", str(tmp_path / "p.md")]) == 0
    text = (tmp_path / "p.md").read_text()
    assert "## plain step" not in text and "## spec step (k=4) against the plain step" in text


# ------------------------------------------------------------------------------------------
# Qwen3.5/3.6 MoE's map: the Gated DeltaNet kernels, read from the release's own source

# The Triton kernels of vLLM 0.27.1's Gated DeltaNet: Qwen's layer, the short convolution and the
# flash-linear-attention ops it calls (kda.py is Kimi Delta Attention's, which Qwen never runs).
GDN_SOURCES = ("vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py",
               "vllm/model_executor/layers/mamba/ops/causal_conv1d.py",
               "vllm/third_party/flash_linear_attention/ops")
NOT_QWENS = {"kda.py"}
GATED_NORMS = {"layer_norm_gated_fwd_kernel", "layer_norm_gated_fwd_kernel1", "layer_norm_fwd_kernel"}


def triton_kernels(path: Path) -> set[str]:
    """The names of the @triton.jit functions in a file: what a CUDA trace calls their kernels."""
    text = path.read_text()
    names = set()
    for jit in re.finditer(r"@triton\.jit", text):
        definition = re.compile(r"^def (\w+)\(", re.M).search(text, jit.end())
        if definition:
            names.add(definition[1])
    return names


def test_every_gated_deltanet_kernel_of_the_release_is_linear_attention_but_its_norms(release_tree):
    qwen = load_kernel_map("qwen3_5_moe")
    root = release_tree("0.27.1")
    kernels: set[str] = set()
    for relative in GDN_SOURCES:
        path = root / relative
        files = [path] if path.is_file() else sorted(p for p in path.glob("*.py") if p.name not in NOT_QWENS)
        for file in files:
            kernels |= triton_kernels(file)
    assert {"_causal_conv1d_update_kernel", "fused_sigmoid_gating_delta_rule_update_kernel",
            "fused_recurrent_gated_delta_rule_packed_decode_kernel", "fused_gdn_gating_kernel"} <= kernels
    placed = {name: qwen.group_of(name) for name in kernels}
    assert {n for n, g in placed.items() if g != "linear_attention"} == GATED_NORMS
    assert {placed[n] for n in GATED_NORMS} == {"norms_elementwise"}
    # Gemma 4's map has no such group: the same names would be its sampling or other time
    assert load_kernel_map("gemma4").group_of("_causal_conv1d_update_kernel") == "sampling"


def test_qwen_shares_gemma4s_groups_but_its_own_gemm_bytes():
    qwen, gemma4 = load_kernel_map("qwen3_5_moe"), load_kernel_map("gemma4")
    for name in ("attention", "moe", "moe_routing", "activation_quant", "sampling", "norms_elementwise"):
        assert qwen.group(name) == gemma4.group(name), name
    assert qwen.group("fp8_gemm").patterns == gemma4.group("fp8_gemm").patterns
    assert qwen.group("fp8_gemm").byte_groups == ("attention", "linear_attention", "shared_expert")
    assert qwen.names.index("linear_attention") < qwen.names.index("sampling")


def test_the_qwen_roofline_meets_its_kernel_map(tmp_path):
    roofline, reported = roofline_of_build_py(tmp_path, "qwen3.6-35b-a3b", "0.27.1")
    analysis = profile_report.analyse(recorded_profile(), load_kernel_map("qwen3_5_moe"), roofline)
    assert analysis["floor"]["unmatched_byte_groups"] == []  # every byte has its kernel group
    floors = sum(g.get("floor_us") or 0 for g in analysis["groups"].values())
    assert floors == pytest.approx(analysis["floor"]["step_floor_us"])
    states = reported["groups"]
    assert analysis["groups"]["linear_attention"]["floor_bytes"] == \
        states["recurrent_state"] + states["conv_state"] > 0


@pytest.mark.parametrize("recipe, layers, shape, architecture, hidden", [
    ("qwen3.6-35b-a3b", 8, "35b-a3b", "Qwen3_5MoeForConditionalGeneration", 2048),
    ("gemma-4-31b-it", 10, "31b", "Gemma4ForCausalLM", 5376),
])
def test_a_dummy_profile_builds_the_recipes_own_model(tmp_path, recipe, layers, shape, architecture, hidden):
    """The GPU run as far as this host goes (no vLLM here: the engine's start fails and says so):
    the dummy model it writes is the recipe's own, not the first family's first shape (which
    profiled a Gemma 4 26B-A4B for any recipe until 2026-12-02), and the kernel map is its family's."""
    out, work = tmp_path / "out", tmp_path / "work"
    result = subprocess.run([sys.executable, "verify/profile.py", "--recipe", recipe, "--target", "h200",
                             "--dummy", "--layers", str(layers), "--k", "2", "--out", str(out),
                             "--work", str(work), "--max-seconds", "120"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    recorded = json.loads((out / "profile.json").read_text())
    assert result.returncode == 1 and "No module named" in recorded["error"]
    assert (recorded["shape"], recorded["layers"]) == (shape, layers)
    assert recorded["family"] == load_recipe_family(recipe)
    model = Path(recorded["settings"]["engine_kwargs"]["model"])
    config = json.loads((model / "config.json").read_text())
    text = config.get("text_config") or config
    assert config["architectures"] == [architecture] and text["hidden_size"] == hidden
    assert text["num_hidden_layers"] == layers


def load_recipe_family(recipe: str) -> str:
    from forge.serving.recipes import load_recipe

    return load_recipe(recipe, "h200").family_model[0].name


def test_roofline_auto_is_the_floor_build_py_prints_for_what_the_profile_ran(monkeypatch):
    """The recorded plain profile and the roofline printed beside it then (`build.py roofline
    --context 356`, record h200-0.27.1-profile-26b-a4b-l30-plain): `--roofline auto` derives the
    same floor from the profile's own record (26B-A4B, h200, 0.27.1, 30 layers, its prompt plus
    the mean reply)."""
    monkeypatch.chdir(ROOT)
    record = "benchmarks/results/h200-0.27.1-profile-26b-a4b-l30-plain"
    recorded = json.loads(Path(f"{record}/profile.json").read_text())
    auto = profile.recorded_roofline(recorded, "profile.json")
    committed = profile_report.read_roofline(f"{record}/roofline.json")
    assert {k: v for k, v in auto.items() if k != "source"} == \
        {k: v for k, v in committed.items() if k != "source"}
    assert auto["source"] == ("build.py roofline --recipe gemma-4-26b-a4b-it --target h200 --vllm 0.27.1 "
                              "--layers 30 --context 356")
    args = profile.parse_args(["--report", f"{record}/profile.json", "--roofline", "auto"])
    text, entries = profile.report_text(args)
    assert entries[0][1]["floor"]["step_floor_us"] == pytest.approx(1e3 * committed["floor_ms"])
    assert "--roofline auto" in text and auto["source"] in text


def test_roofline_auto_needs_a_dummy_profile_with_its_prompt():
    with pytest.raises(ForgeError, match=r"p.json: --roofline auto needs a dummy-weight profile"):
        profile.recorded_roofline({**recorded_profile(), "dummy": False}, "p.json")
    with pytest.raises(ForgeError, match=r"p.json: --roofline auto needs a dummy-weight profile"):
        profile.recorded_roofline({**recorded_profile(), "prompt_tokens": None}, "p.json")
    with pytest.raises(ForgeError, match=r"p.json: --roofline auto: no vLLM release recorded"):
        profile.recorded_roofline({**recorded_profile(), "prompt_tokens": 276, "machine": {}}, "p.json")
