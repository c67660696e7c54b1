"""verify's engine worker and mtp_smoke's in-process mode, where no GPU is needed: a failed engine
start is a named failed check (from the worker's real log), and measuring engines take turns."""
import json
import threading
import time

from verify import mtp_smoke
from verify.engine_worker import _exclusive, _wait_for_all


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
    spec = json.loads((tmp_path / "engine.spec.json").read_text())
    assert spec["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "0"  # --runner v1 over the recipe's v2
    kwargs = spec["engine_kwargs"]
    assert kwargs["load_format"] == "dummy" and kwargs["skip_tokenizer_init"] is True
    assert kwargs["speculative_config"]["model"].endswith("gemma-4-26b-a4b-assistant")
    assert kwargs["speculative_config"]["num_speculative_tokens"] == 3
    assert kwargs["quantization"] == "fp8" and kwargs["disable_log_stats"] is False
    assert "enforce_eager" not in kwargs
    assert [w["name"] for w in spec["windows"]] == ["greedy", "recipe_sampling"]
    assert spec["windows"][0]["sampling"]["temperature"] == 0.0


def test_measurements_take_turns_under_the_lock(tmp_path):
    lock = str(tmp_path / "measure.lock")
    spans = []

    def measure(name):
        with _exclusive(lock):
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


def test_barrier_waits_for_every_engine_ready_or_failed(tmp_path):
    barrier = {"dir": str(tmp_path), "name": "a", "count": 3, "timeout_s": 10}
    (tmp_path / "a.ready").touch()
    (tmp_path / "b.failed").touch()
    threading.Timer(0.6, (tmp_path / "c.ready").touch).start()
    start = time.monotonic()
    _wait_for_all(barrier)
    assert 0.5 < time.monotonic() - start < 5
