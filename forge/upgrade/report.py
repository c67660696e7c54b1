"""An upgrade as data (`--json`, validated against forge/upgrade/schema.py) and as text with every
detail (`--verbose`); the default text is forge.upgrade.brief's."""
from __future__ import annotations

from forge.patching.vocabulary import Kind
from forge.serving.vllm_args import RUNNER_MODULES
from forge.untrusted import visible
from forge.upgrade.brief import SHOWN, head_line, index_line, relative
from forge.upgrade.compare import Upgrade
from forge.upgrade.kernels import STATE_WORDS

SCHEMA_VERSION = 1


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
        "family_lines": [{**c.to_dict(), "family_file": relative(c.family_file)}
                         for c in u.family_lines],
        "recipes": [c.to_dict() for c in u.recipes],
        "image": {"from": u.images[0].to_dict(), "to": u.images[1].to_dict()},
        "next": u.next,
    }


def render_verbose(u: Upgrade) -> str:
    lines = [head_line(u)]
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
    # a line quotes the data files, the releases' sources and the records: shown, not acted on
    return "\n".join(visible(line) for line in lines)


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
    lines += [index_line(c) for c in u.indexes]
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
        lines.append(f"{relative(c.family_file)} drafter.shares.{c.what} ({c.check}) "
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
