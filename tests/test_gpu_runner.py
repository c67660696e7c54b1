"""benchmarks/gpu/run.py on the CPU, with real processes (python3 -c, sleep, sh): what starts beside
what (from the intervals run.json records), timed jobs alone, a cut job's process group killed and
its partial output kept, dependants skipped, bad plans and a vLLM release other than the plan's
refused in one line before any job. The host's "vLLM" is a real distribution's metadata
(vllm-<version>.dist-info) on PYTHONPATH, which is what the runner reads."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "benchmarks" / "gpu" / "run.py"


def fake_vllm(folder: Path, version: str) -> Path:
    dist = folder / f"vllm-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return folder


@pytest.fixture
def host(tmp_path):
    """PYTHONPATH of a host with vLLM 0.27.1+cu130 installed."""
    return str(fake_vllm(tmp_path / "site", "0.27.1+cu130"))


def write_plan(tmp_path: Path, jobs: list[dict], **top) -> Path:
    plan = {"vllm": "0.27.1", "gpu_memory_gib": 10, "kill_grace_s": 1, **top, "jobs": jobs}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def job(job_id: str, seconds: float, gib: float = 1, **fields) -> dict:
    return {"id": job_id, "command": ["sleep", str(seconds)],
            "gpu_memory_gib": gib, "timeout_s": 10, **fields}


def run(plan: Path, out: Path | None, pythonpath: str, *extra: str, timeout: float = 30) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    argv = [sys.executable, str(RUN), str(plan), *(["--out", str(out)] if out else []), *extra]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


def jobs_of(out: Path) -> dict[str, dict]:
    return {entry["id"]: entry for entry in json.loads((out / "run.json").read_text())["jobs"]}


def overlap(a: dict, b: dict) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


def alive(pid: int) -> bool:
    """A process that still runs (a zombie no one reaped yet has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_jobs_whose_reservations_fit_run_side_by_side_and_others_in_sequence(tmp_path, host):
    plan = write_plan(tmp_path, [job("big1", 0.8, 6), job("big2", 0.8, 6), job("small", 0.8, 3)])
    result = run(plan, tmp_path / "out", host)
    assert result.returncode == 0, result.stderr
    jobs = jobs_of(tmp_path / "out")
    assert overlap(jobs["big1"], jobs["small"])          # 6 + 3 fit in 10 GiB
    assert not overlap(jobs["big1"], jobs["big2"])       # 6 + 6 do not
    assert jobs["big2"]["start"] >= jobs["big1"]["end"]
    assert {entry["status"] for entry in jobs.values()} == {"passed"}
    assert "start big1 (untimed, 6 GiB reserved, 6 of 10 in use" in result.stdout
    assert "start small (untimed, 3 GiB reserved, 9 of 10 in use" in result.stdout
    assert (tmp_path / "out" / "timeline.txt").read_text().count("passed ") == 3
    assert (tmp_path / "out" / "logs" / "big2.log").read_text().startswith("+ ")


def test_a_timed_job_runs_alone_and_no_later_job_starts_before_it(tmp_path, host):
    plan = write_plan(tmp_path, [job("smoke1", 0.6), job("smoke2", 0.6), job("bench", 0.5, 4, timed=True),
                                 job("smoke3", 0.3), job("profile", 0.3, 2, timed=True)])
    result = run(plan, tmp_path / "out", host)
    assert result.returncode == 0, result.stderr
    jobs = jobs_of(tmp_path / "out")
    assert overlap(jobs["smoke1"], jobs["smoke2"])
    for timed in ("bench", "profile"):
        assert not any(overlap(jobs[timed], other) for name, other in jobs.items() if name != timed), timed
    # smoke3 fits beside the smokes, but the timed bench ahead of it in the plan goes first
    assert jobs["smoke3"]["start"] >= jobs["bench"]["end"]
    assert "start bench (timed, alone, 4 GiB reserved, 4 of 10 in use" in result.stdout


CUT = """
import os, subprocess, sys, time
out = sys.argv[1]
child = subprocess.Popen(["sleep", "60"])
open(os.path.join(out, "child.pid"), "w").write(str(child.pid))
open(os.path.join(out, "partial.json"), "w").write('{"windows": 1}')
open(os.path.join(out, "weights.bin"), "w").write("dropped")
print("measured the first window", flush=True)
time.sleep(60)
"""


def test_a_cut_job_loses_its_process_group_keeps_its_partial_output_and_skips_its_dependants(tmp_path, host):
    plan = write_plan(tmp_path, [
        {"id": "bench", "command": ["{python}", "-c", CUT, "{out}"], "gpu_memory_gib": 4, "timeout_s": 1.5,
         "timed": True, "keep_when_cut": ["*.json", "*.pid"]},
        job("report", 0.1, 0, depends_on=["bench"]),
        job("after-report", 0.1, 0, depends_on=["report"])])
    started = time.monotonic()
    result = run(plan, tmp_path / "out", host)
    assert time.monotonic() - started < 10
    assert result.returncode == 1
    out = tmp_path / "out"
    jobs = jobs_of(out)
    bench = jobs["bench"]
    assert bench["status"] == "cut" and bench["exit"] == -signal.SIGTERM
    assert 1.5 <= bench["end"] - bench["start"] < 4
    child = int((out / "bench" / "child.pid").read_text())
    assert not alive(child)                               # the job's child went with it
    assert bench["kept"] == ["child.pid", "partial.json"]
    assert (out / "bench" / "partial.json").is_file() and not (out / "bench" / "weights.bin").exists()
    assert "measured the first window" in (out / "logs" / "bench.log").read_text()
    assert "cut bench: cut at its timeout of 1.5 s" in result.stdout and "partial output kept: bench/" in result.stdout
    assert jobs["report"]["status"] == "skipped" and jobs["report"]["reason"] == "dependency bench cut"
    assert jobs["after-report"]["reason"] == "dependency report skipped"
    assert jobs["report"]["start"] is None and not (out / "logs" / "report.log").exists()


def test_a_failed_dependency_skips_what_needs_it_and_the_rest_runs(tmp_path, host):
    plan = write_plan(tmp_path, [
        {"id": "apply", "command": "sh -c 'echo patched nothing; echo refused: vLLM 0.33.0 >&2; exit 3'",
         "gpu_memory_gib": 0, "timeout_s": 5},
        job("smoke", 0.1, depends_on=["apply"]), job("bench", 0.1, timed=True, depends_on=["smoke"]),
        {"id": "machine", "command": "sh -c 'echo lots of output; echo RESULT: PASS'", "gpu_memory_gib": 0,
         "timeout_s": 5}])
    result = run(plan, tmp_path / "out", host)
    assert result.returncode == 1
    jobs = jobs_of(tmp_path / "out")
    assert jobs["apply"]["status"] == "failed" and jobs["apply"]["exit"] == 3
    assert jobs["apply"]["reason"] == "refused: vLLM 0.33.0"       # the log's last line
    assert (jobs["smoke"]["status"], jobs["smoke"]["reason"]) == ("skipped", "dependency apply failed")
    assert (jobs["bench"]["status"], jobs["bench"]["reason"]) == ("skipped", "dependency smoke skipped")
    assert jobs["machine"]["status"] == "passed"
    assert "failed apply exit 3 after" in result.stdout and "skipped smoke: dependency apply failed" in result.stdout
    assert "done: 1 of 4 jobs passed" in result.stdout
    passed = next(line for line in result.stdout.splitlines() if " passed machine " in line)
    assert passed.endswith(": RESULT: PASS")              # a passed job's line ends with its verdict


def test_a_command_that_cannot_start_fails_and_says_why(tmp_path, host):
    plan = write_plan(tmp_path, [{"id": "tune", "command": ["no-such-tool", "--space", "small"],
                                  "gpu_memory_gib": 1, "timeout_s": 5}, job("report", 0, 0, depends_on=["tune"])])
    result = run(plan, tmp_path / "out", host)
    assert result.returncode == 1
    jobs = jobs_of(tmp_path / "out")
    assert jobs["tune"]["status"] == "failed"
    assert jobs["tune"]["reason"] == "cannot start no-such-tool: No such file or directory"
    assert jobs["report"]["reason"] == "dependency tune failed"
    assert "cannot start no-such-tool" in (tmp_path / "out" / "logs" / "tune.log").read_text()


def test_a_job_that_leaves_a_process_behind_has_it_stopped(tmp_path, host):
    plan = write_plan(tmp_path, [{"id": "serve", "command": ["sh", "-c", "sleep 60 & echo $! > {out}/pid"],
                                  "gpu_memory_gib": 1, "timeout_s": 5}])
    result = run(plan, tmp_path / "out", host)
    assert result.returncode == 0, result.stderr
    assert not alive(int((tmp_path / "out" / "serve" / "pid").read_text()))
    assert "passed serve exit 0" in result.stdout and "leftover processes stopped" in result.stdout


def test_a_stopped_runner_stops_its_jobs_and_still_writes_run_json(tmp_path, host):
    plan = write_plan(tmp_path, [job("long", 30), job("next", 0.1, timed=True)])
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": host}
    runner = subprocess.Popen([sys.executable, str(RUN), str(plan), "--out", str(out)], env=env,
                              stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (out / "logs" / "long.log").exists():
        time.sleep(0.05)
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=10) == 128 + signal.SIGTERM  # the shell's code for a signalled end
    jobs = jobs_of(out)
    assert jobs["long"]["status"] == "stopped" and jobs["long"]["reason"] == "the runner got SIGTERM"
    assert jobs["next"]["status"] == "skipped"
    assert json.loads((out / "run.json").read_text())["end"] is not None


def test_env_templates_pythonpath_and_the_cutlass_dsl_folder(tmp_path, host):
    (tmp_path / "site" / "nvidia_cutlass_dsl" / "dsl_packages").mkdir(parents=True)
    plan = write_plan(tmp_path, [{
        "id": "env", "gpu_memory_gib": 0, "timeout_s": 5, "env": {"PYTHONPATH": "{out}/plugin", "CONTROL": "agree"},
        "command": ["{python}", "-c", "import os; print(os.environ['PYTHONPATH']); print(os.environ['CONTROL']);"
                    "print(os.environ['NCCL_NVLS_ENABLE'], os.environ['VLLM_FORGE_MEASURE_LOCK'])"]}],
        env={"NCCL_NVLS_ENABLE": 0})
    result = run(plan, tmp_path / "out", host)
    assert result.returncode == 0, result.stderr
    lines = (tmp_path / "out" / "logs" / "env.log").read_text().splitlines()
    out = tmp_path / "out"
    assert lines[1] == f"{out}/env/plugin:{host}:{host}/nvidia_cutlass_dsl/dsl_packages"
    assert lines[2:] == ["agree", f"0 {out}/measure.lock"]


def test_pack_leaves_out_what_the_plan_excludes(tmp_path, host):
    plan = write_plan(tmp_path, [{"id": "bench", "gpu_memory_gib": 0, "timeout_s": 5,
                                  "command": "sh -c 'mkdir -p {out}/models/x && echo w > {out}/models/x/w && "
                                             "echo r > {out}/bench.json'"}],
                      pack={"exclude": ["models", "*.trace.json.gz"]})
    assert run(plan, tmp_path / "out", host).returncode == 0
    with tarfile.open(tmp_path / "out" / "results.tgz") as archive:
        names = archive.getnames()
    assert "out/bench/bench.json" in names and "out/run.json" in names and "out/logs/bench.log" in names
    assert not any("models" in name for name in names)


def test_dry_run_prints_the_schedule_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    plan = write_plan(tmp_path, [
        {"id": "apply", "command": ["touch", str(marker)], "gpu_memory_gib": 0, "timeout_s": 60},
        job("smoke", 1, 6, depends_on=["apply"]), job("smoke2", 1, 6, depends_on=["apply"]),
        job("bench", 1, 8, timed=True, depends_on=["apply"])])
    result = run(plan, None, "", "--dry-run")     # no vLLM needed: nothing is checked or run
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    lines = result.stdout.splitlines()
    assert lines[1] == f"+0 s  apply (untimed, 0 GiB, at most 60 s): touch {marker}"
    assert lines[2].startswith("+60 s  smoke (untimed, 6 GiB, at most 10 s, after apply): ")
    assert lines[3].startswith("+70 s  smoke2 ") and lines[4].startswith("+80 s  bench (timed, alone, 8 GiB")
    assert lines[-1] == "at most 90 s if every job runs to its timeout"


@pytest.mark.parametrize("installed, says", [("0.33.0", "has vLLM 0.33.0"), (None, "has no vLLM installed")])
def test_a_host_without_the_plans_release_is_refused_before_any_job(tmp_path, installed, says):
    marker = tmp_path / "ran"
    plan = write_plan(tmp_path, [{"id": "a", "command": ["touch", str(marker)], "gpu_memory_gib": 0, "timeout_s": 5}])
    site = str(fake_vllm(tmp_path / "site", installed)) if installed else ""
    result = run(plan, tmp_path / "out", site)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"run.py: {plan}: vllm: the plan expects vLLM 0.27.1; ")
    assert says in result.stderr
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_an_out_folder_that_is_not_empty_is_refused(tmp_path, host):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "run.json").write_text("{}")
    result = run(write_plan(tmp_path, [job("a", 0)]), tmp_path / "out", host)
    assert result.returncode == 2 and "--out: " in result.stderr and "is not an empty folder" in result.stderr
    assert (tmp_path / "out" / "run.json").read_text() == "{}"


def good_job(**changes) -> dict:
    return {**job("smoke", 0), **changes}


BAD_PLANS = [
    ("vllm", {"vllm": 0.3}, [good_job()], "a release as a quoted string"),
    ("gpu_memory_gib", {"gpu_memory_gib": None}, [good_job()], "a positive number"),
    ("jobs", {}, [], "a non-empty list of jobs"),
    ("jobs[0] (smoke).gpu_memory_gib", {}, [good_job(gpu_memory_gib=11)], "more than the plan's gpu_memory_gib (10)"),
    ("jobs[0] (smoke).command", {}, [good_job(command=["{python}", "x.py", "--model", "{model}"])],
     "{model} is not a field a command may name"),
    ("jobs[0] (smoke).command", {}, [good_job(command="python3 'unclosed")], "cannot split the command"),
    ("jobs[0] (smoke).timout_s", {}, [good_job(timout_s=5)], "not a field of a plan job"),
    ("jobs[0] (smoke).timeout_s", {}, [good_job(timeout_s=-1)], "a positive number"),
    ("jobs[0] (smoke).timed", {}, [good_job(timed="yes")], "true or false"),
    ("jobs[0] (smoke).timeout_s", {}, [good_job(timeout_s=10 ** 10)], "up to 604800"),
    ("kill_grace_s", {"kill_grace_s": 1e9}, [good_job()], "up to 3600"),
    ("gpu_memory_gib", {"gpu_memory_gib": 1e300}, [good_job()], "up to 100000"),
    ("jobs[0].id", {}, [good_job(id="smoke\n")], "it names a folder"),
    ("vllm", {"vllm": "0.27.1\n"}, [good_job()], "a release as a quoted string"),
    ("jobs[0] (smoke).ready_url", {}, [good_job(ready_url="http://127.0.0.1:8012/health\n")],
     "an http:// URL"),
    ("jobs[0].id", {}, [good_job(id="Smoke 1")], "it names a folder"),
    ("jobs[1].id", {}, [good_job(), good_job()], "'smoke' is already the id of jobs[0]"),
    ("jobs[0] (smoke).depends_on", {}, [good_job(depends_on=["apply"])], "'apply' is no job of this plan"),
    ("jobs[0] (a).depends_on", {}, [good_job(id="a", depends_on=["b"]), good_job(id="b", depends_on=["a"])],
     "a dependency cycle: a -> b -> a"),
    ("jobs[0] (smoke).env.X", {}, [good_job(env={"X": {"nested": 1}})], "a string or a number"),
    ("jobs[0] (smoke).env.X", {}, [good_job(env={"X": "{model}"})], "{model} is not a field a command may name"),
    ("jobs[0] (smoke).env", {}, [good_job(env={"1X": "a"})], "'1X' is not an environment variable name"),
    ("jobs[0] (smoke).keep_when_cut", {}, [good_job(keep_when_cut=["**"] * 10_001)], "at most 10000 items"),
    ("jobs[0] (smoke).gpu_memory_gib", {}, [good_job(gpu_memory_gib="3")], "a non-negative number up to 100000"),
    ("gpus", {"gpus": 2}, [good_job()], "not a field of a plan"),
    ("jobs[0] (smoke).ready_url", {}, [good_job(ready_url="localhost:8012")], "an http:// URL"),
    ("jobs[0] (smoke).timed", {}, [good_job(ready_url="http://127.0.0.1:8012/health", timed=True)],
     "a server (ready_url) is untimed"),
    ("jobs[1] (bench).depends_on", {}, [good_job(ready_url="http://127.0.0.1:8012/health"),
                                        good_job(id="bench", timed=True, depends_on=["smoke"])],
     "a timed job runs alone, not beside the server smoke"),
]


@pytest.mark.parametrize("field, top, jobs, problem", BAD_PLANS, ids=[case[0] + ":" + case[3] for case in BAD_PLANS])
def test_a_bad_plan_is_one_line_naming_the_file_and_the_field(tmp_path, host, field, top, jobs, problem):
    plan = write_plan(tmp_path, jobs, **top)
    result = run(plan, tmp_path / "out", host)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"run.py: {plan}: {field}: "), result.stderr
    assert problem in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("line", ["gpu_memory_gib: .nan", "gpu_memory_gib: .inf", "kill_grace_s: .inf",
                                  "kill_grace_s: -.inf", "gpu_memory_gib: 1" + "0" * 400])
def test_a_number_that_is_not_finite_is_refused_at_load(tmp_path, host, line):
    # .nan passed every comparison the checks made (a NaN timeout is never reached: the runner
    # looped for ever); .inf reached run.json's strict JSON after the jobs had started.
    plan = tmp_path / "plan.yaml"
    budget = "" if line.startswith("gpu_memory_gib") else "gpu_memory_gib: 10\n"
    plan.write_text(f"vllm: '0.27.1'\n{budget}{line}\njobs:\n- {{id: a, command: [sleep, '0'], "
                    "gpu_memory_gib: 0, timeout_s: 5}\n")
    result = run(plan, tmp_path / "out", host)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"run.py: {plan}: line "), result.stderr
    assert "not a finite number" in result.stderr or "past the range of a number" in result.stderr
    assert not (tmp_path / "out").exists()


BREAK_THE_RECORD = """
import os, sys
run = os.path.dirname(sys.argv[1])
os.replace(os.path.join(run, "run.json"), os.path.join(run, "moved.json"))
os.mkdir(os.path.join(run, "run.json"))     # the runner's next record cannot replace a folder
"""
LONG = "import os, sys, time; open(sys.argv[1] + '/pid', 'w').write(str(os.getpid())); time.sleep(60)"


def test_a_runner_that_cannot_go_on_stops_every_job_and_says_why_in_one_line(tmp_path, host):
    plan = write_plan(tmp_path, [
        {"id": "long", "command": ["{python}", "-c", LONG, "{out}"], "gpu_memory_gib": 1, "timeout_s": 60},
        {"id": "breaker", "command": ["{python}", "-c", BREAK_THE_RECORD, "{out}"], "gpu_memory_gib": 1,
         "timeout_s": 60}])
    started = time.monotonic()
    result = run(plan, tmp_path / "out", host)
    assert time.monotonic() - started < 20
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("run.py: ") and "the run stopped" in result.stderr
    pid = int((tmp_path / "out" / "long" / "pid").read_text())
    assert not alive(pid)


def test_a_jobs_log_line_reaches_the_terminal_and_the_timeline_escaped(tmp_path, host):
    # The failed job's last log line is quoted in its event: raw, its escapes cleared the screen
    # and set the window's title.
    shout = "import sys; print('\\x1b[2J\\x1b]0;owned\\x07 RESULT: PASS'); sys.exit(3)"
    plan = write_plan(tmp_path, [{"id": "noisy", "command": ["{python}", "-c", shout],
                                  "gpu_memory_gib": 1, "timeout_s": 10}])
    result = run(plan, tmp_path / "out", host)
    assert result.returncode == 1
    timeline = (tmp_path / "out" / "timeline.txt").read_text()
    for text in (result.stdout, timeline):
        assert "\x1b" not in text and "\r" not in text and "\x07" not in text
        assert "failed noisy exit 3" in text and "\\x1b[2J" in text


def test_a_plan_that_is_not_yaml_says_where(tmp_path, host):
    plan = tmp_path / "plan.yaml"
    plan.write_text("vllm: '0.27.1'\njobs: [\n")
    result = run(plan, None, host)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"run.py: {plan}: line "), result.stderr
    assert "not valid YAML" in result.stderr


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


FETCH = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).status)"


def test_a_server_serves_its_clients_and_is_stopped_once_they_ended(tmp_path, host):
    url = f"http://127.0.0.1:{free_port()}/"
    port = url.rsplit(":", 1)[1].strip("/")
    plan = write_plan(tmp_path, [
        {"id": "serve", "command": ["{python}", "-m", "http.server", port, "--bind", "127.0.0.1",
                                    "--directory", "{out}"],
         "gpu_memory_gib": 4, "timeout_s": 20, "ready_url": url},
        {"id": "smoke", "command": ["{python}", "-c", FETCH, url], "gpu_memory_gib": 0, "timeout_s": 5,
         "depends_on": ["serve"]},
        {"id": "burst", "command": ["{python}", "-c", FETCH, url], "gpu_memory_gib": 0, "timeout_s": 5,
         "depends_on": ["serve"]}])
    result = run(plan, tmp_path / "out", host)
    assert result.returncode == 0, result.stdout
    jobs = jobs_of(tmp_path / "out")
    serve = jobs["serve"]
    assert serve["status"] == "passed" and serve["ready"] is not None
    for client in ("smoke", "burst"):
        assert jobs[client]["status"] == "passed"
        assert serve["ready"] <= jobs[client]["start"] and jobs[client]["end"] <= serve["end"]
        assert (tmp_path / "out" / "logs" / f"{client}.log").read_text().splitlines()[-1] == "200"
    assert f"serving serve: {url} answered after" in result.stdout
    assert "passed serve: stopped once its clients ended" in result.stdout
    with socket.socket() as probe:      # the server is gone
        assert probe.connect_ex(("127.0.0.1", int(port))) != 0


def test_a_server_that_never_answers_is_cut_and_its_clients_skipped(tmp_path, host):
    plan = write_plan(tmp_path, [
        {"id": "serve", "command": "sleep 30", "gpu_memory_gib": 4, "timeout_s": 1.5,
         "ready_url": f"http://127.0.0.1:{free_port()}/health"},
        job("smoke", 0, depends_on=["serve"])])
    result = run(plan, tmp_path / "out", host)
    assert result.returncode == 1
    jobs = jobs_of(tmp_path / "out")
    assert jobs["serve"]["status"] == "cut" and jobs["serve"]["ready"] is None
    assert jobs["smoke"]["reason"] == "dependency serve cut"


def test_the_dry_run_starts_a_servers_clients_beside_it_and_a_timed_job_after_it(tmp_path):
    from benchmarks.gpu.runner.plan import load_plan
    from benchmarks.gpu.runner.schedule import dry_run

    plan = load_plan(write_plan(tmp_path, [
        {**job("serve", 0, 4), "timeout_s": 600, "ready_url": "http://127.0.0.1:8012/health"},
        {**job("smoke", 0, depends_on=["serve"]), "timeout_s": 60},
        {**job("burst", 0, depends_on=["serve"]), "timeout_s": 100},
        {**job("bench", 0, 8, timed=True), "timeout_s": 300}]))
    assert [(offset, entry.id) for offset, entry in dry_run(plan)] == [
        (0, "serve"), (0, "smoke"), (0, "burst"), (100, "bench")]
