"""bench.py's figures from the engine workers' raw results, and their JSON, Markdown and PNG.

Every figure says what it measures: "wall" is request wall clock including prefill, "decode"
is decode-only (1 / TPOT, from the engine's first/last token timestamps), TTFT is time to first
token. The speculative step's cost is decode time per engine step (one step per draft when
speculating) over the plain engine's; the break-even mean acceptance length equals that ratio,
since speedup ~= mean acceptance length / step cost ratio.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from verify.metrics import counters_from_snapshot

# Acceptance the field saw on coherent prose (A100, FP8+MTP k=3: ~87%, REFERENCE.md §6), used
# only to show what a given step cost would yield with a working drafter.
REFERENCE_ACCEPTANCE = 0.87


def window_figures(window: dict | None) -> dict | None:
    if not window:
        return None
    requests = window["requests"]
    tokens = sum(r["tokens"] for r in requests)
    wall = sum(window["wall_s"])
    tpots = [r["tpot_s"] for r in requests if r.get("tpot_s")]
    ttfts = [r["ttft_s"] for r in requests if r.get("ttft_s")]
    figures = {"requests": len(requests), "concurrency": window.get("concurrency", 1),
               "tokens": tokens, "wall_s": round(wall, 3),
               "wall_tok_s": round(tokens / wall, 1) if wall else None,
               "tpot_ms": round(1000 * statistics.mean(tpots), 3) if tpots else None,
               "decode_tok_s": round(1 / statistics.mean(tpots), 1) if tpots else None,
               "ttft_ms": round(1000 * statistics.mean(ttfts), 1) if ttfts else None}
    # Decode time over engine steps: a speculative step is one draft (per request).
    decode_s = sum(r["tpot_s"] * (r["tokens"] - 1) for r in requests if r.get("tpot_s"))
    spec = (counters_from_snapshot(window["metrics_after"])
            - counters_from_snapshot(window["metrics_before"]))
    steps = spec.drafts if spec.drafts else sum(r["tokens"] - 1 for r in requests)
    figures["step_ms"] = round(1000 * decode_s / steps, 3) if steps and decode_s else None
    figures["spec"] = spec.summary() if spec.drafts else None
    return figures


def engine_figures(result: dict) -> dict:
    windows = result.get("windows", {})
    figures = {name: window_figures(windows.get(name))
               for name in ("burst", "sustained", "conc8", "conc16")}
    figures["followup"] = windows.get("followup")
    return figures


def derive(engines: dict[str, dict]) -> None:
    """Add each speculative engine's step cost against its plain counterpart (same dtype and
    runner), the break-even acceptance length, and the speedup that follows at a reference
    acceptance. Measured in the sustained (batch 1) window."""
    for name, engine in engines.items():
        k = engine["k"]
        if not k or not engine.get("figures"):
            continue
        plain = engines.get(plain_name(engine["dtype"], engine["runner"]), {})
        spec_step = _sustained(engine, "step_ms")
        plain_step = _sustained(plain, "step_ms")
        if not (spec_step and plain_step):
            continue
        ratio = spec_step / plain_step
        length = 1 + k * REFERENCE_ACCEPTANCE
        engine["derived"] = {
            "plain_engine": plain_name(engine["dtype"], engine["runner"]),
            "step_cost_ratio": round(ratio, 3),
            "break_even_mean_acceptance_length": round(ratio, 3),
            "max_speedup_all_accepted": round((k + 1) / ratio, 3),
            f"projected_speedup_at_{int(REFERENCE_ACCEPTANCE * 100)}pct_acceptance": round(length / ratio, 3)}


def _sustained(engine: dict, key: str):
    sustained = (engine.get("figures") or {}).get("sustained") or {}
    return sustained.get(key)


def engine_name(dtype: str, k: int, runner: str) -> str:
    return f"{dtype}{f'-mtp{k}' if k else ''}-{runner}"


def plain_name(dtype: str, runner: str) -> str:
    return engine_name(dtype, 0, runner)


def render_markdown(report: dict) -> str:
    m = report["machine"]
    lines = [f"# verify/bench.py results: {report['recipe']} ({report['target']})", "",
             f"- date: {report['date']}; command: `{report['command']}`"]
    if report.get("server_burst"):
        b = report["server_burst"]
        lines += [f"- server burst: {b['answered']}/{b['requests']} answered ({b['failed']} failed), "
                  f"{b['max_tokens']} tokens each, p50 {b['latency_p50_s']} s, max "
                  f"{b['latency_max_s']} s, wall {b['wall_s']} s"]
    if not report["engines"]:
        return "\n".join(lines) + "\n"
    lines += [f"- machine: {m.get('device')}, vLLM {m.get('vllm')}, torch {m.get('torch')}",
             f"- model: {'dummy weights, Gemma-4-26B-A4B shapes, ' if report['dummy'] else ''}"
             f"{report['layers']} target layers"
             + (" (dummy weights accept no drafts: a speculative run measures the cost of one "
                "speculative step)" if report["dummy"] else ""),
             "- wall = request wall clock incl. prefill; decode = 1/TPOT (decode only); "
             "TTFT = time to first token; conc N = N requests at once (aggregate tok/s)", "",
             "| engine | burst wall tok/s | burst decode tok/s | sustained wall tok/s | "
             "sustained decode tok/s | TTFT ms | step ms | step cost x plain | break-even length | "
             "conc 8 tok/s | conc 16 tok/s | follow-up TTFT cold / cached ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, engine in report["engines"].items():
        f = engine.get("figures")
        if not f:
            lines.append(f"| {name} | failed: {engine.get('error') or 'no result'} |" + " |" * 10)
            continue
        d = engine.get("derived", {})
        follow = f.get("followup") or {}
        lines.append("| " + " | ".join([
            name, _get(f, "burst", "wall_tok_s"), _get(f, "burst", "decode_tok_s"),
            _get(f, "sustained", "wall_tok_s"), _get(f, "sustained", "decode_tok_s"),
            _get(f, "sustained", "ttft_ms"), _get(f, "sustained", "step_ms"),
            _fmt(d.get("step_cost_ratio")), _fmt(d.get("break_even_mean_acceptance_length")),
            _get(f, "conc8", "wall_tok_s"), _get(f, "conc16", "wall_tok_s"),
            f"{_ms(follow.get('cold_ttft_s'))} / {_ms(follow.get('cached_ttft_s'))}"]) + " |")
    lines += ["", f"Plot: {report.get('plot') or 'not rendered (' + report.get('plot_note', '') + ')'}"]
    return "\n".join(lines) + "\n"


def _get(figures: dict, window: str, key: str) -> str:
    return _fmt((figures.get(window) or {}).get(key))


def _fmt(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def _ms(seconds) -> str:
    return "–" if seconds is None else f"{1000 * seconds:.1f}"


def render_plot(report: dict, path: Path) -> str | None:
    """Sustained decode tok/s and step cost per engine, V1 and V2 side by side. Returns None
    if matplotlib is not installed (the caller records that)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    names = [n for n, e in report["engines"].items() if e.get("figures")]
    decode = [_sustained(report["engines"][n], "decode_tok_s") or 0 for n in names]
    steps = [_sustained(report["engines"][n], "step_ms") or 0 for n in names]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    colors = ["#4c72b0" if n.endswith("v1") else "#dd8452" for n in names]
    left.bar(names, decode, color=colors)
    left.set_ylabel("decode tok/s (batch 1, sustained)")
    right.bar(names, steps, color=colors)
    right.set_ylabel("ms per engine step")
    for axis in (left, right):
        axis.tick_params(axis="x", rotation=45)
    fig.suptitle(f"{report['recipe']} on {report['machine'].get('device')}, vLLM "
                 f"{report['machine'].get('vllm')}, {report['layers']} layers"
                 f"{', dummy weights' if report['dummy'] else ''} (blue V1, orange V2)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def write_outputs(report: dict, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    png = out / "bench.png"
    plot = render_plot(report, png)
    report["plot"] = png.name if plot else None
    if not plot:
        report["plot_note"] = "matplotlib is not installed here"
    paths = {"json": out / "bench.json", "md": out / "bench.md"}
    paths["json"].write_text(json.dumps(report, indent=1) + "\n")
    paths["md"].write_text(render_markdown(report))
    if plot:
        paths["png"] = png
    return paths
