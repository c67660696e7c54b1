"""`build.py tune-moe`: tune vLLM's Triton fused-MoE kernel for an MoE model on this GPU (the
expert shape and activation from models/<family>.yaml; Gemma-4-26B-A4B today).

For each token count M the server runs, time every config of a search space with vLLM's own
`fused_experts` (the installed release's kernel, under its `override_config`), then time the best
one against vLLM's default config for that M, and keep it only where it wins. The result is a
JSON under vLLM's own file name (E=128,N=704,device_name=...[,dtype=fp8_w8a8].json), which vLLM
reads from $VLLM_TUNED_CONFIG_FOLDER: no source patch needed (docs/reference.md §2).

Two steps, because the GPU host has no checkout to commit from:
  on the GPU:  build.py tune-moe --dtype bf16 --recipe R --target T --batch-sizes 1,8,64,256 --results R.json
  here:        build.py tune-moe --import-results R.json   (writes patches/moe-configs/<name>,
               registers it in patches/series.yaml as a moe-config patch with provenance)
torch, triton and vllm are imported only by the GPU step.
"""
from __future__ import annotations

import datetime
import hashlib
import itertools
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from forge import REPO_ROOT
from forge.data_formats import load_json
from forge.errors import ForgeError
from forge.files import REPORT, SOURCE, read_bytes, regular_or_absent, write_text_atomically
from forge.json_text import dump_json
from forge.models import MoeShape, moe_models
from forge.patching.moe_config_names import config_file_name, parse_config_name
from forge.patching.vocabulary import Kind
from forge.progress import say, track
from forge.untrusted import visible

if TYPE_CHECKING:
    from forge.serving.moe_tune_files import BenchEngine, TuneResults

PATCHES_DIR = REPO_ROOT / "patches"
MOE_CONFIG_DIR = PATCHES_DIR / "moe-configs"
# Token counts a server runs: decode batches up to max_num_seqs x (1 + k) and prefill chunks.
# A config tuned only for M=1 and used at M=8 was slower than the default (docs/reference.md §2).
SERVER_BATCH_SIZES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 2048, 4096]
# Releases a config tuned on vLLM 0.25.0 is shipped for: 0.25 and 0.26 pin the same torch
# (2.11.0) and so the same Triton that compiled the kernel we timed (docs/reference.md §1); from 0.27
# torch and Triton move on and a config must be re-tuned there.
TUNED_RELEASES = ">=0.25.0,<0.27"
# Tuned must beat the default by this fraction to be kept: smaller gaps are timing noise.
MIN_GAIN = 0.01
SPACES = {
    # Small enough for one GPU call (about 50 kernel compiles per dtype); what this project ran.
    "small": {"BLOCK_SIZE_M": [16, 32, 64], "BLOCK_SIZE_N": [32, 64, 128],
              "BLOCK_SIZE_K": [128, 256], "GROUP_SIZE_M": [1], "num_warps": [4, 8],
              "num_stages": [3, 4]},
    "full": {"BLOCK_SIZE_M": [16, 32, 64, 128], "BLOCK_SIZE_N": [32, 64, 128, 256],
             "BLOCK_SIZE_K": [64, 128, 256], "GROUP_SIZE_M": [1, 16, 32, 64],
             "num_warps": [4, 8], "num_stages": [2, 3, 4, 5]},
}
CONFIG_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps",
               "num_stages")


# ------------------------------------------------------------------------------------------
# Pure parts (run and tested on the CPU)

def search_space(m: int, shape: MoeShape, space: str = "small") -> list[dict]:
    """Configs worth timing at M tokens. BLOCK_SIZE_M tiles one expert's tokens, and M tokens
    spread over E experts give each about M*topk/E: a tile far taller than that is padding."""
    if space not in SPACES:
        raise ForgeError(f"tune-moe: unknown search space {space!r} (known: {', '.join(SPACES)})")
    grid = SPACES[space]
    per_expert = max(1, -(-m * shape.topk // shape.experts))
    tallest = max(16, 2 * _next_power_of_two(per_expert))
    configs = []
    for values in itertools.product(*(grid[key] for key in CONFIG_KEYS)):
        config = dict(zip(CONFIG_KEYS, values))
        if config["BLOCK_SIZE_M"] <= tallest:
            configs.append(config)
    return configs


def _next_power_of_two(n: int) -> int:
    return 1 << (n - 1).bit_length()


def recipe_token_counts(k_values: list[int], concurrency: list[int]) -> list[int]:
    """Token counts per fused-MoE call in decode with k draft tokens: a speculative step verifies
    k+1 tokens per request, so M = (k+1) x requests in the step."""
    if any(k < 0 for k in k_values) or any(c < 1 for c in concurrency):
        raise ForgeError(f"tune-moe: k must be >= 0 and concurrency >= 1 (got k={k_values}, "
                         f"concurrency={concurrency})")
    return sorted({(k + 1) * c for k in k_values for c in concurrency})


def token_counts_for_recipe(recipe, k_values: list[int] | None = None,
                            concurrency: list[int] | None = None) -> list[int]:
    """The recipe's M list: its k (or the given ones) at batch 1, 8 and its max_num_seqs."""
    ks = k_values or [recipe.speculative.num_speculative_tokens]
    return recipe_token_counts(ks, concurrency or [1, 8, recipe.serve.max_num_seqs])


def merge_configs(shipped: dict[str, dict], chosen: dict) -> dict[int, dict]:
    """The shipped file's token counts plus (overriding) the newly chosen ones."""
    merged = {int(m): c for m, c in shipped.items()}
    merged.update({int(m): c for m, c in chosen.items()})
    return merged


def shipped_configs(path: Path) -> dict[str, dict]:
    """{"<M>": config} of a config file in vLLM's format, or one DataError naming the field."""
    from forge.serving.moe_tune_files import ShippedConfig
    from forge.typed import loaded

    return loaded(ShippedConfig, load_json(path, SOURCE), path).configs()


def write_merged(results: dict, directory: Path, config_dir: Path = MOE_CONFIG_DIR) -> Path:
    """results' configs merged over the shipped file of the same name, written to directory."""
    shipped_file = config_dir / results["file_name"]
    shipped = shipped_configs(shipped_file) if regular_or_absent(shipped_file, SOURCE) else {}
    merged = merge_configs(shipped, results["configs"])
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / results["file_name"]
    write_text_atomically(target, render_config_json(merged, results["provenance"].get("triton")))
    return target


def choose(tuned: dict[int, dict], defaults: dict[int, dict], min_gain: float = MIN_GAIN):
    """Per M, keep the tuned config only where its re-measured time beats the default's.

    tuned/defaults: {M: {"config": {...}, "us": time}}. Returns (file_configs, decisions).
    Where the default wins the file carries vLLM's default config for that M, not a gap: vLLM
    takes the nearest M key of a file, so a missing key would spread a neighbour's config.
    """
    file_configs, decisions = {}, []
    for m in sorted(tuned):
        t_tuned, t_default = tuned[m]["us"], defaults[m]["us"]
        wins = t_tuned < t_default * (1 - min_gain)
        file_configs[m] = tuned[m]["config"] if wins else _kernel_keys(defaults[m]["config"])
        decisions.append({"M": m, "tuned_us": round(t_tuned, 2), "default_us": round(t_default, 2),
                          "speedup": round(t_default / t_tuned, 3), "kept": "tuned" if wins else "default",
                          "tuned_config": tuned[m]["config"],
                          "default_config": _kernel_keys(defaults[m]["config"])})
    return file_configs, decisions


def _kernel_keys(config: dict) -> dict:
    return {key: config[key] for key in CONFIG_KEYS if key in config}


def render_config_json(configs: dict[int, dict], triton_version: str | None) -> str:
    """vLLM's format: {"<M>": {BLOCK_SIZE_M, ...}, ...} in numeric order (+ triton_version,
    which vLLM pops before use)."""
    data: dict = {str(m): _kernel_keys(configs[m]) for m in sorted(configs)}
    if triton_version:
        data["triton_version"] = triton_version
    return dump_json(data, indent=4) + "\n"


def patch_id(file_name: str) -> str:
    """'E=128,N=704,device_name=NVIDIA_H200,dtype=fp8_w8a8.json' -> 'moe-e128-n704-nvidia-h200-fp8_w8a8'."""
    name = parse_config_name(file_name)
    if name is None:
        raise ForgeError(f"{file_name}: not named like a fused-MoE config (E=...,N=...,device_name=....json)")
    device = name.device.lower().replace("_", "-")
    return f"moe-e{name.experts}-n{name.n}-{device}-{name.dtype or 'bf16'}"


def provenance_text(results: TuneResults) -> str:
    p = results.provenance
    kept = [str(d.M) for d in results.decisions if d.kept == "tuned"]
    lost = [str(d.M) for d in results.decisions if d.kept == "default"]
    return (f"Tuned fused-MoE Triton configs for {_shape_text(results.file_name)}, "
            f"{results.dtype}. Without it vLLM logs \"Using default MoE config ... Config file "
            f"not found\" on this device (no release bundles one). Tuned config kept at M = "
            f"{', '.join(kept) or 'none'}; vLLM's default kept at M = {', '.join(lost) or 'none'} "
            f"(tuned did not win by {MIN_GAIN:.0%}). Provenance: device {p.device}, driver "
            f"{p.driver}, Triton {p.triton}, torch {p.torch}, vLLM {p.vllm}, "
            f"search space {results.space}, date {p.date}, duration {p.duration_s} s, "
            f"command: {p.command}. Shipped for {TUNED_RELEASES}: the releases that pin the "
            f"torch and Triton it was tuned with.")


def _shape_text(file_name: str) -> str:
    """'Gemma-4-26B-A4B (E=128, N=704, top-8, TP=1)': the model models/ gives these experts."""
    name = parse_config_name(file_name)
    if name is None:
        raise ForgeError(f"{file_name}: not named like a fused-MoE config (E=...,N=...,device_name=....json)")
    for _, model in moe_models():
        shape = model.moe
        if shape and (shape.experts, shape.intermediate) == (name.experts, name.n):
            return f"{model.label} (E={shape.experts}, N={shape.intermediate}, top-{shape.topk}, TP=1)"
    raise ForgeError(f"{file_name}: no model in models/ has {name.experts} experts of {name.n}")


def load_results(results_path: Path) -> TuneResults:
    """A GPU run's results (`tune-moe --results`), or one DataError naming the file and field."""
    from forge.serving.moe_tune_files import TuneResults
    from forge.typed import loaded

    return loaded(TuneResults, load_json(results_path, REPORT), results_path)


def import_results(results_path: Path, config_dir: Path = MOE_CONFIG_DIR,
                   series_path: Path | None = None, end_to_end: EndToEnd | None = None) -> Path:
    """Write a GPU run's tuned JSON into patches/moe-configs and register it in the series, only
    where a benchmark of the same engine with and without it shows it winning end to end."""
    results = load_results(results_path)
    if not any(d.kept == "tuned" for d in results.decisions):
        raise ForgeError(f"{results_path}: decisions: tuned won at no token count; "
                         "nothing to ship (vLLM's default is as good here)")
    if end_to_end is None:
        raise ForgeError(f"{results_path}: a tuned config ships only where it wins end to end: give "
                         "--end-to-end BENCH_JSON (verify/bench.py with --engine ...,moe=DIR and "
                         "--engine ...,moe=none) with --with-engine and --without-engine")
    if end_to_end.config_name != results.file_name:
        raise ForgeError(f"{results_path}: file_name: {results.file_name}, but the end-to-end "
                         f"run measured {end_to_end.config_name}")
    end_to_end.require_win()
    configs = {int(m): c.model_dump() for m, c in results.configs.items()}
    config_dir.mkdir(parents=True, exist_ok=True)
    target = config_dir / results.file_name
    write_text_atomically(target, render_config_json(configs, results.provenance.triton))
    register(target, f"{provenance_text(results)} {end_to_end.text()}", series_path)
    return target


# ------------------------------------------------------------------------------------------
# The end-to-end proof: decode tok/s of one engine with the config against the same engine without

# Settings that must match between the two engines for the comparison to be about the config.
SAME_SETTINGS = ("dtype", "k", "runner", "attention", "compile")


@dataclass(frozen=True)
class EndToEnd:
    config_name: str
    window: str
    runs: tuple[tuple[str, float, float], ...]  # (the bench run's date, with, without tok/s)

    @property
    def worst_gain(self) -> float:
        return min(with_ / without for _, with_, without in self.runs)

    def require_win(self, min_gain: float = MIN_GAIN) -> None:
        if self.worst_gain < 1 + min_gain:
            raise ForgeError(f"{self.config_name}: did not win end to end ({self._figures()}; needs "
                             f"+{min_gain:.0%} in every run): not shipped")

    def text(self) -> str:
        return (f"End to end ({self.window} decode tok/s with it vs vLLM's default config, same "
                f"engine settings, same run): {self._figures()}.")

    def _figures(self) -> str:
        return "; ".join(f"{with_:.1f} vs {without:.1f} ({with_ / without - 1:+.1%}, {date})"
                         for date, with_, without in self.runs)


def end_to_end(bench_files: list[Path], config_name: str, with_engine: str, without_engine: str,
               window: str = "sustained@agree") -> EndToEnd:
    """Read verify/bench.py's bench.json files: the with-engine must have read config_name, the
    without-engine must not have, and both must share every other setting."""
    from forge.serving.moe_tune_files import BenchRun
    from forge.typed import loaded

    runs = []
    for path in bench_files:
        bench = loaded(BenchRun, load_json(path, REPORT), path)
        with_, without = (_engine(bench.engines, name, path) for name in (with_engine, without_engine))
        if not _read_config(with_, config_name):
            raise ForgeError(f"{path}: engines.{visible(with_engine)}: did not read {config_name} "
                             f"(its log: {visible(with_.moe_config_log)})")
        if _read_config(without, config_name):
            raise ForgeError(f"{path}: engines.{visible(without_engine)}: read {config_name} too")
        differ = [key for key in SAME_SETTINGS if with_.setting(key) != without.setting(key)]
        if differ:
            raise ForgeError(f"{path}: engines {visible(with_engine)} and {visible(without_engine)} "
                             f"differ in {', '.join(differ)}: not a comparison of the config alone")
        runs.append((visible(bench.date or "?"),
                     _decode_tok_s(with_, window, path), _decode_tok_s(without, window, path)))
    if not runs:
        raise ForgeError("--end-to-end: give at least one bench.json")
    return EndToEnd(config_name, window, tuple(runs))


def _engine(engines: dict[str, BenchEngine], name: str, path: Path) -> BenchEngine:
    if name not in engines:
        raise ForgeError(f"{path}: engines.{visible(name)}: no such engine "
                         f"(has {visible(', '.join(sorted(engines)))})")
    return engines[name]


def _read_config(engine: BenchEngine, config_name: str) -> bool:
    return any(line.endswith("/" + config_name) for line in engine.moe_config_log or [])


def _decode_tok_s(engine: BenchEngine, window: str, path: Path) -> float:
    figure = (engine.figures or {}).get(window)
    if figure is None or not figure.decode_tok_s:
        raise ForgeError(f"{path}: engines.{visible(engine.name)}.figures.{visible(window)}: "
                         "no decode figure")
    return figure.decode_tok_s


def register(config_file: Path, why: str, series_path: Path | None = None) -> None:
    """Add (or refresh) this file's moe-config entry; other entries are left as they are."""
    from forge.patching import series as patch_series

    series = patch_series.load_series(series_path) if series_path else patch_series.load_series()
    base = series.path.parent
    relative = config_file.resolve().relative_to(base.resolve()).as_posix()
    digest = hashlib.sha256(read_bytes(config_file, SOURCE)).hexdigest()
    entry = patch_series.Patch(
        id=patch_id(config_file.name), kind=Kind.MOE_CONFIG,
        title=f"Tuned fused-MoE config {config_file.name}",
        files=[patch_series.PatchFile(relative, digest, config_file.resolve())],
        releases=TUNED_RELEASES, why=why)
    series.patches = [p for p in series.patches if p.id != entry.id] + [entry]
    patch_series.save_series(series, series.path)


# ------------------------------------------------------------------------------------------
# The GPU sweep

def tuned_file_name(device_name: str, dtype: str, shape: MoeShape) -> str:
    """The file vLLM looks up for experts of this shape at tensor parallel 1 on this GPU."""
    return config_file_name(device_name, dtype, shape.experts, shape.intermediate)


def moe_shape_for(recipe=None) -> MoeShape:
    """The experts tune-moe times: the recipe's model's, else the one MoE model models/ lists."""
    if recipe is not None:
        if recipe.moe_shape is None:
            raise ForgeError(f"tune-moe: {recipe.base_model} has no MoE block (models/)")
        return recipe.moe_shape
    found = moe_models()
    if len(found) != 1:
        names = ", ".join(model.label for _, model in found) or "none"
        raise ForgeError(f"tune-moe: name the model with --recipe (MoE models in models/: {names})")
    shape = found[0][1].moe
    assert shape is not None  # moe_models() lists MoE models only
    return shape


class KernelBench:
    """Times vLLM's fused_experts on random weights of the model's expert shape, one config at a time."""

    def __init__(self, dtype: str, shape: MoeShape):
        import torch
        from vllm.model_executor.layers.fused_moe import fused_moe as fm
        from vllm.model_executor.layers.fused_moe.activation import MoEActivation
        from vllm.model_executor.layers.fused_moe.config import FUSED_MOE_UNQUANTIZED_CONFIG, fp8_w8a8_moe_quant_config

        self.torch, self.fm, self.dtype, self.shape = torch, fm, dtype, shape
        self.activation = MoEActivation[shape.activation]  # the family's (models/<family>.yaml)
        e, n, k = shape.experts, shape.intermediate, shape.hidden
        torch.manual_seed(0)
        w1 = torch.randn(e, 2 * n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        w2 = torch.randn(e, k, n, device="cuda", dtype=torch.bfloat16) / n ** 0.5
        if dtype == "fp8_w8a8":
            # `--quantization fp8`: static per-tensor weight scales, dynamic activation scales.
            fp8 = torch.float8_e4m3fn
            s1 = (w1.abs().amax(dim=(1, 2)) / 448.0).float()
            s2 = (w2.abs().amax(dim=(1, 2)) / 448.0).float()
            self.w1 = (w1 / s1[:, None, None]).to(fp8)
            self.w2 = (w2 / s2[:, None, None]).to(fp8)
            self.quant_config = fp8_w8a8_moe_quant_config(w1_scale=s1, w2_scale=s2)
        else:
            self.w1, self.w2, self.quant_config = w1, w2, FUSED_MOE_UNQUANTIZED_CONFIG
        self.config_dtype = "fp8_w8a8" if dtype == "fp8_w8a8" else None

    def default_config(self, m: int) -> dict:
        s = self.shape
        return self.fm.get_default_config(m, s.experts, s.intermediate, s.hidden, s.topk,
                                          self.config_dtype, None)

    def time_us(self, config: dict, m: int, graph_calls: int = 10, replays: int = 20) -> float:
        """Mean time of one fused_experts call at M tokens: CUDA-graph replays of graph_calls
        calls, as the server runs decode steps (launch overhead off the measurement)."""
        torch = self.torch
        from vllm.model_executor.layers.fused_moe import override_config

        x = torch.randn(m, self.shape.hidden, device="cuda", dtype=torch.bfloat16)
        logits = torch.randn(m, self.shape.experts, device="cuda", dtype=torch.float32)
        weights, ids = torch.topk(torch.softmax(logits, dim=-1), self.shape.topk, dim=-1)

        def call():
            return self.fm.fused_experts(x, self.w1, self.w2, weights, ids.to(torch.int32),
                                         activation=self.activation,
                                         quant_config=self.quant_config)

        with override_config(_kernel_keys(config)):
            call()  # compile outside the graph
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(graph_calls):
                    call()
        for _ in range(3):
            graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        graph.reset()
        return start.elapsed_time(end) * 1000 / (replays * graph_calls)


def sweep(dtype: str, batch_sizes: list[int], space: str, shape: MoeShape, log=say) -> dict:
    started = time.time()
    bench = KernelBench(dtype, shape)
    tuned, defaults, timings = {}, {}, {}
    for m in track(batch_sizes, f"tune-moe {dtype}", unit="token counts"):
        results = []
        for config in search_space(m, shape, space):
            try:
                results.append((bench.time_us(config, m), config))
            except Exception as exc:  # noqa: BLE001 (a config the GPU cannot run: skip it)
                log(f"M={m} {config}: skipped ({type(exc).__name__}: {str(exc)[:80]})")
        if not results:
            raise ForgeError(f"tune-moe: no config of space {space!r} ran at M={m}")
        results.sort(key=lambda r: r[0])
        timings[m] = [{"us": round(t, 2), "config": c} for t, c in results]
        best = results[0][1]
        # Re-measure best and default side by side, three times each, median: the sweep's
        # minimum is biased low (selection over noise).
        default = bench.default_config(m)
        t_best = sorted(bench.time_us(best, m) for _ in range(3))[1]
        t_default = sorted(bench.time_us(default, m) for _ in range(3))[1]
        tuned[m], defaults[m] = {"config": best, "us": t_best}, {"config": default, "us": t_default}
        log(f"M={m}: {len(results)} configs; best {t_best:.1f} us vs default {t_default:.1f} us "
            f"({t_default / t_best:.2f}x) {best}")
    configs, decisions = choose(tuned, defaults)
    return {"configs": configs, "decisions": decisions, "timings": timings,
            "duration_s": round(time.time() - started, 1)}


def gpu_provenance(duration_s: float) -> dict:
    import torch
    import triton
    import vllm

    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, check=True).stdout.split()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        driver = "unknown"
    return {"device": torch.cuda.get_device_name(), "driver": driver, "triton": triton.__version__,
            "torch": torch.__version__, "vllm": vllm.__version__, "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "duration_s": duration_s, "command": "python3 build.py " + shlex.join(sys.argv[1:])}


def tune(dtype: str, batch_sizes: list[int], shape: MoeShape, space: str = "small") -> dict:
    """Sweep on this host's GPU: the results JSON a later `--import-results` reads (chosen configs
    per token count, decisions, timings, vLLM's file name for this GPU, provenance)."""
    if any(m < 1 for m in batch_sizes):
        raise ForgeError(f"tune-moe: --batch-sizes must be positive token counts (got {batch_sizes})")
    try:
        import torch
    except ImportError as exc:
        raise ForgeError("tune-moe: needs torch and vllm (run it on the target GPU, "
                         "inside the image)") from exc
    if not torch.cuda.is_available():
        raise ForgeError("tune-moe: no CUDA GPU visible: run it on the target GPU")
    result = sweep(dtype, batch_sizes, space, shape)
    result.update({"dtype": dtype, "space": space, "batch_sizes": batch_sizes,
                   "file_name": tuned_file_name(torch.cuda.get_device_name(), dtype, shape),
                   "provenance": gpu_provenance(result["duration_s"])})
    result["configs"] = {str(m): c for m, c in result["configs"].items()}
    return result


def write_results(result: dict, path: Path) -> Path:
    return write_text_atomically(path, dump_json(result, indent=1) + "\n")
