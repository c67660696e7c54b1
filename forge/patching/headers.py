"""The provenance header of each source diff, generated from its patches/series.yaml entry.

The manifest is the one home of a patch's provenance (title, why, upstream issue and PR, the
release it was fixed in, its releases); the diff's header is written from it, DEP-3 style, by
`build.py new-patch` / `refresh-patch` / `patch-headers`, and `patch-headers --check` (the tests
run it) fails when a header differs from what the manifest says. Nobody edits a header by hand.

The diff engine ignores everything before the first `--- ` line, so the header never changes
what a patch does; it does change the file's sha256, which the manifest records.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from forge.files import SOURCE, read_bytes
from forge.patching.series import Patch, PatchFile, Series, render_series
from forge.patching.vocabulary import Kind

COMMAND = "python3 build.py patch-headers"
VLLM_ISSUES = "https://github.com/vllm-project/vllm/issues/"
VLLM_PULLS = "https://github.com/vllm-project/vllm/pull/"


def render_header(patch: Patch) -> bytes:
    """The header lines of `patch`'s diffs: DEP-3 fields as `# ` comments."""
    fields = [f"vllm-forge patch: {patch.id}", f"Description: {patch.title}"]
    # DEP-3 long description: continuation lines start with a space; an empty line is " .".
    fields += [f" {line}" if line.strip() else " ." for line in patch.why.strip().splitlines()]
    fields += _upstream_fields(patch.upstream or {})
    # Not retired_in: the upstream watch sets it through the manifest alone, and it is a status
    # fact about later releases rather than where the change came from.
    fields.append(f"Releases: {patch.releases}")
    fields.append(f"Generated-By: {COMMAND} from patches/series.yaml (edit the manifest, not this)")
    return "".join(f"# {line}\n" for line in fields).encode()


def _upstream_fields(upstream: dict) -> list[str]:
    fields = []
    if upstream.get("issue"):
        fields.append(f"Bug: {VLLM_ISSUES}{upstream['issue']}")
    pr, fixed_in = upstream.get("pr"), upstream.get("fixed_in")
    if fixed_in:
        fields.append(f"Applied-Upstream: {fixed_in}" + (f", {VLLM_PULLS}{pr}" if pr else ""))
    elif pr:
        fields.append(f"Forwarded: {VLLM_PULLS}{pr}")
    if upstream.get("introduced_by"):
        fields.append(f"Introduced-By: {VLLM_PULLS}{upstream['introduced_by']}")
    return fields


def body_of(diff: bytes) -> bytes:
    """The diff without its header: from the first `--- ` line on."""
    if diff.startswith(b"--- "):
        return diff
    start = diff.find(b"\n--- ")
    return diff[start + 1:] if start >= 0 else diff


def with_header(patch: Patch, diff: bytes) -> bytes:
    return render_header(patch) + body_of(diff)


def stale_files(series: Series) -> list[tuple[Patch, PatchFile, bytes]]:
    """Each source diff whose header is not the one its manifest entry generates, with the
    content it should have."""
    stale = []
    for patch in series.patches:
        if patch.kind != Kind.SOURCE:
            continue
        for f in patch.files:
            current = read_bytes(f.absolute, SOURCE)
            wanted = with_header(patch, current)
            if wanted != current:
                stale.append((patch, f, wanted))
    return stale


def header_writes(series: Series) -> dict[Path, bytes]:
    """What regenerating every stale header writes: the diffs, then the manifest with their new
    sha256 (updated in `series` too). Empty when every header is current."""
    writes: dict[Path, bytes] = {}
    for patch, stale, content in stale_files(series):
        digest = hashlib.sha256(content).hexdigest()
        patch.files = [PatchFile(f.path, digest, f.absolute) if f is stale else f for f in patch.files]
        writes[stale.absolute] = content
    if writes:
        writes[series.path] = render_series(series).encode()
    return writes
