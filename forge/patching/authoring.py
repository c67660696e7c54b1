"""Making and refreshing source patches: the manifest entries `new-patch` / `refresh-patch` write
from a work tree's diff, and the status of those entries on every release the series covers.

Nothing here writes: each function returns the files to write (diffs first, the manifest last)
for forge.patching.work_tree.finish. A change that would leave a covered release in conflict is
refused (ConflictError, exit 3) before anything is written.
"""
from __future__ import annotations

import copy
import hashlib
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from forge import files
from forge.errors import ConflictError, ForgeError
from forge.patching import diff_writer, diffs, headers
from forge.patching.series import Patch, PatchFile, Series, load_series, render_series
from forge.patching.status import PatchStatus, status_of
from forge.patching.vocabulary import Kind, Status
from forge.upstream import releases
from forge.versions import Release

UPPER_BOUNDS = ("<", "<=")
EXCLUSIONS = ("!=",)


def diff_path(patch_id: str) -> str:
    """Where a new source patch's diff goes, relative to the manifest's directory."""
    return f"source/{patch_id}.diff"


@dataclass
class Outcome:
    writes: dict[Path, bytes]                       # diffs, then the manifest
    statuses: dict[str, dict[str, PatchStatus]]     # patch id -> release -> status
    how: str                                        # one sentence: what the finish did


def check_release(series: Series, vllm: Release | str) -> None:
    """`--vllm` names a published release inside what the series covers."""
    version = Release(vllm).version
    if version < Version(series.checked_from):
        raise ForgeError(f"--vllm: {vllm} is before the series' checked_from {series.checked_from}")
    if version > Version(series.checked_through):
        raise ForgeError(f"--vllm: {vllm} is newer than the series' checked_through "
                         f"{series.checked_through}; run `python3 build.py upstream-watch --write` "
                         "first")
    try:
        releases.sdist_info(vllm)
    except ForgeError as exc:
        raise ForgeError(f"--vllm: {exc}") from None


def covered_releases(series: Series) -> list[Version]:
    through = Version(series.checked_through)
    return [v for v in releases.list_releases(minimum=series.checked_from) if v <= through]


def new_entry(series: Series, tree: Path, vllm: Release | str, fields: dict) -> Outcome:
    """Append a source patch (`fields`: title, why, releases, upstream, fixes_marker) holding the
    diff from release `vllm` to the edited `tree`."""
    body = diff_writer.tree_diff(releases.release_tree(vllm), tree)
    patch, content = _source_patch(series, fields, body)
    if not patch.in_range(Release(vllm).version):
        raise ForgeError(f"--releases: {patch.releases} leaves out vLLM {vllm}, the release the "
                         "diff was made on")
    _check_marker(patch, vllm)
    patches = [*series.patches, patch]
    table = _checked_statuses([patch], patches, series)
    writes = {patch.files[0].absolute: content, **_manifest(series, patches)}
    return Outcome(writes, table, f"added {patch.id}")


def refreshed_entry(series: Series, tree: Path, vllm: Release | str, patch_id: str,
                    releases_spec: str | None) -> Outcome:
    """Replace `patch_id`'s diff by the diff from release `vllm` to the edited `tree`, in place
    where the new diff still serves every release the old one did; else keep the old entry for
    the releases before `vllm` and add a variant `<id>-<major>.<minor>` from `vllm` on (the
    series' convention, as structured-draft-window and structured-draft-window-0.24)."""
    old = series.get(patch_id)
    version = Release(vllm).version
    if _already_exact(old, releases.release_tree(vllm), tree):
        return Outcome({}, {}, f"{patch_id}'s diff already makes exactly these changes to vLLM "
                               f"{vllm}; nothing to write")
    body = diff_writer.tree_diff(releases.release_tree(vllm), tree)
    fields = _fields_of(old, releases=releases_spec or old.releases)
    in_place, content = _source_patch(series, fields, body, old.files[0].path)
    covered = covered_releases(series)
    before = _statuses(old, covered)
    after = _statuses(in_place, covered)
    served = [v for v, s in before.items() if s.status == Status.APPLIES] + [str(version)]
    if all(after[v].status == Status.APPLIES for v in served):
        patches = [in_place if p.id == patch_id else p for p in series.patches]
        table = _checked_statuses([in_place], patches, series)
        return Outcome({in_place.files[0].absolute: content, **_manifest(series, patches)},
                       table, f"refreshed {patch_id} in place")
    return _with_variant(series, old, version, body, releases_spec)


def _already_exact(patch: Patch, pristine: Path, tree: Path) -> bool:
    """The edited tree is what the existing diff makes of the release: a refresh would only
    reshape its hunks (and could lose the context that keeps its reverse fitting later)."""
    try:
        planned = diffs.plan_diff(pristine, patch.diffs)
    except diffs.HunkError:
        return False
    changed = diff_writer.changed_files(pristine, tree)
    return set(changed) == set(planned) and all(
        diff_writer.read_or_none(tree / rel) == planned[rel] for rel in changed)


def _with_variant(series: Series, old: Patch, version: Version, body: bytes,
                  releases_spec: str | None) -> Outcome:
    earlier, earlier_content = _narrowed(series, old, version)
    variant, content = _variant(series, old, version, body, releases_spec)
    patches = []
    for p in series.patches:
        patches += [earlier, variant] if p.id == old.id else [p]
    table = _checked_statuses([earlier, variant], patches, series)
    writes = {earlier.files[0].absolute: earlier_content, variant.files[0].absolute: content,
              **_manifest(series, patches)}
    return Outcome(writes, table, f"kept {old.id} for releases {earlier.releases} and added "
                                  f"{variant.id} for {variant.releases}")


def _narrowed(series: Series, old: Patch, version: Version) -> tuple[Patch, bytes]:
    """The old entry for the releases before `version` (its diff as it was, its header anew)."""
    earlier = copy.copy(old)
    earlier.releases = _before(old.releases, version)
    if earlier.retired_in and Version(earlier.retired_in) >= version:
        earlier.retired_in = None       # from `version` on the variant carries it, retired_in too
    content = headers.with_header(earlier, files.read_bytes(old.files[0].absolute, files.SOURCE))
    earlier.files = [_file(old.files[0].path, content, series)]
    return earlier, content


def _variant(series: Series, old: Patch, version: Version, body: bytes,
             releases_spec: str | None) -> tuple[Patch, bytes]:
    """`<id>-<major>.<minor>`: the new diff from `version` on, with the old entry's upstream."""
    variant_id = f"{old.id}-{version.major}.{version.minor}"
    if any(p.id == variant_id for p in series.patches):
        raise ForgeError(f"refresh-patch ID: {old.id}'s new diff does not serve the releases before "
                         f"{version}, and the variant id {variant_id} is taken; refresh {variant_id}")
    why = (f"The same change as {old.id}, refreshed for vLLM {version}'s code, where {old.id}'s "
           f"diff does not fit (`build.py refresh-patch`); {old.id} says what breaks without it.")
    fields = _fields_of(old, id=variant_id, title=f"{old.title} (vLLM {version.major}."
                        f"{version.minor} on)", releases=releases_spec or _from(old.releases, version),
                        why=textwrap.fill(why, width=96) + "\n")
    return _source_patch(series, fields, body)


def _before(spec: str, version: Version) -> str:
    """`spec` ending before `version` (its upper bounds at or past `version` dropped)."""
    kept = [s for s in SpecifierSet(spec)
            if not (s.operator in UPPER_BOUNDS and Version(s.version) >= version)]
    return ",".join([*sorted(str(s) for s in kept), f"<{version}"])


def _from(spec: str, version: Version) -> str:
    """`spec` starting at `version` (its lower bounds replaced, its upper bounds kept)."""
    kept = sorted(str(s) for s in SpecifierSet(spec) if s.operator in UPPER_BOUNDS + EXCLUSIONS)
    return ",".join([f">={version}", *kept])


def _fields_of(patch: Patch, **changes) -> dict:
    fields = {"id": patch.id, "title": patch.title, "why": patch.why, "releases": patch.releases,
              "upstream": patch.upstream, "fixes_marker": patch.fixes_marker,
              "retired_in": patch.retired_in, "candidate": patch.candidate}
    return {**fields, **changes}


def _source_patch(series: Series, fields: dict, body: bytes,
                  path: str | None = None) -> tuple[Patch, bytes]:
    """The entry and its diff file's content (header generated from the entry)."""
    patch = Patch(kind=Kind.SOURCE, files=[], **fields)
    content = headers.with_header(patch, body)
    patch.files = [_file(path or diff_path(patch.id), content, series)]
    patch.diffs = diffs.parse_diff(content, patch.files[0].path)
    # The manifest lists what the diff changes (series load refuses a diff that strays).
    patch.touches = sorted(set(diffs.target_paths(patch.diffs)))
    return patch, content


def _file(path: str, content: bytes, series: Series) -> PatchFile:
    return PatchFile(path, hashlib.sha256(content).hexdigest(), series.path.parent / path)


def _check_marker(patch: Patch, vllm: str) -> None:
    if not patch.fixes_marker:
        return
    tree = releases.release_tree(vllm)
    targets = [d.old_path for d in patch.diffs if d.old_path]
    if not any(patch.fixes_marker in files.read_text(tree / rel, files.SOURCE, errors="replace") for rel in targets):
        raise ForgeError(f"--fixes-marker: {patch.fixes_marker!r} is in none of the files the diff "
                         f"changes in vLLM {vllm} ({', '.join(targets) or 'it only adds files'})")


def _statuses(patch: Patch, versions: list[Version]) -> dict[str, PatchStatus]:
    return {str(v): status_of(patch, releases.release_tree(str(v)), v) for v in versions}


def _checked_statuses(changed: list[Patch], patches: list[Patch], series: Series
                      ) -> dict[str, dict[str, PatchStatus]]:
    """The `changed` entries' status on every covered release; a ConflictError where one would
    conflict, or would not stack on the patches before it in the series (`patches`)."""
    covered = covered_releases(series)
    table = {p.id: _statuses(p, covered) for p in changed}
    for patch_id, by_release in table.items():
        for version, status in by_release.items():
            if status.status == Status.CONFLICT:
                raise ConflictError(f"vLLM {version}: {patch_id} would conflict ({status.detail}); "
                                    "narrow it with --releases; nothing written")
    for release in covered:
        if any(table[p.id][str(release)].status == Status.APPLIES for p in changed):
            _check_stacking(patches, release)
    return table


def _check_stacking(patches: list[Patch], version: Version) -> None:
    """`build.py apply` applies the source patches that apply to a release one on top of the
    other, in the series' order: each must still fit after the ones before it."""
    tree = releases.release_tree(str(version))
    contents: dict[str, bytes | None] = {}
    applied: list[str] = []
    for patch in patches:
        if patch.kind != Kind.SOURCE or status_of(patch, tree, version).status != Status.APPLIES:
            continue
        try:
            contents.update(diffs.plan_diff(tree, patch.diffs, contents=contents))
        except diffs.HunkError as exc:
            raise ConflictError(f"vLLM {version}: {patch.id} does not fit once {', '.join(applied)} "
                                f"applied ({exc}); the series applies its patches in order, so make "
                                "this change in the patch it overlaps (refresh-patch); nothing "
                                "written") from None
        applied.append(patch.id)


def _manifest(series: Series, patches: list[Patch]) -> dict[Path, bytes]:
    changed = copy.copy(series)
    changed.patches = patches
    return {series.path: render_series(changed).encode()}


def validate(writes: dict[Path, bytes], series: Series, scratch: Path) -> None:
    """Load the manifest as `writes` would leave it, from a copy of its directory in `scratch`:
    a finish never writes a series that does not load."""
    base = series.path.parent
    copy_dir = scratch / "check"
    shutil.rmtree(copy_dir, ignore_errors=True)
    shutil.copytree(base, copy_dir)
    for path, content in writes.items():
        (copy_dir / path.relative_to(base)).parent.mkdir(parents=True, exist_ok=True)
        (copy_dir / path.relative_to(base)).write_bytes(content)
    try:
        load_series(copy_dir / series.path.name, check_index=False)
    finally:
        shutil.rmtree(copy_dir, ignore_errors=True)
