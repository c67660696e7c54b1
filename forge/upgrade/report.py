"""An upgrade as data (`--json`, validated against forge/upgrade/schema.py) and as text: brief by
default (the verdict and what blocks it first, then one line per change grouped by kind, recipes
that share a reason on one line, at most WIDTH characters a line), every detail with --verbose."""
from __future__ import annotations

import re
from pathlib import Path

from forge import REPO_ROOT
from forge.patching.vocabulary import Kind
from forge.serving.vllm_args import RUNNER_MODULES
from forge.upgrade import patch_changes as pc
from forge.upgrade.compare import Upgrade
from forge.upgrade.kernels import STATE_WORDS

SCHEMA_VERSION = 1
WIDTH = 100
# The patch changes the text shows, in this order (the JSON holds every patch).
SHOWN = (pc.CONFLICT, pc.NOT_CARRIED, pc.RETIRES, pc.DROPS, pc.NEW, pc.CARRIED)
# The packages the brief report names among the requirement changes (--verbose: all of them).
KEY_PACKAGES = ("torch", "transformers", "flashinfer-python", "triton", "xgrammar")


def to_dict(u: Upgrade) -> dict:
    old_fn, new_fn = u.gemma4_attention
    return {
        "schema": SCHEMA_VERSION, "from": u.before, "to": u.after, "target": u.target.name,
        "downgrade": u.downgrade, "unchecked": u.unchecked, "verdict": u.verdict,
        "blocking": u.blocking,
        "patches": [c.to_dict() for c in u.patches],
        "dependencies": {"requirements": [c.to_dict() for c in u.requirements],
                         "constraints": [c.to_dict() for c in u.patches if c.kind == Kind.DEPENDENCY],
                         "drift": [d.to_dict() for d in u.drift],
                         "indexes": [c.to_dict() for c in u.indexes]},
        "defaults": {
            "runners": {"from": u.runners[0], "to": u.runners[1], "removed": u.removed_runners,
                        "recipes": u.runner_recipes()},
            "choices": [c.to_dict() for c in u.choices],
            "gemma4_attention": {"from": old_fn.to_dict(), "to": new_fn.to_dict(),
                                 "changed": old_fn.digest != new_fn.digest},
            "moe_backends": u.moe_backends,
            "effective": [c.to_dict() for c in u.effective],
        },
        "kernels": [b.to_dict() for b in u.kernels],
        "family_lines": [{**c.to_dict(), "family_file": _relative(c.family_file)}
                         for c in u.family_lines],
        "recipes": [c.to_dict() for c in u.recipes],
        "image": {"from": u.images[0].to_dict(), "to": u.images[1].to_dict()},
        "next": u.next,
    }


def _relative(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return path


def _head(u: Upgrade) -> str:
    way = "downgrade" if u.downgrade else "upgrade"
    return (f"{way} vLLM {u.before} -> {u.after} for {u.target.name} "
            f"(sm_{u.target.cuda_arch.replace('.', '')}, CUDA {u.target.cuda}): {u.verdict}")


# --- brief -------------------------------------------------------------------------------------

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
    lines = [_head(u)]
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
    return "\n".join(_fit(line) for line in lines)


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
        by_file.setdefault(_relative(family_file), []).append(what)
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
    return _packed(pieces) + [_index_line(c) for c in u.indexes] + \
        [d.brief(u.after) for d in u.drift]


def _index_line(change) -> str:
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


# --- verbose -----------------------------------------------------------------------------------

def render_verbose(u: Upgrade) -> str:
    lines = [_head(u)]
    lines += _section("blocking", u.blocking)
    lines += _section("patches", _patch_lines(u))
    lines += _section("dependencies", _dependency_lines(u))
    lines += _section("defaults", _default_lines(u))
    lines += _section(f"kernel builds for sm_{u.target.cuda_arch.replace('.', '')} "
                      "(CMakeLists.txt, CUDA " + u.target.cuda + ")", _kernel_lines(u))
    lines += _section("cited log lines (models/*.yaml) per release", _family_line_lines(u))
    for change in u.recipes:
        lines += _section(f"recipe {change.recipe}", _recipe_lines(change))
    lines += _section("image", [side.line() for side in u.images])
    lines += _section("next", u.next)
    return "\n".join(lines)


def _section(title: str, body: list[str]) -> list[str]:
    return [f"{title}:"] + [f"  {line}" for line in body or ["none"]]


def _patch_lines(u: Upgrade) -> list[str]:
    lines = []
    for change in sorted((c for c in u.patches if c.change in SHOWN),
                         key=lambda c: SHOWN.index(c.change)):
        upstream = f" [{change.upstream_text}]" if change.upstream_text else ""
        candidate = " (candidate: images leave it out)" if change.candidate else ""
        lines.append(f"{change.change:<9} {change.id}{candidate}: {change.before} -> "
                     f"{change.after}{upstream}: {change.detail}")
    unchanged = [c.id for c in u.patches if c.change not in SHOWN]
    if unchanged:
        lines.append(f"not applied on either: {', '.join(unchanged)}")
    return lines


def _dependency_lines(u: Upgrade) -> list[str]:
    lines = [c.line(u.before, u.after) for c in u.requirements]
    for c in u.patches:
        if c.kind == Kind.DEPENDENCY and c.before != c.after:
            lines.append(f"constraint {c.id}: {c.before} -> {c.after} [{c.upstream_text}]: "
                         f"{c.detail}")
    lines += [_index_line(c) for c in u.indexes]
    lines += [d.line(u.after) for d in u.drift]
    return lines


def _default_lines(u: Upgrade) -> list[str]:
    lines = [f"model runners: {', '.join(u.runners[0])} -> {', '.join(u.runners[1])}"]
    for runner in u.removed_runners:
        module = RUNNER_MODULES.get(runner, "?")
        lines.append(f"the {runner.upper()} runner is removed in {u.after} ({module} is gone); "
                     f"recipes on it: {', '.join(u.runner_recipes()) or 'none'}")
    for c in u.effective:
        recipes = f"; recipes: {', '.join(c.recipes)}" if c.recipes else ""
        pin = f"; to keep the old value: {c.pin}" if c.pin else ""
        detail = f" ({c.detail})" if c.detail else ""
        lines.append(f"{c.setting}: {c.before} -> {c.after} ({c.where}){detail}{recipes}{pin}")
    for choice in u.choices:
        if choice.removed or choice.added:
            lines.append(f"{choice.flag}: removed {', '.join(choice.removed) or 'none'}; added "
                         f"{', '.join(choice.added) or 'none'}")
    old_fn, new_fn = u.gemma4_attention
    if old_fn.digest != new_fn.digest:
        where = f"{new_fn.path}, {new_fn.name}" + (f" lines {new_fn.lines[0]}-{new_fn.lines[1]}"
                                                   if new_fn.lines else " (gone)")
        lines.append(f"Gemma 4's attention choice changed ({where}): GPU families it tests "
                     f"{old_fn.families or 'none'} -> {new_fn.families or 'none'}; a recipe "
                     "that pins serve.attention_backend keeps its backend")
    for change in u.moe_backends:
        if change["removed"] or change["added"]:
            lines.append(f"{change['weights']} MoE backends ({change['oracle']}): removed "
                         f"{', '.join(change['removed']) or 'none'}; added "
                         f"{', '.join(change['added']) or 'none'}")
    return lines


def _kernel_lines(u: Upgrade) -> list[str]:
    lines = []
    for b in u.kernels:
        if not b.changed and b.state_before == b.state_after:
            continue

        def side(request, built):
            return "not built" if request is None else \
                f'"{request.text}" (line {request.line}; built {";".join(built) or "for none"})'
        state = f"{STATE_WORDS[b.state_before]} -> {STATE_WORDS[b.state_after]}"
        lines.append(f"{b.family}: {b.variable} {side(b.before, b.built_before)} -> "
                     f"{side(b.after, b.built_after)}: {state}")
    return lines


def _family_line_lines(u: Upgrade) -> list[str]:
    lines = []
    for c in u.family_lines:
        found = "; ".join(f"{v}: {', '.join(where) or 'not in the source'}"
                          for v, where in c.found.items())
        lines.append(f"{_relative(c.family_file)} drafter.shares.{c.what} ({c.check}) "
                     f"{c.line!r}: {found}")
    return lines


def _recipe_lines(change) -> list[str]:
    lines = [f"refused: {line}" for line in change.refused]
    lines += [f"renamed: {line}" for line in change.renamed]
    lines += [f"kernels: {line}" for line in change.kernels]
    lines += [f"known failure: {line}" for line in change.known_failures]
    lines += list(change.notes)
    lines.append("evidence: " + "; ".join(c.line() for c in change.evidence))
    lines += [f"evidence: cited record {i} has no result.json naming a vLLM release"
              for i in change.missing_evidence]
    return lines
