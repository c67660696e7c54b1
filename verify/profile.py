#!/usr/bin/env python3
"""Where the decode step's GPU time goes: kernel time per token and per step by kernel group, for
the plain or the speculative step of a recipe, beside each group's byte floor.

  profile.py --recipe R [--target T] [--dummy [--shape 26b-a4b] [--layers N]] --k 0|K
             [--tokens 128] [--attention-backend TRITON_ATTN] [--roofline FILE] [--max-seconds S]
             --out DIR                                                    (GPU host: DIR/profile.json)
  profile.py --report DIR/profile.json [DIR2/profile.json ...] [--roofline FILE] [--plot PNG]
             [--md FILE] [--json FILE] [--baseline PLAIN/profile.json]    (any machine: tables, plot)

On the GPU host one engine (the recipe's settings as verify/bench.py builds them; --k 0 drops the
drafter, --k K sets its tokens) runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so a
CUDA-only torch profiler sees its kernels, CUDA-graph replays included. It warms up, times a short
and a long greedy reply to one prompt without the profiler (wall), then profiles the same two;
the decode step is the long reply's cost beyond the short one's (verify/profile_report.py), so
prefill and the first steps cancel. With --dummy the controls plugin (verify/controls.py) makes
target and drafter agree (--control agree, the default): every draft is accepted, a spec step
yields k+1 tokens.

Why not vLLM's own profiler (LLM.start_profile, ProfilerConfig in 0.25-0.33): its worker records
CPU and CUDA activity together (vllm/v1/worker/gpu_worker.py: activities=["CPU", "CUDA"]), and
CPU activity made a 256-token profile on the H200 far too slow; `--profiler vllm` still uses it and
parses the trace it writes. The kernel tables are recorded in profile.json, so every figure can be
re-derived on any machine from that file (--report).

--max-seconds: profile.json is rewritten after every phase, phases that no longer fit are skipped,
and at the limit a watchdog writes what there is and exits 124, so a cut run still says something.
"""
from __future__ import annotations

import os
import sys

# run as a file, not as verify.profile, by Python itself (a spawned child re-runs it as __mp_main__):
# see verify/_repository_on_path.py
if not __package__ and __name__ == "__main__":
    # (which also takes verify/ off sys.path, where this file would shadow the standard library's
    # `profile` that cProfile, imported by torch, needs)
    import _repository_on_path  # noqa: F401

import argparse  # noqa: E402 (after the path fix above)
import datetime  # noqa: E402
import shlex  # noqa: E402
import site  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

from forge import files  # noqa: E402
from forge.commands.cli import OneLineParser  # noqa: E402
from forge.data_formats import load_json  # noqa: E402
from forge.errors import ForgeError, exit_on_interrupt  # noqa: E402
from forge.files import check_output_file, write_text_atomically  # noqa: E402
from forge.json_text import dump_json  # noqa: E402
from forge.untrusted import visible, visible_lines  # noqa: E402
from verify import controls, profile_report  # noqa: E402
from verify.dummy_models import check_shape_flag, encode_without_tokenizer, recipe_shape  # noqa: E402
from verify.kernel_groups import load_kernel_map  # noqa: E402
from verify.report import read_json_object, write_output  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROFILE_FILE = "profile.json"
ROOFLINE_AUTO = "auto"
# The short reply's length: prefill plus a few steps (1 + 3 spec steps of k=4), whose cost the
# long reply's subtraction removes.
SHORT_TOKENS = 16
# Seconds kept back for writing the trace tables and the report after the last phase.
WRAP_UP_S = 20


def parse_args(argv=None) -> argparse.Namespace:
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--report", nargs="+", metavar="PROFILE_JSON",
                   help="analyse recorded profile.json files (no GPU): tables, --plot, --md")
    p.add_argument("--plot", help="with --report: write a PNG (needs matplotlib)")
    p.add_argument("--md", help="with --report: write the tables to this Markdown file")
    p.add_argument("--json", help="with --report: write the figures (one analysis per profile)")
    p.add_argument("--baseline", metavar="PROFILE_JSON",
                   help="with --report: a plain step's profile.json to compare the reported spec "
                        "steps with (in the comparison only, not reported itself)")
    p.add_argument("--roofline", help="the output of `build.py roofline ... --json`: each group's "
                                      "byte floor (default: the one recorded in the profile); with "
                                      f"--report, `{ROOFLINE_AUTO}`: the roofline of what each "
                                      "profile recorded (recipe, target, release, depth, context)")
    p.add_argument("--family", help="the kernel map of verify/kernel_groups.yaml to use (default: the "
                                    "recipe's model family; with --report, the one recorded)")
    p.add_argument("--recipe", help="recipe name, e.g. gemma-4-26b-a4b-it")
    p.add_argument("--target", default=os.environ.get("VLLM_FORGE_TARGET"))
    p.add_argument("--k", type=int, default=0, help="draft tokens: 0 = the plain step (no drafter)")
    p.add_argument("--tokens", type=int, default=128,
                   help="decode tokens profiled beyond the short reply (rounded up to whole "
                        "spec steps of k+1)")
    p.add_argument("--repeat", type=int, default=3, help="wall-time repetitions (median)")
    p.add_argument("--prompt-tokens", type=int,
                   help="with --dummy: the prompt's length in tokens, the context the decode "
                        "step attends over (default: the first gate prompt, ~276)")
    p.add_argument("--dummy", action="store_true",
                   help="dummy weights in the shapes of the recipe's model (models/)")
    p.add_argument("--shape", help="with --dummy: a model of models/<family>.yaml, with an assistant "
                                   "shape unless --k 0 (default: the recipe's own model)")
    p.add_argument("--layers", type=int, help="with --dummy: target layers (default: real depth)")
    p.add_argument("--control", choices=controls.CONTROLS, default="agree",
                   help="with --dummy: agreeing (every draft accepted) or random model")
    p.add_argument("--model", help="local target model path (default: the recipe's)")
    p.add_argument("--drafter", help="local drafter path (default: the recipe's)")
    p.add_argument("--runner", choices=["v1", "v2"], help="default: the recipe's model runner")
    p.add_argument("--attention-backend", help="e.g. TRITON_ATTN (default: the recipe's)")
    p.add_argument("--compile-backend", choices=["inductor", "eager"], default="inductor")
    p.add_argument("--moe-config-dir", help="exported as VLLM_TUNED_CONFIG_FOLDER")
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--kv-cache-gib", type=float, help="fixed KV cache size")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--profiler", choices=["torch", "vllm"], default="torch",
                   help="torch: CUDA-only torch.profiler (default); vllm: LLM.start_profile "
                        "(records CPU activity too: slow)")
    p.add_argument("--save-trace", action="store_true", help="keep the Chrome traces (gzip) in --out")
    p.add_argument("--max-seconds", type=float, default=560,
                   help="stop by then, writing what was measured (default 560)")
    p.add_argument("--out", default="profile-out", help="profile.json and profile.md (and "
                                                        "--save-trace's traces) only")
    p.add_argument("--work", help="the dummy models, the controls plugin and the raw traces "
                                  "(default: a folder under the system's temp dir)")
    args = p.parse_args(argv)
    # a given --shape names a dummy model of models/, as in bench.py; the plain step needs no drafter
    check_shape_flag(p, args, drafter=args.k > 0)
    return args


# ------------------------------------------------------------------------------------------
# CPU side: the report from recorded JSON

def report(args) -> int:
    for flag, path in (("--json", args.json), ("--md", args.md), ("--plot", args.plot)):
        if path:
            check_output_file(path, flag)   # before the profiles are read and analysed
    text, entries = report_text(args)
    print(visible_lines(text))
    if args.json:
        write_output(args.json, report_json(entries), f"--json {args.json}")
        print(visible(f"wrote {args.json}"))
    if args.md:
        write_output(args.md, visible_lines(text), f"--md {args.md}")
        print(visible(f"wrote {args.md}"))
    if args.plot:
        print(visible(f"wrote {profile_report.render_plot(entries, Path(args.plot))}"))
    return 0


def report_text(args) -> tuple[str, list[tuple[dict, dict]]]:
    """--report's Markdown (headed by the command that rebuilds it) and its (profile, analysis)
    entries, writing nothing: what a test compares with a committed report."""
    kernel_maps: dict = {}

    def analysed(path: str) -> tuple[dict, dict]:
        profile = read_json_object(path, "profile JSON")
        replies = profile.get("profiles")
        if not isinstance(replies, dict) or not all(isinstance(replies.get(r), dict)
                                                    for r in ("short", "long")):
            raise ForgeError(f"{path}: not a profile JSON: no `profiles` with a short and a long reply")
        family = args.family or profile.get("family") or "gemma4"
        kernel_map = kernel_maps.setdefault(family, load_kernel_map(family))
        roofline: dict | None
        if args.roofline == ROOFLINE_AUTO:
            roofline = recorded_roofline(profile, path)
        else:
            roofline = (profile_report.read_roofline(args.roofline) if args.roofline
                        else profile.get("roofline"))
        return profile, profile_report.analyse(profile, kernel_map, roofline)

    entries = [analysed(path) for path in args.report]
    baseline = [analysed(args.baseline)[1]] if args.baseline else []
    if baseline and baseline[0].get("k"):
        raise ForgeError(f"{args.baseline}: --baseline must be a plain step's profile (k=0), "
                         f"not k={baseline[0]['k']}")
    markdown = [f"Rebuilt from the recorded profile by `{report_command(args)}`.\n"]
    markdown += [profile_report.render_markdown(profile, analysis) for profile, analysis in entries]
    comparison = profile_report.render_comparison(baseline + [a for _, a in entries])
    return "\n".join(markdown + [comparison]), entries


def recorded_roofline(profile: dict, path: str) -> dict:
    """The floor of what a dummy profile ran, as `build.py roofline` counts it: the recorded recipe
    on its target and release, at its depth, with the context its decode step attended over on
    average (the prompt plus the mean of the short and the long reply: the step is their
    difference, verify/profile_report.py)."""
    from forge.serving.recipes import load_recipe
    from forge.serving.roofline import recipe_report
    from forge.targets import get_target

    if not profile.get("dummy") or not isinstance(profile.get("prompt_tokens"), int):
        raise ForgeError(f"{path}: --roofline {ROOFLINE_AUTO} needs a dummy-weight profile with its "
                         "prompt length recorded; give a `build.py roofline --json` file instead")
    if not (profile.get("machine") or {}).get("vllm"):
        raise ForgeError(f"{path}: --roofline {ROOFLINE_AUTO}: no vLLM release recorded (the engine "
                         "never started)")
    replies = profile.get("profiles") or {}
    if not {"short", "long"} <= set(replies):
        raise ForgeError(f"{path}: --roofline {ROOFLINE_AUTO}: no short and long profiled replies")
    context = round(profile["prompt_tokens"] + (replies["short"]["tokens"] + replies["long"]["tokens"]) / 2)
    vllm, layers = profile["machine"]["vllm"], profile["layers"]
    report = recipe_report(load_recipe(profile["recipe"], profile["target"]), get_target(profile["target"]),
                           vllm, context_len=context, layers=layers)
    command = (f"build.py roofline --recipe {profile['recipe']} --target {profile['target']} "
               f"--vllm {vllm} --layers {layers} --context {context}")
    return profile_report.roofline_floor(report, command)


def report_json(entries: list[tuple[dict, dict]]) -> str:
    return dump_json([a for _, a in entries], "profile analysis", indent=1) + "\n"


def report_command(args) -> str:
    """The --report command line that wrote (or would write) these files."""
    words = ["python3 -m verify.profile --report", *args.report]
    for flag in ("baseline", "roofline", "family", "md", "json", "plot"):
        if getattr(args, flag):
            words += [f"--{flag}", getattr(args, flag)]
    return " ".join(words)


# ------------------------------------------------------------------------------------------
# GPU side: one engine in this process

class Recorder:
    """profile.json, rewritten whole after every phase (a cut run keeps what it measured)."""

    def __init__(self, path: Path, data: dict):
        self.path, self.data, self.lock = path, data, threading.Lock()
        self.started = time.monotonic()

    def write(self) -> None:
        with self.lock:
            self.data["elapsed_s"] = round(time.monotonic() - self.started, 1)
            write_text_atomically(self.path, dump_json(self.data, f"profile {self.path}",
                                                       indent=1) + "\n")

    def say(self, text: str) -> None:
        print(f"[profile {time.monotonic() - self.started:6.1f} s] {visible(text)}", flush=True)

    def left(self, limit: float) -> float:
        return limit - (time.monotonic() - self.started)


def start_watchdog(recorder: Recorder, limit: float) -> None:
    """At the limit: record that the run was cut, write, exit 124 (the engine cannot be
    interrupted mid-start any other way)."""
    def expire():
        try:
            recorder.data["cut"] = f"--max-seconds {limit:g} reached during: {recorder.data.get('phase')}"
            recorder.write()
            recorder.say(recorder.data["cut"] + f"; wrote {recorder.path}")
        except Exception:  # noqa: BLE001 (the main thread was changing the data: the last write stands)
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            os._exit(124)

    timer = threading.Timer(limit, expire)
    timer.daemon = True
    timer.start()


def run_recipe(args):
    """The recipe on the run's target (without --target, the GPU host's, detected)."""
    from forge.serving.recipes import load_recipe

    if not args.target:
        from verify.machine import detect_target
        args.target = detect_target()
    return load_recipe(args.recipe, args.target)


def dummy_shape(args) -> str:
    """The dummy model the recipe's profile builds: its own model where the family has a drafter
    shape for it, as bench.py and mtp_smoke.py take it (verify/dummy_models.py: recipe_shape); for
    the plain step (--k 0) its own model always, drafter shape or not."""
    recipe = run_recipe(args)
    try:
        shape = recipe_shape(recipe, args.shape, drafter=args.k > 0)
    except ValueError as exc:
        raise ForgeError(str(exc)) from None
    family, model = recipe.family_model
    if args.shape is None and shape != model.name:
        # a profile is read as the recipe model's: never another model's shapes in its place
        raise ForgeError(f"--k {args.k}: {family.source}: models.{model.name} has no drafter shape "
                         f"for --dummy; profile its plain step (--k 0) or name a --shape")
    return shape


def engine_plan(args, work: Path):
    """(recipe, engine spec) from the recipe, built exactly as verify/bench.py builds its engines."""
    from verify.bench import DEFAULT_MAX_NUM_SEQS, engine_spec

    recipe = run_recipe(args)
    if args.k and not recipe.engine_kwargs().get("speculative_config"):
        raise ForgeError(f"--k {args.k}: recipe {recipe.name} ({recipe.target}) has no drafter")
    engine = {"name": f"mtp{args.k}" if args.k else "plain", "dtype": engine_dtype(recipe),
              "k": args.k, "runner": args.runner or recipe.serve.model_runner, "attention": None,
              "moe": None, "compile": None}
    # no windows: the profile decodes one sequence; max_num_seqs as every bench engine before conc32
    spec = engine_spec(recipe, args, engine, work, max_num_seqs=DEFAULT_MAX_NUM_SEQS)
    if engine["dtype"] == "auto" and recipe.serve.quantization:
        spec["engine_kwargs"]["quantization"] = recipe.serve.quantization
    # The engine core in this process: a separate EngineCore process would run the kernels out
    # of this process's profiler's reach.
    spec["env"]["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if args.dummy:
        spec["env"][controls.ENV_INITIAL] = args.control
    if args.profiler == "vllm":
        spec["engine_kwargs"]["profiler_config"] = {
            "profiler": "torch", "torch_profiler_dir": str(work / "vllm-traces"),
            "torch_profiler_with_stack": False, "torch_profiler_use_gzip": False,
            "torch_profiler_dump_cuda_time_total": False}
    return recipe, spec


def dummy_layers(spec: dict) -> int:
    """The target's depth as written into the dummy model's config (--layers or the real one)."""
    config = load_json(Path(spec["engine_kwargs"]["model"]) / "config.json", files.CACHE)
    # a multimodal checkpoint's config (Qwen3.5/3.6) nests the text model under text_config
    return config.get("text_config", config)["num_hidden_layers"]


def engine_dtype(recipe) -> str:
    """bench.engine_spec's dtype for the recipe's own quantization (fp8, none, or another kept
    as the recipe says)."""
    quantization = recipe.serve.quantization
    return "fp8" if quantization == "fp8" else ("bf16" if quantization is None else "auto")


def enter_engine_environment(spec: dict, args, work: Path) -> None:
    os.environ.update(spec["env"])
    if args.dummy:
        # vLLM finds the controls plugin through importlib.metadata, which reads the site dirs
        # (the PYTHONPATH in spec["env"] reaches only processes started from here); the repository
        # itself is already importable, this process runs verify.
        site.addsitedir(str(work / "plugin"))


def decode_tokens(tokens: int, k: int) -> int:
    """Whole spec steps of k+1 tokens, so the long reply's extra steps are all full ones."""
    per_step = k + 1
    return -(-tokens // per_step) * per_step


class Generator:
    """One greedy reply at a time, with its engine steps read from vLLM's own counters."""

    def __init__(self, llm, prompt, k: int):
        self.llm, self.prompt, self.k = llm, prompt, k

    def run(self, tokens: int) -> dict:
        from vllm import SamplingParams

        from verify.engine_worker import metrics_snapshot, request_figures
        from verify.metrics import counters_from_snapshot

        params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
        before = counters_from_snapshot(metrics_snapshot(self.llm))
        started = time.perf_counter()
        output = self.llm.generate([self.prompt], params, use_tqdm=False)[0]
        wall = time.perf_counter() - started
        figures = request_figures(output, False)
        result = {"tokens": figures["tokens"], "wall_s": wall, "tpot_s": figures["tpot_s"],
                  "steps": figures["tokens"], "steps_from": "tokens (one per plain step)"}
        if self.k:
            drafts = (counters_from_snapshot(metrics_snapshot(self.llm)) - before).drafts
            # A spec step verifies one draft per request: its steps are the drafts counted (the
            # prefill step drafts but verifies none; the short/long difference cancels it).
            result.update(steps=int(drafts), steps_from="vllm:spec_decode_num_drafts")
            if not drafts:
                result.update(steps=figures["tokens"], steps_from="tokens (no spec-decode counts)")
        return result


def measure_wall(generator: Generator, short: int, long: int, recorder: Recorder, limit: float) -> None:
    wall: dict = {"short": {"wall_s": [], "tpot_s": []}, "long": {"wall_s": [], "tpot_s": []}}
    recorder.data["wall"] = wall
    needed = None
    for repeat in range(recorder.data["settings"]["repeat"]):
        # Another repetition, then the two profiled replies (about two more), must still fit.
        if needed and recorder.left(limit) < 3 * needed + WRAP_UP_S:
            recorder.say("wall: no time for another repetition (the profile needs it)")
            break
        started = time.monotonic()
        for label, tokens in (("short", short), ("long", long)):
            run = generator.run(tokens)
            wall[label].update(tokens=run["tokens"], steps=run["steps"], steps_from=run["steps_from"])
            wall[label]["wall_s"].append(run["wall_s"])
            wall[label]["tpot_s"].append(run["tpot_s"])
        needed = time.monotonic() - started
        recorder.write()
        per = profile_report.wall_per_step(wall)
        recorder.say(f"wall {repeat + 1}: {wall['long']['tokens']} tokens in "
                     f"{wall['long']['wall_s'][-1]:.3f} s, {wall['long']['steps']} steps"
                     + (f"; decode {per['us_per_step'] / 1e3:.3f} ms/step, "
                        f"{per['us_per_token'] / 1e3:.3f} ms/token" if per else ""))


def profile_run(generator: Generator, tokens: int, label: str, args, work: Path, out: Path) -> dict:
    """One reply under the profiler; its trace reduced to a kernel table (the trace itself is
    kept only with --save-trace: ~100k events per 128 tokens)."""
    import torch

    torch.cuda.synchronize()
    if args.profiler == "vllm":
        generator.llm.start_profile(f"forge-{label}")
        run = generator.run(tokens)
        torch.cuda.synchronize()
        generator.llm.stop_profile()
        trace = newest_trace(work / "vllm-traces")
    else:
        from torch.profiler import ProfilerActivity, profile

        # CUDA only: CPU activity made a 256-token profile far too slow (H200, issue 19).
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run = generator.run(tokens)
            torch.cuda.synchronize()
        trace = work / f"trace-{label}.json"
        prof.export_chrome_trace(str(trace))
    table = profile_report.kernel_table(profile_report.read_trace(trace))
    if args.save_trace:
        save_gzipped(trace, out / f"trace-{label}.json.gz")
    trace.unlink()
    return {**run, **table}


def save_gzipped(trace: Path, destination: Path) -> None:
    import gzip

    data = files.read_bytes(trace, files.TRACE)
    files.write_bytes_atomically(destination, data if trace.suffix == ".gz" else gzip.compress(data))


def newest_trace(directory: Path) -> Path:
    traces = sorted(directory.rglob("*.json*"), key=lambda p: p.stat().st_mtime)
    if not traces:
        raise ForgeError(f"vLLM's profiler wrote no trace under {directory}")
    return traces[-1]


def run_profiles(generator: Generator, short: int, long: int, args, work: Path, out: Path,
                 recorder: Recorder) -> None:
    profiles: dict = {}
    recorder.data["profiles"] = profiles
    # The long reply first: should a second profiler session in one process record nothing,
    # the long one alone still gives the step (profile_report.analyse says so).
    for label, tokens in (("long", long), ("short", short)):
        recorder.data["phase"] = f"profile ({label}, {tokens} tokens)"
        recorder.write()
        profiles[label] = profile_run(generator, tokens, label, args, work, out)
        recorder.write()
        p = profiles[label]
        recorder.say(f"profiled {label}: {p['tokens']} tokens, {p['steps']} steps, {p['events']} "
                     f"GPU events, {p['kernel_us'] / 1e3:.1f} ms kernels, busy "
                     f"{p['busy_us'] / 1e3:.1f} of {p['span_us'] / 1e3:.1f} ms span")


def gpu_run(args) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    # Apart from --out, so that only the results come back from a machine that returns a few
    # files; absolute, since the dummy model's path is handed to vLLM as is.
    work = (Path(args.work) if args.work
            else Path(tempfile.gettempdir(), "vllm-forge-profile", out.name)).resolve()
    work.mkdir(parents=True, exist_ok=True)
    recipe, spec = engine_plan(args, work)
    family = args.family or recipe.family_model[0].name
    kernel_map = load_kernel_map(family)  # a broken map fails here, before the GPU work
    roofline = profile_report.read_roofline(args.roofline) if args.roofline else None
    short = SHORT_TOKENS
    long = short + decode_tokens(args.tokens, args.k)
    recorder = Recorder(out / PROFILE_FILE, {
        "kind": "vllm-forge decode profile", "recipe": recipe.name, "target": recipe.target,
        "family": family, "k": args.k, "dummy": args.dummy,
        "shape": args.shape if args.dummy else None,
        "layers": dummy_layers(spec) if args.dummy else "checkpoint",
        "control": args.control if args.dummy else None,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "verify/profile.py " + shlex.join(sys.argv[1:]),
        "settings": {"short_tokens": short, "long_tokens": long, "repeat": args.repeat,
                     "profiler": args.profiler, "max_seconds": args.max_seconds,
                     "engine_kwargs": spec["engine_kwargs"], "env": spec["env"]},
        "phase": "engine start", "cut": None, "error": None, "roofline": roofline})
    recorder.write()
    start_watchdog(recorder, args.max_seconds)
    enter_engine_environment(spec, args, work)
    try:
        measure(args, spec, recorder, short, long, work, out)
    except Exception as exc:  # noqa: BLE001 (recorded with what was measured, then exit 1)
        traceback.print_exc()
        recorder.data["error"] = f"{type(exc).__name__}: {exc}"
        recorder.write()
        return 1
    return finish(recorder, kernel_map, roofline, out)


def measure(args, spec: dict, recorder: Recorder, short: int, long: int, work: Path,
            out: Path) -> None:
    from verify.engine_worker import gpu_turn, measure_lock, set_control, start_engine

    recorder.say(f"starting the engine: {dump_json(spec['engine_kwargs'])}")
    lock = measure_lock(None)
    with gpu_turn(lock, alone=False):  # start and warm-up: never while another run's clock runs
        llm, info = start_engine(spec["engine_kwargs"])
        recorder.data["machine"] = {key: info.get(key) for key in ("device", "vllm", "torch")}
        recorder.data["engine"] = info
        recorder.say(f"engine up in {info['init_s']} s: vLLM {info['vllm']}, torch {info['torch']}, "
                     f"{info['device']}, CUDA graphs {info.get('cudagraph_mode')}")
        if args.dummy:
            recorder.data["control_reply"] = set_control(llm, args.control)
        prompt = first_prompt(args.dummy, args.prompt_tokens, args.shape)
        recorder.data["prompt_tokens"] = len(prompt) if args.dummy else None
        generator = Generator(llm, {"prompt_token_ids": prompt} if args.dummy else prompt, args.k)
        recorder.data["phase"] = "warm-up"
        recorder.write()
        for tokens in (long, short):
            generator.run(tokens)  # first-sight compiles of every shape, before any clock
    with gpu_turn(lock):  # no other run's clock nor engine start on this GPU meanwhile
        recorder.data["phase"] = "wall"
        recorder.write()
        measure_wall(generator, short, long, recorder, args.max_seconds)
        if recorder.left(args.max_seconds) < WRAP_UP_S + 3 * wall_of_long(recorder):
            recorder.data["cut"] = "no time left for the profile (--max-seconds)"
            recorder.say(recorder.data["cut"])
            return
        run_profiles(generator, short, long, args, work, out, recorder)


def wall_of_long(recorder: Recorder) -> float:
    walls = recorder.data["wall"]["long"]["wall_s"]
    return max(walls) if walls else 10.0


def first_prompt(dummy: bool, length: int | None = None, shape: str | None = None):
    """The first gate prompt; under --dummy as token ids (the shape's family's), repeated or cut
    to `length`."""
    from verify.prompts import gate_prompts, load_prompts

    text = gate_prompts(load_prompts())[0][1]
    if not dummy:
        return text
    ids = encode_without_tokenizer(text, shape)
    if length is None:
        return ids
    body = ids[1:]  # BOS once, at the start
    return ids[:1] + (body * (length // len(body) + 1))[:length - 1]


def finish(recorder: Recorder, kernel_map, roofline: dict | None, out: Path) -> int:
    data = recorder.data
    data["phase"] = "done" if not data.get("cut") else data["phase"]
    if "profiles" in data and {"short", "long"} <= set(data["profiles"]):
        try:
            analysis = profile_report.analyse(data, kernel_map, roofline)
        except Exception as exc:  # noqa: BLE001 (the raw tables are written either way)
            traceback.print_exc()
            data["error"] = f"analysis: {type(exc).__name__}: {exc}"
        else:
            # The figures as derived here; --report derives them again from the raw tables.
            data["analysis"] = analysis
            text = profile_report.render_markdown(data, analysis)
            write_text_atomically(out / "profile.md", visible_lines(text))
            print(visible_lines(text), flush=True)
    recorder.write()
    recorder.say(f"wrote {recorder.path}")
    return 0 if data["phase"] == "done" and not data.get("error") else 1


def check_lengths(args) -> None:
    """Refuse, before any GPU work, what the engine would refuse after its minutes of start-up."""
    if args.k < 0 or args.tokens < 1:
        raise ForgeError("--k must be 0 or more and --tokens 1 or more")
    if args.prompt_tokens is not None and (not args.dummy or args.prompt_tokens < 2):
        raise ForgeError("--prompt-tokens needs --dummy and at least 2 tokens")
    context = len(first_prompt(args.dummy, args.prompt_tokens, args.shape)) if args.dummy else 0
    context += SHORT_TOKENS + decode_tokens(args.tokens, args.k) + args.k
    if context > args.max_model_len:
        raise ForgeError(f"the prompt and the long reply take {context} tokens: more than "
                         f"--max-model-len {args.max_model_len}")


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        if args.report:
            return report(args)
        if not args.recipe:
            raise ForgeError("--recipe is required (or --report PROFILE_JSON)")
        if args.dummy:
            args.shape = dummy_shape(args)
        check_lengths(args)
        code = gpu_run(args)
    except ForgeError as exc:
        print(f"error: {visible(exc)}", file=sys.stderr)
        return 2
    # An in-process engine can hold the interpreter at exit (its threads): everything is written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run() -> int:
    """`python3 verify/profile.py` and the installed `vllm-forge-profile` (pyproject.toml): main, with Ctrl-C
    as one line and exit 130 (forge.errors.exit_on_interrupt)."""
    return exit_on_interrupt(main)


if __name__ == "__main__":
    sys.exit(run())
