#!/usr/bin/env python3
"""Measure decode speed with and without the drafter, honestly labelled. Writes bench.json,
bench.md and bench.png (matplotlib, where installed).

  bench.py --recipe R [--target T] [--dummy --layers N] [--configs bf16,fp8,fp8-mtp1,...]
           [--runners v1,v2] [--parallel] --out DIR
  bench.py --recipe R --endpoint URL --burst 500 --out DIR     (a running server)
  bench.py --render DIR/bench.json                            (re-render md/png)

Per engine (vllm.LLM in its own process, see engine_worker.py), batch 1 unless stated:
burst (short replies), sustained (long generation), wall clock and decode-only (TPOT) each,
TTFT, concurrency 8 and 16, and a follow-up turn that hits the prefix cache against a cold
prompt of the same length. Speculative engines get their step cost against the plain engine of
the same dtype and runner, and the break-even acceptance length. With --parallel all engines
start at once (memory allowing) and then measure one at a time under a file lock.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forge.errors import ForgeError  # noqa: E402
from verify import bench_report  # noqa: E402
from verify.dummy_models import encode_without_tokenizer, write_dummy_models  # noqa: E402
from verify.prompts import gate_prompts, load_prompts  # noqa: E402
from verify.vllm_logs import parse_engine_log  # noqa: E402

WORKER = Path(__file__).with_name("engine_worker.py")
CONFIG = re.compile(r"^(bf16|fp8)(?:-mtp([1-9]))?$")
DEFAULT_CONFIGS = "bf16,fp8,fp8-mtp1,fp8-mtp2,fp8-mtp3"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", help="recipe name, e.g. gemma-4-26b-a4b-it")
    p.add_argument("--target", default=os.environ.get("VLLM_FORGE_TARGET"))
    p.add_argument("--configs", default=DEFAULT_CONFIGS,
                   help=f"comma-separated dtype[-mtpK] (default {DEFAULT_CONFIGS})")
    p.add_argument("--runners", default="v1,v2", help="model runners to measure (default v1,v2)")
    p.add_argument("--dummy", action="store_true", help="Gemma-4-26B-A4B shapes, dummy weights")
    p.add_argument("--layers", type=int, default=30, help="with --dummy: target layers")
    p.add_argument("--model", help="local target model path (default: the recipe's)")
    p.add_argument("--drafter", help="local drafter path (default: the recipe's)")
    p.add_argument("--parallel", action="store_true", help="start all engines at once")
    p.add_argument("--gpu-memory-utilization", type=float, help="per engine")
    p.add_argument("--kv-cache-gib", type=float, help="fixed KV cache per engine")
    p.add_argument("--max-model-len", type=int, default=8192)
    p.add_argument("--attention-backend", help="e.g. TRITON_ATTN")
    p.add_argument("--moe-config-dir", help="exported as VLLM_TUNED_CONFIG_FOLDER")
    p.add_argument("--burst-tokens", type=int, default=48)
    p.add_argument("--sustained-tokens", type=int, default=512)
    p.add_argument("--repeat", type=int, default=2, help="sustained repetitions")
    p.add_argument("--endpoint", help="benchmark a running server instead")
    p.add_argument("--burst", type=int, default=500, help="with --endpoint: concurrent requests")
    p.add_argument("--render", help="re-render bench.md/png from this bench.json")
    p.add_argument("--collect", action="store_true",
                   help="build the report from the engine results already under --out "
                        "(a run that was cut short)")
    p.add_argument("--token-prompts", action="store_true",
                   help="with --endpoint: send token ids (a server started with "
                        "--skip-tokenizer-init on a dummy model)")
    p.add_argument("--wait-server", nargs=2, metavar=("HEALTH_URL", "PID"),
                   help="a server starting beside the engines: measure only once it is up "
                        "(or its process has exited)")
    p.add_argument("--out", default="bench-out")
    p.add_argument("--timeout", type=int, default=1500, help="seconds for all engines together")
    return p.parse_args(argv)


def parse_configs(text: str) -> list[tuple[str, int]]:
    configs = []
    for item in text.split(","):
        match = CONFIG.match(item.strip())
        if not match:
            raise ForgeError(f"--configs: {item!r} is not dtype[-mtpK] (e.g. bf16, fp8-mtp3)")
        configs.append((match[1], int(match[2] or 0)))
    return configs


def parse_runners(text: str) -> list[str]:
    runners = [r.strip() for r in text.split(",")]
    bad = [r for r in runners if r not in ("v1", "v2")]
    if bad:
        raise ForgeError(f"--runners: {bad[0]!r} is not v1 or v2")
    return runners


# ------------------------------------------------------------------------------------------
# In-process engines

def windows(args, prompts: dict) -> list[dict]:
    encode = encode_without_tokenizer if args.dummy else (lambda text: text)
    gate = [encode(text) for _, text in gate_prompts(prompts)]
    greedy = {"temperature": 0.0, "ignore_eos": args.dummy}
    return [
        {"name": "warmup", "prompts": gate[:2], "sampling": {**greedy, "max_tokens": 16}},
        {"name": "burst", "warmup": True, "prompts": [encode(t) for t in prompts["burst"]], "sequential": True,
         "sampling": {**greedy, "max_tokens": args.burst_tokens}},
        {"name": "sustained", "warmup": True, "prompts": [encode(prompts["prose"][0])], "sequential": True,
         "repeat": args.repeat,
         "sampling": {**greedy, "max_tokens": args.sustained_tokens, "ignore_eos": True}},
        {"name": "conc8", "warmup": True, "prompts": (gate * 2)[:8],
         "sampling": {**greedy, "max_tokens": 128, "ignore_eos": True}},
        {"name": "conc16", "warmup": True, "prompts": (gate * 2)[:16],
         "sampling": {**greedy, "max_tokens": 128, "ignore_eos": True}},
        {"name": "followup", "warmup": True, "kind": "followup", "sampling": {**greedy, "max_tokens": 32},
         "prompts": [encode(prompts["followup"]["first"]), _continuation(args, prompts)]},
    ]


def _continuation(args, prompts: dict):
    """The second turn's own tokens (no BOS: it continues the first turn's context)."""
    text = " " + prompts["followup"]["second"]
    return encode_without_tokenizer(text)[1:] if args.dummy else text


def engine_spec(recipe, args, dtype: str, k: int, runner: str, out: Path) -> dict:
    kwargs = recipe.engine_kwargs(speculative=bool(k))
    kwargs.pop("quantization", None)
    if dtype == "fp8":
        kwargs["quantization"] = "fp8"
    if k:
        kwargs["speculative_config"] = {**kwargs["speculative_config"], "num_speculative_tokens": k}
    if args.dummy:
        target_dir, draft_dir = write_dummy_models(out / "models", args.layers)
        kwargs.update(model=str(target_dir), load_format="dummy", skip_tokenizer_init=True)
        if k:
            kwargs["speculative_config"]["model"] = str(draft_dir)
    if args.model:
        kwargs["model"] = args.model
    if args.drafter and k:
        kwargs["speculative_config"]["model"] = args.drafter
    overrides = {"attention_backend": args.attention_backend,
                 "gpu_memory_utilization": args.gpu_memory_utilization,
                 "max_model_len": args.max_model_len, "max_num_seqs": 16,
                 "kv_cache_memory_bytes": int(args.kv_cache_gib * 2**30) if args.kv_cache_gib else None}
    kwargs.update({key: v for key, v in overrides.items() if v is not None})
    kwargs["disable_log_stats"] = False
    name = bench_report.engine_name(dtype, k, runner)
    env = {**recipe.env(), "VLLM_USE_V2_MODEL_RUNNER": "1" if runner == "v2" else "0",
           # Separate compile caches: engines compiling at once never share a cache entry.
           "VLLM_CACHE_ROOT": f"/tmp/vllm-forge-bench-cache/{name}"}
    if args.moe_config_dir:
        env["VLLM_TUNED_CONFIG_FOLDER"] = str(Path(args.moe_config_dir).resolve())
    return {"name": name, "env": env, "engine_kwargs": kwargs,
            "result_file": str(out / "engines" / f"{name}.result.json")}


def run_engines(specs: list[dict], out: Path, parallel: bool, timeout: int,
                server: tuple[str, str] | None = None) -> dict[str, dict]:
    engines_dir, barrier_dir = out / "engines", out / "barrier"
    engines_dir.mkdir(parents=True, exist_ok=True)
    barrier_dir.mkdir(parents=True, exist_ok=True)
    for stale in barrier_dir.iterdir():
        stale.unlink()
    groups = [specs] if parallel else [[s] for s in specs]
    results = {}
    for group in groups:
        procs = {}
        for spec in group:
            spec["barrier"] = {"dir": str(barrier_dir / str(len(results))), "name": spec["name"],
                               "count": len(group) + bool(server), "timeout_s": timeout}
            spec["lock_file"] = str(out / "measure.lock")
            path = engines_dir / f"{spec['name']}.spec.json"
            path.write_text(json.dumps(spec, indent=1))
            log = open(engines_dir / f"{spec['name']}.log", "w")
            procs[spec["name"]] = (subprocess.Popen(
                [sys.executable, str(WORKER), str(path)], stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"}), log, spec)
            print(f"[bench] started {spec['name']}", flush=True)
        _wait(procs, timeout, server)
        server = None  # only the first group waits for it
        for name, (_, _, spec) in procs.items():
            result_file = Path(spec["result_file"])
            result = json.loads(result_file.read_text()) if result_file.exists() else {}
            log_text = (engines_dir / f"{name}.log").read_text(errors="replace")
            results[name] = {"result": result, "log": parse_engine_log(log_text)}
    return results


def collect_engines(specs: list[dict], out: Path) -> dict[str, dict]:
    """The results and logs a run left under out/engines (written as each window finishes)."""
    raw = {}
    for spec in specs:
        result_file = out / "engines" / f"{spec['name']}.result.json"
        log_file = out / "engines" / f"{spec['name']}.log"
        raw[spec["name"]] = {
            "result": json.loads(result_file.read_text()) if result_file.exists() else {},
            "log": parse_engine_log(log_file.read_text(errors="replace") if log_file.exists() else "")}
    return raw


def _wait(procs: dict, timeout: int, server: tuple[str, str] | None = None) -> None:
    """Wait for every worker; one that dies before it is ready is marked failed at the barrier,
    so the others do not wait for it. A server beside them arrives when its health URL answers
    (or its process is gone)."""
    deadline = time.monotonic() + timeout
    barrier = Path(next(iter(procs.values()))[2]["barrier"]["dir"])
    barrier.mkdir(parents=True, exist_ok=True)
    while time.monotonic() < deadline:
        running = 0
        for name, (proc, log, spec) in procs.items():
            if proc.poll() is None:
                running += 1
                continue
            if not (barrier / f"{name}.ready").exists():
                (barrier / f"{name}.failed").touch()
        if server and not list(barrier.glob("server.*")):
            state = _server_state(*server)
            if state:
                (barrier / f"server.{state}").touch()
                print(f"[bench] server beside the engines: {state}", flush=True)
        if not running:
            break
        time.sleep(1)
    for name, (proc, log, _) in procs.items():
        if proc.poll() is None:
            proc.kill()
            print(f"[bench] {name}: killed after {timeout} s", flush=True)
        log.close()
        print(f"[bench] {name}: exit {proc.wait()}", flush=True)


def _server_state(health_url: str, pid: str) -> str | None:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(health_url, timeout=2) as response:
            if response.status == 200:
                return "ready"
    except (urllib.error.URLError, OSError):
        pass
    return None if Path(f"/proc/{pid}").exists() else "failed"


def inprocess_report(recipe, args, out: Path) -> dict:
    configs, runners = parse_configs(args.configs), parse_runners(args.runners)
    prompts = load_prompts()
    specs = []
    for runner in runners:
        for dtype, k in configs:
            spec = engine_spec(recipe, args, dtype, k, runner, out)
            spec["windows"] = windows(args, prompts)
            specs.append(spec)
    if args.collect:
        raw = collect_engines(specs, out)
    else:
        raw = run_engines(specs, out, args.parallel, args.timeout, args.wait_server)
    engines, machine = {}, {}
    for spec in specs:
        name = spec["name"]
        dtype, k = CONFIG.match(name.rsplit("-", 1)[0]).groups()
        result, facts = raw[name]["result"], raw[name]["log"]
        engine = result.get("engine", {})
        engines[name] = {"dtype": dtype, "k": int(k or 0), "runner": name.rsplit("-", 1)[1],
                         "init_s": engine.get("init_s"), "cudagraph_mode": engine.get("cudagraph_mode"),
                         "moe_backends": facts.moe_backends, "v2_runner_log": facts.v2_runner,
                         "error": None if engine.get("started") else (facts.root_cause or result.get("error")),
                         "figures": bench_report.engine_figures(result) if engine.get("started") else None}
        if engine.get("started"):
            machine = {key: engine.get(key) for key in ("device", "vllm", "torch")}
    bench_report.derive(engines)
    return {"engines": engines, "machine": machine}


# ------------------------------------------------------------------------------------------
# A running server: a burst of concurrent requests, every one answered

def server_burst(url: str, count: int, max_tokens: int = 32, token_prompts: bool = False) -> dict:
    import requests

    url = url.rstrip("/")
    model = requests.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
    texts = [t for _, t in gate_prompts(load_prompts())]
    if token_prompts:
        texts = [encode_without_tokenizer(t) for t in texts]

    def one(i: int):
        started = time.perf_counter()
        try:
            response = requests.post(f"{url}/v1/completions", timeout=900, json={
                "model": model, "prompt": texts[i % len(texts)], "max_tokens": max_tokens,
                "temperature": 0.0})
            ok = response.status_code == 200 and bool(response.json().get("choices"))
        except (requests.RequestException, ValueError):
            ok = False
        return ok, time.perf_counter() - started

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=count) as pool:
        results = list(pool.map(one, range(count)))
    latencies = sorted(t for _, t in results)
    return {"requests": count, "answered": sum(ok for ok, _ in results),
            "failed": sum(not ok for ok, _ in results), "wall_s": round(time.perf_counter() - started, 2),
            "latency_p50_s": round(statistics.median(latencies), 3),
            "latency_max_s": round(latencies[-1], 3), "max_tokens": max_tokens}


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    try:
        if args.render:
            report = json.loads(Path(args.render).read_text())
            paths = bench_report.write_outputs(report, Path(args.render).parent)
            print(f"rendered {', '.join(str(p) for p in paths.values())}")
            return 0
        if not args.recipe:
            raise ForgeError("--recipe is required")
        from forge.recipes import load_recipe

        if not args.target:
            from verify.mtp_smoke import detect_target
            args.target = detect_target()
        recipe = load_recipe(args.recipe, args.target)
        report = {"recipe": recipe.name, "target": recipe.target, "dummy": args.dummy,
                  "layers": args.layers if args.dummy else "checkpoint",
                  "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                  "command": "verify/bench.py " + shlex.join(sys.argv[1:] if argv is None else argv),
                  "engines": {}, "machine": {}}
        if args.endpoint:
            report["server_burst"] = server_burst(args.endpoint, args.burst,
                                                  token_prompts=args.token_prompts)
        else:
            report.update(inprocess_report(recipe, args, out))
    except ForgeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    paths = bench_report.write_outputs(report, out)
    print(Path(paths["md"]).read_text())
    failed = [n for n, e in report["engines"].items() if e.get("error") or not e.get("figures")]
    burst = report.get("server_burst")
    return 1 if failed or (burst and burst["failed"]) else 0


if __name__ == "__main__":
    sys.exit(main())
