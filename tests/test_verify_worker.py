"""verify's engine worker and mtp_smoke's in-process mode, where no GPU is needed: a failed engine
start is a named failed check (from the worker's real log), and measuring engines take turns."""
import json
import threading
import time
from pathlib import Path

import yaml

from verify import mtp_smoke
from verify.engine_worker import MEASURE_LOCK_ENV, _wait_for_all, gpu_turn, measure_lock
from verify.report import NOT_INSTALLED, installed_versions


def test_failed_engine_start_is_a_failed_check_with_the_root_cause(tmp_path):
    # The real worker in a child process, with an interpreter that cannot import vLLM (this
    # CI host has no torch or vllm): exactly what an image missing its engine would show.
    code = mtp_smoke.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--dummy",
                           "--layers", "6", "--runner", "v1", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "mtp_smoke.json").read_text())
    first = report["checks"][0]
    assert code == 1 and first["name"] == "engine started" and first["status"] == "FAIL"
    assert first["detail"].startswith("engine failed to start: ModuleNotFoundError: No module named")
    assert "Traceback" not in first["detail"]
    # Read in the worker's own process before the engine failed to start: this interpreter's
    # real metadata, which has no vLLM or torch.
    assert report["versions"] == installed_versions() and report["versions"]["vllm"] == NOT_INSTALLED
    assert report["vllm"] is None          # so the report claims no release either
    spec = json.loads((tmp_path / "engine.spec.json").read_text())
    assert spec["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "0"  # --runner v1 over the recipe's v2
    kwargs = spec["engine_kwargs"]
    assert kwargs["load_format"] == "dummy" and kwargs["skip_tokenizer_init"] is True
    assert kwargs["speculative_config"]["model"].endswith("gemma-4-26b-a4b-assistant")
    recipe_file = Path(__file__).resolve().parents[1] / "recipes/gemma-4-26b-a4b-it.yaml"
    k = yaml.safe_load(recipe_file.read_text())["targets"]["h200"]["speculative"]["num_speculative_tokens"]
    assert kwargs["speculative_config"]["num_speculative_tokens"] == k
    assert kwargs["quantization"] == "fp8" and kwargs["disable_log_stats"] is False
    assert "enforce_eager" not in kwargs
    # --dummy: the gate runs on the agreeing model, then on the random one, on this engine
    assert [(w["name"], w.get("control")) for w in spec["windows"]] == [
        ("greedy_agree", "agree"), ("greedy_random", "random"), ("recipe_sampling", "agree")]
    assert spec["windows"][0]["sampling"]["temperature"] == 0.0
    plugin_dir = spec["env"]["PYTHONPATH"].split(":")[0]
    assert (tmp_path / "plugin" / "vllm_forge_controls-1.0.dist-info").is_dir()
    assert plugin_dir == str((tmp_path / "plugin").resolve())
    # the engine never ran: the controls say NOT CHECKED, not "verify is broken"
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses["acceptance (temperature 0)"] == "NOT CHECKED"
    assert statuses["acceptance, random model (negative control)"] == "NOT CHECKED"
    assert report["verify_broken"] is False


def test_lossless_runs_a_second_engine_without_the_drafter_beside_it(tmp_path):
    code = mtp_smoke.main(["--recipe", "gemma-4-31b-it", "--target", "h200", "--dummy", "--shape",
                           "31b", "--layers", "4", "--centroids", "--lossless", "--out", str(tmp_path)])
    assert code == 1
    spec = json.loads((tmp_path / "engine.spec.json").read_text())
    without = json.loads((tmp_path / "engine-no-draft.spec.json").read_text())
    assert "speculative_config" not in without["engine_kwargs"]
    assert [w["control"] for w in without["windows"]] == ["agree", "random"]
    assert all(w["keep_token_ids"] for w in without["windows"])
    draft = json.loads(Path(spec["engine_kwargs"]["speculative_config"]["model"], "config.json").read_text())
    assert draft["use_ordered_embeddings"] is True and draft["backbone_hidden_size"] == 5376
    target = json.loads(Path(spec["engine_kwargs"]["model"], "config.json").read_text())
    assert target["hidden_size"] == 5376 and target["num_hidden_layers"] == 4
    report = json.loads((tmp_path / "mtp_smoke.json").read_text())
    assert report["shape"] == "31b" and report["centroids"] is True
    assert report["compile_backend"] == "inductor" and "compilation_config" not in spec["engine_kwargs"]


def test_eager_compile_backend_skips_inductor_but_keeps_cuda_graphs(tmp_path):
    mtp_smoke.main(["--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--dummy", "--layers", "4",
                    "--compile-backend", "eager", "--out", str(tmp_path)])
    kwargs = json.loads((tmp_path / "engine.spec.json").read_text())["engine_kwargs"]
    assert kwargs["compilation_config"]["backend"] == "eager"
    assert "enforce_eager" not in kwargs  # CUDA graphs stay on: the gate checks them
    assert json.loads((tmp_path / "mtp_smoke.json").read_text())["compile_backend"] == "eager"


def test_measurements_take_turns_under_the_lock(tmp_path):
    lock = str(tmp_path / "measure.lock")
    spans = []

    def measure(name):
        with gpu_turn(lock):
            start = time.monotonic()
            time.sleep(0.2)
            spans.append((start, time.monotonic()))

    threads = [threading.Thread(target=measure, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans.sort()
    assert all(earlier[1] <= later[0] for earlier, later in zip(spans, spans[1:]))


def test_an_engine_start_never_overlaps_a_timed_window_but_starts_overlap_each_other(tmp_path):
    lock = str(tmp_path / "measure.lock")
    spans: dict[str, tuple[float, float]] = {}

    def hold(name, alone, delay):
        time.sleep(delay)
        with gpu_turn(lock, alone=alone):
            start = time.monotonic()
            time.sleep(0.3)
            spans[name] = (start, time.monotonic())

    threads = [threading.Thread(target=hold, args=args) for args in
               (("window", True, 0.0), ("start-a", False, 0.05), ("start-b", False, 0.05))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    window, a, b = spans["window"], spans["start-a"], spans["start-b"]
    assert a[0] >= window[1] and b[0] >= window[1]  # the starts waited for the clock
    assert a[0] < b[1] and b[0] < a[1]  # and ran beside each other


def test_the_shared_measure_lock_named_in_the_environment_wins_over_the_runs_own(monkeypatch, tmp_path):
    """Two bench runs and a profile on one GPU: each names its own lock, the environment one shared."""
    monkeypatch.delenv(MEASURE_LOCK_ENV, raising=False)
    assert measure_lock(str(tmp_path / "own.lock")) == str(tmp_path / "own.lock")
    assert measure_lock(None) is None
    monkeypatch.setenv(MEASURE_LOCK_ENV, str(tmp_path / "shared.lock"))
    assert measure_lock(str(tmp_path / "own.lock")) == str(tmp_path / "shared.lock")
    assert measure_lock(None) == str(tmp_path / "shared.lock")


def test_barrier_waits_for_every_engine_ready_or_failed(tmp_path):
    barrier = {"dir": str(tmp_path), "name": "a", "count": 3, "timeout_s": 10}
    (tmp_path / "a.ready").touch()
    (tmp_path / "b.failed").touch()
    threading.Timer(0.6, (tmp_path / "c.ready").touch).start()
    start = time.monotonic()
    _wait_for_all(barrier)
    assert 0.5 < time.monotonic() - start < 5


def test_a_timeout_kills_the_worker_and_the_engine_it_started(tmp_path):
    """vLLM runs its EngineCore in a child process; killing only the worker left those children
    holding GPU memory on the H200 (2026-11-30). Workers lead their own process group."""
    import os
    import subprocess
    import sys

    from verify.machine import kill_group

    pid_file = tmp_path / "child.pid"
    code = ("import subprocess, sys, time; "
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(pid_file)!r}, 'w').write(str(c.pid)); time.sleep(60)")
    worker = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    deadline = time.monotonic() + 10
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child = int(pid_file.read_text())
    kill_group(worker)
    assert worker.returncode is not None
    deadline = time.monotonic() + 5
    while _alive(child):
        assert time.monotonic() < deadline, "the engine child survived its worker"
        time.sleep(0.05)
    assert os.getpgid(os.getpid()) != worker.pid  # the test itself was not in that group


def _alive(pid: int) -> bool:
    """Running and not a zombie (a killed orphan waits for init to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_an_engine_not_up_by_the_start_timeout_is_killed_and_named_and_the_rest_measure(tmp_path):
    """§12.4's hang: an engine stuck in its start held the barrier (and the shared GPU lock) so no
    window ran. With --start-timeout, bench kills it alone; an engine that came up in time and
    measures past that limit is left to finish."""
    import subprocess
    import sys

    from verify.bench import START_TIMEOUT_ERROR, _wait, parse_args
    from verify.supervisor import Worker
    from verify.vllm_logs import root_cause

    barrier = tmp_path / "barrier"
    barrier.mkdir()
    workers = {  # the real barrier protocol: a ready engine touches <name>.ready, then measures
        "up": f"import time, pathlib; pathlib.Path({str(barrier / 'up.ready')!r}).touch(); "
              "print('measuring', flush=True); time.sleep(3)",
        "hung": "import time; print('compiling', flush=True); time.sleep(60)"}
    procs = {}
    for name, code in workers.items():
        log = open(tmp_path / f"{name}.log", "w")
        spec = {"barrier": {"dir": str(barrier)}}
        procs[name] = Worker(name, spec, tmp_path / f"{name}.log",
                             subprocess.Popen([sys.executable, "-c", code], stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True), log)
    began = time.monotonic()
    _wait(list(procs.values()), timeout=30, start_timeout=1)
    assert time.monotonic() - began < 15
    assert procs["hung"].proc.returncode < 0 and (barrier / "hung.failed").exists()
    assert procs["up"].proc.returncode == 0 and not (barrier / "up.failed").exists()
    hung_log = (tmp_path / "hung.log").read_text()
    assert hung_log.startswith("compiling")
    assert root_cause(hung_log) == (f"{START_TIMEOUT_ERROR}: not ready 1 s after it started "
                                    "(bench --start-timeout 1): killed by bench")
    assert START_TIMEOUT_ERROR not in (tmp_path / "up.log").read_text()
    assert parse_args(["--recipe", "r", "--start-timeout", "420"]).start_timeout == 420


def test_a_negative_start_timeout_is_refused_naming_the_flag(capsys):
    import pytest

    from verify.bench import parse_args

    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--recipe", "r", "--start-timeout", "-5"])
    assert exit_info.value.code == 2
    assert "--start-timeout: -5 is below 0" in capsys.readouterr().err
