"""A record's figures, taken by code from the raw report beside it, so no figure is typed by hand:
a smoke's two controls (mtp_smoke.json), a bench's engines (bench.json, as verify/bench.py
writes it), a profile's step (analysis.json, as `verify/profile.py --report --json` writes it),
`vllm bench latency`'s JSON (latency.json, *.latency.json; counters.json: the engine's spec-decode
counters), a candidate against its baseline (the record's `pairs`), and a release's CMake arch
lists (cmake-<kernels>-<release>.txt: `grep -n` excerpts of its CMakeLists.txt).
Every figure `derive(record, records)` makes must be in the record's `figures` with that value
(tests/test_evidence.py); a record may state more, read off raw files no code here reads."""
from __future__ import annotations

import re
from collections.abc import Callable

from forge import files
from forge.data_formats import load_json
from forge.errors import ForgeError
from forge.evidence import suite
from forge.evidence.records import Record
from forge.json_text import dump_json

# the smoke's windows of its two controls (verify/controls.py)
CONTROL_WINDOWS = {"agree": "greedy_agree", "random": "greedy_random"}
PROFILE = "spark343"   # the acceptance profile x stock is read at (verify/bench_report.py)


def _json(record: Record, name: str):
    return load_json(record.raw(name), files.REPORT)


def _put(figures: dict, name: str, value) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        figures[name] = value


def smoke_figures(record: Record) -> dict:
    windows = _json(record, "mtp_smoke.json").get("windows") or {}
    figures: dict = {}
    for key, window in CONTROL_WINDOWS.items():
        counters = windows.get(window) or {}
        for name in ("accepted", "draft_tokens", "mean_acceptance_length"):
            _put(figures, f"{key}_{name}", counters.get(name))
    return figures


def engine_figures(engine: dict) -> dict:
    derived = engine.get("derived") or {}
    figures: dict = {}
    _put(figures, "step_ms", derived.get("step_ms"))
    _put(figures, "step_cost_x_plain", derived.get("step_cost_x_plain"))
    projected = (derived.get("projected") or {}).get(PROFILE) or {}
    if derived.get("stock_engine"):
        _put(figures, "x_stock", projected.get("speedup_vs_stock"))
    _put(figures, "projected_tok_s", projected.get("tok_s"))
    for window, values in sorted((engine.get("figures") or {}).items()):
        _put(figures, f"{window}.decode_tok_s", (values or {}).get("decode_tok_s"))
    return figures


def _engine_of_k(report: dict, settings: dict) -> str | None:
    """The record's own engine where its settings name none: the one engine that ran its k."""
    k = settings.get("num_speculative_tokens")
    ran = [n for n, e in (report.get("engines") or {}).items() if k and e.get("k") == k]
    return ran[0] if len(ran) == 1 else None


def bench_figures(record: Record) -> dict:
    """Per engine `<engine>.<figure>`; the record's own engine (settings.engine, else the one that
    ran the record's k) also unprefixed."""
    report = _json(record, "bench.json")
    figures: dict = {}
    for name, engine in sorted((report.get("engines") or {}).items()):
        figures.update({f"{name}.{k}": v for k, v in engine_figures(engine).items()})
    headline = record.settings.get("engine") or _engine_of_k(report, record.settings)
    if headline:
        figures.update(engine_figures(report["engines"][headline]))
    for name, value in sorted((report.get("server_burst") or {}).items()):
        _put(figures, f"burst.{name}", value)
    return figures


def profile_figures(record: Record, records: dict[str, Record]) -> dict:
    step = _json(record, "analysis.json")[0]
    figures: dict = {}
    for name in ("wall_us_per_step", "kernel_us_per_step", "wall_us_per_token", "busy_pct",
                 "tokens_per_step"):
        _put(figures, name, step.get(name))
    floor = step.get("floor") or {}
    _put(figures, "step_floor_us", floor.get("step_floor_us"))
    _put(figures, "bytes_per_step", floor.get("bytes_per_step"))
    _put(figures, "pct_of_floor", floor.get("pct_of_floor_wall"))
    _put(figures, "pct_of_floor_kernels", floor.get("pct_of_floor_kernels"))
    for group, values in (step.get("groups") or {}).items():
        for name in ("us_per_step", "floor_us", "pct_of_floor"):
            _put(figures, f"group.{group}.{name}", (values or {}).get(name))
    baseline = record.settings.get("baseline")
    if baseline:
        plain = _json(records[baseline], "analysis.json")[0]
        figures["step_cost_x_plain"] = step["wall_us_per_step"] / plain["wall_us_per_step"]
        figures["kernel_cost_x_plain"] = step["kernel_us_per_step"] / plain["kernel_us_per_step"]
    return figures


def tune_figures(record: Record) -> dict:
    """Per tuned token count M: the tuned config's kernel speedup over vLLM's default
    (`build.py tune-moe --results`), `<dtype>.M<m>.speedup`."""
    figures: dict = {}
    for name in sorted(n for n in record.files if n.startswith("tune-moe-") and n.endswith(".json")):
        results = _json(record, name)
        for decision in results.get("decisions") or []:
            _put(figures, f"{results.get('dtype')}.M{decision.get('M')}.speedup", decision.get("speedup"))
    return figures


LATENCY = "latency.json"
LATENCY_SUFFIX = ".latency.json"
COUNTERS = {"spec_drafts": "vllm:spec_decode_num_drafts",
            "spec_draft_tokens": "vllm:spec_decode_num_draft_tokens",
            "spec_accepted_tokens": "vllm:spec_decode_num_accepted_tokens"}
ZERO_ACCEPTANCE_WINDOW = "sustained@random"   # verify/bench.py's window with the random drafter
CLOCK_TOLERANCE = 0.05   # vLLM's clock and verify's must agree this close, or the record says why


def _avg_latency(data: dict, where) -> float:
    value = data.get("avg_latency")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ForgeError(f"{where}: avg_latency: not a number (a `vllm bench latency` JSON?)")
    return float(value)


def _latency_run(record: Record, name: str, prefix: str) -> dict:
    """One `vllm bench latency` JSON: its mean and median latency and, where the record states
    its --output-len, ms per step (one prefill and output_len-1 decode steps, the prefill counted)."""
    data = _json(record, name)
    figures = {f"{prefix}avg_latency_s": _avg_latency(data, record.folder / name)}
    _put(figures, f"{prefix}median_latency_s", (data.get("percentiles") or {}).get("50"))
    output_len = record.settings.get("output_len")
    if isinstance(output_len, int) and output_len > 0:
        figures[f"{prefix}ms_per_step"] = figures[f"{prefix}avg_latency_s"] * 1000 / output_len
    return figures


def bench_zero_acceptance_step(record: Record, records: dict[str, Record]) -> float | None:
    """The step verify/bench.py timed for the engine a latency record names (settings.bench,
    settings.bench_engine) at zero acceptance: the window the random drafter ran in."""
    bench_id, engine = record.settings.get("bench"), record.settings.get("bench_engine")
    if not bench_id:
        return None
    where = record.folder / "result.json"
    if bench_id not in records or not engine:
        raise ForgeError(f"{where}: settings.bench: names no bench record {bench_id!r} "
                         f"with settings.bench_engine")
    report = _json(records[bench_id], "bench.json")
    window = (((report.get("engines") or {}).get(engine) or {}).get("figures") or {}).get(ZERO_ACCEPTANCE_WINDOW)
    step = (window or {}).get("step_ms")
    if isinstance(step, bool) or not isinstance(step, (int, float)):
        raise ForgeError(f"{where}: settings.bench_engine: {bench_id}'s bench.json has no "
                         f"{engine} {ZERO_ACCEPTANCE_WINDOW} step_ms")
    return float(step)


def pair_figures(record: Record, records: dict[str, Record]) -> dict:
    figures: dict = {}
    for name, pair in sorted(record.pairs.items()):
        baseline_id, baseline_file = pair["baseline"].split("/")
        if baseline_id not in records:
            raise ForgeError(f"{record.folder / 'result.json'}: pairs.{name}.baseline: "
                             f"no result record {baseline_id!r}")
        fused = _avg_latency(_json(record, pair["candidate"]), record.folder / pair["candidate"])
        base = records[baseline_id]
        plain = _avg_latency(_json(base, baseline_file), base.folder / baseline_file)
        figures.update({f"{name}_fused_avg_latency_s": fused, f"{name}_plain_avg_latency_s": plain,
                        f"{name}_fused_x_plain": fused / plain})
    return figures


def pair_verdict(record: Record) -> str | None:
    """A candidate slower than its baseline in every pair loses, faster in every pair wins; pairs
    on both sides of 1 are a tie."""
    names = [f"{name}_fused_x_plain" for name in record.pairs]
    if not names or any(n not in record.figures for n in names):
        return None
    ratios = [record.figures[n] for n in names]
    return "loss" if min(ratios) > 1 else "win" if max(ratios) < 1 else "tie"


def latency_figures(record: Record, records: dict[str, Record]) -> dict:
    figures: dict = {}
    paired = {p["candidate"] for p in record.pairs.values()}
    if LATENCY in record.files:
        figures.update(_latency_run(record, LATENCY, ""))
    for name in sorted(n for n in record.files if n.endswith(LATENCY_SUFFIX) and n not in paired):
        figures.update(_latency_run(record, name, name[:-len(LATENCY_SUFFIX)].replace("-", "_") + "_"))
    if "counters.json" in record.files:
        counters = _json(record, "counters.json")
        for figure, counter in COUNTERS.items():
            _put(figures, figure, counters.get(counter))
    step = bench_zero_acceptance_step(record, records)
    if step is not None and "ms_per_step" in figures:
        figures["bench_step_ms_zero_acc"] = step
        figures["vs_bench_zero_acc"] = figures["ms_per_step"] / step
    figures.update(pair_figures(record, records))
    return figures


ARCH_EXCERPT = re.compile(r"cmake-([a-z0-9]+)-(\d+\.\d+\.\d+)\.txt")
ARCH_LIST = re.compile(r'cuda_archs_loose_intersection\((\w+_ARCHS) "([^"]+)"')


def arch_excerpts(record: Record) -> list[tuple[str, str, str]]:
    """(kernels, release, file) of each CMake arch-list excerpt beside the record."""
    return [(m.group(1), m.group(2), name) for name in sorted(record.files)
            if (m := ARCH_EXCERPT.fullmatch(name))]


def arch_list_figures(record: Record) -> dict:
    """Per excerpt, how many of its arch lists name the record's CUDA arch family
    (settings.cuda_arch, e.g. "12.1": sm_12x) and how many FP8 lists it has."""
    arch = str(record.settings.get("cuda_arch") or "").split(" ")[0]
    if not re.fullmatch(r"\d+\.\d+", arch):
        raise ForgeError(f"{record.folder / 'result.json'}: settings.cuda_arch: must start with "
                         f"the arch its excerpts are read for, e.g. '12.1' (got {arch!r})")
    family = arch.split(".")[0] + "."
    figures: dict = {}
    for kernels, release, name in arch_excerpts(record):
        lists = [m.groups() for line in files.read_text(record.raw(name), files.REPORT).splitlines()
                 if (m := ARCH_LIST.search(line))]
        suffix = release.replace(".", "_")
        figures[f"{kernels}_arch_lists_naming_sm{family[:-1]}x_{suffix}"] = sum(
            any(a.startswith(family) for a in archs.split(";")) for _, archs in lists)
        figures[f"{kernels}_fp8_arch_lists_{suffix}"] = sum("_FP8_" in n for n, _ in lists)
    return figures


def is_latency(record: Record) -> bool:
    return record.kind == "latency" and (bool(record.pairs) or any(
        n == LATENCY or n.endswith(LATENCY_SUFFIX) for n in record.files))


DERIVERS: dict[str, Callable[[Record, dict], dict]] = {
    "mtp_smoke.json": lambda record, records: smoke_figures(record),
    "bench.json": lambda record, records: bench_figures(record),
    "analysis.json": profile_figures,
    suite.LOG_NAME: lambda record, records: suite.suite_figures(record),
}
TUNE_PREFIX = "tune-moe-"


def derive(record: Record, records: dict[str, Record]) -> dict | None:
    """The figures the record's raw report makes, or None where it has none to derive from
    (figures read off a log or a table by hand, stated as such in its summary)."""
    for name, deriver in DERIVERS.items():
        if name in record.files:
            return deriver(record, records)
    if any(n.startswith(TUNE_PREFIX) for n in record.files):
        return tune_figures(record)
    if is_latency(record):
        return latency_figures(record, records)
    if arch_excerpts(record):
        return arch_list_figures(record)
    return None


def write_derived(record: Record, records: dict[str, Record]) -> dict:
    """Set in the record's result.json every figure its raw report makes (figures of other names,
    read off other raw files, and the rest of the file stay as they are); returns the derived
    ones. A record with no raw report to derive from is refused."""
    from forge.evidence.records import RECORD_FILE
    from forge.files import write_text_atomically

    figures = derive(record, records)
    if figures is None:
        raise ForgeError(f"{record.folder / RECORD_FILE}: files: no raw report to derive figures "
                         f"from (mtp_smoke.json, bench.json, analysis.json, tune-moe-*.json or latency.json)")
    path = record.folder / RECORD_FILE
    data = load_json(path, files.REPORT)
    data["figures"] = {**data.get("figures", {}), **figures}
    write_text_atomically(path, dump_json(data, indent=2) + "\n")
    return figures
