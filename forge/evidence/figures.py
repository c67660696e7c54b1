"""A record's figures, taken by code from the raw report beside it, so no figure is typed by hand:
a smoke's two controls (mtp_smoke.json), a bench's engines (bench.json, as verify/bench.py
writes it), a profile's step (analysis.json, as `verify/profile.py --report --json` writes it).
Every figure `derive(record, records)` makes must be in the record's `figures` with that value
(tests/test_evidence.py); a record may state more, read off raw files no code here reads."""
from __future__ import annotations

import json
from collections.abc import Callable

from forge.errors import ForgeError
from forge.evidence.records import Record

# the smoke's windows of its two controls (verify/controls.py)
CONTROL_WINDOWS = {"agree": "greedy_agree", "random": "greedy_random"}
PROFILE = "spark343"   # the acceptance profile x stock is read at (verify/bench_report.py)


def _json(record: Record, name: str):
    try:
        return json.loads(record.raw(name).read_text())
    except (OSError, ValueError) as exc:
        raise ForgeError(f"{record.folder / name}: cannot read the raw report: {exc}") from exc


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


DERIVERS: dict[str, Callable[[Record, dict], dict]] = {
    "mtp_smoke.json": lambda record, records: smoke_figures(record),
    "bench.json": lambda record, records: bench_figures(record),
    "analysis.json": profile_figures,
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
                         f"from (mtp_smoke.json, bench.json, analysis.json or tune-moe-*.json)")
    path = record.folder / RECORD_FILE
    data = json.loads(path.read_text())
    data["figures"] = {**data.get("figures", {}), **figures}
    write_text_atomically(path, json.dumps(data, indent=2) + "\n")
    return figures
