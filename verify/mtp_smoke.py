#!/usr/bin/env python3
"""Prove a serving image's Gemma 4 drafter works: it loads, shares the target's embedding, runs
under CUDA graphs, and its drafts are accepted at the recipe's thresholds. Exit 0 only if every
check passes; writes a JSON report and prints a short table.

  mtp_smoke.py --recipe gemma-4-26b-a4b-it [--target h200] [--dummy] [--lossless]
  mtp_smoke.py --recipe gemma-4-26b-a4b-it --endpoint http://127.0.0.1:8000 [--server-log F]

In-process mode starts vLLM (vllm.LLM, the recipe's settings) in a child process whose log is
captured, so a failed start is a failed check naming the root-cause line. Acceptance is taken
over the verify window only (metric deltas), at temperature 0; the recipe's own sampling is
reported beside it. --dummy writes Gemma-4-26B-A4B-shaped configs and loads dummy weights.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forge.errors import ForgeError  # noqa: E402
from verify import checks as gate  # noqa: E402
from verify.dummy_models import encode_without_tokenizer, write_dummy_models  # noqa: E402
from verify.metrics import (SpecCounters, counters_from_prometheus,  # noqa: E402
                            counters_from_snapshot)
from verify.prompts import gate_prompts, load_prompts  # noqa: E402
from verify.report import NOT_CHECKED, Check, render_table, verdict, write_report  # noqa: E402
from verify.vllm_logs import EngineLogFacts, parse_engine_log  # noqa: E402

WORKER = Path(__file__).with_name("engine_worker.py")
# GPU name fragments -> forge target names (images/targets.yaml).
DEVICE_TARGETS = (("GB10", "gb10"), ("H200", "h200"), ("H100", "h100"), ("A100", "a100"))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", required=True, help="recipe name, e.g. gemma-4-26b-a4b-it")
    p.add_argument("--target", default=os.environ.get("VLLM_FORGE_TARGET"),
                   help="recipe target (default $VLLM_FORGE_TARGET, else from the GPU's name)")
    p.add_argument("--model", help="local path of the target model (default: the recipe's)")
    p.add_argument("--drafter", help="local path of the drafter (default: the recipe's)")
    p.add_argument("--endpoint", help="check a running server at this URL instead")
    p.add_argument("--server-log", help="with --endpoint: that server's log, for the log checks")
    p.add_argument("--dummy", action="store_true", help="Gemma-4-26B-A4B shapes, dummy weights")
    p.add_argument("--layers", type=int, default=30, help="with --dummy: target layers (30 = real)")
    p.add_argument("--lossless", action="store_true",
                   help="also check greedy output with the drafter equals greedy output without")
    p.add_argument("--runner", choices=["v1", "v2"], help="override the recipe's model runner")
    p.add_argument("--max-tokens", type=int, default=128, help="tokens per prompt (default 128)")
    p.add_argument("--attention-backend", help="e.g. TRITON_ATTN")
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--kv-cache-gib", type=float, help="fixed KV cache size (engines sharing a GPU)")
    p.add_argument("--moe-config-dir", help="exported as VLLM_TUNED_CONFIG_FOLDER")
    p.add_argument("--out", default="verify-out", help="directory for the report and logs")
    p.add_argument("--timeout", type=int, default=900, help="seconds allowed for the engine run")
    return p.parse_args(argv)


def detect_target() -> str:
    try:
        import torch

        name = torch.cuda.get_device_name()
    except Exception as exc:  # noqa: BLE001
        raise ForgeError(f"no --target given and no GPU name readable ({exc})") from exc
    for fragment, target in DEVICE_TARGETS:
        if fragment in name:
            return target
    raise ForgeError(f"no --target given and GPU {name!r} is not a known target")


def load_recipe(args):
    from forge.recipes import load_recipe as load

    return load(args.recipe, args.target or detect_target())


# ------------------------------------------------------------------------------------------
# In-process: the engine in a child process, its log captured

def engine_setup(recipe, args, out: Path, speculative: bool = True) -> tuple[dict, dict]:
    """(engine kwargs, environment) for vllm.LLM from the recipe plus this run's overrides."""
    kwargs = recipe.engine_kwargs(speculative=speculative)
    env = dict(recipe.env())
    if args.runner:
        env["VLLM_USE_V2_MODEL_RUNNER"] = "1" if args.runner == "v2" else "0"
    if args.dummy:
        target_dir, draft_dir = write_dummy_models(out / "models", args.layers)
        kwargs.update(model=str(target_dir), load_format="dummy", skip_tokenizer_init=True)
        if speculative:
            kwargs["speculative_config"] = {**kwargs["speculative_config"], "model": str(draft_dir)}
    if args.model:
        kwargs["model"] = args.model
    if args.drafter and speculative:
        kwargs["speculative_config"] = {**kwargs["speculative_config"], "model": args.drafter}
    overrides = {"attention_backend": args.attention_backend,
                 "gpu_memory_utilization": args.gpu_memory_utilization,
                 "max_model_len": args.max_model_len,
                 "kv_cache_memory_bytes": int(args.kv_cache_gib * 2**30) if args.kv_cache_gib else None}
    kwargs.update({k: v for k, v in overrides.items() if v is not None})
    # Figures come from the engine's own counters: stats must be on.
    kwargs["disable_log_stats"] = False
    if args.moe_config_dir:
        env["VLLM_TUNED_CONFIG_FOLDER"] = str(Path(args.moe_config_dir).resolve())
    return kwargs, env


def prompt_inputs(args, texts: list[str]) -> list:
    return [encode_without_tokenizer(t) for t in texts] if args.dummy else texts


def run_worker(spec: dict, work: Path, label: str, timeout: int) -> tuple[dict, str]:
    """Run engine_worker.py on spec; return (its result JSON, its log text)."""
    work.mkdir(parents=True, exist_ok=True)
    spec_path, log_path = work / f"{label}.spec.json", work / f"{label}.log"
    spec["result_file"] = str(work / f"{label}.result.json")
    spec_path.write_text(json.dumps(spec, indent=1))
    print(f"[mtp_smoke] starting engine ({label}); log: {log_path}", flush=True)
    started = time.time()
    with open(log_path, "w") as log:
        try:
            subprocess.run([sys.executable, str(WORKER), str(spec_path)], stdout=log,
                           stderr=subprocess.STDOUT, timeout=timeout, check=False,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"})
        except subprocess.TimeoutExpired:
            log.write(f"\nTimeoutError: engine run exceeded {timeout} s\n")
    print(f"[mtp_smoke] engine ({label}) done in {time.time() - started:.0f} s", flush=True)
    result_file = Path(spec["result_file"])
    result = json.loads(result_file.read_text()) if result_file.exists() else {"engine": {"started": False}}
    return result, log_path.read_text(errors="replace")


def window_counters(result: dict, name: str) -> SpecCounters | None:
    window = result.get("windows", {}).get(name)
    if not window:
        return None
    return (counters_from_snapshot(window["metrics_after"])
            - counters_from_snapshot(window["metrics_before"]))


def inprocess_checks(recipe, args, out: Path) -> tuple[list[Check], dict]:
    prompts = [text for _, text in gate_prompts(load_prompts())]
    kwargs, env = engine_setup(recipe, args, out)
    greedy = {"temperature": 0.0, "max_tokens": args.max_tokens, "ignore_eos": args.dummy}
    sampling = {k: v for k, v in recipe.sampling.values.items() if k != "source"}
    spec = {"name": "smoke", "env": env, "engine_kwargs": kwargs,
            "prometheus_dir": str(out / "prometheus"),
            "windows": [
                {"name": "greedy", "prompts": prompt_inputs(args, prompts), "sampling": greedy,
                 "keep_token_ids": args.lossless, "save_prometheus": True},
                {"name": "recipe_sampling", "prompts": prompt_inputs(args, prompts),
                 "sampling": {**sampling, "seed": 0, "max_tokens": args.max_tokens,
                              "ignore_eos": args.dummy}}]}
    result, log = run_worker(spec, out, "engine", args.timeout)
    facts = parse_engine_log(log)
    engine = result.get("engine", {})
    checks = [gate.check_engine_started(engine.get("started", False), facts, result.get("error"))]
    if engine.get("started"):
        runner_v2 = env.get("VLLM_USE_V2_MODEL_RUNNER") == "1" or facts.v2_runner
        checks += log_checks(facts, recipe, runner_v2, engine.get("cudagraph_mode"))
    checks.append(gate.check_acceptance(window_counters(result, "greedy"),
                                        recipe.thresholds.min_acceptance_rate,
                                        recipe.thresholds.min_mean_acceptance_length))
    checks.append(gate.report_sampling(window_counters(result, "recipe_sampling"),
                                       recipe.sampling.values))
    if args.lossless:
        checks.append(lossless_check(recipe, args, out, result))
    context = {"engine": engine, "log_facts": facts.to_dict(), "engine_kwargs": kwargs, "env": env,
               "windows": {n: (c.summary() if (c := window_counters(result, n)) else None)
                           for n in ("greedy", "recipe_sampling")}}
    return checks, context


def log_checks(facts: EngineLogFacts, recipe, runner_v2: bool, mode: str | None) -> list[Check]:
    # The engine's own tensor parallel size picks the file: N = 704 / TP (a multi-node layout).
    moe = recipe.moe_config_for(facts.tensor_parallel_size or 1)
    expect = recipe.expect
    return [gate.check_architectures(facts),
            gate.check_shared_embedding(facts, runner_v2),
            gate.check_cuda_graphs(facts, mode),
            gate.check_moe_config(facts, moe.name if moe else None,
                                  tuned_config_expected(moe, facts.vllm_version)),
            gate.check_quantization(facts, expect.quantization),
            gate.check_moe_backend(facts, expect.moe_backend),
            gate.check_attention_backend(facts, expect.attention_backend,
                                         expect.flash_attn_version)]


def tuned_config_expected(moe, vllm_version: str | None) -> bool:
    """A recipe expects its tuned config only on releases the patch series ships it for (the H200
    tunes are for 0.25-0.26: a 0.27 image carries none, and vLLM rightly reports it missing);
    a file vLLM itself bundles (provider vllm) on every release."""
    if not (moe and moe.expected):
        return False
    if moe.provider == "vllm":
        return True
    if vllm_version is None:
        return True  # the engine did not say its release: hold the recipe to its word
    from forge.patches import shipped_moe_configs

    return moe.name in shipped_moe_configs(vllm_version)


def lossless_check(recipe, args, out: Path, with_draft: dict) -> Check:
    prompts = [text for _, text in gate_prompts(load_prompts())]
    kwargs, env = engine_setup(recipe, args, out, speculative=False)
    spec = {"name": "no-draft", "env": env, "engine_kwargs": kwargs, "windows": [
        {"name": "greedy", "prompts": prompt_inputs(args, prompts), "keep_token_ids": True,
         "sampling": {"temperature": 0.0, "max_tokens": args.max_tokens, "ignore_eos": args.dummy}}]}
    without, _ = run_worker(spec, out, "engine-no-draft", args.timeout)
    return gate.check_lossless(_token_ids(with_draft), _token_ids(without))


def _token_ids(result: dict) -> list[list[int]] | None:
    window = result.get("windows", {}).get("greedy")
    return [r["token_ids"] for r in window["requests"]] if window else None


# ------------------------------------------------------------------------------------------
# Endpoint: a running OpenAI-compatible vLLM server

def endpoint_checks(recipe, args) -> tuple[list[Check], dict]:
    import requests

    url = args.endpoint.rstrip("/")
    try:
        models = requests.get(f"{url}/v1/models", timeout=30).json()["data"]
    except (requests.RequestException, ValueError, KeyError) as exc:
        return [gate.failed("server answers", f"{url}/v1/models: {exc}")], {}
    model = models[0]["id"]
    checks = [gate.passed("server answers", f"{url} serves {model}")]
    if args.server_log:
        facts = parse_engine_log(Path(args.server_log).read_text(errors="replace"))
        checks += log_checks(facts, recipe, facts.v2_runner, None)
    else:
        checks += [Check(n, NOT_CHECKED, "needs the server's log: pass --server-log")
                   for n in ("architectures", "draft shares target embedding", "CUDA graphs",
                             "tuned MoE config", "quantization", "MoE backend",
                             "attention backend")]
    # --dummy: a server on a dummy model runs with --skip-tokenizer-init: send token ids.
    prompts = prompt_inputs(args, [text for _, text in gate_prompts(load_prompts())])
    windows = {}
    greedy = {"temperature": 0.0, "max_tokens": args.max_tokens, "ignore_eos": args.dummy}
    sampling = {k: v for k, v in recipe.sampling.values.items() if k != "source"}
    for name, params in (("greedy", greedy), ("recipe_sampling",
                                              {**sampling, "seed": 0, "max_tokens": args.max_tokens,
                                               "ignore_eos": args.dummy})):
        before = counters_from_prometheus(requests.get(f"{url}/metrics", timeout=30).text)
        for prompt in prompts:
            response = requests.post(f"{url}/v1/completions", timeout=600,
                                     json={"model": model, "prompt": prompt, **params})
            response.raise_for_status()
        after = counters_from_prometheus(requests.get(f"{url}/metrics", timeout=30).text)
        windows[name] = after - before
    checks.append(gate.check_acceptance(windows["greedy"], recipe.thresholds.min_acceptance_rate,
                                        recipe.thresholds.min_mean_acceptance_length))
    checks.append(gate.report_sampling(windows["recipe_sampling"], recipe.sampling.values))
    return checks, {"endpoint": url, "model": model,
                    "windows": {n: w.summary() for n, w in windows.items()}}


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        recipe = load_recipe(args)
    except ForgeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.endpoint:
        checks, context = endpoint_checks(recipe, args)
    else:
        checks, context = inprocess_checks(recipe, args, out)
    report = write_report(out / "mtp_smoke.json", checks, recipe=recipe.name, target=recipe.target,
                          dummy=args.dummy, layers=args.layers if args.dummy else None,
                          runner=args.runner or recipe.serve.model_runner, **context)
    print(render_table(checks))
    print(f"report: {report}")
    return 0 if verdict(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
