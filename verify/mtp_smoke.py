#!/usr/bin/env python3
"""Prove a serving image's MTP drafter works: it loads, shares what its family says it takes from
the target (models/<family>.yaml, drafter.shares), runs under CUDA graphs, and its drafts are
accepted at the recipe's thresholds. Exit 0 only if every check passes; writes a JSON report and
prints a short table.

  mtp_smoke.py --recipe gemma-4-26b-a4b-it [--target h200] [--dummy] [--lossless]
  mtp_smoke.py --recipe gemma-4-26b-a4b-it --endpoint http://127.0.0.1:8000 --server-log F
               [--dummy [--expect-control agree|random]]
  (either mode: --image-digest sha256:... names the image under test, for build.py publish)

In-process mode starts vLLM (vllm.LLM, the recipe's settings) in a child process whose log is
captured, so a failed start is a failed check naming the root-cause line. Acceptance is taken
over the verify window only (metric deltas), at temperature 0; the recipe's own sampling is
reported beside it. --dummy writes configs of the recipe's model family with published shapes
(models/<family>.yaml; --shape picks another of that family, e.g. 31b), loads dummy weights,
and then runs the gate twice on one engine, as controls (verify/controls.py): on an agreeing
model (target and drafter made to agree; the gate must PASS) and on the random one (the gate
must FAIL). If either control goes the wrong way, verify itself is broken: exit 3.
With --lossless, a second engine without the drafter runs beside it and greedy outputs must be
identical: gated on the agreeing model (exact zero logits), reported on the random one (its
near-tied logits may break differently under other batch shapes).
A server started with the controls plugin (benchmarks/gpu/serve_local.py --control agree|random)
serves one control model for its whole life: --endpoint --dummy --expect-control agree|random
says which, and the acceptance gate is then that control (agree: the gate must PASS; random: it
must FAIL, and the gate itself stays NOT CHECKED); a control going the wrong way: exit 3.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

# run as a file, not as verify.X, by Python itself (a spawned child re-runs it as __mp_main__):
# see verify/_repository_on_path.py
if not __package__ and __name__ == "__main__":
    import _repository_on_path  # noqa: F401

from forge.commands.cli import OneLineParser
from forge.errors import ForgeError, exit_on_interrupt
from forge.files import SERVER_LOG, check_output_dir, read_tail
from forge.serving.serve import installed_runner_env, installed_runs_v2_only
from forge.untrusted import visible
from verify import checks as gate
from verify import controls
from verify import device as devices
from verify import engine_spec as build
from verify.device import DEVICES
from verify.dummy_models import check_shape_flag, encode_without_tokenizer, recipe_shape
from verify.endpoint import Endpoint, EndpointError, excerpt, served_model, server_release
from verify.engine_worker import read_result
from verify.flags import endpoint_url, positive_count, positive_seconds
from verify.machine import detect_target
from verify.metrics import MetricsError, SpecCounters, counters_from_prometheus, counters_from_snapshot
from verify.prompts import gate_prompts, load_prompts
from verify.report import (
    INFO,
    REPORT_NAME,
    Check,
    failed,
    not_checked,
    passed,
    release_in,
    render_table,
    unknown_versions,
    verdict,
    versions_line,
    write_report,
)
from verify.supervisor import start_worker, wait_all
from verify.vllm_logs import EngineLogFacts, parse_engine_log, report_log_facts

ROOT = Path(__file__).resolve().parents[1]
# GPU name fragments -> forge target names (images/targets.yaml).


def parse_args(argv=None) -> argparse.Namespace:
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", required=True, help="recipe name, e.g. gemma-4-26b-a4b-it")
    p.add_argument("--target", default=os.environ.get("VLLM_FORGE_TARGET"),
                   help="recipe target (default $VLLM_FORGE_TARGET, else from the GPU's name)")
    p.add_argument("--model", help="local path of the target model (default: the recipe's)")
    p.add_argument("--drafter", help="local path of the drafter (default: the recipe's)")
    p.add_argument("--endpoint", type=endpoint_url, help="check a running server at this URL instead")
    p.add_argument("--server-log", help="with --endpoint: that server's log, for the log checks (without it "
                        "they cannot run and the report cannot pass)")
    p.add_argument("--dummy", action="store_true",
                   help="the recipe's family's published shapes, dummy weights, positive and negative controls")
    p.add_argument("--shape", help="with --dummy: a model of the recipe's models/<family>.yaml with a "
                   "drafter shape (default: the recipe's model, else the family's first)")
    p.add_argument("--layers", type=int, help="with --dummy: target layers (default: the real depth)")
    p.add_argument("--centroids", action="store_true",
                   help="with --dummy: a centroid-masked drafter (use_ordered_embeddings)")
    p.add_argument("--expect-control", choices=controls.CONTROLS,
                   help="with --endpoint --dummy: the control model the server runs "
                        "(serve_local.py --control): the acceptance gate must PASS on agree, FAIL on random")
    p.add_argument("--lossless", action="store_true",
                   help="also check greedy output with the drafter equals greedy output without")
    p.add_argument("--runner", choices=["v1", "v2"], help="override the recipe's model runner")
    p.add_argument("--device", choices=DEVICES, default="cuda",
                   help="where the in-process engine runs (default cuda); cpu: vLLM's CPU build "
                        "(build.py smoke --device cpu), where the GPU-only checks are NOT APPLICABLE and "
                        "the recipe settings a CPU cannot run are named as not honoured")
    p.add_argument("--batch", type=positive_count, metavar="N",
                   help="in-process: the gate prompts repeated to N requests, all at once (a decode "
                        "batch of N: paths chosen by the number of sequences, e.g. Triton's split-KV "
                        "above 16 on the 26B-A4B; default: the gate prompts once)")
    p.add_argument("--max-tokens", type=positive_count, default=128, help="tokens per prompt (default 128)")
    p.add_argument("--attention-backend", help="e.g. TRITON_ATTN")
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--kv-cache-gib", type=float, help="fixed KV cache size (engines sharing a GPU)")
    p.add_argument("--moe-config-dir", help="exported as VLLM_TUNED_CONFIG_FOLDER")
    p.add_argument("--compile-backend", choices=["inductor", "eager"],
                   help="vLLM's compile backend (default: the recipe's, i.e. vLLM's Inductor); eager "
                        "skips Inductor's code generation, CUDA graphs are still captured and checked")
    p.add_argument("--out", default="verify-out", help="directory for the report and logs")
    p.add_argument("--timeout", type=positive_seconds, default=900,
                   help="seconds allowed for the engine run (with --endpoint: for each request)")
    p.add_argument("--image-digest", type=image_digest, default=os.environ.get(DIGEST_ENV),
                   help="sha256 digest (or NAME@sha256:...) of the image under test, recorded in "
                        f"the report for build.py publish (default ${DIGEST_ENV})")
    args = p.parse_args(argv)
    check_shape_flag(p, args)
    if args.expect_control and not (args.endpoint and args.dummy):
        p.error("--expect-control needs --endpoint and --dummy (in-process, --dummy runs both controls)")
    if args.batch and args.endpoint:
        p.error("--batch is in-process only (--endpoint sends the gate prompts one at a time)")
    if args.device != "cuda" and args.endpoint:
        p.error("--device is in-process only (--endpoint checks a server wherever it runs)")
    return args


def smoke_prompts(args) -> list:
    """The gate prompts as the engine takes them, cycled to --batch requests where it is given."""
    prompts = prompt_inputs(args, [text for _, text in gate_prompts(load_prompts())])
    if args.batch:
        prompts = [prompts[i % len(prompts)] for i in range(args.batch)]
    return prompts


DIGEST_ENV = "VLLM_FORGE_IMAGE_DIGEST"
_DIGEST = re.compile(r"(?:[^@\s]+@)?(sha256:[0-9a-f]{64})")


def image_digest(text: str) -> str:
    """The sha256:... of `sha256:...` or of `docker image inspect`'s RepoDigests `NAME@sha256:...`."""
    match = _DIGEST.fullmatch(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"not sha256:<64 hex> or NAME@sha256:<64 hex> "
                                         f"(from --image-digest or ${DIGEST_ENV}): {text!r}")
    return match[1]


def make_output_dir(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ForgeError(f"--out {out}: cannot make the folder: {exc.strerror or exc}") from None


def load_recipe(args):
    from forge.serving.recipes import load_recipe as load

    return load(args.recipe, args.target or detect_target())


# ------------------------------------------------------------------------------------------
# In-process: the engine in a child process, its log captured

def engine_setup(recipe, args, out: Path, speculative: bool = True) -> tuple[dict, dict, list]:
    """(engine kwargs, environment, the recipe settings the device does not honour) for vllm.LLM
    from the recipe plus this run's overrides (verify/engine_build.py), adapted to --device."""
    kwargs, env = build.recipe_engine(recipe, speculative)
    if args.runner:
        env["VLLM_USE_V2_MODEL_RUNNER"] = "1" if args.runner == "v2" else "0"
    # 0.34.0 on: no V1 runner and no switch (vLLM refuses VLLM_USE_V2_MODEL_RUNNER=0 at start)
    env = installed_runner_env(env, args.runner or recipe.serve.model_runner, recipe)
    if args.dummy:
        build.use_dummy_models(kwargs, env, recipe, out / "models", out / "plugin", args.layers, args.shape,
                              drafter=speculative, centroids=args.centroids)
    build.use_given_models(kwargs, args.model, args.drafter, speculative)
    kwargs = build.with_attention(kwargs, args.attention_backend)
    build.with_sizes(kwargs, args.gpu_memory_utilization, args.max_model_len, args.kv_cache_gib)
    build.with_compile_backend(kwargs, args.compile_backend)
    build.with_moe_configs(env, args.moe_config_dir)
    return build.finished(kwargs, env, args.device)


def prompt_inputs(args, texts: list[str]) -> list:
    return [encode_without_tokenizer(t, args.shape, getattr(args, "family", None)) for t in texts] if args.dummy else texts


def run_worker(spec: dict, work: Path, label: str, timeout: int) -> tuple[dict, str]:
    """Run engine_worker.py on spec; return (its result JSON, its log text)."""
    return run_workers([(spec, label)], work, timeout)[label]


def run_workers(jobs: list[tuple[dict, str]], work: Path, timeout: int) -> dict[str, tuple[dict, str]]:
    """Run engine_worker.py on every (spec, label) at once; {label: (result JSON, log text)}."""
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    workers = []
    for spec, label in jobs:
        spec["result_file"] = str(work / f"{label}.result.json")
        print(visible(f"[mtp_smoke] starting engine ({label}); log: {work / f'{label}.log'}"),
              flush=True)      # work: under --out
        workers.append(start_worker(label, spec, work / f"{label}.spec.json", work / f"{label}.log"))

    def timed_out(worker) -> None:
        worker.log.write(f"\nTimeoutError: engine run exceeded {timeout} s\n")
        worker.log.flush()

    wait_all(workers, timeout, on_timeout=timed_out)
    results = {}
    for worker in workers:
        print(f"[mtp_smoke] engine ({worker.name}) done in {time.time() - started:.0f} s", flush=True)
        result = read_result(Path(worker.spec["result_file"]))
        results[worker.name] = (result, read_tail(worker.log_path).decode(errors="replace"))
    return results


def window_counters(result: dict, name: str) -> SpecCounters | None:
    """The counters' delta over one window of the engine's result; None if it did not run;
    MetricsError where a reading or the delta cannot be true (verify/metrics.py)."""
    window = result.get("windows", {}).get(name)
    if not window:
        return None
    if not isinstance(window, dict) or not {"metrics_before", "metrics_after"} <= window.keys():
        raise MetricsError(f"the {name} window names no metrics_before and metrics_after")
    try:
        return (counters_from_snapshot(window["metrics_after"])
                - counters_from_snapshot(window["metrics_before"]))
    except MetricsError as exc:
        raise MetricsError(f"{name} window: {exc}") from None


def windows_measured(result: dict, names: list[str]) -> dict[str, SpecCounters | None | MetricsError]:
    """window_counters of each name, a refusal kept as its MetricsError (it becomes a FAIL)."""
    measured: dict[str, SpecCounters | None | MetricsError] = {}
    for name in names:
        try:
            measured[name] = window_counters(result, name)
        except MetricsError as exc:
            measured[name] = exc
    return measured


def window_summary(window: SpecCounters | None | MetricsError) -> dict | None:
    if isinstance(window, MetricsError):
        return {"refused": str(window)}
    return window.summary() if window else None


def inprocess_checks(recipe, args, out: Path) -> tuple[list[Check], dict]:
    prompts = smoke_prompts(args)
    kwargs, env, not_honoured = engine_setup(recipe, args, out)
    skipped = devices.skipped_windows(args.device)
    greedy = {"temperature": 0.0, "max_tokens": args.max_tokens, "ignore_eos": args.dummy}
    sampling = {k: v for k, v in recipe.sampling.values.items() if k != "source"}
    recipe_sampling = {**sampling, "seed": 0, "max_tokens": args.max_tokens, "ignore_eos": args.dummy}
    # --dummy: the agreeing model first, then the random one, on the same engine.
    gated = list(controls.CONTROLS) if args.dummy else [None]
    windows = [{"name": _greedy_window(c), "prompts": prompts, "sampling": greedy, "control": c,
                "keep_token_ids": args.lossless, "save_prometheus": True} for c in gated]
    if "recipe-sampling" not in skipped:
        windows.append({"name": "recipe_sampling", "prompts": prompts, "sampling": recipe_sampling,
                        "control": gated[0]})
    jobs = [({"name": "smoke", "device": args.device, "env": env, "engine_kwargs": kwargs,
              "prometheus_dir": str(out / "prometheus"), "windows": windows}, "engine")]
    if args.lossless:
        jobs.append((lossless_spec(recipe, args, out, prompts, gated), "engine-no-draft"))
    runs = run_workers(jobs, out, args.timeout)
    result, log = runs["engine"]
    facts = parse_engine_log(log)
    engine = result.get("engine", {})
    checks = [gate.check_engine_started(engine.get("started", False), facts, result.get("error"))]
    if engine.get("started"):
        checks += log_checks(facts, recipe, engine_runs_v2(env, facts), engine.get("cudagraph_mode"),
                             args.device)
    thresholds = recipe.thresholds
    names = [_greedy_window(c) for c in gated] + ["recipe_sampling"]
    measured = windows_measured(result, names)
    errors = result.get("window_errors") or {}
    for control in gated:
        window = measured[_greedy_window(control)]
        label = gate.NEGATIVE_CONTROL if control == "random" else gate.ACCEPTANCE
        if window is None and errors.get(_greedy_window(control)):
            # the engine started but failed running the prompts: that failure is the finding
            checks.append(failed(label, f"the {_greedy_window(control)} window failed in the engine: "
                                        f"{errors[_greedy_window(control)]}"))
            continue
        if isinstance(window, MetricsError):
            checks.append(gate.counters_refused(label, str(window)))
            continue
        verdict_ = gate.check_acceptance(window, thresholds.min_acceptance_rate,
                                         thresholds.min_mean_acceptance_length)
        checks.append({None: verdict_, "agree": gate.positive_control(verdict_),
                       "random": gate.negative_control(verdict_)}[control])
    sampled = measured["recipe_sampling"]
    if "recipe-sampling" in skipped:
        checks.append(not_checked(gate.SAMPLING, f"skipped: {skipped['recipe-sampling']}", gating=False))
    else:
        checks.append(gate.counters_refused(gate.SAMPLING, str(sampled))
                      if isinstance(sampled, MetricsError)
                      else gate.report_sampling(sampled, recipe.sampling.values))
    if args.lossless:
        without, _ = runs["engine-no-draft"]
        for control in gated:
            name = _greedy_window(control)
            check = gate.check_lossless(_token_ids(result, name), _token_ids(without, name))
            if control:
                check.name += f", {control} model"
            if control == "random" and check.failed:
                # Random dummy weights give near-tied logits (all within ~1e-3), where kernels of
                # different batch shapes (a k+1-token verify step vs a 1-token step) may break
                # ties differently: reported, gated only where logits are exact (agreeing model).
                check = Check(check.name, INFO, f"{check.detail} (near-tied random logits; not gated)")
            checks.append(check)
    # Read inside the engine's process before it started (engine_worker.py).
    versions = result.get("versions") or unknown_versions("the engine process wrote no result")
    context = {"engine": engine, "versions": versions, "log_facts": facts.to_dict(),
               "engine_kwargs": kwargs, "env": env,
               "windows": {n: window_summary(w) for n, w in measured.items()},
               **devices.report_context(args.device, not_honoured, skipped)}
    return checks, context


def _greedy_window(control: str | None) -> str:
    return "greedy" if control is None else f"greedy_{control}"


def log_checks(facts: EngineLogFacts, recipe, runner_v2: bool, mode: str | None,
               device: str = "cuda") -> list[Check]:
    # The engine's own tensor parallel size picks the file: N = 704 / TP (a multi-node layout).
    moe = recipe.moe_config_for(facts.tensor_parallel_size or 1)
    expect = recipe.expect
    family = recipe.family_model[0]
    # what the family's drafter takes from the target: one check each (models/<family>.yaml)
    shared = [gate.check_shared(facts, runner_v2, family, what) for what in family.shares]
    checks = [gate.check_architectures(facts, family), *shared,
              gate.check_cuda_graphs(facts, mode),
              gate.check_moe_config(facts, moe.name if moe else None,
                                    tuned_config_expected(moe, facts.vllm_version)),
              gate.check_quantization(facts, expect.quantization),
              gate.check_moe_backend(facts, expect.moe_backend),
              gate.check_attention_backend(facts, expect.attention_backend,
                                           expect.flash_attn_version)]
    return [devices.as_applicable(device, check) for check in checks]


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
    from forge.patching.status import shipped_moe_configs

    return moe.name in shipped_moe_configs(vllm_version)


def engine_runs_v2(env: dict, facts: EngineLogFacts, site_packages: str | None = None) -> bool:
    """Whether the in-process engine ran the V2 runner: the switch set, the runner's own line in the
    log (0.33.0 and earlier), or a vLLM that has no other runner (0.34.0 on: no switch, no line)."""
    return (env.get("VLLM_USE_V2_MODEL_RUNNER") == "1" or facts.v2_runner
            or installed_runs_v2_only(site_packages))


def lossless_spec(recipe, args, out: Path, prompts: list, gated: list) -> dict:
    """The same engine without the drafter, run beside the speculative one: greedy output must
    match token for token (on each control model under --dummy)."""
    kwargs, env, _ = engine_setup(recipe, args, out, speculative=False)
    greedy = {"temperature": 0.0, "max_tokens": args.max_tokens, "ignore_eos": args.dummy}
    return {"name": "no-draft", "device": args.device, "env": env, "engine_kwargs": kwargs, "windows": [
        {"name": _greedy_window(c), "prompts": prompts, "keep_token_ids": True, "control": c,
         "sampling": greedy} for c in gated]}


def _token_ids(result: dict, name: str = "greedy") -> list[list[int]] | None:
    window = result.get("windows", {}).get(name)
    return [r["token_ids"] for r in window["requests"]] if window else None


# ------------------------------------------------------------------------------------------
# Endpoint: a running OpenAI-compatible vLLM server

# The checks read from the server's log (--server-log): without it they cannot run.
def log_check_names(recipe) -> list[str]:
    """log_checks' names, in its order: the family's drafter.shares checks after the architectures."""
    return ["architectures", *gate.shared_check_names(recipe.family_model[0]), "CUDA graphs",
            "tuned MoE config", "quantization", "MoE backend", "attention backend"]


def server_log_checks(recipe, server_log: str | None) -> list[Check]:
    if not server_log:
        return [not_checked(name, "needs the server's log: pass --server-log")
                for name in log_check_names(recipe)]
    try:
        # its end: a log over the cap is read from where it says why the run ended
        text = read_tail(server_log, SERVER_LOG).decode("utf-8", "replace")
    except ForgeError as exc:
        return ([failed("server log", f"--server-log {exc}")]
                + [not_checked(name, "the server's log could not be read")
                   for name in log_check_names(recipe)])
    facts = parse_engine_log(text)
    # The server is another process: the vLLM installed here speaks for it only where the log
    # names the same release (verify runs in the server's image).
    v2_only = facts.vllm_version is not None and installed_runs_v2_only(release=facts.vllm_version)
    return log_checks(facts, recipe, facts.v2_runner or v2_only, None)


def read_counters(server: Endpoint, what: str) -> SpecCounters:
    text = server.get("/metrics", what).text
    try:
        return counters_from_prometheus(text)
    except MetricsError as exc:
        raise EndpointError(f"{what}: {exc}") from None


def measure_window(server: Endpoint, model: str, prompts: list, params: dict,
                   name: str) -> SpecCounters:
    """The spec-decode counters' delta over the prompts of one window, sent one at a time."""
    before = read_counters(server, f"GET /metrics (before the {name} window)")
    for number, prompt in enumerate(prompts, 1):
        what = f"POST /v1/completions ({name} window, prompt {number} of {len(prompts)})"
        answer = server.post_json("/v1/completions", what, {"model": model, "prompt": prompt, **params})
        if not isinstance(answer.get("choices"), list) or not answer["choices"]:
            raise EndpointError(f"{what}: the answer has no choices: {excerpt(json.dumps(answer, default=str, allow_nan=False))}")
    after = read_counters(server, f"GET /metrics (after the {name} window)")
    try:
        return after - before
    except MetricsError as exc:
        raise EndpointError(f"{name} window: {exc}") from None


def endpoint_checks(recipe, args) -> tuple[list[Check], dict]:
    server = Endpoint(args.endpoint, args.timeout)
    context: dict[str, object] = {"endpoint": server.url, "vllm": None,
                                  "versions": unknown_versions("the server did not answer")}
    try:
        model = served_model(server)
    except EndpointError as exc:
        why = "not run: the server did not answer"
        return ([failed("server answers", str(exc))]
                + [not_checked(name, why) for name in (*log_check_names(recipe), "acceptance (temperature 0)")]
                + [not_checked("acceptance (recipe sampling)", why, gating=False)]), context
    release, release_note = server_release(server)
    # The server runs in another process: its GET /version names its vLLM release, nothing else.
    context.update(model=model, vllm=release, versions=unknown_versions(
        f"--endpoint: the server's GET /version names only vLLM ({release_note})", vllm=release))
    checks = [passed("server answers", f"{server.url} serves {model}, {release_note}")]
    checks += server_log_checks(recipe, args.server_log)
    # --dummy: a server on a dummy model runs with --skip-tokenizer-init: send token ids.
    prompts = prompt_inputs(args, [text for _, text in gate_prompts(load_prompts())])
    greedy = {"temperature": 0.0, "max_tokens": args.max_tokens, "ignore_eos": args.dummy}
    windows = {}
    try:
        windows["greedy"] = measure_window(server, model, prompts, greedy, "greedy")
    except EndpointError as exc:
        checks += [failed("acceptance (temperature 0)", str(exc)),
                   not_checked("acceptance (recipe sampling)", "not run: the greedy window failed",
                               gating=False)]
    else:
        checks += endpoint_acceptance(gate.check_acceptance(
            windows["greedy"], recipe.thresholds.min_acceptance_rate,
            recipe.thresholds.min_mean_acceptance_length), args.expect_control)
        checks.append(sampling_window_check(server, model, prompts, recipe, args, windows))
    context["windows"] = {name: window.summary() for name, window in windows.items()}
    if args.expect_control:
        context["control"] = args.expect_control
    return checks, context


def endpoint_acceptance(acceptance: Check, control: str | None) -> list[Check]:
    """The greedy window's gate on the server's model, or, on a server that runs a control model
    (--expect-control), the control it must be: as in-process --dummy judges its two windows."""
    if control is None:
        return [acceptance]
    if control == "agree":
        return [gate.positive_control(acceptance)]
    return [gate.negative_control(acceptance),
            not_checked(acceptance.name, "the server runs the random control model "
                                       "(--expect-control random): only the negative control ran")]


def sampling_window_check(server: Endpoint, model: str, prompts: list, recipe, args,
                          windows: dict) -> Check:
    sampling = {k: v for k, v in recipe.sampling.values.items() if k != "source"}
    params = {**sampling, "seed": 0, "max_tokens": args.max_tokens, "ignore_eos": args.dummy}
    try:
        windows["recipe_sampling"] = measure_window(server, model, prompts, params,
                                                    "recipe_sampling")
    except EndpointError as exc:
        # Reported beside the gate, but a server failing the recipe's own settings is a failure.
        return failed("acceptance (recipe sampling)", str(exc))
    return gate.report_sampling(windows["recipe_sampling"], recipe.sampling.values)


def report_identity(recipe, args, context: dict) -> dict:
    """What was verified, for build.py publish to match against what it publishes: the target, the
    vLLM release (the server's own /version with --endpoint; else the engine log's, else the one
    installed where the engine ran) and the image digest (--image-digest /
    $VLLM_FORGE_IMAGE_DIGEST)."""
    if args.endpoint:
        release = context.get("vllm")
    else:
        release = (context.get("log_facts", {}).get("vllm_version")
                   or release_in(context["versions"]))
    return {"target": recipe.target, "vllm": release, "image_digest": args.image_digest}


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        out = check_output_dir(args.out, "--out")
        recipe = load_recipe(args)
        if args.dummy:
            args.shape = recipe_shape(recipe, args.shape)
            args.family = recipe.family_model[0].name
        load_prompts()   # a bad prompts.yaml is refused before anything runs (read again where used)
        if not args.endpoint:
            make_output_dir(out)        # the engine's spec and log go there as it runs
    except (ForgeError, ValueError) as exc:
        print(f"error: {visible(exc)}", file=sys.stderr)
        return 2
    if args.endpoint:
        checks, context = endpoint_checks(recipe, args)
    else:
        checks, context = inprocess_checks(recipe, args, out)
    broken = gate.controls_broken(checks)
    if "log_facts" in context:
        context["log_facts"] = report_log_facts(context["log_facts"], verdict(checks, args.device))
    context = {**context, **report_identity(recipe, args, context)}
    try:
        report = write_report(out / REPORT_NAME, checks, recipe=recipe.name,
                              dummy=args.dummy, shape=args.shape if args.dummy else None,
                              layers=args.layers if args.dummy else None, centroids=args.centroids,
                              compile_backend=args.compile_backend or "inductor",
                              runner=args.runner or recipe.serve.model_runner,
                              verify_broken=bool(broken), device=args.device, **context,
                              **({"batch": args.batch} if args.batch else {}))
    except ForgeError as exc:
        print(render_table(checks, device=args.device))
        print(f"error: {visible(exc)}", file=sys.stderr)
        return 2
    print(render_table(checks, device=args.device))
    print(f"ran on: {versions_line(context['versions'])}")
    print(f"report: {visible(report)}")
    if broken:
        print(f"VERIFY BROKEN: {visible(broken[0].detail)}", file=sys.stderr)
        return 3
    return 0 if verdict(checks, args.device) else 1


def run() -> int:
    """`python3 verify/mtp_smoke.py` and the installed `vllm-forge-mtp-smoke` (pyproject.toml): main, with Ctrl-C
    as one line and exit 130 (forge.errors.exit_on_interrupt)."""
    return exit_on_interrupt(main)


if __name__ == "__main__":
    sys.exit(run())
