"""bench.py's figures from the engine workers' raw results, and their JSON, Markdown and PNG.

Every figure says what it measures: "wall" is request wall clock including prefill, "decode"
is decode-only (1 / TPOT, from the engine's first/last token timestamps), TTFT is time to first
token. Per window:
- acceptance from vLLM's counters (deltas over the window): rate, mean length, per position;
- tokens per step = decode tokens / engine steps (a speculative step is one draft per request);
- step cost = decode time / steps = TPOT x tokens per step.
Per speculative engine: speedup = its decode tok/s over the plain engine of the same settings
(same dtype, runner, attention, MoE config, compile backend; k = 0) and over `stock` (the
release's default runner and dtype, no drafter), all from one run; and projected tok/s at an
acceptance profile from the measured step cost:

    tok/s(L) = L / step_cost(k),   L = 1 + p_1 + ... + p_k   (p_i: per-position acceptance)

Step cost at greedy does not depend on acceptance (a step verifies k+1 tokens and drafts k
whatever is accepted); a dummy run measures it at full (agreeing model) and zero (random model)
acceptance, and the projection uses their mean and reports their spread.
"""
from __future__ import annotations

import re
import statistics
from pathlib import Path

from forge.errors import ForgeError
from forge.files import write_text_atomically
from forge.json_text import dump_json
from forge.serving.acceptance import profile_length
from forge.untrusted import visible, visible_lines
from verify.metrics import counters_from_snapshot
from verify.report import missing_folders, remove_made, save_figure, versions_line

SPECIAL_WINDOWS = ("followup",)
# bench.py's windows of C gate prompts at once (conc<C>), in the concurrency table's order.
CONCURRENCY_WINDOWS = ("conc8", "conc16", "conc32", "conc64")
# A run that measured one of these gets the concurrency table (and derived["concurrency"]): the
# main table already shows conc8, so a run of conc8 alone renders as it did before the table.
BEYOND_CONC8 = CONCURRENCY_WINDOWS[1:]
# Long-context windows, bench.py --windows long<N>k[-conc<C>]: a prompt of N x 1024 tokens, batch 1
# or C requests at once; their prefill is reported apart from their decode.
LONG_WINDOW = re.compile(r"long([1-9][0-9]*)k(?:-conc([1-9][0-9]*))?")   # fullmatch
# vLLM's online FP8 quantizations of a BF16 checkpoint (`--quantization`): fp8 scales activations
# per tensor, dynamically (two passes over each activation); fp8_per_channel scales weights per
# output channel and activations per token, llm-compressor's FP8_DYNAMIC layout; fp8_per_block,
# 128x128 weight blocks. The shorthands are in vllm/config/quantization.py `_ONLINE_SHORTHANDS`
# from 0.25.0 (checked in the 0.25.0, 0.27.1 and 0.33.0 sources).
ONLINE_FP8 = ("fp8", "fp8_per_channel", "fp8_per_block")
# fp8-dynamic: not online: a pre-quantized compressed-tensors checkpoint (llm-compressor's
# FP8_DYNAMIC: static per-channel FP8 weights, dynamic per-token FP8 activations), read from its
# config.json, so no `quantization` argument; with --dummy the target's config.json carries it
# (forge/models.py Family.fp8_checkpoint_config). fp8-static: the same checkpoint in llm-compressor's
# static FP8 preset (per-tensor weights and calibrated per-tensor activation scales): no activation
# max is reduced at run time (issue 19's "static scales"; dummy weights give the scales vLLM's dummy
# init values, so its figures are speed only).
PREQUANTIZED_FP8 = ("fp8-dynamic", "fp8-static")
# The FP8 engines the picks choose among (bench.py's DTYPES add bf16 and auto).
FP8_DTYPES = (*ONLINE_FP8, *PREQUANTIZED_FP8)


def long_window(name: str) -> tuple[int, int] | None:
    """long32k-conc8 (or long32k-conc8@agree) -> (32768 prompt tokens, concurrency 8); None for
    any other window."""
    match = LONG_WINDOW.fullmatch(name.split("@")[0])
    return (int(match[1]) * 1024, int(match[2] or 1)) if match else None


def concurrency_of(name: str) -> int:
    """conc16 (or conc16@agree) -> 16."""
    return int(name.split("@")[0].removeprefix("conc"))


def window_figures(window: dict | None) -> dict | None:
    if not window:
        return None
    requests = window["requests"]
    tokens = sum(r["tokens"] for r in requests)
    wall = sum(window["wall_s"])
    tpots = [r["tpot_s"] for r in requests if r.get("tpot_s")]
    ttfts = [r["ttft_s"] for r in requests if r.get("ttft_s")]
    figures = {"requests": len(requests), "concurrency": window.get("concurrency", 1),
               "control": window.get("control"), "tokens": tokens, "wall_s": round(wall, 3),
               "wall_tok_s": round(tokens / wall, 1) if wall else None,
               "tpot_ms": round(1000 * statistics.mean(tpots), 3) if tpots else None,
               "decode_tok_s": round(1 / statistics.mean(tpots), 1) if tpots else None,
               "ttft_ms": round(1000 * statistics.mean(ttfts), 1) if ttfts else None}
    # Decode time over engine steps: a speculative step is one draft (per request).
    decode_s = sum(r["tpot_s"] * (r["tokens"] - 1) for r in requests if r.get("tpot_s"))
    decode_tokens = sum(r["tokens"] - 1 for r in requests if r.get("tpot_s"))
    spec = (counters_from_snapshot(window["metrics_after"])
            - counters_from_snapshot(window["metrics_before"]))
    steps = spec.drafts if spec.drafts else decode_tokens
    figures["steps"] = steps
    figures["tokens_per_step"] = round(decode_tokens / steps, 3) if steps else None
    figures["step_ms"] = round(1000 * decode_s / steps, 3) if steps and decode_s else None
    figures["spec"] = spec.summary() if spec.drafts else None
    return figures


def prefill_figures(window: dict) -> dict:
    """A long window's prefill, apart from its decode: per batch, the time to its last request's
    first token (TTFT counts from arrival, so a request waiting on the others' prefill counts
    that wait), and the prompt tokens per second of those times."""
    requests, size = window["requests"], window.get("concurrency", 1)
    batches = [requests[i:i + size] for i in range(0, len(requests), size)]
    timed = [b for b in batches if all(r.get("ttft_s") for r in b)]
    seconds = [max(r["ttft_s"] for r in b) for b in timed]
    tokens = sum(r["prompt_tokens"] for b in timed for r in b)
    return {"prompt_tokens": requests[0]["prompt_tokens"] if requests else None,
            "prefill_ms": round(1000 * statistics.mean(seconds), 1) if seconds else None,
            "prefill_tok_s": round(tokens / sum(seconds)) if seconds else None}


def engine_figures(result: dict) -> dict:
    windows = result.get("windows", {})
    figures = {name: window_figures(w) for name, w in windows.items()
               if name != "warmup" and name.split("@")[0] not in SPECIAL_WINDOWS}
    for name, w in windows.items():
        decode = figures.get(name)
        if decode and long_window(name):
            decode.update(prefill_figures(w))
    for name, w in windows.items():
        if name.split("@")[0] in SPECIAL_WINDOWS:
            figures[name] = w
    return figures


FAMILY_KEYS = ("dtype", "runner", "attention", "moe", "compile", "site", "kv", "moe_backend")


def family(engine: dict) -> tuple:
    """Engines that differ only in k: a speculative engine's plain counterpart shares this. A
    candidate's engines (site=) compare with the plain engine of their own site, and with the
    release's own one where the run has none there (a patch that changes only the spec step)."""
    return tuple(engine.get(key) for key in FAMILY_KEYS)


def plain_counterpart(engine: dict, plains: dict[tuple, str]) -> str | None:
    own_site = plains.get(family(engine))
    return own_site or plains.get(family({**engine, "site": None}))


def derive(engines: dict[str, dict], profiles: dict | None = None) -> None:
    """Speedups over the plain engine of the same family and over stock (same window, same
    run), step cost across the agreeing/random windows, projections at each profile, and (a run
    beyond conc8) each conc<C> window's decode against stock's, derived["concurrency"]."""
    profiles = profiles or {}
    plains: dict[tuple, str] = {}
    for n, e in engines.items():  # the first of a family: an A/A twin listed after it stays a figure
        if not e["k"] and e.get("figures") and not e.get("stock"):
            plains.setdefault(family(e), n)
    stock = next((n for n, e in engines.items() if e.get("stock") and e.get("figures")), None)
    default_kv = default_kv_engines(engines)
    by_concurrency = measures_beyond_conc8(engines)
    for engine in engines.values():
        figures = engine.get("figures")
        if not figures:
            continue
        plain = plain_counterpart(engine, plains)
        derived: dict = {"plain_engine": plain, "stock_engine": stock, "windows": {}}
        references = [(plain, "speedup_vs_plain"), (stock, "speedup_vs_stock")]
        if engine.get("kv") not in (None, "auto"):
            derived["default_kv_engine"] = default_kv.get(_kv_peer(engine))
            references.append((derived["default_kv_engine"], "speedup_vs_default_kv"))
        for window, f in figures.items():
            if not isinstance(f, dict) or "decode_tok_s" not in f:
                continue
            w = {}
            for ref_name, key in references:
                ref = (engines.get(ref_name, {}).get("figures") or {}).get(window) if ref_name else None
                if ref and ref.get("decode_tok_s") and f.get("decode_tok_s"):
                    w[key] = round(f["decode_tok_s"] / ref["decode_tok_s"], 3)
            derived["windows"][window] = w
        if engine["k"]:
            split = {base: s for base in dict.fromkeys(w.split("@")[0] for w in figures if long_window(w))
                     if (s := decode_split(*_pair(figures, base)))}
            if split:
                derived["decode_split"] = split
        if by_concurrency:
            stock_figures = engines[stock].get("figures") if stock else None
            derived["concurrency"] = concurrency_derived(figures, derived["windows"], stock_figures)
        steps = [f["step_ms"] for w, f in figures.items()
                 if w.startswith("sustained") and isinstance(f, dict) and f.get("step_ms")]
        if steps:
            step = statistics.mean(steps)
            derived["step_ms"] = round(step, 3)
            derived["step_ms_spread"] = round((max(steps) - min(steps)) / step, 3)
            plain_engine = engines.get(plain or "", {})
            plain_step = (plain_engine.get("derived") or {}).get("step_ms") if plain else None
            plain_step = plain_step or _mean_step(plain_engine)
            if plain_step:
                derived["step_cost_x_plain"] = round(step / plain_step, 3)
            stock_tok_s = _decode(engines.get(stock or "", {}), "sustained")
            derived["projected"] = {}
            for profile, rates in profiles.items():
                length = profile_length(rates, engine["k"]) if engine["k"] else 1.0
                if length is None:
                    continue
                tok_s = 1000 * length / step
                derived["projected"][profile] = {
                    "mean_acceptance_length": round(length, 3), "tok_s": round(tok_s, 1),
                    "speedup_vs_stock": round(tok_s / stock_tok_s, 3) if stock_tok_s else None}
        engine["derived"] = derived


def decode_split(full: dict | None, zero: dict | None) -> dict | None:
    """A speculative engine's decode time in one request-at-a-time window as steps x a steady step
    cost + a fixed cost a request, solved from its two controls: the agreeing model decodes the
    same reply in fewer steps than the random one, and a step costs the same at any acceptance
    (module docstring). None where the two do not differ in steps, or requests overlapped.
    Records h200-0.27.1-bench-26b-a4b-l10-long-kv8 and h200-0.27.1-bench-26b-a4b-l10-long-attention: at 32k tokens the k=4 engine's decode holds a fixed
    ~110-140 ms a request (240 with a candidate) that TPOT x tokens/step spreads over a short
    reply's few steps; at short context the solve's fixed part stays within -39..+13 ms."""
    if not full or not zero or full.get("concurrency", 1) != 1 or zero.get("concurrency", 1) != 1:
        return None
    if not all(w.get("steps") and w.get("step_ms") and w.get("requests") for w in (full, zero)):
        return None
    if zero["steps"] == full["steps"]:
        return None
    full_ms, zero_ms = full["steps"] * full["step_ms"], zero["steps"] * zero["step_ms"]
    step = (zero_ms - full_ms) / (zero["steps"] - full["steps"])
    return {"step_ms": round(step, 3), "fixed_ms": round((full_ms - full["steps"] * step) / full["requests"], 1)}


def measures_beyond_conc8(engines: dict[str, dict]) -> bool:
    return any(w.split("@")[0] in BEYOND_CONC8 for e in engines.values() for w in e.get("figures") or {})


def concurrency_derived(figures: dict, ratios: dict, stock_figures: dict | None) -> dict:
    """Per conc<C> window measured: decode tok/s at full acceptance (and, under controls, zero:
    `_zero`), its ratio to stock's of the same window and acceptance (the window's
    speedup_vs_stock), and whether the full-acceptance decode is below stock's (None: no stock)."""
    chosen = {}
    for base in CONCURRENCY_WINDOWS:
        full, zero = _pair(figures, base)
        if not full:
            continue
        entry = {"decode_tok_s": full.get("decode_tok_s"),
                 "x_stock": ratios.get(_name(figures, base, "agree"), {}).get("speedup_vs_stock")}
        if zero:
            entry.update(decode_tok_s_zero=zero.get("decode_tok_s"),
                         x_stock_zero=ratios.get(f"{base}@random", {}).get("speedup_vs_stock"))
        entry["slower_than_stock"] = _slower(full, _pair(stock_figures or {}, base)[0])
        chosen[base] = entry
    return chosen


def _slower(full: dict, stock_full: dict | None) -> bool | None:
    """Below stock's decode, compared unrounded (a ratio rounded to 1 may still be slower)."""
    ours, stocks = full.get("decode_tok_s"), (stock_full or {}).get("decode_tok_s")
    return ours < stocks if ours and stocks else None


def default_kv_engines(engines: dict[str, dict]) -> dict[tuple, str]:
    """The measured engines of the default KV cache (kv=auto, else no kv: the recipe's, auto in
    every recipe), by everything else that makes an engine: an FP8 KV engine's reference."""
    chosen = {}
    for kv in (None, "auto"):   # an explicit kv=auto wins over the recipe's
        chosen.update({_kv_peer(e): n for n, e in engines.items() if e.get("kv") == kv and e.get("figures")})
    return chosen


def _kv_peer(engine: dict) -> tuple:
    return (*family({**engine, "kv": None}), engine.get("k"), bool(engine.get("stock")))


def _mean_step(engine: dict) -> float | None:
    steps = [f["step_ms"] for w, f in (engine.get("figures") or {}).items()
             if w.startswith("sustained") and isinstance(f, dict) and f.get("step_ms")]
    return statistics.mean(steps) if steps else None


def _decode(engine: dict, base: str) -> float | None:
    """Decode tok/s of a window family (sustained@agree/@random or plain sustained), mean."""
    values = [f["decode_tok_s"] for w, f in (engine.get("figures") or {}).items()
              if w.split("@")[0] == base and isinstance(f, dict) and f.get("decode_tok_s")]
    return statistics.mean(values) if values else None


def picks(engines: dict[str, dict], profiles: dict, compile_backend: str | None = None) -> dict:
    """Per profile, the engine (k, runner) with the highest projected tok/s, plain included."""
    chosen = {}
    for profile in profiles:
        best = None
        for name, engine in engines.items():
            projected = ((engine.get("derived") or {}).get("projected") or {}).get(profile)
            if not projected or engine.get("stock") or engine.get("dtype") not in FP8_DTYPES:
                continue
            if compile_backend and engine.get("compile") != compile_backend:
                continue
            if best is None or projected["tok_s"] > best["tok_s"]:
                best = {"engine": name, "k": engine["k"], "runner": engine["runner"], **projected}
        if best:
            chosen[profile] = best
    return chosen


def engine_name(dtype: str, k: int, runner: str) -> str:
    return f"{dtype}{f'-mtp{k}' if k else ''}-{runner}"


def plain_name(dtype: str, runner: str) -> str:
    return engine_name(dtype, 0, runner)


def _versus_stock(speedup) -> str:
    # A run without a stock engine (e.g. a V1-only sweep) has no ratio to print.
    return f"{speedup}x stock" if speedup is not None else "no stock engine in this run"


def render_markdown(report: dict) -> str:
    m = report["machine"]
    lines = [f"# verify/bench.py results: {report['recipe']} ({report['target']})", "",
             f"- date: {report['date']}; command: `{report['command']}`"]
    lines.append(f"- ran on: {versions_line(report['machine'])}")
    if report.get("server_burst"):
        b = report["server_burst"]
        lines += [f"- server burst: {b['answered']}/{b['requests']} answered ({b['failed']} failed), "
                  f"{b['max_tokens']} tokens each, p50 {b['latency_p50_s']} s, max "
                  f"{b['latency_max_s']} s, wall {b['wall_s']} s"]
    if not report["engines"]:
        return "\n".join(lines) + "\n"
    shape = report.get("shape") or "26b-a4b"
    controlled = any("@" in w for e in report["engines"].values() for w in (e.get("figures") or {}))
    lines += [f"- machine: {m.get('device')}",
              f"- model: {'dummy weights, ' + shape + ' shapes, ' if report['dummy'] else ''}"
              f"{report['layers']} target layers"
              + ("; every window runs on the agreeing model (@agree: full acceptance) and on the "
                 "random one (@random: zero acceptance), verify/controls.py" if controlled else
                 "; no controls: dummy weights accept no drafts" if report["dummy"] else ""),
              "- decode = 1/TPOT (decode only, batch 1 in `sustained`); tokens/step and acceptance "
              "from vLLM's counters; step ms = TPOT x tokens per step; speedups are ratios of "
              "decode tok/s to the plain engine of the same settings and to `stock`, same window, "
              "same run",
              "- projected tok/s(L) = L / step cost, L = 1 + sum of the profile's first k "
              "per-position rates; step cost = mean over the sustained windows", ""]
    profiles = list(report.get("profiles") or {})
    pair = "full / zero acc." if controlled else "as measured"
    lines += ["| engine | runner | k | attention | compile | MoE config | init s | sustained decode "
              f"tok/s {pair} | mean acc. length (per position) | tokens/step | step ms "
              f"(spread) | step x plain | speedup vs plain / vs stock ({'full acc.' if controlled else 'as measured'}) "
              f"| conc 8 decode tok/s {pair} |" + "".join(f" projected {p} tok/s (x stock) |" for p in profiles),
              "|" + "---|" * (14 + len(profiles))]
    for name, e in report["engines"].items():
        f = e.get("figures")
        if not f:
            lines.append(f"| {engine_label(name, e)} | failed: {visible(e.get('error') or 'no result')} |"
                         + " |" * (12 + len(profiles)))
            continue
        d = e.get("derived") or {}
        full, zero = _pair(f, "sustained")
        spec = (full or {}).get("spec") or {}
        positions = "/".join(f"{r:.2f}" for r in spec.get("per_position_rates") or [])
        w = (d.get("windows") or {}).get(_name(f, "sustained", "agree"), {})
        c_full, c_zero = _pair(f, "conc8")
        row = [engine_label(name, e), e.get("runner"), str(e.get("k")), e.get("attention") or "–",
               e.get("compile") or "–", _short_moe(e.get("moe")), _fmt(e.get("init_s")),
               _both(full, zero, "decode_tok_s", controlled),
               f"{_fmt(spec.get('mean_acceptance_length'))} ({positions or '–'})",
               _fmt((full or {}).get("tokens_per_step")),
               f"{_fmt(d.get('step_ms'))} ({_pct(d.get('step_ms_spread'))})",
               _fmt(d.get("step_cost_x_plain")),
               f"{_fmt(w.get('speedup_vs_plain'))} / {_fmt(w.get('speedup_vs_stock'))}",
               _both(c_full, c_zero, "decode_tok_s", controlled)]
        for profile in profiles:
            proj = (d.get("projected") or {}).get(profile)
            row.append(f"{_fmt(proj['tok_s'])} ({_fmt(proj['speedup_vs_stock'])})" if proj else "–")
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    lines += concurrency_table(report["engines"], controlled)
    lines += long_context_table(report["engines"], controlled)
    for profile, pick in (report.get("picks") or {}).items():
        lines.append(f"\n- best at profile `{profile}` ({report['profiles'][profile]}): "
                     f"{pick['engine']} (k={pick['k']}, runner {pick['runner']}), projected "
                     f"{pick['tok_s']} tok/s, {_versus_stock(pick.get('speedup_vs_stock'))}")
    lines += ["", f"Plot: {report.get('plot') or 'not rendered (' + report.get('plot_note', '') + ')'}"]
    return "\n".join(lines) + "\n"


def concurrency_table(engines: dict[str, dict], controlled: bool) -> list[str]:
    """One row per engine: decode at each conc<C> window measured, its ratio to stock where stock
    measured it, and the concurrencies where it is slower than stock (issue 19: never slower at
    8 and 16). From derived["concurrency"]: nothing for a run without it (conc8 alone, or a
    bench.json written before the table)."""
    measured = [w for w in CONCURRENCY_WINDOWS if any(w in _concurrency(e) for e in engines.values())]
    if not measured:
        return []
    stocked = [w for w in measured if any(_concurrency(e).get(w, {}).get("x_stock") is not None
                                          for e in engines.values())]
    pair = "full / zero acc." if controlled else "as measured"
    header = ["engine"]
    for window in measured:
        header.append(f"conc {concurrency_of(window)} decode tok/s {pair}")
        if window in stocked:
            header.append(f"conc {concurrency_of(window)} x stock")
    if stocked:
        header.append("slower than stock at")
    rows = [_concurrency_row(name, e, measured, stocked, controlled) for name, e in engines.items()]
    return ["", "Concurrency (`conc<C>`: the gate prompts repeated to C requests at once, 128 "
                "tokens each): decode = 1/TPOT; x stock = over `stock`'s decode of the same window "
                "and acceptance, same run; slower than stock at: the concurrencies where the "
                "engine's full-acceptance decode is below stock's", "",
            "| " + " | ".join(header) + " |", "|" + "---|" * len(header), *rows]


def _concurrency(engine: dict) -> dict:
    return (engine.get("derived") or {}).get("concurrency") or {}


def _concurrency_row(name: str, engine: dict, measured: list[str], stocked: list[str],
                     controlled: bool) -> str:
    cells = [engine_label(name, engine)]
    if not engine.get("figures"):
        blanks = len(measured) + len(stocked) + bool(stocked) - 1
        return f"| {cells[0]} | failed: {visible(engine.get('error') or 'no result')} |" + " |" * blanks
    figures = _concurrency(engine)
    for window in measured:
        entry = figures.get(window, {})
        cells.append(_values(entry.get("decode_tok_s"), entry.get("decode_tok_s_zero"), controlled))
        if window in stocked:
            cells.append(_values(entry.get("x_stock"), entry.get("x_stock_zero"), controlled))
    if stocked:
        slower = [str(concurrency_of(w)) for w in measured if figures.get(w, {}).get("slower_than_stock")]
        cells.append(", ".join(slower) or "–")
    return "| " + " | ".join(cells) + " |"


def _values(full, zero, controlled: bool) -> str:
    """A figure at full acceptance, and under controls / at zero acceptance."""
    return f"{_fmt(full)} / {_fmt(zero)}" if controlled else _fmt(full)


def long_context_table(engines: dict[str, dict], controlled: bool) -> list[str]:
    """One row per engine and long window measured; nothing for a run without one."""
    split = any((e.get("derived") or {}).get("decode_split") for e in engines.values())
    rows = [_long_row(name, e, base, controlled, split) for name, e in engines.items()
            for base in dict.fromkeys(w.split("@")[0] for w in e.get("figures") or {} if long_window(w))]
    if not rows:
        return []
    pair = "full / zero acc." if controlled else "as measured"
    return ["", "Long context (`long<N>k[-conc<C>]`: N x 1024 prompt tokens from the prose prompts, "
                "C requests at once): decode = 1/TPOT over the reply, at that context; vs default KV "
                "cache: an engine with kv= over the same engine without it; prefill ms = "
                "time to the first token of a batch's last request (its prefill, with the others' "
                "ahead of it), prefill tok/s = prompt tokens over those times"
            + ("; steady step / fixed ms: a speculative engine's decode split into steps x a steady "
               "step cost + a fixed cost a request, solved from its two controls (one request at "
               "a time)" if split else ""), "",
            f"| engine | window | prompt tokens | requests at once | decode tok/s {pair} | speedup vs "
            f"plain / vs stock / vs default KV cache ({'full acc.' if controlled else 'as measured'}) "
            f"| prefill ms {pair} | prefill tok/s {pair} |" + (" steady step ms / fixed ms a request |" if split else ""),
            "|" + "---|" * (9 if split else 8), *rows]


def _long_row(name: str, engine: dict, base: str, controlled: bool, split: bool) -> str:
    """The row; with `split` (some engine of the run has one) also its decode split's cell."""
    figures = engine["figures"]
    full, zero = _pair(figures, base)
    speedups = ((engine.get("derived") or {}).get("windows") or {}).get(_name(figures, base, "agree"), {})
    row = [engine_label(name, engine), base, _fmt((full or {}).get("prompt_tokens")),
           _fmt((full or {}).get("concurrency")), _both(full, zero, "decode_tok_s", controlled),
           " / ".join(_fmt(speedups.get(f"speedup_vs_{ref}")) for ref in ("plain", "stock", "default_kv")),
           _both(full, zero, "prefill_ms", controlled), _both(full, zero, "prefill_tok_s", controlled)]
    if split:
        own = ((engine.get("derived") or {}).get("decode_split") or {}).get(base)
        row.append(f"{_fmt(own['step_ms'])} / {_fmt(own['fixed_ms'])}" if own else "–")
    return "| " + " | ".join(row) + " |"


def engine_label(name: str, engine: dict) -> str:
    """The engine's name, and its KV cache dtype where its --engine set one (kv=): the figures
    of an FP8 KV cache must not read as the default cache's."""
    return f"{name} (KV {engine['kv']})" if engine.get("kv") else name


def _both(full: dict | None, zero: dict | None, key: str, controlled: bool) -> str:
    return _values((full or {}).get(key), (zero or {}).get(key), controlled)


def _name(figures: dict, base: str, control: str) -> str:
    return f"{base}@{control}" if f"{base}@{control}" in figures else base


def _pair(figures: dict, base: str) -> tuple[dict | None, dict | None]:
    """(full-acceptance window, zero-acceptance window); a non-dummy run has only the first."""
    if f"{base}@agree" in figures:
        return figures.get(f"{base}@agree"), figures.get(f"{base}@random")
    return figures.get(base), None


def _short_moe(moe) -> str:
    return "–" if not moe else Path(str(moe)).name


def _pct(value) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


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
    """Left: sustained decode tok/s per engine at full and zero acceptance. Right: step cost per
    engine, and (when profiles are given) projected tok/s against k per runner. Returns None if
    matplotlib is not installed (the caller records that)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    engines = {n: e for n, e in report["engines"].items() if e.get("figures")}
    names = list(engines)
    full = [(_pair(engines[n]["figures"], "sustained")[0] or {}).get("decode_tok_s") or 0 for n in names]
    zero = [(_pair(engines[n]["figures"], "sustained")[1] or {}).get("decode_tok_s") or 0 for n in names]
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5))
    xs = range(len(names))
    left.bar([x - 0.2 for x in xs], full, width=0.4, label="full acceptance (agreeing model)")
    left.bar([x + 0.2 for x in xs], zero, width=0.4, label="zero acceptance (random model)")
    left.set_xticks(list(xs), names, rotation=60, ha="right", fontsize=7)
    left.set_ylabel("sustained decode tok/s (batch 1)")
    left.legend(fontsize=7)
    profile = next(iter(report.get("profiles") or {}), None)
    series: dict = {}
    for e in engines.values():
        d = e.get("derived") or {}
        key = f"{e.get('runner')}, {e.get('compile')}, {e.get('attention')}"
        if profile and (d.get("projected") or {}).get(profile) and not e.get("stock"):
            series.setdefault(key, []).append((e["k"], d["projected"][profile]["tok_s"]))
    if series:
        for key, points in sorted(series.items()):
            points.sort()
            right.plot([k for k, _ in points], [t for _, t in points], marker="o", label=key)
        right.set_xlabel("k (draft tokens)")
        right.set_ylabel(f"projected tok/s at profile {profile}")
        right.legend(fontsize=7)
    else:
        steps = [(e.get("derived") or {}).get("step_ms") or 0 for e in engines.values()]
        right.bar(names, steps)
        right.set_ylabel("ms per engine step")
        right.tick_params(axis="x", rotation=60)
    fig.suptitle(f"{report['recipe']} on {report['machine'].get('device')}, vLLM "
                 f"{report['machine'].get('vllm')}, {report.get('shape') or ''} {report['layers']} layers"
                 f"{', dummy weights' if report['dummy'] else ''}", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
    return str(path)


def write_outputs(report: dict, out: Path) -> dict[str, Path]:
    """bench.json, bench.md and bench.png in `out`, or, should the OS refuse one (a full disk, a
    read-only folder), none of them: one ForgeError naming the folder."""
    made = missing_folders(out / "bench.json")
    png = out / "bench.png"
    paths = {"json": out / "bench.json", "md": out / "bench.md"}
    new = tuple(p for p in (png, *paths.values()) if not p.exists())  # removed again on a failure
    try:
        out.mkdir(parents=True, exist_ok=True)
        plot = render_plot(report, png)
        report["plot"] = png.name if plot else None
        if not plot:
            report["plot_note"] = "matplotlib is not installed here"
        # Each whole or not at all; the JSON strict (a NaN figure is refused by its field's path).
        write_text_atomically(paths["json"], dump_json(report, f"bench report {paths['json']}",
                                                       indent=1) + "\n")
        # Engine errors are log lines: a reader's `cat bench.md` must not obey what the log said.
        write_text_atomically(paths["md"], visible_lines(render_markdown(report)))
    except OSError as exc:
        remove_made(made, new)
        raise ForgeError(f"{out}: the bench report was not written: {exc.strerror or exc}") from None
    if plot:
        paths["png"] = png
    return paths
