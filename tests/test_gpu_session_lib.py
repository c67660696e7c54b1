"""tests/gpu/session/lib.sh, the scheduler every GPU session script from s19 on shares, run with real
bash and flock: jobs whose GPU memory does not fit together never run together, an untimed job
keeps every timed window waiting (the GPU lock held shared), and `summary` gives each step's
verdict in one line (§10 of docs/gpu-evidence.md: the first machine went back while logs were
read between calls)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

SESSION = Path(__file__).resolve().parent / "gpu" / "session"
LIB = SESSION / "lib.sh"


def run_bash(script: str, work: Path, capacity: int = 10) -> subprocess.CompletedProcess:
    prelude = f'W={work} SESSION=test CAPACITY_GB={capacity}; . {LIB}\n'
    return subprocess.run(["bash", "-c", prelude + script], capture_output=True, text=True, timeout=120)


def intervals(work: Path) -> dict[str, tuple[float, float]]:
    """job -> (start, end) as the jobs wrote them (date +%s.%N)."""
    spans = {}
    for line in (work / "spans").read_text().splitlines():
        name, start, end = line.split()
        spans[name] = (float(start), float(end))
    return spans


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


RECORD = '''record() {  # name, seconds: the span this job held its reservation
  local t0; t0=$(date +%s.%N); sleep "$2"; echo "$1 $t0 $(date +%s.%N)" >> "$W/spans"
}
'''


@pytest.mark.parametrize("script", sorted(SESSION.glob("*.sh")), ids=lambda p: p.name)
def test_every_session_script_parses(script):
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


NEXT_SESSION = SESSION / "s25.sh"
BENCHES = SESSION / "benches.sh"


def test_the_long_attention_benchs_engines_are_ones_bench_accepts():
    """A typo in an --engine costs an engine start on the GPU: bench_long_attn's literal engine
    definitions (s24's, kept for a rerun) parse as bench parses them (site= folders are the GPU
    host's, not checked here), and so do its bench flags."""
    from verify import bench

    text = BENCHES.read_text()
    folders = dict(re.findall(r"^([A-Z0-9]+)=(/tmp/\S+)", text, re.M))  # HEAD512=/tmp/site-head512
    bench_call = re.search(r"^bench_long_attn\(\) \{.*?^\}", text, re.M | re.S)[0]
    literals = [re.sub(r"\$([A-Z0-9]+)", lambda m: folders[m[1]], t)
                for t in re.findall(r'--engine "(name=[^"]+)"', bench_call)]
    engines = [bench.parse_engine(t, check_site=False) for t in literals]
    assert [(e["k"], e["site"]) for e in engines] == [
        (0, None), (4, None), (0, "/tmp/site-head512"), (4, "/tmp/site-head512"),
        (0, "/tmp/site-groupkv"), (4, "/tmp/site-groupkv")]
    flags = ["--recipe", "r", "--windows", re.search(r'--windows "([^"]+)"', bench_call)[1]]
    for flag in ("--start-timeout", "--max-model-len", "--long-tokens"):
        (value,) = re.findall(rf"{flag} (\d+)", bench_call)
        flags += [flag, value]
    args = bench.parse_args(flags)
    assert args.start_timeout == 600
    assert bench.windows(args, bench.load_prompts())  # every window name is one bench knows


PROFILE_CALL = re.compile(r"(profile_recipe|profile_long) (\S+) \"\$P\" (\S+) (\d+) (\d+) ([\d.]+)(?: (\d+))?")


def profile_flags(function: str, prompt_tokens: str) -> list[str]:
    """The flags benches.sh's profile function passes that decide what the profile can hold."""
    body = re.search(rf"^{function}\(\) \{{.*?^\}}", BENCHES.read_text(), re.M | re.S)[0]
    flags = ["--max-model-len", re.search(r"--max-model-len (\d+)", body)[1],
             "--tokens", re.search(r"--tokens (\d+)", body)[1]]
    return flags + (["--prompt-tokens", prompt_tokens] if prompt_tokens else [])


def test_the_next_sessions_profiles_are_each_recipes_own_and_its_k():
    """Each profile call profiles the recipe's own dummy model (verify/profile.py: dummy_shape) at
    a depth the model has, plain or at the recipe's own k, and its prompt and replies fit the
    context it is given (profile.check_lengths, which the GPU would otherwise refuse minutes in)."""
    from forge.serving.recipes import load_recipe
    from verify import profile

    calls = PROFILE_CALL.findall(NEXT_SESSION.read_text())
    assert [call[1] for call in calls] == ["profile-26b-k4-32k", "profile-26b-plain-32k", "profile-e4b-plain"]
    for function, name, recipe, layers, k, utilization, prompt_tokens in calls:
        args = profile.parse_args(["--recipe", recipe, "--target", "h200", "--dummy", "--layers", layers,
                                   "--k", k, "--gpu-memory-utilization", utilization, "--out", name,
                                   *profile_flags(function, prompt_tokens)])
        loaded = load_recipe(recipe, "h200")
        family, model = loaded.family_model
        assert profile.dummy_shape(args) == model.name and 1 <= int(layers) <= model.layers
        args.shape = profile.dummy_shape(args)
        profile.check_lengths(args)
        assert int(k) in (0, loaded.speculative.num_speculative_tokens), name
        assert ("-plain" in name) == (k == "0") and (f"-k{k}" in name or k == "0")
        assert (function == "profile_long") == bool(prompt_tokens) == name.endswith("-32k")
    # one after another (no `&`): each step's time is its own engine's alone
    assert "&" not in re.search(r"^job271\(\) \{.*?^\}", NEXT_SESSION.read_text(), re.M | re.S)[0]


def test_jobs_that_do_not_fit_together_never_overlap_and_those_that_fit_do(tmp_path):
    result = run_bash(RECORD + '''
timed big1 6 record big1 2 &
sleep 0.3; timed big2 6 record big2 2 &
sleep 0.3; timed small 3 record small 1 &
wait
''', tmp_path)
    assert result.returncode == 0, result.stderr
    spans = intervals(tmp_path)
    assert not overlap(spans["big1"], spans["big2"])  # 6 + 6 > 10 GB
    assert overlap(spans["big1"], spans["small"]) or overlap(spans["big2"], spans["small"])  # 6 + 3 fit
    assert (tmp_path / "reserved").read_text() == ""  # every reservation released
    timeline = (tmp_path / "timeline.txt").read_text()
    assert "big1: start (6 GB reserved)" in timeline and "small: exit 0" in timeline


def test_an_untimed_job_keeps_every_timed_window_waiting(tmp_path):
    """A timed window takes the GPU lock alone (verify's gpu_turn); an untimed job holds it shared."""
    result = run_bash(RECORD + '''
untimed smoke 2 record smoke 2 &
sleep 0.5
( flock -x 8; t0=$(date +%s.%N); echo "window $t0 $(date +%s.%N)" >> "$W/spans" ) 8>> "$VLLM_FORGE_MEASURE_LOCK"
wait
''', tmp_path)
    assert result.returncode == 0, result.stderr
    spans = intervals(tmp_path)
    assert spans["window"][0] >= spans["smoke"][1]


def test_summary_gives_each_steps_verdict_in_one_line(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir(parents=True)
    (logs / "smoke-a.txt").write_text("lots of engine output\nRESULT: PASS (11 passed, 0 failed)\nexit 0\n")
    (logs / "bench.txt").write_text("[bench] started stock\nImportError: cannot import name 'LLM'\n")
    result = run_bash("summary", tmp_path)
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(None, 1) for line in result.stdout.splitlines())
    assert lines["smoke-a"].strip() == "RESULT: PASS (11 passed, 0 failed) exit 0"
    assert "ImportError: cannot import name 'LLM'" in lines["bench"]


def test_pack_leaves_out_the_job_copies_but_not_a_report(tmp_path):
    work = tmp_path / "s"
    (work / "repo271").mkdir(parents=True)
    (work / "repo271" / "big").write_text("x")
    (work / "report.md").write_text("kept")
    out = tmp_path / "out"
    out.mkdir()
    result = subprocess.run(["bash", "-c", f'W={work} SESSION=test OUT={out}; . {LIB}; pack'],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    listing = subprocess.run(["tar", "tzf", str(out / "test.tgz")], capture_output=True, text=True).stdout
    assert "s/report.md" in listing and "repo271" not in listing


def test_collect_waits_for_the_job_start_named_whatever_its_name(tmp_path):
    """`collect` waits for the jobs `start` recorded, a JOB= name included (§14: it waited for
    none, its pattern fixed to `job`), and returns at once when none of them runs."""
    script = tmp_path / "s99.sh"
    script.write_text("sleep 3\n")
    result = run_bash(f'''echo profiles271 > "$W/jobs"
bash {script} profiles271 &
sleep 0.5; t0=$(date +%s.%N)
wait_for_jobs 20 "$(jobs_pattern {script})"
t1=$(date +%s.%N)
wait_for_jobs 20 "$(jobs_pattern {script})"
echo "$t0 $t1 $(date +%s.%N) $(jobs_pattern {script})"
''', tmp_path)
    assert result.returncode == 0, result.stderr
    t0, t1, t2, pattern = result.stdout.split(maxsplit=3)
    assert pattern.strip() == "s99.sh (profiles271)$"
    assert float(t1) - float(t0) >= 2  # waited for the running job
    assert float(t2) - float(t1) < 2  # and not for one that has ended
