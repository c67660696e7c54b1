#!/usr/bin/env python3
"""Measure decode speed with and without the drafter, honestly labelled. Writes bench.json,
bench.md and bench.png (matplotlib, where installed).

  bench.py --recipe R [--target T] [--dummy --shape 26b-a4b --layers N]
           [--configs stock,fp8,fp8-mtp1,...] [--runners v1,v2] [--engine name=..,k=..]
           [--compile-backend eager] [--parallel --max-parallel N] [--profile NAME=p1/p2/..] --out DIR
  bench.py --recipe R --endpoint URL --burst 500 --out DIR     (a running server)
  bench.py --render DIR/bench.json                            (re-render md/png)

Per engine (vllm.LLM in its own process, see engine_worker.py), batch 1 unless stated:
burst (short replies), sustained (long generation), wall clock and decode-only (TPOT) each,
TTFT, concurrency 8 and 16 (32 and 64 on request), and a follow-up turn that hits the prefix cache against a cold
prompt of the same length (--windows picks some); on request, long-context windows
long<N>k[-conc<C>] (N x 1024 prompt tokens, C requests at once), their prefill apart from their
decode. kv= on an --engine sets its KV cache dtype (e.g. an FP8 KV cache at long context).
With --dummy every window runs twice on one engine: on the agreeing model (full acceptance) and
on the random one (zero acceptance), switched by verify/controls.py. Acceptance comes from vLLM's own counters; each speculative engine gets
tokens per step, step cost (TPOT x tokens per step), its speedup over the plain engine of the
same settings and over `stock` (the release's own default: its default runner and dtype, no
drafter) of the same run, and projected tok/s at an acceptance profile (--profile) from the
measured step cost: tok/s(L) = L / step_cost(k), L = 1 + sum of the first k per-position rates.
With --parallel engines start together (--max-parallel at a time) and then measure one at a
time under a file lock.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# run as a file, not as verify.X, by Python itself (a spawned child re-runs it as __mp_main__):
# see verify/_repository_on_path.py
if not __package__ and __name__ == "__main__":
    import _repository_on_path  # noqa: F401

from forge.commands.cli import OneLineParser
from forge.errors import ForgeError, exit_on_interrupt
from forge.files import REPORT, append_text, check_output_dir, read_tail, read_text
from forge.serving.acceptance import parse_profile
from forge.serving.recipes import KV_CACHE_DTYPES, fp8_kv_refusal
from forge.serving.serve import installed_runner_env
from forge.untrusted import visible, visible_lines
from verify import bench_report, controls
from verify import engine_spec as build
from verify.bench_report import FP8_DTYPES, ONLINE_FP8, PREQUANTIZED_FP8, long_window
from verify.dummy_models import (
    check_shape_flag,
    encode_without_tokenizer,
    full_layers,
    recipe_shape,
)
from verify.endpoint import Endpoint, EndpointError, served_model, server_release
from verify.engine_files import PLAIN_NAME
from verify.engine_worker import measure_lock, read_result
from verify.flags import burst_count, endpoint_url
from verify.machine import detect_target, kill_group
from verify.metrics import MetricsError
from verify.prompts import gate_prompts, load_prompts
from verify.report import UNKNOWN, checked_versions, read_json_object, unknown_versions
from verify.supervisor import start_worker, wait_all
from verify.vllm_logs import parse_engine_log

ROOT = Path(__file__).resolve().parents[1]
CONFIG = re.compile(r"^(bf16|fp8)(?:-mtp([1-9]))?$")
DEFAULT_CONFIGS = "stock,bf16,fp8,fp8-mtp1,fp8-mtp2,fp8-mtp3"
# The most requests of an --endpoint burst in flight at once: each is a thread, and a thread per
# request (--burst 2000) is 2000 stacks of 8 MiB of address space; the rest wait for a free one.
BURST_THREADS = 64
WINDOWS = ("burst", "sustained", "conc8", "conc16", "followup")
# Every fixed window --windows may name: conc32 and conc64 only on request (not in WINDOWS), so the
# default runs (and their reports) stay as they were.
FIXED_WINDOWS = ("burst", "sustained", *bench_report.CONCURRENCY_WINDOWS, "followup")
LONG_WINDOWS = "long<N>k[-conc<C>]"
# Every engine's max_num_seqs: the largest concurrency of the windows measured, at least
# DEFAULT_MAX_NUM_SEQS (so the runs before conc32/conc64 keep their engines' setting), at most
# MAX_CONCURRENCY (no window asks for more). A window of more requests than max_num_seqs would
# queue some, and its decode figure would mix in their prefill.
DEFAULT_MAX_NUM_SEQS = 16
MAX_CONCURRENCY = 64
# A long window's text prompt (no --dummy) holds this many characters per token it must reach:
# prose runs at about 4 per token in the families' tokenizers, and the worker cuts it to length.
LONG_TEXT_CHARS_PER_TOKEN = 8
ENGINE_KEYS = ("name", "dtype", "k", "runner", "attention", "moe", "compile", "site", "kv", "moe_backend")
# Recorded in an engine's meta only where its --engine names them: the reports of earlier runs
# (and of engines without them) stay as they were.
OPTIONAL_KEYS = ("site", "kv", "moe_backend")
DTYPES = (*FP8_DTYPES, "bf16", "auto")
# vLLM checks the name itself (KernelConfig.moe_backend, 0.25.0-0.33.0); this only keeps a typo
# like "Triton" or "flashinfer-cutlass" from costing an engine start
MOE_BACKEND_NAME = re.compile(r"[a-z][a-z0-9_]*")


def parse_args(argv=None) -> argparse.Namespace:
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", help="recipe name, e.g. gemma-4-26b-a4b-it")
    p.add_argument("--target", default=os.environ.get("VLLM_FORGE_TARGET"))
    p.add_argument("--configs", default=DEFAULT_CONFIGS,
                   help=f"comma-separated dtype[-mtpK] (default {DEFAULT_CONFIGS})")
    p.add_argument("--runners", default="v1,v2", help="model runners to measure (default v1,v2)")
    p.add_argument("--dummy", action="store_true",
                   help="the recipe's family's published shapes, dummy weights, agreeing and random model per window")
    p.add_argument("--shape", help="with --dummy: a model of the recipe's models/<family>.yaml with a "
                   "drafter shape (default: the recipe's model, else the family's first)")
    p.add_argument("--layers", type=int, help="with --dummy: target layers (default: real depth)")
    p.add_argument("--engine", action="append", default=[],
                   help="one more engine: name=N,dtype=fp8|fp8_per_channel|fp8_per_block|fp8-dynamic|fp8-static|bf16|auto,"
                        "k=K,runner=v1|v2|default,"
                        "attention=BACKEND|default,moe=DIR|none,compile=inductor|eager,"
                        "site=DIR (import vLLM from DIR, e.g. a copy patched with --with-candidate),"
                        f"kv={'|'.join(KV_CACHE_DTYPES)} (vLLM's kv_cache_dtype; default: the "
                        "recipe's),moe_backend=NAME (vLLM's --moe-backend, e.g. triton; default: "
                        "vLLM's choice)")
    p.add_argument("--compile-backend", choices=["inductor", "eager"], default="inductor",
                   help="vLLM's compile backend for the grid's engines (eager: no Inductor, "
                        "piecewise and full CUDA graphs still captured; starts much faster)")
    p.add_argument("--windows", default=",".join(WINDOWS),
                   help=f"of {', '.join(FIXED_WINDOWS)} (default: {', '.join(WINDOWS)}), or "
                        f"{LONG_WINDOWS}: a "
                        "prompt of N x 1024 tokens (the prose prompts repeated), --long-tokens "
                        "decoded, batch 1 or C requests at once (C at most "
                        f"{MAX_CONCURRENCY}; e.g. long8k, long32k, long32k-conc8); "
                        "--max-model-len must hold its prompt and reply")
    p.add_argument("--max-parallel", type=int, default=0, help="with --parallel: engines per wave")
    p.add_argument("--profile", action="append", default=[],
                   help="acceptance profile NAME=p1/p2/.. (per-position rates) or NAME=rate@RATE "
                        "(the same rate at every position): projected tok/s per engine")
    p.add_argument("--model", help="local target model path (default: the recipe's)")
    p.add_argument("--drafter", help="local drafter path (default: the recipe's)")
    p.add_argument("--parallel", action="store_true", help="start all engines at once")
    p.add_argument("--gpu-memory-utilization", type=float, help="per engine")
    p.add_argument("--kv-cache-gib", type=float, help="fixed KV cache per engine")
    p.add_argument("--max-model-len", type=int, default=8192,
                   help="per engine (default 8192); a long window needs its prompt + --long-tokens")
    p.add_argument("--attention-backend", help="e.g. TRITON_ATTN")
    p.add_argument("--moe-config-dir", help="exported as VLLM_TUNED_CONFIG_FOLDER")
    p.add_argument("--burst-tokens", type=int, default=48)
    p.add_argument("--sustained-tokens", type=int, default=512)
    p.add_argument("--long-tokens", type=int, default=256, help="decode tokens of a long window")
    p.add_argument("--repeat", type=int, default=2, help="sustained repetitions")
    p.add_argument("--endpoint", type=endpoint_url, help="benchmark a running server instead")
    p.add_argument("--burst", type=burst_count, default=500,
                   help=f"with --endpoint: requests sent at once (at most {BURST_THREADS} in flight)")
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
    p.add_argument("--start-timeout", type=int, default=0,
                   help="seconds an engine may take to come up (default: no limit but --timeout); "
                        "one not ready by then is killed and reported failed, and the others of "
                        "its wave go on measuring")
    args = p.parse_args(argv)
    check_shape_flag(p, args)
    if args.start_timeout < 0:
        p.error(f"--start-timeout: {args.start_timeout} is below 0 (0: no limit)")
    return args


def parse_configs(text: str) -> list[tuple[str, int]]:
    """dtype[-mtpK] items; `stock` is ("auto", 0): the release's own default dtype."""
    configs = []
    for item in filter(None, (i.strip() for i in text.split(","))):
        if item.strip() == "stock":
            configs.append(("auto", 0))
            continue
        match = CONFIG.match(item.strip())
        if not match:
            raise ForgeError(f"--configs: {item!r} is not stock or dtype[-mtpK] (e.g. bf16, fp8-mtp3)")
        configs.append((match[1], int(match[2] or 0)))
    return configs


def parse_engine(text: str, check_site: bool = True) -> dict:
    """--engine name=fa4-k3,dtype=fp8,k=3,runner=v2,attention=default -> an engine definition.
    site=DIR: the engine imports vLLM from DIR (a copy of the install holding vllm/, e.g. with a
    candidate patch applied: `build.py apply --site-packages DIR --with-candidate ID`), so one run
    compares patched against unpatched engines. check_site=False (--collect: no engine starts)
    takes DIR as the report names it: the GPU host's folder is not on the machine that rebuilds."""
    fields = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in ENGINE_KEYS:
            raise ForgeError(f"--engine: {item!r} is not one of {', '.join(ENGINE_KEYS)} = value")
        fields[key.strip()] = value.strip()
    if "name" not in fields:
        raise ForgeError(f"--engine {text!r}: name= is required")
    if not re.fullmatch(PLAIN_NAME, fields["name"]):
        # the name becomes file names under --out (engines/<name>.log) and the progress lines
        raise ForgeError(f"--engine {text!r}: name must be letters, digits and . _ + - @ (128 at "
                         "most, no leading dot)")
    engine: dict = {"dtype": "fp8", "k": 0, "runner": "default", "attention": None, "moe": None,
              "compile": None, "site": None, "kv": None, **fields}
    engine["stock"] = engine["name"] == "stock"  # the release's default: named so on purpose
    if engine["stock"] and engine["moe"] is None:
        engine["moe"] = "none"
    if engine["dtype"] not in DTYPES:
        raise ForgeError(f"--engine {text!r}: dtype must be one of {', '.join(DTYPES)}")
    if engine["runner"] not in ("v1", "v2", "default"):
        raise ForgeError(f"--engine {text!r}: runner must be v1, v2 or default")
    if engine["kv"] is not None and engine["kv"] not in KV_CACHE_DTYPES:
        raise ForgeError(f"--engine {text!r}: kv must be one of {', '.join(KV_CACHE_DTYPES)}")
    if engine.get("moe_backend") is not None and not MOE_BACKEND_NAME.fullmatch(engine["moe_backend"]):
        raise ForgeError(f"--engine {text!r}: moe_backend must be one of vLLM's --moe-backend names "
                         "(lower case and underscores, e.g. triton)")
    try:
        engine["k"] = int(engine["k"])
    except ValueError as exc:
        raise ForgeError(f"--engine {text!r}: k must be an integer") from exc
    if engine["site"] is not None and check_site:
        site = Path(engine["site"]).expanduser()
        if not site.is_dir():
            raise ForgeError(f"--engine {text!r}: site={engine['site']}: no such directory")
        if not (site / "vllm" / "__init__.py").is_file():
            raise ForgeError(f"--engine {text!r}: site={engine['site']}: holds no vllm/ package "
                             "(a copy of the site-packages directory that holds vllm)")
        engine["site"] = str(site.resolve())
    return engine


def grid_engines(configs: list[tuple[str, int]], runners: list[str]) -> list[dict]:
    engines = []
    for dtype, k in configs:
        if dtype == "auto":  # stock: vLLM's own runner, once
            # stock: as the release ships, so no tuned MoE folder either
            engines.append({"name": "stock", "dtype": "auto", "k": 0, "runner": "default",
                            "attention": None, "moe": "none", "compile": None, "stock": True})
            continue
        for runner in runners:
            engines.append({"name": bench_report.engine_name(dtype, k, runner), "dtype": dtype,
                            "k": k, "runner": runner, "attention": None, "moe": None,
                            "compile": None})
    return engines


def parse_runners(text: str) -> list[str]:
    runners = [r.strip() for r in text.split(",")]
    bad = [r for r in runners if r not in ("v1", "v2")]
    if bad:
        raise ForgeError(f"--runners: {bad[0]!r} is not v1 or v2")
    return runners


# ------------------------------------------------------------------------------------------
# In-process engines

def windows(args, prompts: dict) -> list[dict]:
    """The selected windows; with --dummy each measured one twice, agreeing then random model.
    The long ones come last, in the order --windows names them."""
    chosen = [w.strip() for w in args.windows.split(",")]
    for name in chosen:
        _check_window_name(name)
    base = [w for w in _all_windows(args, prompts) if w["name"] == "warmup" or w["name"] in chosen]
    controls_ = controls.CONTROLS if args.dummy else (None,)
    fixed = [_controlled(w, control) for w in base
             for control in (controls_ if w["name"] != "warmup" else (None,))]
    source = LongPrompts(args, prompts)
    longs = [_long_window(args, name, control, source)
             for name in chosen if long_window(name) for control in controls_]
    check_model_len(args, longs)
    return fixed + longs


def _check_window_name(name: str) -> None:
    if name in FIXED_WINDOWS:
        return
    shape = long_window(name)
    if not shape:
        raise ForgeError(f"--windows: {name!r} is not one of {', '.join(FIXED_WINDOWS)} or "
                         f"{LONG_WINDOWS}")
    if shape[1] > MAX_CONCURRENCY:
        raise ForgeError(f"--windows: {name}: more than {MAX_CONCURRENCY} requests at once "
                         f"(the most an engine's max_num_seqs is set to)")


def window_concurrency(name: str) -> int:
    """Requests at once of a --windows name: C of conc<C> and long<N>k-conc<C>, else 1."""
    if name in bench_report.CONCURRENCY_WINDOWS:
        return bench_report.concurrency_of(name)
    shape = long_window(name)
    return shape[1] if shape else 1


def engine_max_num_seqs(window_names: str) -> int:
    """Every engine's max_num_seqs for these --windows (the rule: see DEFAULT_MAX_NUM_SEQS)."""
    names = [w.strip() for w in window_names.split(",") if w.strip()]
    return max([DEFAULT_MAX_NUM_SEQS, *map(window_concurrency, names)])


def _controlled(window: dict, control: str | None) -> dict:
    if control is None:
        return window
    return {**window, "name": f"{window['name']}@{control}", "control": control}


def _long_window(args, name: str, control: str | None, source: LongPrompts) -> dict:
    """A prompt of exactly N tokens per request, decoded --long-tokens past EOS, after a warm-up on
    other prompts of that length (so the measured prefill is not served by the prefix cache)."""
    tokens, concurrency = long_window(name) or (0, 0)
    window = {"name": name, "warmup": True, "prompt_tokens": tokens, "sequential": concurrency == 1,
              "prompts": source.take(tokens, concurrency),
              "warmup_prompts": source.take(tokens, concurrency),
              "sampling": {"temperature": 0.0, "ignore_eos": True, "max_tokens": args.long_tokens}}
    return _controlled(window, control)


class LongPrompts:
    """Long prompts from the prose prompts, each starting at its own offset into them: no two
    prompts of a run share a first token block, so none is served by vLLM's prefix cache (a
    later window's, the random model's after the agreeing one's, the measured after its
    warm-up). With --dummy, exactly N token ids (BOS, then the text's); else text long enough
    for N tokens, which the worker cuts to N with the engine's tokenizer."""

    def __init__(self, args, prompts: dict):
        # the trailing separator: a repeat joins the last prompt to the first as the others are joined
        self.text = "\n\n".join(prompts["prose"]) + "\n\n"
        self.dummy = args.dummy
        # --dummy: the text's token ids once (BOS, then the rest), not once per prompt; unused else
        ids: list[int] = encode_without_tokenizer(self.text, args.shape) if args.dummy else [0]
        self.bos, self.body = ids[0], ids[1:]
        self.taken = 0

    def take(self, tokens: int, count: int) -> list:
        if self.taken + count > len(self.text):
            raise ForgeError(f"--windows: more long prompts than the {len(self.text)} distinct "
                             "starts the prose prompts give: name fewer long windows")
        prompts = [self._prompt(self.taken + i, tokens) for i in range(count)]
        self.taken += count
        return prompts

    def _prompt(self, start: int, tokens: int):
        if not self.dummy:
            text = self.text[start:] + self.text[:start]
            return text * (tokens * LONG_TEXT_CHARS_PER_TOKEN // len(text) + 1)
        body = self.body[start:] + self.body[:start]
        return [self.bos] + (body * ((tokens - 1) // len(body) + 1))[:tokens - 1]


def check_model_len(args, measured: list[dict]) -> None:
    """Refused before any engine starts: vLLM would stop a reply at --max-model-len unasked."""
    if not measured:
        return
    if args.long_tokens < 1:
        raise ForgeError(f"--long-tokens {args.long_tokens}: a long window decodes 1 token or more")
    longest = max(measured, key=_window_len)
    if _window_len(longest) > args.max_model_len:
        raise ForgeError(f"--max-model-len {args.max_model_len} is shorter than window "
                         f"{longest['name'].split('@')[0]}: {longest['prompt_tokens']} prompt + "
                         f"{longest['sampling']['max_tokens']} decode tokens = {_window_len(longest)}")


def _window_len(window: dict) -> int:
    return window["prompt_tokens"] + window["sampling"]["max_tokens"]


def _all_windows(args, prompts: dict) -> list[dict]:
    encode = (lambda text: encode_without_tokenizer(text, args.shape)) if args.dummy else (lambda text: text)
    gate = [encode(text) for _, text in gate_prompts(prompts)]
    greedy = {"temperature": 0.0, "ignore_eos": args.dummy}
    return [
        {"name": "warmup", "prompts": gate[:2], "sampling": {**greedy, "max_tokens": 16}},
        {"name": "burst", "warmup": True, "prompts": [encode(t) for t in prompts["burst"]], "sequential": True,
         "sampling": {**greedy, "max_tokens": args.burst_tokens}},
        {"name": "sustained", "warmup": True, "prompts": [encode(prompts["prose"][0])], "sequential": True,
         "repeat": args.repeat,
         "sampling": {**greedy, "max_tokens": args.sustained_tokens, "ignore_eos": True}},
        *(_concurrent_window(name, gate, greedy) for name in bench_report.CONCURRENCY_WINDOWS),
        {"name": "followup", "warmup": True, "kind": "followup", "sampling": {**greedy, "max_tokens": 32},
         "prompts": [encode(prompts["followup"]["first"]), _continuation(args, prompts)]},
    ]


def _concurrent_window(name: str, gate: list, greedy: dict) -> dict:
    """conc<C>: the gate prompts repeated to C prompts, sent at once, 128 tokens each."""
    count = bench_report.concurrency_of(name)
    prompts = (gate * (count // len(gate) + 1))[:count]
    return {"name": name, "warmup": True, "prompts": prompts,
            "sampling": {**greedy, "max_tokens": 128, "ignore_eos": True}}


def _continuation(args, prompts: dict):
    """The second turn's own tokens (no BOS: it continues the first turn's context)."""
    text = " " + prompts["followup"]["second"]
    return encode_without_tokenizer(text, args.shape)[1:] if args.dummy else text


def engine_spec(recipe, args, engine: dict, out: Path, max_num_seqs: int | None = None) -> dict:
    """max_num_seqs: the windows' rule (engine_max_num_seqs) unless the caller runs none (profile.py)."""
    dtype, k, runner = engine["dtype"], engine["k"], engine["runner"]
    kwargs, env = build.recipe_engine(recipe, speculative=bool(k))
    kwargs.pop("quantization", None)
    if dtype in ONLINE_FP8:
        kwargs["quantization"] = dtype
    if k:
        kwargs["speculative_config"] = {**kwargs["speculative_config"], "num_speculative_tokens": k}
    if dtype in PREQUANTIZED_FP8 and not (args.dummy or args.model):
        raise ForgeError(f"--engine {engine['name']}: dtype={dtype} needs --dummy or --model "
                         f"(a compressed-tensors FP8 checkpoint): the recipe's model is not one")
    if args.dummy:
        # A root of its own: the quantized target's config.json must not replace the plain one
        # that fp8 and bf16 engines of the same run load (the directory names are the same).
        checkpoint = dtype if dtype in PREQUANTIZED_FP8 else None
        build.use_dummy_models(kwargs, env, recipe, out / (f"models-{checkpoint}" if checkpoint else "models"),
                               out / "plugin", args.layers, args.shape, drafter=bool(k), checkpoint=checkpoint)
    if engine.get("site"):
        # First on the path: this engine's worker imports vLLM from there; the plugin (--dummy)
        # and the rest of the path stay behind it.
        rest = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        env["PYTHONPATH"] = ":".join([engine["site"], *(p for p in rest.split(":") if p)])
    _set_kv_cache_dtype(kwargs, engine, recipe.target)
    build.use_given_models(kwargs, args.model, args.drafter, bool(k))
    attention = engine.get("attention") or args.attention_backend
    kwargs = build.with_attention(kwargs, attention)
    build.with_sizes(kwargs, args.gpu_memory_utilization, args.max_model_len, args.kv_cache_gib,
                     max_num_seqs or engine_max_num_seqs(args.windows))
    if engine.get("moe_backend"):
        kwargs["moe_backend"] = engine["moe_backend"]
    backend = engine.get("compile") or args.compile_backend
    build.with_compile_backend(kwargs, backend)
    kwargs, env, _ = build.finished(kwargs, env)
    name = engine["name"]
    # Stock runs vLLM's own default runner: the variable is left unset.
    env.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    if runner != "default":
        env["VLLM_USE_V2_MODEL_RUNNER"] = "1" if runner == "v2" else "0"
        try:  # the vLLM this engine imports: its site= copy, else the one installed here
            env = installed_runner_env(env, runner, recipe, engine.get("site"))
        except ForgeError as exc:
            raise ForgeError(f"--engine {name}: {exc}") from None
    # Separate compile caches: engines compiling at once never share a cache entry.
    env["VLLM_CACHE_ROOT"] = f"/tmp/vllm-forge-bench-cache/{out.name}-{name}"
    moe = engine.get("moe") or args.moe_config_dir
    if moe == "none":
        # An empty folder: vLLM finds no file there nor (H200) among its bundled configs.
        (out / "moe-none").mkdir(parents=True, exist_ok=True)
        env["VLLM_TUNED_CONFIG_FOLDER"] = str((out / "moe-none").resolve())
    else:
        build.with_moe_configs(env, moe)
    meta = {key: engine.get(key) for key in ENGINE_KEYS if key not in OPTIONAL_KEYS or engine.get(key)}
    meta.update(attention=attention or "default", compile=backend, moe=moe or "none",
                stock=bool(engine.get("stock")))
    return {"name": name, "env": env, "engine_kwargs": kwargs, "meta": meta,
            "result_file": str(out / "engines" / f"{name}.result.json")}


def _set_kv_cache_dtype(kwargs: dict, engine: dict, target: str) -> None:
    """kv=auto: vLLM's own default (the model's dtype), whatever the recipe serves with; kv=fp8..:
    that KV cache; no kv: the recipe's setting, as the engine kwargs already hold it."""
    kv = engine.get("kv")
    if kv is None:
        return
    refusal = fp8_kv_refusal(target, kv)
    if refusal:
        raise ForgeError(f"--engine {engine['name']}: kv={kv}: {refusal}")
    kwargs.pop("kv_cache_dtype", None)
    if kv != "auto":
        kwargs["kv_cache_dtype"] = kv


def run_engines(specs: list[dict], out: Path, parallel: bool, timeout: int,
                server: tuple[str, str] | None = None, max_parallel: int = 0,
                start_timeout: int = 0) -> dict[str, dict]:
    engines_dir, barrier_dir = out / "engines", out / "barrier"
    engines_dir.mkdir(parents=True, exist_ok=True)
    # A previous run's barrier (one folder per engine group, its .ready/.failed markers) would
    # release or fail this run's engines: it goes, folders and all, before any engine starts.
    if barrier_dir.is_dir():
        shutil.rmtree(barrier_dir)
    barrier_dir.mkdir(parents=True, exist_ok=True)
    size = (max_parallel or len(specs)) if parallel else 1
    groups = [specs[i:i + size] for i in range(0, len(specs), size)]
    results: dict[str, dict] = {}
    for group in groups:
        workers = []
        for spec in group:
            spec["barrier"] = {"dir": str(barrier_dir / str(len(results))), "name": spec["name"],
                               "count": len(group) + bool(server), "timeout_s": timeout}
            spec["lock_file"] = measure_lock(str(out / "measure.lock"))
            workers.append(start_worker(spec["name"], spec, engines_dir / f"{spec['name']}.spec.json",
                                        engines_dir / f"{spec['name']}.log"))
            print(f"[bench] started {spec['name']}", flush=True)
        _wait(workers, timeout, server, start_timeout)
        server = None  # only the first group waits for it
        for worker in workers:
            result = read_result(Path(worker.spec["result_file"]))
            log_text = read_tail(worker.log_path).decode(errors="replace")
            results[worker.name] = {"result": result, "log": parse_engine_log(log_text), "log_text": log_text}
    return results


def collect_engines(specs: list[dict], out: Path) -> dict[str, dict]:
    """The results and logs a run left under out/engines (written as each window finishes)."""
    raw = {}
    for spec in specs:
        log_file = out / "engines" / f"{spec['name']}.log"
        log_text = read_tail(log_file).decode(errors="replace") if log_file.exists() else ""
        raw[spec["name"]] = {
            "result": read_result(out / "engines" / f"{spec['name']}.result.json"),
            "log": parse_engine_log(log_text), "log_text": log_text}
    return raw


def _wait(workers: list, timeout: int, server: tuple[str, str] | None = None,
          start_timeout: int = 0) -> None:
    """Wait for every worker (verify/supervisor.py); one that dies before it is ready is marked
    failed at the barrier, so the others do not wait for it. One still not ready start_timeout s in
    (0: no limit) is killed and marked failed too: an engine hung in its start holds the GPU lock
    shared and the barrier open, so no window of any engine could run (the H200 run of 2026-12-01
    that record h200-0.27.1-bench-26b-a4b-l10-fp8-static holds). A server beside them arrives when
    its health URL answers (or its process is gone)."""
    barrier = Path(workers[0].spec["barrier"]["dir"])
    barrier.mkdir(parents=True, exist_ok=True)
    waiting = {"server": server}

    def tick(elapsed: float) -> None:
        late = start_timeout and elapsed > start_timeout
        for worker in workers:
            if worker.running() and late and not _arrived(barrier, worker.name):
                _kill_start(worker.proc, worker.log, worker.name, start_timeout)
            if not worker.running() and not (barrier / f"{worker.name}.ready").exists():
                (barrier / f"{worker.name}.failed").touch()
        if waiting["server"] and not list(barrier.glob("server.*")):
            state = _server_state(*waiting["server"])
            if state:
                (barrier / f"server.{state}").touch()
                print(f"[bench] server beside the engines: {state}", flush=True)

    def timed_out(worker) -> None:
        print(f"[bench] {worker.name}: killed after {timeout} s", flush=True)

    wait_all(workers, timeout, tick, timed_out)
    for worker in workers:
        print(f"[bench] {worker.name}: exit {worker.proc.wait()}", flush=True)


def _arrived(barrier: Path, name: str) -> bool:
    return (barrier / f"{name}.ready").exists() or (barrier / f"{name}.failed").exists()


START_TIMEOUT_ERROR = "EngineStartTimeoutError"


def _kill_start(proc: subprocess.Popen, log, name: str, start_timeout: int) -> None:
    """Kill a worker whose engine is not up in time; the line it leaves ends the engine's log,
    so the report names this as the engine's root cause (verify/vllm_logs.py: root_cause)."""
    kill_group(proc)
    log.flush()
    append_text(log.name, f"\n{START_TIMEOUT_ERROR}: not ready {start_timeout} s after it started "
                          f"(bench --start-timeout {start_timeout}): killed by bench\n")
    print(f"[bench] {name}: not ready after {start_timeout} s, killed", flush=True)


# One probe of --wait-server's health URL: 2 s in all (not per read: a server that drips a byte
# at a time passes every read's own timeout) and a few KiB of answer (vLLM's /health is empty).
HEALTH_TIMEOUT_S = 2
HEALTH_CAP = 64 * 1024


def _server_state(health_url: str, pid: str) -> str | None:
    """"ready" once the health URL answers 200 within the probe's bounds, "failed" once the
    server's process is gone, else None (asked again on the next tick)."""
    from verify.endpoint import Endpoint, EndpointError

    try:
        if Endpoint(health_url, HEALTH_TIMEOUT_S).get("", "server health", HEALTH_CAP).status == 200:
            return "ready"
    except EndpointError:
        pass
    return None if Path(f"/proc/{pid}").exists() else "failed"


def inprocess_report(recipe, args, out: Path) -> dict:
    configs, runners = parse_configs(args.configs), parse_runners(args.runners)
    definitions = grid_engines(configs, runners) + [parse_engine(e, check_site=not args.collect) for e in args.engine]
    names = [d["name"] for d in definitions]
    if len(set(names)) != len(names):
        raise ForgeError(f"engine names must be unique (got {', '.join(names)})")
    measured = windows(args, load_prompts())   # before an engine spec writes anything
    specs = []
    for definition in definitions:
        spec = engine_spec(recipe, args, definition, out)
        spec["windows"] = measured
        specs.append(spec)
    if args.collect:
        raw = collect_engines(specs, out)
    else:
        raw = run_engines(specs, out, args.parallel, args.timeout, args.wait_server,
                          args.max_parallel, args.start_timeout)
    engines, device, versions = {}, None, None
    for spec in specs:
        name = spec["name"]
        result, facts = raw[name]["result"], raw[name]["log"]
        engine = result.get("engine", {})
        versions = versions or recorded_versions(result)
        figures, error = engine_outcome(result, facts)
        engines[name] = {**spec["meta"], "k": int(spec["meta"]["k"] or 0),
                         "init_s": engine.get("init_s"), "cudagraph_mode": engine.get("cudagraph_mode"),
                         "moe_backends": facts.moe_backends, "v2_runner_log": facts.v2_runner,
                         "attention_log": facts_attention(raw[name].get("log_text", "")),
                         "moe_config_log": facts.moe_config_used or (
                             ["default (Config file not found)"] if facts.moe_config_missing else []),
                         "error": error, "window_errors": result.get("window_errors"),
                         "figures": figures}
        if engine.get("started"):
            device = engine.get("device")
    machine = {"device": device, **checked_versions(
        versions or unknown_versions("no engine process wrote a result"))}
    profiles = dict(parse_profile(p) for p in args.profile)
    bench_report.derive(engines, profiles)
    return {"engines": engines, "machine": machine, "profiles": profiles,
            "picks": bench_report.picks(engines, profiles)}


def engine_outcome(result: dict, facts) -> tuple[dict | None, str | None]:
    """(figures, error) of one engine: its log's root cause (if any) when it did not start; no figures
    and the reason when its spec-decode counters cannot be true (verify/metrics.py), so the
    report counts it failed rather than print figures derived from them."""
    if not result.get("engine", {}).get("started"):
        return None, facts.root_cause or result.get("error")
    try:
        return bench_report.engine_figures(result), None
    except MetricsError as exc:
        return None, f"the spec-decode counters cannot be true: {exc}"


def recorded_versions(result: dict) -> dict[str, str] | None:
    """The versions an engine result names (engine_worker.py reads them where the engine runs).
    Results written before the worker recorded them (the GPU runs committed up to 2026-11-30) name
    only the vLLM and torch their started engine imported: transformers is unknown there."""
    if result.get("versions"):
        return result["versions"]
    engine = result.get("engine", {})
    if not engine.get("started"):
        return None
    return {"vllm": engine.get("vllm"), "torch": engine.get("torch"),
            "transformers": f"{UNKNOWN}: not recorded (an engine result from before verify "
                            "recorded it)"}


ATTENTION_LINE = re.compile(r"Using (?:AttentionBackendEnum\.)?(\w+) (?:attention )?backend"
                            r"|Using FlashAttention version (\d)")


def facts_attention(log_text: str) -> list[str]:
    """The attention backend lines vLLM logged (e.g. 'Using FlashAttention version 4')."""
    seen = []
    for line in log_text.splitlines():
        if ("attention" in line.lower() or "FlashAttention" in line) and ATTENTION_LINE.search(line):
            text = line.split("]", 1)[-1].strip()
            if text not in seen:
                seen.append(text)
    return seen[:6]


# ------------------------------------------------------------------------------------------
# A running server: a burst of concurrent requests, every one answered

def server_burst(url: str, count: int, max_tokens: int = 32, token_prompts: bool = False) -> dict:
    server = Endpoint(url, 30)
    try:
        model = served_model(server)
    except EndpointError as exc:
        raise ForgeError(f"--endpoint {url}: {exc}") from None
    texts: list = [t for _, t in gate_prompts(load_prompts())]
    if token_prompts:
        texts = [encode_without_tokenizer(t) for t in texts]
    completions = Endpoint(url, 900)

    def one(i: int):
        started = time.perf_counter()
        try:
            answer = completions.post_json("/v1/completions", "POST /v1/completions", {
                "model": model, "prompt": texts[i % len(texts)], "max_tokens": max_tokens,
                "temperature": 0.0})
            ok = bool(answer.get("choices"))
        except EndpointError:
            ok = False
        return ok, time.perf_counter() - started

    started = time.perf_counter()
    pool = ThreadPoolExecutor(max_workers=min(count, BURST_THREADS))
    try:
        results = list(pool.map(one, range(count)))
    finally:
        # Ctrl-C: the requests in flight are not waited for (their 900 s timeout)
        pool.shutdown(wait=False, cancel_futures=True)
    latencies = sorted(t for _, t in results)
    return {"requests": count, "in_flight": min(count, BURST_THREADS),
            "answered": sum(ok for ok, _ in results),
            "failed": sum(not ok for ok, _ in results), "wall_s": round(time.perf_counter() - started, 2),
            "latency_p50_s": round(statistics.median(latencies), 3),
            "latency_max_s": round(latencies[-1], 3), "max_tokens": max_tokens}


def endpoint_machine(url: str) -> dict:
    """What a burst against a running server can say it ran on: the server's GET /version names
    its vLLM release; its device, torch and transformers live in another process."""
    release, note = server_release(Endpoint(url, 30))
    return {"device": None, **unknown_versions(
        f"--endpoint: the server's GET /version names only vLLM ({note})", vllm=release)}


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    try:
        if args.render:
            report = read_json_object(args.render, "bench report (--render)")
            paths = bench_report.write_outputs(report, Path(args.render).parent)
            print(visible(f"rendered {', '.join(str(p) for p in paths.values())}"))   # --render's folder
            return 0
        if not args.recipe:
            raise ForgeError("--recipe is required")
        check_output_dir(out, "--out")      # before an engine runs for minutes
        from forge.serving.recipes import load_recipe

        if not args.target:
            args.target = detect_target()
        recipe = load_recipe(args.recipe, args.target)
        if args.dummy:
            try:
                args.shape = recipe_shape(recipe, args.shape)
            except ValueError as exc:
                raise ForgeError(str(exc)) from None
        report = {"recipe": recipe.name, "target": recipe.target, "dummy": args.dummy,
                  "shape": args.shape if args.dummy else None,
                  "layers": (args.layers or full_layers(args.shape)) if args.dummy else "checkpoint",
                  "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                  "command": "verify/bench.py " + shlex.join(sys.argv[1:] if argv is None else argv),
                  "engines": {}, "machine": {}}
        if args.endpoint:
            report["machine"] = endpoint_machine(args.endpoint)
            report["server_burst"] = server_burst(args.endpoint, args.burst,
                                                  token_prompts=args.token_prompts)
        else:
            report.update(inprocess_report(recipe, args, out))
        paths = bench_report.write_outputs(report, out)
    except ForgeError as exc:
        print(f"error: {visible(exc)}", file=sys.stderr)
        return 2
    print(visible_lines(read_text(paths["md"], REPORT)))
    failed = [n for n, e in report["engines"].items() if e.get("error") or not e.get("figures")]
    burst = report.get("server_burst")
    return 1 if failed or (burst and burst["failed"]) else 0


def run() -> int:
    """`python3 verify/bench.py` and the installed `vllm-forge-bench` (pyproject.toml): main, with Ctrl-C
    as one line and exit 130 (forge.errors.exit_on_interrupt)."""
    return exit_on_interrupt(main)


if __name__ == "__main__":
    sys.exit(run())
