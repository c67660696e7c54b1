"""patches/series.yaml: the patch manifest, validated on load and written back without losing
its comment block.

Load: every field is checked (forge.schema), every patch file's sha256 is verified, every
source diff is parsed. Save (`save_series`): the comment block at the top of the file is kept
verbatim and the data below it is written in one canonical layout; the committed series.yaml
is in that layout, so load + save reproduces it byte for byte. Comments therefore belong in the
top block; per-patch prose belongs in the `why` field.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import yaml
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from forge import REPO_ROOT
from forge.errors import FileError, ForgeError
from forge.files import DATA_YAML, SOURCE, read_bytes, read_text, write_text_atomically
from forge.patching import diffs
from forge.patching.moe_config_names import parse_config_name
from forge.patching.vocabulary import Kind
from forge.schema import Field, ListOf, load_yaml, pep440_specifier, pep440_version, sha256_hex, validate

PATCHES_DIR = REPO_ROOT / "patches"
DEFAULT_SERIES = PATCHES_DIR / "series.yaml"
CANDIDATE_FLAG = "--with-candidate"
KINDS = tuple(kind.value for kind in Kind)


# An id names files (patches/source/<id>.diff, build/patch-work/<id>): well under NAME_MAX.
MAX_PATCH_ID = 100


def patch_id_problem(value: str) -> str | None:
    ok = value and all(c.isalnum() or c in "-._" for c in value) and value[0].isalnum()
    if not ok:
        return f"must be letters, digits, '-', '.', '_' (got {value!r})"
    if len(value) > MAX_PATCH_ID:
        return f"must be at most {MAX_PATCH_ID} characters (got {len(value)})"
    return None


def _relative_path(value: str) -> str | None:
    if value.startswith("/") or ".." in Path(value).parts:
        return f"must be a path inside patches/ (got {value!r})"
    return None


def _vllm_paths(values: list) -> str | None:
    """`touches`: files of the installed vllm/ package tree, as a diff names them after a/ b/."""
    for value in values:
        path = PurePosixPath(value)
        if path.is_absolute() or ".." in path.parts or path.parts[:1] != ("vllm",) \
                or len(path.parts) < 2 or path.as_posix() != value:
            return f"must name files inside vllm/ like vllm/v1/spec_decode/gemma4.py (got {value!r})"
    if len(set(values)) != len(values):
        return "names a file twice"
    return None


# PEP 508 names (packaging >= 24 has canonicalize_name(validate=True); images may carry 23).
# fullmatch: `$` would take a name with a trailing newline.
PROJECT_NAME = re.compile(r"[A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9]", re.IGNORECASE)


def _project_name(value: str) -> str | None:
    return None if PROJECT_NAME.fullmatch(value) else f"not a valid Python project name: {value!r}"


FILE_SCHEMA = {
    "path": Field(str, check=_relative_path),
    "sha256": Field(str, check=sha256_hex),
}
UPSTREAM_SCHEMA = {
    "issue": Field(int, required=False),
    "pr": Field(int, required=False),
    "fixed_in": Field(str, required=False, check=pep440_version),
    "introduced_by": Field(int, required=False),
}
PATCH_SCHEMA = {
    "id": Field(str, check=patch_id_problem),
    "title": Field(str),
    "kind": Field(str, choices=KINDS),
    "files": Field(ListOf(FILE_SCHEMA, min_items=1), required=False),
    # source: every vLLM file its diffs change; a diff that changes any other file is refused
    "touches": Field(ListOf(str, min_items=1), required=False, check=_vllm_paths),
    "releases": Field(str, check=pep440_specifier),
    "package": Field(str, required=False, check=_project_name),
    "specifier": Field(str, required=False, check=pep440_specifier),
    "why": Field(str),
    "upstream": Field(UPSTREAM_SCHEMA, required=False),
    "fixes_marker": Field(str, required=False),
    "retired_in": Field(str, required=False, check=pep440_version),
    # a speed patch not yet shown to win end to end: status computed and shown, never applied
    # unless asked (`build.py apply --with-candidate ID`)
    "candidate": Field(bool, required=False, default=False, check=lambda v: None if v else
                       "write it only as `candidate: true` (leave it out otherwise)"),
}
SERIES_SCHEMA = {
    "checked_from": Field(str, check=pep440_version),
    "checked_through": Field(str, check=pep440_version),
    "patches": Field(ListOf(PATCH_SCHEMA)),
}


@dataclass(frozen=True)
class PatchFile:
    path: str             # relative to the patches/ directory, as written in the manifest
    sha256: str
    absolute: Path

    @property
    def name(self) -> str:
        return Path(self.path).name


@dataclass
class Patch:
    id: str
    title: str
    kind: str
    files: list[PatchFile]
    releases: str
    why: str
    upstream: dict | None = None
    fixes_marker: str | None = None
    retired_in: str | None = None
    candidate: bool = False                 # applied only with --with-candidate ID
    touches: list[str] | None = None        # source: the vLLM files its diffs change
    package: str | None = None              # dependency: the PyPI project, canonical name
    specifier: SpecifierSet | None = None   # dependency: what the installed version must satisfy
    diffs: list[diffs.FileDiff] = field(default_factory=list, repr=False)

    def in_range(self, version: Version) -> bool:
        # Local build tags (+cu130) and dev builds still belong to the release they name.
        return SpecifierSet(self.releases).contains(Version(version.public), prereleases=True)

    def retired_for(self, version: Version) -> bool:
        return self.retired_in is not None and version >= Version(self.retired_in)


@dataclass
class Series:
    path: Path
    checked_from: str
    checked_through: str
    patches: list[Patch]
    header: str = ""        # the comment block at the top, kept verbatim by save_series
    digest: str = ""        # sha256 over the manifest and every patch file: keys status caches

    def get(self, patch_id: str) -> Patch:
        for patch in self.patches:
            if patch.id == patch_id:
                return patch
        raise ForgeError(f"{self.path}: no patch with id {patch_id!r}")

    def chosen_candidates(self, ids: list[str] | None) -> frozenset[str]:
        """The candidates an apply was asked for (`--with-candidate ID`, repeatable); an id the
        series does not have, or one of a patch that is no candidate, is refused."""
        chosen = []
        for patch_id in ids or []:
            patch = next((p for p in self.patches if p.id == patch_id), None)
            if patch is None:
                raise ForgeError(f"{CANDIDATE_FLAG} {patch_id}: {self.path} has no patch with that id")
            if not patch.candidate:
                raise ForgeError(f"{CANDIDATE_FLAG} {patch_id}: not a candidate in {self.path} "
                                 "(it is applied wherever it applies)")
            chosen.append(patch_id)
        return frozenset(chosen)

    def skipped(self, patch_id: str, chosen: frozenset[str] = frozenset()) -> bool:
        """True for a candidate not asked for: apply and image builds leave it out."""
        return self.get(patch_id).candidate and patch_id not in chosen


def load_series(path: str | Path | None = None, offline: bool = False,
                check_index: bool = True) -> Series:
    """Read, validate and hash-check the manifest. Errors name the file and the field.

    Dependency constraints are also checked against the package index (cached; `offline`: the
    cache only): the package exists, its specifier admits a published version, its `releases`
    admit a known vLLM release. `check_index=False` skips that (apply inside an image, where
    the manifest was checked when the image was planned and the index may be out of reach)."""
    # VLLM_FORGE_SERIES points every command (and image build) at another manifest.
    path = Path(path or os.environ.get("VLLM_FORGE_SERIES") or DEFAULT_SERIES)
    data = validate(load_yaml(path), SERIES_SCHEMA, str(path))
    if Version(data["checked_through"]) < Version(data["checked_from"]):
        raise ForgeError(f"{path}: checked_through: must not be before checked_from "
                         f"{data['checked_from']} (got {data['checked_through']})")
    base = path.parent
    digest = hashlib.sha256(read_bytes(path, DATA_YAML))
    patches: list[Patch] = []
    for index, entry in enumerate(data["patches"]):
        where = f"{path}: patches[{index}]"
        if any(p.id == entry["id"] for p in patches):
            raise ForgeError(f"{where}.id: duplicate patch id {entry['id']!r}")
        if entry["kind"] == Kind.DEPENDENCY:
            _check_dependency_fields(entry, where)     # before reading files it must not have
        files = [_checked_file(base, f, f"{where}.files[{i}]", digest)
                 for i, f in enumerate(entry["files"] or [])]
        patch = Patch(files=files, **{k: v for k, v in entry.items()
                                      if k not in ("files", "package", "specifier")})
        _check_kind_fields(patch, entry, where)
        if patch.kind == Kind.DEPENDENCY:
            patch.package = canonicalize_name(entry["package"])
            patch.specifier = SpecifierSet(entry["specifier"])
            if check_index:
                _check_against_index(patch, where, data["checked_from"], offline)
        if patch.kind == Kind.SOURCE:
            patch.diffs = _checked_diffs(patch, where)
        patches.append(patch)
    return Series(path, data["checked_from"], data["checked_through"], patches,
                  header=_header_of(read_text(path, DATA_YAML)), digest=digest.hexdigest())


def _checked_file(base: Path, entry: dict, where: str, digest) -> PatchFile:
    absolute = base / entry["path"]
    try:
        content = read_bytes(absolute, SOURCE)
    except FileError as exc:
        detail = str(exc).removeprefix(f"{absolute}: ").removeprefix("cannot read it: ")
        raise ForgeError(f"{where}.path: cannot read {absolute}: {detail}") from exc
    actual = hashlib.sha256(content).hexdigest()
    if actual != entry["sha256"]:
        raise ForgeError(f"{where}.sha256: {entry['path']} has sha256 {actual}, "
                         f"the manifest says {entry['sha256']}")
    digest.update(entry["path"].encode() + b"\0" + content)
    return PatchFile(entry["path"], entry["sha256"], absolute)


def _checked_diffs(patch: Patch, where: str) -> list[diffs.FileDiff]:
    """Every diff of a source patch, each changing only files its entry's `touches` lists (the
    paths themselves are checked to stay inside the tree when the diff is parsed)."""
    listed = set(patch.touches or [])
    loaded: list[diffs.FileDiff] = []
    for f in patch.files:
        file_diffs = diffs.load_diff(f.absolute)
        for rel in diffs.target_paths(file_diffs):
            if rel not in listed:
                raise ForgeError(f"{where}.touches: {f.path} changes {rel}, which the entry does "
                                 "not list")
        loaded.extend(file_diffs)
    unchanged = sorted(listed - set(diffs.target_paths(loaded)))
    if unchanged:
        raise ForgeError(f"{where}.touches: lists {unchanged[0]}, which none of its diffs changes")
    return loaded


def _check_kind_fields(patch: Patch, entry: dict, where: str) -> None:
    if patch.kind == Kind.DEPENDENCY:
        return      # checked before its (absent) files were read
    for name in ("package", "specifier"):
        if entry.get(name) is not None:
            raise ForgeError(f"{where}.{name}: only dependency patches have one")
    if patch.kind == Kind.SOURCE and not patch.touches:
        raise ForgeError(f"{where}.touches: required field is missing (the vLLM files its "
                         "diffs change)")
    if patch.kind != Kind.SOURCE and entry.get("touches") is not None:
        raise ForgeError(f"{where}.touches: only source patches have one")
    if not patch.files:
        raise ForgeError(f"{where}.files: required field is missing")
    if patch.kind == Kind.SOURCE:
        if not patch.upstream or not (patch.upstream.get("issue") or patch.upstream.get("pr")):
            raise ForgeError(f"{where}.upstream: a source patch names its upstream issue or pr")
        if any(not f.path.endswith(".diff") for f in patch.files):
            raise ForgeError(f"{where}.files: a source patch's files are .diff files")
    if patch.kind == Kind.MOE_CONFIG:
        if patch.fixes_marker:
            raise ForgeError(f"{where}.fixes_marker: only source patches have one")
        for f in patch.files:
            if parse_config_name(f.name) is None:
                raise ForgeError(f"{where}.files: {f.path} is not named like a fused-MoE config "
                                 "(E=...,N=...,device_name=....json)")


def _check_dependency_fields(entry: dict, where: str) -> None:
    for name in ("package", "specifier"):
        if entry.get(name) is None:
            raise ForgeError(f"{where}.{name}: a dependency patch needs one")
    for name in ("files", "fixes_marker", "touches"):
        if entry.get(name) is not None:
            raise ForgeError(f"{where}.{name}: a dependency patch has none")
    if not SpecifierSet(entry["specifier"]):
        raise ForgeError(f"{where}.specifier: must constrain something (got an empty specifier)")
    upstream = entry.get("upstream") or {}
    if not (upstream.get("issue") or upstream.get("pr")):
        raise ForgeError(f"{where}.upstream: a dependency patch names its upstream issue or pr")


def _check_against_index(patch: Patch, where: str, checked_from: str, offline: bool) -> None:
    """Facts only the indexes know: the package exists and can satisfy the constraint, and the
    releases range covers a vLLM release that exists."""
    from forge.upstream import pypi, releases

    try:
        published = pypi.published_versions(patch.package or "", offline=offline)
    except pypi.UnknownProject as exc:
        raise ForgeError(f"{where}.package: {exc}") from exc
    except ForgeError as exc:
        raise ForgeError(f"{where}.package: cannot check it: {exc}") from exc
    specifier = patch.specifier or SpecifierSet()
    if not any(specifier.contains(v, prereleases=True) for v in published):
        raise ForgeError(f"{where}.specifier: no published version of {patch.package} satisfies "
                         f"{patch.specifier} (newest {published[-1] if published else 'none'})")
    known = releases.list_releases(minimum=checked_from, offline=offline)
    if not any(patch.in_range(v) for v in known):
        raise ForgeError(f"{where}.releases: no known vLLM release from {checked_from} "
                         f"({known[0] if known else '-'} .. {known[-1] if known else '-'}) is in "
                         f"{patch.releases!r}")


def _header_of(text: str) -> str:
    lines = []
    for line in text.splitlines(keepends=True):
        if not line.startswith("#") and line.strip():
            break
        lines.append(line)
    return "".join(lines)


# --- writing the manifest back (used by the upstream watch) ---------------------------------

class _BlockStyleDumper(yaml.SafeDumper):
    pass


def _represent_str(dumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockStyleDumper.add_representer(str, _represent_str)


def series_to_data(series: Series) -> dict:
    patches = []
    for p in series.patches:
        # str(): a Kind member (code names kinds through the enum) is written as its plain spelling
        entry: dict[str, object] = {"id": p.id, "title": p.title, "kind": str(p.kind),
                                    "releases": p.releases}
        if p.retired_in:
            entry["retired_in"] = p.retired_in
        if p.candidate:
            entry["candidate"] = True
        if p.kind == Kind.DEPENDENCY:
            entry["package"] = p.package
            entry["specifier"] = str(p.specifier)
        if p.upstream:
            entry["upstream"] = {k: v for k, v in p.upstream.items() if v is not None}
        if p.fixes_marker:
            entry["fixes_marker"] = p.fixes_marker
        if p.files:
            entry["files"] = [{"path": f.path, "sha256": f.sha256} for f in p.files]
        if p.touches:
            entry["touches"] = list(p.touches)
        entry["why"] = p.why
        patches.append(entry)
    return {"checked_from": series.checked_from, "checked_through": series.checked_through,
            "patches": patches}


def render_series(series: Series) -> str:
    body = yaml.dump(series_to_data(series), Dumper=_BlockStyleDumper, sort_keys=False,
                     allow_unicode=True, width=100, default_flow_style=False)
    return series.header + body


def save_series(series: Series, path: str | Path | None = None) -> Path:
    """Write the manifest atomically (header comments kept), then re-load it to prove it valid."""
    path = Path(path) if path else series.path
    return write_text_atomically(path, render_series(series), check=load_series)

