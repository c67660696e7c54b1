"""`build.py upgrade`'s default text: brief. The verdict and what blocks it first, then one line
per change grouped by kind (patches, kernels, defaults, verify, dependencies, recipes, image),
recipes that share a reason on one line, at most WIDTH characters a line; `--verbose`
(forge.upgrade.report.render_verbose) and `--json` keep every detail."""
from __future__ import annotations

import re
from pathlib import Path

from forge import REPO_ROOT
from forge.serving.vllm_args import RUNNER_MODULES
from forge.untrusted import visible
from forge.upgrade import patch_changes as pc
from forge.upgrade.compare import Upgrade
from forge.upgrade.kernels import STATE_WORDS

WIDTH = 100
# The patch changes shown, in this order (the JSON holds every patch).
SHOWN = (pc.CONFLICT, pc.NOT_CARRIED, pc.RETIRES, pc.DROPS, pc.NEW, pc.CARRIED)
# The packages named among the requirement changes (--verbose: all of them).
KEY_PACKAGES = ("torch", "transformers", "flashinfer-python", "triton", "xgrammar")


def relative(path: str) -> str:
    """A family file as the repository names it (models/gemma4.yaml), else the path given."""
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return path


def head_line(u: Upgrade) -> str:
    """The first line of either text: the move, the target and the verdict."""
    way = "downgrade" if u.downgrade else "upgrade"
    return (f"{way} vLLM {u.before} -> {u.after} for {u.target.name} "
            f"(sm_{u.target.cuda_arch.replace('.', '')}, CUDA {u.target.cuda}): {u.verdict}")



def _fit(line: str, width: int = WIDTH) -> str:
    """One line of at most `width` characters (the rest is in --verbose and --json)."""
    return line if len(line) <= width else line[:width - 3].rstrip() + "..."


BODY = WIDTH - 2          # a section's lines are indented by two


def _listing(head: str, names: list[str]) -> list[str]:
    """`head` then the names, wrapped to the body width, further lines indented under it."""
    lines, current = [], head
    for i, name in enumerate(names):
        piece = name + ("," if i < len(names) - 1 else "")
        if len(current) + 1 + len(piece) > BODY:
            lines.append(current)
            current = f"  {piece}"
        else:
            current = f"{current} {piece}"
    lines.append(current)
    return lines


def _packed(pieces: list[str], separator: str = "; ") -> list[str]:
    """The pieces joined on as few lines of the body width as they fit."""
    lines: list[str] = []
    for piece in pieces:
        if lines and len(lines[-1]) + len(separator) + len(piece) <= BODY:
            lines[-1] += separator + piece
        else:
            lines.append(piece)
    return lines


def _recipes_text(names, u: Upgrade, room: int = 40) -> str:
    """The recipes by name, or `all N recipes` (every recipe the new release serves and starts)
    / `N recipes` where the names take more room."""
    served = [c.recipe for c in u.recipes if c.served_to and not c.refused]
    if len(names) > 1 and sorted(names) == sorted(served):
        return f"all {len(served)} recipes"
    text = ", ".join(names)
    return text if len(text) <= room else f"{len(names)} recipes"


def render(u: Upgrade) -> str:
    lines = [head_line(u)]
    candidates = any(c.candidate and c.change in SHOWN for c in u.patches)
    sections = [("blocking", _brief_blocking(u)),
                ("patches" + (" (*: a candidate, which images leave out)" if candidates else ""),
                 _brief_patches(u)),
                (f"kernels on sm_{u.target.cuda_arch.replace('.', '')} (as vLLM's CMake builds "
                 f"the {u.target.platform} image)", _brief_kernels(u)),
                ("defaults the recipes leave to vLLM", _brief_defaults(u)),
                ("verify", _brief_verify(u)), ("dependencies", _brief_dependencies(u)),
                ("recipes", _brief_recipes(u)), ("image", _brief_next(u))]
    for title, body in sections:
        if body:
            lines.append(f"{title}:")
            lines += [f"  {line}" for line in body]
    # visible before _fit: a line quotes the data files, the releases' sources and the records,
    # and the cut must count the escapes it shows
    return "\n".join(_fit(visible(line)) for line in lines)


def _brief_blocking(u: Upgrade) -> list[str]:
    lines = []
    for c in u.patches:
        command = f"`{pc.REFRESH_COMMAND.format(id=c.id, version=u.after)}`"
        if c.change == pc.CONFLICT:
            lines += [f"patch {c.id} conflicts on {u.after}; refresh:", f"  {command}"]
        elif c.change == pc.NOT_CARRIED:
            lines += [f"patch {c.id}: needed on {u.after} (the code it fixes is there), not "
                      "carried; refresh:", f"  {command}"]
    if u.unchecked:
        lines.append(f"vLLM {u.after} is newer than the series' checked_through: run "
                     "`build.py upstream-watch --write`")
    runner_recipes = set(u.runner_recipes())
    for runner in u.removed_runners if runner_recipes else ():
        module = RUNNER_MODULES.get(runner, "?").rsplit("/", 1)[-1]
        lines += _listing(f"no {runner.upper()} runner in {u.after} ({module} gone) for",
                          sorted(runner_recipes))
    grouped: dict[str, list[str]] = {}
    for change in u.recipes:
        for refusal in change.refused:
            if change.recipe in runner_recipes and "runner" in refusal:
                continue
            reason = refusal.split(": ", 1)[1] if refusal.startswith("recipes/") else refusal
            grouped.setdefault(reason, []).append(change.recipe)
    lines += [f"{_recipes_text(names, u)}: {reason}" for reason, names in grouped.items()]
    if u.images[1].problem:
        lines.append(f"the {u.after} image has no plan: {u.images[1].problem}")
    return lines


def _brief_patches(u: Upgrade) -> list[str]:
    by_change: dict[str, list[str]] = {}
    for c in u.patches:
        if c.change in SHOWN and c.change not in pc.BLOCKING:
            fixed = c.upstream.get("fixed_in")
            by_change.setdefault(c.change, []).append(
                c.id + ("*" if c.candidate else "") +
                (f" (in {fixed})" if fixed and c.change == pc.RETIRES else ""))
    words = {pc.RETIRES: "retire (upstream has them):", pc.DROPS: "no longer needed:",
             pc.NEW: "new:", pc.CARRIED: "still carried:"}
    return [line for change in (pc.RETIRES, pc.DROPS, pc.NEW, pc.CARRIED)
            if by_change.get(change) for line in _listing(words[change], by_change[change])]


def _brief_kernels(u: Upgrade) -> list[str]:
    states: dict[str, tuple[str, str]] = {}
    for b in u.kernels:
        if b.state_before != b.state_after:
            states.setdefault(b.family, (b.state_before, b.state_after))
    users: dict[str, list[str]] = {}
    for change in u.recipes:
        for line in change.kernels:
            users.setdefault(line.split(": ", 1)[1].split(" (", 1)[0], []).append(change.recipe)
    grouped: dict[tuple[str, str, tuple[str, ...]], list[str]] = {}
    for family, (before, after) in states.items():
        grouped.setdefault((before, after, tuple(users.get(family, ()))), []).append(family)
    lines = []
    for (before, after, names), families in grouped.items():
        head = f"{', '.join(families)}: {STATE_WORDS[before]} -> {STATE_WORDS[after]}"
        lines += _listing(f"{head}; recipes on it:", list(names)) if names else \
            [f"{head}; no recipe here on it"]
    # The families the recipes rely on that keep their state: said once, so that no change is
    # read as no code.
    kept: dict[str, str] = {}
    for change in u.recipes:
        for state in change.kernel_states:
            if state["from"] == state["to"]:
                kept.setdefault(state["family"], STATE_WORDS[state["to"]])
    if kept:
        lines.append("unchanged: " + ", ".join(f"{f} {s}" for f, s in kept.items()) +
                     " (the families the recipes rely on)")
    return lines


def _brief_defaults(u: Upgrade) -> list[str]:
    lines = []
    for c in u.effective:
        main = f"{c.setting} ({c.where}): {c.before} -> {c.after}"
        # A linear-kernel order is per weight format, which the setting names.
        named = c.recipes and "linear order" not in c.setting
        tail = ([f"[{_recipes_text(c.recipes, u, room=60)}]"] if named else []) + \
            ([f"pin: {c.pin}"] if c.pin else [])
        together = "; ".join([main, *tail]) if tail else main
        if len(together) <= BODY:
            lines.append(together)
        else:
            lines += [main, "  " + "; ".join(tail)] if tail else [main]
    added = [f"{c.flag} +{len(c.added)}" + (f" -{len(c.removed)}" if c.removed else "")
             for c in u.choices if c.added or c.removed]
    added += [f"{m['weights']} MoE +{len(m['added'])}" + (f" -{len(m['removed'])}"
                                                         if m["removed"] else "")
              for m in u.moe_backends if m["added"] or m["removed"]]
    if added:
        lines.append("choices added(+)/removed(-): " + ", ".join(added))
    old_fn, new_fn = u.gemma4_attention
    if old_fn.digest != new_fn.digest and not u.attention_pinned:
        lines.append(f"Gemma 4's attention choice changed: GPU families tested "
                     f"{old_fn.families or 'none'} -> {new_fn.families or 'none'} "
                     "(a pinned backend stays)")
    return lines


def _brief_verify(u: Upgrade) -> list[str]:
    by_file: dict[str, list[str]] = {}
    was: set[str] = set()
    for (family_file, what), checks in u.unseen_lines().items():
        by_file.setdefault(relative(family_file), []).append(what)
        was.update(w.split(":", 1)[0].rsplit("/", 1)[-1] for c in checks
                   for w in c.found.get(u.before, []))
    lines = [f"{name} drafter.shares {', '.join(whats)}: no cited log line in {u.after}'s source"
             for name, whats in by_file.items()]
    if lines:
        lines.append("  so verify's 'draft shares target' checks read nothing" +
                     (f" ({u.before}: {', '.join(sorted(was))})" if was else ""))
    return lines


def _brief_dependencies(u: Upgrade) -> list[str]:
    key = [c for c in u.requirements if c.package in KEY_PACKAGES]
    pieces = [f"{c.package} {c.before or 'not required'} -> {c.after or 'not required'}"
              for c in key]
    rest = len(u.requirements) - len(key)
    if rest:
        pieces.append(f"{rest} more (--verbose)")
    return _packed(pieces) + [index_line(c) for c in u.indexes] + \
        [d.brief(u.after) for d in u.drift]


def index_line(change) -> str:
    return (f"dropped {change.option} ({change.before})" if change.after is None
            else f"added {change.option} ({change.after})")


def _brief_recipes(u: Upgrade) -> list[str]:
    grouped: dict[str, list[str]] = {}
    for change in u.recipes:
        texts = [line.replace(f"vLLM {u.after} ", f"{u.after} ")
                 .replace(" (the recipe's spelling still parses)", "") for line in change.renamed]
        texts += [f"known failure: {_failure(line)}" for line in change.known_failures]
        texts += [n for n in change.notes if "has no VLLM_USE_V2_MODEL_RUNNER" not in n]
        for text in texts:
            grouped.setdefault(text, []).append(change.recipe)
    lines = [f"{_recipes_text(names, u, room=30)}: {text}" for text, names in grouped.items()]
    measured = [[c.recipe for c in u.recipes if c.evidence[side].state == "measured"]
                for side in (0, 1)]
    lines.append("evidence: " + "; ".join(
        f"{v}: {_recipes_text(m, u) if m else 'none measured'}"
        for v, m in zip((u.before, u.after), measured)))
    return lines


def _failure(line: str) -> str:
    """A known failure without the model id and the why (`--verbose` keeps them): the weights and
    parallelism, and the upstream issue."""
    found = re.match(r"^\S+ (.*?): .*\(([^()]*(?:\([^()]*\))?[^()]*)\)$", line)
    return f"{found.group(1)} ({found.group(2)})" if found else line


def _brief_next(u: Upgrade) -> list[str]:
    side = u.images[1]
    if side.problem:
        return [f"{side.moving_tag}: no plan ({side.problem})", "(--verbose: every detail)"]
    base = f"{side.base} {'locked' if side.locked else 'not locked'}"
    smokes = sum(1 for c in u.next if c.startswith("docker run "))
    first = next((c for c in u.next if c.startswith("python3 build.py lock")), None)
    return [f"{side.moving_tag} on {base}",
            f"next: {first + ', then ' if first else ''}build, {smokes} smoke run(s), push, publish "
            "(--verbose: the commands)"]
