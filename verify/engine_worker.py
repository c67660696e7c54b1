"""One vLLM engine in its own process: start it, run the measured windows a spec asks for, write
the results as JSON. mtp_smoke.py and bench.py launch it with `python engine_worker.py SPEC.json`
and capture its output (vLLM's log) to a file, so a failed start is read from the log as a
named root cause rather than raised as a traceback in the caller.

The result names the vLLM, torch and transformers versions installed where the engine runs
(verify/report.py: installed_versions), read before the engine starts, so a failed start names
them too.

Spec (JSON): device (cuda, the default, or cpu: verify/device.py), env, engine_kwargs, windows [{name, prompts, sampling, repeat, warmup,
warmup_prompts, prompt_tokens, keep_token_ids, kind, control}], result_file, prometheus_dir,
barrier {dir, name, count, timeout_s}, lock_file. A window's `control` ("agree" or "random")
first switches a dummy model between agreeing and random target/drafter (verify/controls.py, a
vLLM plugin). Prompts are strings or lists of token ids. Timed windows run under an exclusive
flock on lock_file, after every engine of the barrier has started (or failed), so measurements
of engines sharing one GPU never overlap each other or another engine's start-up.
"""
from __future__ import annotations

import fcntl
import os
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

# run as a file (the engine's own process), by Python itself (a spawned child re-runs it as __mp_main__):
# see verify/_repository_on_path.py
if not __package__ and __name__ == "__main__":
    import _repository_on_path  # noqa: F401

from forge.data_formats import load_json  # noqa: E402
from forge.errors import ForgeError  # noqa: E402 (needs the path above)
from forge.files import REPORT, write_text_atomically  # noqa: E402
from forge.json_text import dump_json  # noqa: E402
from forge.untrusted import visible  # noqa: E402
from verify.report import installed_versions  # noqa: E402

if TYPE_CHECKING:
    from verify.engine_files import EngineSpec


def main(spec_path: str) -> int:
    try:
        spec = read_spec(Path(spec_path))
    except ForgeError as exc:
        print(f"error: {visible(exc)}", file=sys.stderr)     # the log's last line: its root cause
        return 2
    os.environ.update(spec.env)
    result = first_result(spec.name)
    result_file = Path(spec.result_file)
    barrier = spec.barrier.model_dump() if spec.barrier else None
    try:
        with gpu_turn(spec.lock_file, alone=False):  # never while a clock runs
            llm, info = start_engine(dict(spec.engine_kwargs), spec.device)
        result["engine"] = {"started": True, **info}
        _write(result_file, result)
        _arrive(barrier, "ready")
        _wait_for_all(barrier)
        with gpu_turn(spec.lock_file):
            for window in spec.windows:
                try:
                    result["windows"][window.name] = run_window(llm, window.model_dump(),
                                                                spec.prometheus_dir)
                except Exception as exc:  # noqa: BLE001 (one broken window keeps the others)
                    traceback.print_exc()
                    result.setdefault("window_errors", {})[window.name] = \
                        f"{type(exc).__name__}: {exc}"
                _write(result_file, result)
        result["engine"]["max_rss_mib"] = max_rss_mib()
        _write(result_file, result)
    except Exception as exc:  # noqa: BLE001 (reported, then the process fails)
        traceback.print_exc()
        result["error"] = f"{type(exc).__name__}: {exc}"
        _write(result_file, result)
        _arrive(barrier, "failed")
        return 1
    return 0


def read_spec(spec_path: Path) -> EngineSpec:
    """The spec supervisor.start_worker wrote, or one DataError naming the file and the field."""
    from forge.typed import loaded
    from verify.engine_files import EngineSpec

    return loaded(EngineSpec, load_json(spec_path, REPORT), spec_path)


def first_result(name: str | None) -> dict:
    """What a worker's result holds before its engine starts: the versions it will run on."""
    return {"name": name, "versions": installed_versions(), "engine": {"started": False}, "windows": {}}


def start_engine(engine_kwargs: dict, device: str = "cuda"):
    import torch
    import vllm
    from vllm import LLM

    from verify.device import device_name

    started = time.perf_counter()
    llm = LLM(**engine_kwargs)
    init_s = time.perf_counter() - started
    info = {"init_s": round(init_s, 1), "vllm": vllm.__version__, "torch": torch.__version__,
            "device": device_name(device), "cudagraph_mode": None}
    try:
        config = llm.llm_engine.vllm_config
        info["cudagraph_mode"] = str(config.compilation_config.cudagraph_mode).split(".")[-1]
        info["enforce_eager"] = bool(config.model_config.enforce_eager)
    except AttributeError:
        pass  # older engines: the log's config line still says it
    return llm, info


def max_rss_mib() -> int:
    """The most memory this process held at once (its own peak RSS; with the engine core and its
    worker in this process, as on a CPU engine, the engine's) and its children's, in MiB."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(own, children) / 1024)      # Linux reports KiB


def run_window(llm, window: dict, prom_dir: str | None) -> dict:
    control = set_control(llm, window.get("control"))
    if window.get("kind") == "followup":
        return {**run_followup(llm, window), **control}
    from vllm import SamplingParams

    prompts = window_prompts(llm, window)
    sampling = SamplingParams(**window["sampling"])
    batches = _batches(window, prompts)
    if window.get("warmup"):
        # Each new prefill length compiles kernels on first sight (about 1 s each on the H200
        # run of 2026-11-29): run every batch once, briefly, before the clock starts.
        brief = SamplingParams(**{**window["sampling"], "max_tokens": 2})
        for batch in _batches(window, window_prompts(llm, window, "warmup_prompts")):
            llm.generate(batch, brief, use_tqdm=False)
    before = metrics_snapshot(llm)
    prom_before = prometheus_text()
    walls, outputs = [], []
    for _ in range(window.get("repeat", 1)):
        for batch in batches:
            started = time.perf_counter()
            outputs += llm.generate(batch, sampling, use_tqdm=False)
            walls.append(time.perf_counter() - started)
    after = metrics_snapshot(llm)
    if prom_dir and window.get("save_prometheus"):
        Path(prom_dir).mkdir(parents=True, exist_ok=True)
        Path(prom_dir, f"{window['name']}.before.prom").write_text(prom_before)
        Path(prom_dir, f"{window['name']}.after.prom").write_text(prometheus_text())
    return {**control, "wall_s": walls, "repeat": window.get("repeat", 1),
            "concurrency": 1 if window.get("sequential") else len(prompts),
            "requests": [request_figures(o, window.get("keep_token_ids", False)) for o in outputs],
            "metrics_before": before, "metrics_after": after}


def _batches(window: dict, prompts: list) -> list[list]:
    """sequential: one request at a time (batch 1); else all prompts at once (concurrency)."""
    return [[p] for p in prompts] if window.get("sequential") else [prompts]


def window_prompts(llm, window: dict, key: str = "prompts") -> list:
    """A window's prompts as vLLM takes them. `warmup_prompts` (a long window's) are other prompts
    of the same lengths: warming up on the measured ones would leave their prefill in the prefix
    cache, and the clock would time none. `prompt_tokens` (a long window's) cuts each prompt to
    exactly that many tokens: a text prompt's length is known only to the engine's tokenizer."""
    prompts = window.get(key) or window["prompts"]
    length = window.get("prompt_tokens")
    if length:
        prompts = [_exact_length(_token_ids(llm, p), length, window["name"]) for p in prompts]
    return [_prompt(p) for p in prompts]


def _exact_length(ids: list[int], length: int, window: str) -> list[int]:
    if len(ids) < length:
        raise ValueError(f"window {window}: a prompt of {len(ids)} tokens, shorter than its "
                         f"prompt_tokens {length}")
    return list(ids[:length])


def set_control(llm, control: str | None) -> dict:
    """Switch the controls plugin (verify/controls.py) to the agreeing or the random model."""
    if control is None:
        return {}
    from verify.controls import CONTROLS, RPC_METHOD

    if control not in CONTROLS:
        raise ValueError(f"window control must be one of {', '.join(CONTROLS)} (got {control!r})")

    replies = llm.collective_rpc(RPC_METHOD, args=(control == "agree",))
    if not replies or not all(r.get("norms") for r in replies):
        raise RuntimeError(f"controls plugin switched no final norm ({replies}): "
                           "is it installed in the engine (PYTHONPATH, entry point)?")
    return {"control": control, "control_reply": replies}


def run_followup(llm, window: dict) -> dict:
    """TTFT of a second turn whose prefix (the first turn and its answer) is cached, against a
    cold prompt of the same length that shares no prefix with anything served before."""
    first = _token_ids(llm, window["prompts"][0])
    second = _token_ids(llm, window["prompts"][1], special_tokens=False)
    if window.get("warmup"):
        # The same conversation shifted to other token ids: compiles the cold and the
        # cached-prefix prefill paths without warming the measured prefix.
        _followup_pass(llm, window, [first[0]] + [t + 2 for t in first[1:]], [t + 2 for t in second])
    return _followup_pass(llm, window, first, second)


def _followup_pass(llm, window: dict, first: list[int], second: list[int]) -> dict:
    from vllm import SamplingParams

    reply = SamplingParams(**window["sampling"])
    one_token = SamplingParams(**{**window["sampling"], "max_tokens": 1})
    turn1 = llm.generate([_prompt(first)], reply, use_tqdm=False)[0]
    history = list(first) + list(turn1.outputs[0].token_ids) + list(second)
    cold = [history[0], history[1] + 1] + [t + 1 for t in history[2:]]
    figures: dict[str, object] = {}
    for label, ids in (("cold", cold), ("cached", history)):
        started = time.perf_counter()
        out = llm.generate([{"prompt_token_ids": ids}], one_token, use_tqdm=False)[0]
        figures[f"{label}_wall_s"] = time.perf_counter() - started
        figures[f"{label}_ttft_s"] = request_figures(out, False)["ttft_s"]
        figures[f"{label}_cached_tokens"] = getattr(out, "num_cached_tokens", None)
    figures["prompt_tokens"] = len(history)
    return figures


def request_figures(output, keep_token_ids: bool) -> dict:
    generated = output.outputs[0].token_ids
    figures: dict[str, object] = {"prompt_tokens": len(output.prompt_token_ids or []), "tokens": len(generated),
               "ttft_s": None, "tpot_s": None}
    stats = getattr(output, "metrics", None)
    if stats is not None:
        figures["ttft_s"] = getattr(stats, "first_token_latency", None) or None
        first, last = getattr(stats, "first_token_ts", 0), getattr(stats, "last_token_ts", 0)
        if len(generated) > 1 and last > first > 0:
            figures["tpot_s"] = (last - first) / (len(generated) - 1)
    if keep_token_ids:
        figures["token_ids"] = list(generated)
    return figures


def metrics_snapshot(llm) -> dict:
    """{name: total} of every counter (summed over label sets) and {name: [..]} of vectors."""
    snapshot: dict = {}
    for metric in llm.get_metrics():
        if hasattr(metric, "values"):
            values, old = list(metric.values), snapshot.get(metric.name, [])
            size = max(len(values), len(old))
            snapshot[metric.name] = [(values[i] if i < len(values) else 0)
                                     + (old[i] if i < len(old) else 0) for i in range(size)]
        elif hasattr(metric, "value") and metric.name.startswith("vllm:"):
            snapshot[metric.name] = snapshot.get(metric.name, 0) + metric.value
    return snapshot


def prometheus_text() -> str:
    """The process's Prometheus registry as a server's /metrics would serve it (vllm: series)."""
    try:
        from prometheus_client import REGISTRY, generate_latest
    except ImportError:
        return ""
    lines = generate_latest(REGISTRY).decode().splitlines()
    return "\n".join(line for line in lines if "vllm:" in line) + "\n"


def _token_ids(llm, prompt, special_tokens: bool = True) -> list[int]:
    if isinstance(prompt, list):
        return prompt
    return llm.get_tokenizer().encode(prompt, add_special_tokens=special_tokens)


def _prompt(prompt):
    return {"prompt_token_ids": prompt} if isinstance(prompt, list) else prompt


def _write(path: Path, result: dict) -> None:
    """The result, atomically and as strict JSON. A figure vLLM gave as NaN or Infinity cannot be
    written as a number: the windows go and `error` says which field held it, so the reader
    (mtp_smoke, bench) sees a run whose measurements were refused, not a number it cannot trust."""
    try:
        text = dump_json(result, f"engine result {path}", indent=1)
    except ForgeError as exc:
        text = dump_json({**result, "windows": {}, "error": str(exc)}, f"engine result {path}",
                         indent=1, default=str)
    write_text_atomically(path, text)


def read_result(result_file: Path) -> dict:
    """A worker's result JSON as its reader takes it; a missing or unreadable one is an engine
    that did not start, with the reason as its error (the worker writes it atomically: a broken
    one was not written by it)."""
    from pydantic import ValidationError

    from forge.typed import problem_line
    from verify.engine_files import EngineResult

    if not result_file.exists():
        return {"engine": {"started": False}}
    try:
        # As the worker wrote it (keys it left out stay out), once the model has taken it.
        return EngineResult.model_validate(load_json(result_file, REPORT)).model_dump(exclude_unset=True)
    except ForgeError as exc:
        problem = str(exc)
    except ValidationError as exc:
        problem = problem_line(exc, result_file)
    return {"engine": {"started": False}, "error": f"not the worker's result: {visible(problem)}"}


def _arrive(barrier: dict | None, state: str) -> None:
    if barrier:
        Path(barrier["dir"]).mkdir(parents=True, exist_ok=True)
        Path(barrier["dir"], f"{barrier['name']}.{state}").touch()


def _wait_for_all(barrier: dict | None) -> None:
    if not barrier:
        return
    deadline = time.monotonic() + barrier.get("timeout_s", 600)
    directory = Path(barrier["dir"])
    while time.monotonic() < deadline:
        arrived = len(list(directory.glob("*.ready")) + list(directory.glob("*.failed")))
        if arrived >= barrier["count"]:
            return
        time.sleep(0.5)


# One lock for every timed window on a shared GPU. A timed window holds it alone; an engine
# starting (weights, profiling run, CUDA graph capture: bursts of GPU work) holds it shared, so no
# clock runs while another engine starts. Bench runs and profiles started beside each other name
# the same file through the environment; a bench run alone uses its own.
MEASURE_LOCK_ENV = "VLLM_FORGE_MEASURE_LOCK"


def measure_lock(own: str | None) -> str | None:
    return os.environ.get(MEASURE_LOCK_ENV) or own


@contextmanager
def gpu_turn(lock_file: str | None, alone: bool = True):
    if not lock_file:
        yield
        return
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
