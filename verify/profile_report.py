"""The decode profile's analysis, with no GPU: kernel tables from CUDA traces, the decode step's
kernel time per token and per step by kernel group, GPU-busy against wall time, and each group's
share of its byte floor from `build.py roofline --json`. verify/profile.py records the raw data on
the GPU host; everything here re-runs from that JSON on any machine.

Prefill is taken out by difference: each engine generates a short and a long reply to the same
prompt, and the decode step is what the long one costs beyond the short one (same prefill, same
first steps), divided by the extra tokens (and the extra engine steps, which a speculative step
makes fewer than tokens).
"""
from __future__ import annotations

import statistics
import zlib
from pathlib import Path

from forge import files
from forge.data_formats import parse_json
from forge.errors import ForgeError
from verify.kernel_groups import OTHER, KernelMap
from verify.report import read_json_object, save_figure

# Chrome-trace categories of work that runs on the GPU (kineto's names); the rest (cuda_runtime,
# cpu_op, python_function, flow events) is host-side.
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
TOP_KERNELS = 15
# kernel time above the GPU's busy time by more than this share is named as overlap (streams)
OVERLAP_SHOWN = 1.01


# ------------------------------------------------------------------------------------------
# Traces -> kernel tables

def read_trace(path: Path | str) -> dict:
    """A Chrome trace as torch.profiler's export_chrome_trace (or vLLM's profiler) writes it."""
    path = Path(path)
    data = files.read_bytes(path, files.TRACE)
    if path.suffix == ".gz":
        data = _gunzip(data, path)
    return parse_json(data, str(path))


def _gunzip(data: bytes, path: Path) -> bytes:
    """A gzipped trace unpacked up to the trace cap (a small .gz may unpack to gigabytes)."""
    unpacker = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        plain = unpacker.decompress(data, files.TRACE.cap + 1)
    except zlib.error as exc:
        raise ForgeError(f"{path}: not a readable Chrome trace (not gzip: {exc})") from exc
    if len(plain) > files.TRACE.cap:
        raise ForgeError(f"{path}: unpacks past the {files.TRACE.cap >> 20} MiB cap for a "
                         "profiler trace; is it the right file?")
    return plain


def gpu_events(trace: dict) -> list[dict]:
    events = trace.get("traceEvents") if isinstance(trace, dict) else trace
    if not isinstance(events, list):
        raise ForgeError("the trace has no traceEvents list")
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES]


def kernel_table(trace: dict) -> dict:
    """Per kernel name: launches and total µs; plus the GPU's busy time (the union of the
    events' intervals, so overlapping streams count once) and the span from first to last."""
    events = gpu_events(trace)
    table: dict[str, dict] = {}
    for event in events:
        row = table.setdefault(event["name"], {"name": event["name"], "count": 0, "us": 0.0})
        row["count"] += 1
        row["us"] += float(event.get("dur", 0))
    intervals = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events)
    return {"kernels": sorted(table.values(), key=lambda r: -r["us"]),
            "kernel_us": sum(r["us"] for r in table.values()),
            "busy_us": busy_time(intervals),
            "span_us": (max(end for _, end in intervals) - intervals[0][0]) if intervals else 0.0,
            "events": len(events)}


def busy_time(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of sorted (start, end) intervals."""
    if not intervals:
        return 0.0
    busy = 0.0
    current_start, current_end = intervals[0]
    for start, end in intervals[1:]:
        if start > current_end:
            busy += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    return busy + current_end - current_start


def decode_kernels(short: dict, long: dict) -> list[dict]:
    """What the long generation's kernels cost beyond the short one's, per kernel name."""
    rows = {r["name"]: {"name": r["name"], "count": r["count"], "us": r["us"]} for r in long["kernels"]}
    for r in short["kernels"]:
        row = rows.setdefault(r["name"], {"name": r["name"], "count": 0, "us": 0.0})
        row["count"] -= r["count"]
        row["us"] -= r["us"]
    return sorted(rows.values(), key=lambda r: -r["us"])


# ------------------------------------------------------------------------------------------
# The roofline's bytes (build.py roofline --json) -> floors

def read_roofline(path: Path | str) -> dict:
    return roofline_floor(read_json_object(path, "roofline JSON"), str(path))


def roofline_floor(data: dict, source: str) -> dict:
    """{bandwidth_bytes_s, bytes_per_token, groups} from the roofline JSON. The bandwidth is
    the JSON's own bytes_per_token over floor_ms (the two fields issue 19 fixes), so a renamed
    bandwidth field elsewhere in the file cannot make the floors disagree with its floor."""
    if not isinstance(data, dict):
        raise ForgeError(f"{source}: (top level): must be a JSON object")
    groups = data.get("groups")
    if not isinstance(groups, dict) or not groups:
        raise ForgeError(f"{source}: groups: must be an object of byte group -> bytes")
    for name, value in groups.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ForgeError(f"{source}: groups.{name}: must be a whole number of bytes (got {value!r})")
    total, floor_ms = data.get("bytes_per_token"), data.get("floor_ms")
    if not isinstance(total, int) or isinstance(total, bool) or total <= 0:
        raise ForgeError(f"{source}: bytes_per_token: must be a positive whole number (got {total!r})")
    if not isinstance(floor_ms, (int, float)) or isinstance(floor_ms, bool) or floor_ms <= 0:
        raise ForgeError(f"{source}: floor_ms: must be a positive number (got {floor_ms!r})")
    return {"bandwidth_bytes_s": total / (floor_ms / 1e3), "bytes_per_token": total,
            "floor_ms": float(floor_ms), "groups": dict(groups), "source": source}


# ------------------------------------------------------------------------------------------
# Raw profile -> figures

def analyse(profile: dict, kernel_map: KernelMap, roofline: dict | None = None) -> dict:
    """Per kernel group: µs per token and per step of the decode step; GPU-busy against wall;
    with a roofline, each group's floor and the % of it reached (floor / measured)."""
    short, long, method = _decode_pair(profile)
    tokens = long["tokens"] - short["tokens"]
    steps = long["steps"] - short["steps"]
    if tokens <= 0 or steps <= 0:
        raise ForgeError(f"the long profile has no more tokens/steps than the short one "
                         f"({long['tokens']}/{long['steps']} vs {short['tokens']}/{short['steps']})")
    rows = decode_kernels(short, long)
    groups = _group_rows(rows, kernel_map, tokens, steps)
    kernel_us = sum(g["us_total"] for g in groups.values())
    if kernel_us <= 0:
        raise ForgeError(f"the profiles hold no decode kernel time ({long.get('events')} GPU events "
                         "in the long one): did the profiler record the GPU (CUPTI)?")
    wall = wall_per_step(profile.get("wall") or {})
    busy_us = decode_busy_us(short, long, steps)
    result = {
        "k": profile.get("k"), "label": step_label(profile), "method": method,
        "tokens": tokens, "steps": steps,
        "tokens_per_step": tokens / steps,
        "kernel_us_per_token": kernel_us / tokens, "kernel_us_per_step": kernel_us / steps,
        "wall_us_per_token": wall["us_per_token"] if wall else None,
        "wall_us_per_step": wall["us_per_step"] if wall else None,
        # the union of the decode's kernel intervals: kernels overlapping on two streams (Qwen's
        # shared expert beside its routed ones, §15) count once, where the groups' sum counts both
        "busy_us_per_step": busy_us,
        "busy_pct": 100 * busy_us / wall["us_per_step"] if wall else None,
        "tpot_us": engine_tpot_us(profile.get("wall") or {}),
        "profiled_busy_pct": _profiled_busy(long),
        "other_us_per_step": groups["other"]["us_per_step"],
        "groups": groups,
        "top_kernels": [_kernel_row(r, kernel_map, steps) for r in rows[:TOP_KERNELS]],
        # What the map does not know yet, by name, so that it can learn it.
        "other_kernels": [_kernel_row(r, kernel_map, steps) for r in rows
                          if kernel_map.group_of(r["name"]) == OTHER][:TOP_KERNELS],
        "family": kernel_map.family,
    }
    if roofline:
        result["floor"] = floor = apply_floor(groups, roofline, kernel_map, busy_us)
        if wall:
            floor["pct_of_floor_wall"] = 100 * floor["step_floor_us"] / wall["us_per_step"]
    return result


def decode_busy_us(short: dict, long: dict, steps: int) -> float:
    """The GPU's busy time per decode step: the long reply's busy time (the union of its kernel
    intervals) beyond the short one's, over the extra steps."""
    return (long["busy_us"] - short.get("busy_us", 0.0)) / steps


def _decode_pair(profile: dict) -> tuple[dict, dict, str]:
    """(short, long, how the step is taken) from the two profiled replies."""
    short, long = profile["profiles"]["short"], profile["profiles"]["long"]
    if not short.get("events") and long.get("events"):
        # A profiler session that records nothing after an earlier one did: the long reply
        # alone still gives the step, its prefill included (one step's work in ~100).
        return ({"tokens": 0, "steps": 0, "kernels": []}, long,
                "the long reply whole, prefill included (the short reply's profile recorded no GPU events)")
    return short, long, "the long reply minus the short one"


def _kernel_row(row: dict, kernel_map: KernelMap, steps: int) -> dict:
    return {"name": row["name"], "group": kernel_map.group_of(row["name"]),
            "us_per_step": row["us"] / steps, "launches_per_step": row["count"] / steps}


def step_label(profile: dict) -> str:
    k = profile.get("k") or 0
    return "plain step" if not k else f"spec step (k={k})"


def _group_rows(rows: list[dict], kernel_map: KernelMap, tokens: int, steps: int) -> dict:
    groups: dict[str, dict] = {g.name: {"label": g.label, "byte_groups": list(g.byte_groups),
                                        "us_total": 0.0, "launches": 0} for g in kernel_map.groups}
    for row in rows:
        group = groups[kernel_map.group_of(row["name"])]
        group["us_total"] += row["us"]
        group["launches"] += row["count"]
    for group in groups.values():
        group["us_per_token"] = group["us_total"] / tokens
        group["us_per_step"] = group["us_total"] / steps
        group["launches_per_step"] = group["launches"] / steps
    return groups


def _profiled_busy(long: dict) -> float | None:
    """GPU-busy share of the long profile's own span (the profiler's overhead included)."""
    span = long.get("span_us") or 0
    return 100 * long["busy_us"] / span if span else None


def wall_per_step(wall: dict) -> dict | None:
    """Decode wall time per token and per step, without the profiler: the median long run's
    wall time beyond the median short run's, over the extra tokens and steps."""
    short, long = wall.get("short"), wall.get("long")
    if not (short and long and short.get("wall_s") and long.get("wall_s")):
        return None
    extra_s = statistics.median(long["wall_s"]) - statistics.median(short["wall_s"])
    tokens, steps = long["tokens"] - short["tokens"], long["steps"] - short["steps"]
    if tokens <= 0 or steps <= 0:
        return None
    return {"us_per_token": 1e6 * extra_s / tokens, "us_per_step": 1e6 * extra_s / steps}


def engine_tpot_us(wall: dict) -> float | None:
    """The engine's own time per output token of the long replies (vLLM's request metrics,
    what bench.py reports as decode tok/s), as a cross-check of the wall difference."""
    tpots = [t for t in (wall.get("long") or {}).get("tpot_s") or [] if t]
    return 1e6 * statistics.median(tpots) if tpots else None


def apply_floor(groups: dict, roofline: dict, kernel_map: KernelMap, busy_us_per_step: float) -> dict:
    """Each kernel group's floor = its byte groups' bytes / bandwidth; % of floor = floor /
    measured µs per step (a step reads the target's weights once, whatever its tokens); the
    step's share against the GPU's busy time per step."""
    bandwidth = roofline["bandwidth_bytes_s"]
    bytes_by_group = roofline["groups"]
    for name, group in groups.items():
        byte_groups = kernel_map.group(name).byte_groups
        present = [b for b in byte_groups if b in bytes_by_group]
        if not present:
            group["floor_us"] = group["pct_of_floor"] = None
            continue
        group["floor_bytes"] = sum(bytes_by_group[b] for b in present)
        group["floor_us"] = 1e6 * group["floor_bytes"] / bandwidth
        group["pct_of_floor"] = (100 * group["floor_us"] / group["us_per_step"]
                                 if group["us_per_step"] > 0 else None)
    mapped = {b for g in kernel_map.groups for b in g.byte_groups}
    step_floor_us = 1e6 * roofline["bytes_per_token"] / bandwidth
    return {"bandwidth_tb_s": bandwidth / 1e12, "bytes_per_step": roofline["bytes_per_token"],
            "step_floor_us": step_floor_us,
            "pct_of_floor_kernels": 100 * step_floor_us / busy_us_per_step,
            "unmatched_byte_groups": sorted(set(bytes_by_group) - mapped),
            "source": roofline.get("source")}


# ------------------------------------------------------------------------------------------
# Rendering

def render_markdown(profile: dict, analysis: dict) -> str:
    machine = profile.get("machine") or {}
    lines = [f"## {analysis['label']}: {profile.get('recipe')} on {machine.get('device')}, vLLM "
             f"{machine.get('vllm')}, torch {machine.get('torch')}",
             "",
             f"{profile.get('shape')} shapes, {profile.get('layers')} layers"
             f"{', dummy weights (' + str(profile.get('control')) + ' model)' if profile.get('dummy') else ''}"
             f", batch 1, greedy, prompt {profile.get('prompt_tokens') or '?'} tokens; decode = "
             f"{analysis['method']} ({profile['profiles']['long']['tokens']} and "
             f"{profile['profiles']['short']['tokens']} tokens): {analysis['tokens']} tokens in "
             f"{analysis['steps']} steps ({analysis['tokens_per_step']:.2f} tokens/step).",
             ""]
    if profile.get("date") or profile.get("command"):
        lines += [f"Recorded {profile.get('date') or '(no date)'} on {machine.get('device')} by "
                  f"`{profile.get('command') or '(no command)'}`.", ""]
    lines += [_totals_line(analysis), ""]
    floor = analysis.get("floor")
    lines += ["| kernel group | µs/step | µs/token | launches/step | floor µs | % of floor |",
              "|---|---|---|---|---|---|"]
    for name, g in analysis["groups"].items():
        lines.append(f"| {name}: {g['label']} | {g['us_per_step']:.1f} | {g['us_per_token']:.1f} | "
                     f"{g['launches_per_step']:.0f} | {_floor_cell(g, floor)} | "
                     f"{_pct(g.get('pct_of_floor'))} |")
    lines += ["", f"Kernel time in `other` (no group matched): {analysis['other_us_per_step']:.1f} "
                  f"µs/step" + (":" if analysis.get("other_kernels") else ".")]
    lines += [f"- {k['us_per_step']:.1f} µs, {k['launches_per_step']:.0f}x: `{_short_name(k['name'])}`"
              for k in analysis.get("other_kernels") or []]
    if floor:
        lines += ["", _floor_line(floor)]
    lines += ["", "Top kernels (µs/step):", ""]
    lines += [f"- {t['us_per_step']:.1f} µs, {t['launches_per_step']:.0f}x, {t['group']}: "
              f"`{_short_name(t['name'])}`" for t in analysis["top_kernels"]]
    return "\n".join(lines) + "\n"


def render_comparison(analyses: list[dict]) -> str:
    """The spec step's cost against the plain step's, per group: which work a spec step adds.
    Empty unless the list holds one plain and at least one spec step."""
    plain = next((a for a in analyses if not a.get("k")), None)
    specs = [a for a in analyses if a.get("k")]
    if not plain or not specs:
        return ""
    lines = []
    for spec in specs:
        wall = (f", {spec['wall_us_per_step'] / plain['wall_us_per_step']:.2f}x in wall time"
                if spec.get("wall_us_per_step") and plain.get("wall_us_per_step") else "")
        lines += [f"## {spec['label']} against the plain step",
                  "",
                  f"A spec step costs {spec['kernel_us_per_step'] / plain['kernel_us_per_step']:.2f}x "
                  f"the plain step in GPU kernel time{wall}.",
                  "",
                  "| kernel group | plain µs/step | spec µs/step | spec - plain |",
                  "|---|---|---|---|"]
        for name, group in spec["groups"].items():
            base = plain["groups"].get(name, {}).get("us_per_step", 0.0)
            change = round(group["us_per_step"] - base, 1) or 0.0  # never "-0.0"
            lines.append(f"| {name} | {base:.1f} | {group['us_per_step']:.1f} | {change:+.1f} |")
        lines.append("")
    return "\n".join(lines)


def _totals_line(a: dict) -> str:
    wall = (f"wall {a['wall_us_per_step'] / 1e3:.3f} ms/step, {a['wall_us_per_token'] / 1e3:.3f} "
            f"ms/token ({1e6 / a['wall_us_per_token']:.0f} tok/s) without the profiler"
            + (f" (engine TPOT {a['tpot_us'] / 1e3:.3f} ms)" if a.get("tpot_us") else "")
            + f"; GPU busy {a['busy_pct']:.0f}% of wall" if a.get("wall_us_per_step")
            else "wall time not measured")
    return (f"GPU kernels {a['kernel_us_per_step'] / 1e3:.3f} ms/step, "
            f"{a['kernel_us_per_token'] / 1e3:.3f} ms/token{_overlap(a)}; {wall}.")


def _overlap(a: dict) -> str:
    """Where kernels ran side by side on streams, the GPU's busy time apart from their sum."""
    busy = a.get("busy_us_per_step")
    if busy is None or a["kernel_us_per_step"] <= busy * OVERLAP_SHOWN:
        return ""
    return (f" (GPU busy {busy / 1e3:.3f} ms/step: kernels ran side by side on streams, their "
            f"sum is {a['kernel_us_per_step'] / busy:.2f}x the busy time)")


def _floor_line(floor: dict) -> str:
    wall = (f", {floor['pct_of_floor_wall']:.0f}% of it in wall time"
            if floor.get("pct_of_floor_wall") else "")
    unmatched = (f" Byte groups no kernel group counts: {', '.join(floor['unmatched_byte_groups'])}."
                 if floor["unmatched_byte_groups"] else "")
    return (f"Byte floor ({floor['source']}): {floor['bytes_per_step'] / 1e9:.2f} GB/step at "
            f"{floor['bandwidth_tb_s']:.2f} TB/s = {floor['step_floor_us']:.0f} µs/step; the GPU's busy "
            f"time reaches {floor['pct_of_floor_kernels']:.0f}% of it{wall}.{unmatched} The floor reads the "
            "target's weights once per step; a spec step's drafter is not in it.")


def _floor_cell(group: dict, floor: dict | None) -> str:
    """The group's floor and the byte groups it counts; "no floor" where the roofline counts
    no bytes of the group's (its work is overhead a byte budget does not count), "–" without
    a roofline."""
    if not floor:
        return "–"
    if group.get("floor_us") is None:
        return "no floor"
    return f"{group['floor_us']:.1f} ({', '.join(group['byte_groups'])})"


def _pct(value) -> str:
    return "–" if value is None else f"{value:.0f}%"


def _short_name(name: str, limit: int = 110) -> str:
    return name if len(name) <= limit else name[:limit] + "..."


def render_plot(entries: list[tuple[dict, dict]], path: Path) -> Path:
    """One horizontal bar chart per profile: µs per step by kernel group, the floor beside each
    group that has one. Raises ForgeError without matplotlib (it is no dependency of verify)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ForgeError("--plot needs matplotlib (python3 -m pip install matplotlib)") from exc
    # One x scale for every panel: the spec step's bars read against the plain step's.
    fig, axes = plt.subplots(1, len(entries), figsize=(7 * len(entries), 5), squeeze=False,
                             sharex=True)
    for axis, (_, analysis) in zip(axes[0], entries):
        names = list(analysis["groups"])[::-1]
        measured = [analysis["groups"][n]["us_per_step"] for n in names]
        floors = [analysis["groups"][n].get("floor_us") or 0 for n in names]
        ys = range(len(names))
        axis.barh([y + 0.2 for y in ys], measured, height=0.4, label="measured (GPU kernels)")
        if any(floors):
            axis.barh([y - 0.2 for y in ys], floors, height=0.4, label="byte floor")
        for y, name, value in zip(ys, names, measured):
            pct = analysis["groups"][name].get("pct_of_floor")
            if pct is not None:
                axis.text(value, y + 0.2, f" {pct:.0f}% of floor", va="center", fontsize=7)
        axis.set_yticks(list(ys), names, fontsize=8)
        axis.set_xlabel("µs per decode step")
        axis.set_title(f"{analysis['label']}: {analysis['kernel_us_per_step'] / 1e3:.2f} ms kernels"
                       + (f", {analysis['wall_us_per_step'] / 1e3:.2f} ms wall"
                          if analysis.get("wall_us_per_step") else ""), fontsize=9)
        axis.legend(fontsize=7)
    first = entries[0][0]
    machine = first.get("machine") or {}
    fig.suptitle(f"{first.get('recipe')} on {machine.get('device')}, vLLM {machine.get('vllm')}, "
                 f"{first.get('shape')} {first.get('layers')} layers"
                 f"{', dummy weights' if first.get('dummy') else ''}, batch 1", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
    return path
