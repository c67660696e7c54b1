"""The committed analyses of the H200's decode profiles (2026-12-01, vLLM 0.27.1, 26B-A4B shapes,
30 layers, dummy weights, online FP8, V2 runner, TRITON_ATTN, Inductor), rebuilt on the CPU from
the raw profile.json files and the roofline JSON with verify/profile.py's own --report code:
benchmarks/results/profile-{plain,k4}-s18-h200-vllm0.27.1.{md,json} must be what the code makes
of tests/fixtures/gpu/s18-h200-2026-12-01/, and the roofline JSON what `build.py roofline` prints.
After a change to the kernel map or the report, rebuild them with the command each .md names."""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu_evidence import assert_profile_report_rebuilds, profile_pair_figures
from verify import profile

ROOT = Path(__file__).resolve().parents[1]
S18 = "tests/fixtures/gpu/s18-h200-2026-12-01"
ROOFLINE = f"{S18}/roofline-0.27.1.json"
RESULTS = "benchmarks/results"
# The two reports: their --report arguments (the k=4 one compared with the plain step).
REPORTS = {
    "plain": [f"{S18}/profile-plain/profile.json"],
    "k4": [f"{S18}/profile-k4/profile.json", "--baseline", f"{S18}/profile-plain/profile.json"],
}


def _args(which: str) -> list[str]:
    stem = f"{RESULTS}/profile-{which}-s18-h200-vllm0.27.1"
    return ["--report", *REPORTS[which], "--roofline", ROOFLINE, "--md", f"{stem}.md",
            "--json", f"{stem}.json"]


@pytest.mark.parametrize("which", list(REPORTS))
def test_committed_profile_report_is_what_the_code_makes_of_the_raw_data(at_root, which):
    assert_profile_report_rebuilds(_args(which))


@pytest.mark.parametrize("which", list(REPORTS))
def test_committed_report_names_its_command_machine_date_and_dummy_weights(at_root, which):
    args = profile.parse_args(_args(which))
    text = Path(args.md).read_text()
    raw = json.loads(Path(args.report[0]).read_text())
    assert f"`{profile.report_command(args)}`" in text
    assert f"`{raw['command']}`" in text and raw["date"] in text
    assert raw["machine"]["device"] in text and raw["dummy"] and "dummy weights" in text


def test_committed_roofline_is_build_pys_for_the_context_the_profile_averaged_over(at_root):
    committed = json.loads(Path(ROOFLINE).read_text())
    plain = json.loads(Path(REPORTS["plain"][0]).read_text())
    short, long = plain["profiles"]["short"]["tokens"], plain["profiles"]["long"]["tokens"]
    # The decode step measured is the long reply beyond the short one: its steps attend over the
    # prompt plus short..long generated tokens, on average the prompt plus their mean.
    assert committed["context_len"] == round(plain["prompt_tokens"] + (short + long) / 2)
    command = (f"build.py roofline --recipe {plain['recipe']} --target {plain['target']} "
               f"--vllm {plain['machine']['vllm']} --context {committed['context_len']} --json")
    done = subprocess.run([sys.executable, *shlex.split(command)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == committed


def test_groups_without_bytes_say_no_floor(at_root):
    args = profile.parse_args(_args("plain"))
    text = Path(args.md).read_text()
    _, entries = profile.report_text(args)
    analysis = entries[0][1]
    for name, group in analysis["groups"].items():
        row = next(line for line in text.splitlines() if line.startswith(f"| {name}: "))
        if group["floor_us"] is None:
            assert "| no floor |" in row
        else:
            assert f"{group['floor_us']:.1f} ({', '.join(group['byte_groups'])})" in row
    assert analysis["groups"]["activation_quant"]["floor_us"] is None
    assert analysis["groups"]["attention"]["byte_groups"] == ["kv_cache"]  # its floor: the KV read


def test_docs_measured_on_the_h200_are_the_committed_figures(at_root):
    """docs/roofline.md's "Measured on the H200" section, derived from the committed analyses."""
    doc = Path("docs/roofline.md").read_text()
    section = doc[doc.index("## Measured on the H200"):]
    plain, spec = (json.loads(Path(_args(which)[-1]).read_text())[0] for which in ("plain", "k4"))
    figures = profile_pair_figures(plain, spec)
    biggest = sorted(plain["groups"], key=lambda n: plain["groups"][n]["us_per_step"]
                     - spec["groups"][n]["us_per_step"])[:3]
    for rank, name in enumerate(biggest, 1):
        change = spec["groups"][name]["us_per_step"] - plain["groups"][name]["us_per_step"]
        figures.append(f"{rank}. {name}, {change:+.1f} µs")
    for prefix in ("kernel_unified_attention", "nvjet_sm90_tst_256x8"):
        before, after = (next(t for t in a["top_kernels"] if t["name"].startswith(prefix))
                         for a in (plain, spec))
        if prefix.startswith("kernel"):
            figures.append(f"runs {after['launches_per_step']:.0f} times a step instead of "
                           f"{before['launches_per_step']:.0f}, at "
                           f"{after['us_per_step'] / after['launches_per_step']:.1f}")
        else:
            figures.append(f"({before['us_per_step']:.1f} ->")
    missing = [f for f in figures if f not in " ".join(section.split())]
    assert missing == []
