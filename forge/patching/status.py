"""Status of every patch in patches/series.yaml against a vLLM tree (a release's sdist or an
install); the `patches` / `apply` commands are in forge.commands.patches.

Statuses (the same engine for a release's sdist tree and for an installed site-packages):
  not-needed        outside the patch's `releases`, a target file absent, the code it fixes absent
                    (`fixes_marker` not in the file), or retired and the reverse does not apply
  applies           every hunk fits exactly one place (forge.patching.diffs); moe-config: vLLM bundles no
                    file of that name
  already-upstream  the reverse applies (upstream holds the change); moe-config: bundled
  conflict          in range, the code it fixes is there, and neither forward nor reverse fits
  needed-not-carried  past the top of `releases` (a cap), not retired, and its `fixes_marker` still
                    in the file: the bug is there and the series carries nothing for it (the diff
                    does not fit, or fits but the range stops short); never `not-needed`, which
                    means the release lacks the code or carries the fix
  satisfied         dependency on an install: the installed version already satisfies it

Dependency constraints (kind `dependency`) are judged by forge.patching.dependencies: against a release
from its declared requirements (applies / already-upstream / not-needed), against an install
from the installed version (applies / satisfied / not-needed).

Public API: release_status, matrix, patch_set_hash, status_of, tree_status, for_moe_device,
moe_devices_of, shipped_moe_configs, PatchStatus. The manifest is forge.patching.series, applying
it forge.patching.apply.
"""
from __future__ import annotations

import ast
import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from forge.data_formats import load_json_entry
from forge.errors import ConflictError
from forge.files import CACHE, SOURCE, read_bytes, regular_or_absent, write_entry
from forge.json_text import dump_json
from forge.patching import diffs
from forge.patching.moe_config_names import parse_config_name
from forge.patching.series import Patch, Series, load_series
from forge.patching.vocabulary import Kind, Status

__all__ = ["release_status", "matrix", "patch_set_hash", "PatchStatus", "status_of", "tree_status",
           "for_moe_device", "moe_devices_of", "shipped_moe_configs", "raise_on_conflict",
           "MOE_CONFIGS_DIR"]

MOE_CONFIGS_DIR = "vllm/model_executor/layers/fused_moe/configs"
TREE_KINDS = (Kind.SOURCE, Kind.MOE_CONFIG)      # judged from the release's vllm/ tree alone
STATUSES = tuple(Status)


@dataclass(frozen=True)
class PatchStatus:
    id: str
    kind: str
    status: str
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


# --- status of one patch on one tree ---------------------------------------------------------

def status_of(patch: Patch, root: Path, version: Version, install_path: list[str] | None = None,
              offline: bool = False) -> PatchStatus:
    """Status of `patch` on the tree `root` (the directory holding vllm/) of release `version`.

    A dependency constraint is judged against release `version`'s declared requirements, or,
    with `install_path` (where an install's packages are found), against the installed version."""
    def status(name: str, detail: str) -> PatchStatus:
        return PatchStatus(patch.id, patch.kind, str(name), detail)   # the plain spelling, for JSON

    if patch.kind == Kind.DEPENDENCY:
        from forge.patching import dependencies

        if install_path is not None:
            return status(*dependencies.install_status(patch, version, install_path))
        return status(*dependencies.release_status(patch, version, offline=offline))
    if not patch.in_range(version):
        past = _needed_past_range(patch, root, version)
        if past is not None:
            return status(*past)
        return status(Status.NOT_NEEDED, f"{version} is outside releases {patch.releases}")
    if patch.kind == Kind.MOE_CONFIG:
        return _moe_status(patch, root, status)
    if patch.retired_for(version):
        if _fits(patch, root, reverse=True):
            return status(Status.ALREADY_UPSTREAM, f"retired in {patch.retired_in}; reverse applies")
        return status(Status.NOT_NEEDED, f"retired in {patch.retired_in}")
    # A directory or FIFO where the diff expects a file is a fault, not an absence.
    missing = [d.old_path for d in patch.diffs
               if d.old_path and not regular_or_absent(root / d.old_path, SOURCE)]
    if missing:
        return status(Status.NOT_NEEDED, f"{missing[0]} is absent")
    try:
        broken = _breaks_python(root, diffs.plan_diff(root, patch.diffs))
        if broken:
            return status(Status.CONFLICT, f"the hunks fit but {broken}")
        hunks = sum(len(d.hunks) for d in patch.diffs)
        return status(Status.APPLIES, f"{hunks} hunk(s) fit in {_files(patch)}")
    except diffs.HunkError as forward_error:
        if _fits(patch, root, reverse=True):
            return status(Status.ALREADY_UPSTREAM, f"reverse applies to {_files(patch)}")
        if patch.fixes_marker and not _marker_present(patch, root):
            return status(Status.NOT_NEEDED, f"the code it fixes is absent "
                                        f"({patch.fixes_marker!r} not in {_files(patch)})")
        return status(Status.CONFLICT, f"neither forward nor reverse applies: {forward_error}")


def _above_range(patch: Patch, version: Version) -> bool:
    """`version` fails an upper bound of the patch's releases (< or <=) and meets every other
    clause: the range was capped below it."""
    spec, parsed = SpecifierSet(patch.releases), Version(version.public)
    uppers = [c for c in spec if c.operator in ("<", "<=")]
    return any(not c.contains(parsed, prereleases=True) for c in uppers) and \
        all(c.contains(parsed, prereleases=True) for c in spec if c not in uppers)


def _needed_past_range(patch: Patch, root: Path, version: Version) -> tuple[str, str] | None:
    """needed-not-carried where a source patch's range was capped below `version` but the code it
    fixes is still there (its fixes_marker; without one nothing says so: None) and upstream's fix
    has not come (the reverse does not fit, the patch is not retired). None: not-needed holds."""
    if patch.kind != Kind.SOURCE or not patch.fixes_marker or patch.retired_for(version) \
            or not _above_range(patch, version):
        return None
    marker = (patch.fixes_marker or "").encode()
    holding = [rel for rel in diffs.target_paths(patch.diffs)
               if regular_or_absent(root / rel, SOURCE) and (root / rel).is_file()
               and marker in read_bytes(root / rel, SOURCE)]
    if not holding:
        return None
    if _fits(patch, root, reverse=True):
        return Status.ALREADY_UPSTREAM, f"reverse applies to {_files(patch)}"
    where = f"needed: {patch.fixes_marker!r} is still in {', '.join(holding)}"
    if _fits(patch, root, reverse=False):
        return Status.NEEDED_NOT_CARRIED, (f"{where}; the diff fits {version}, but releases "
                                           f"{patch.releases} stop before it")
    return Status.NEEDED_NOT_CARRIED, (f"{where}; releases {patch.releases} stop before {version}, "
                                       "where the diff does not fit")


def _breaks_python(root: Path, planned: dict[str, bytes | None]) -> str | None:
    """A patched .py file that no longer compiles (where the original did) is no fit.

    Compared with the original because the host's Python may be older than vLLM's syntax. Parsed
    only (ast.parse makes a syntax tree, never code: no exec/compile outside the drift probe)."""
    for rel, new in planned.items():
        if not rel.endswith(".py") or new is None or not regular_or_absent(root / rel, SOURCE):
            continue
        try:
            ast.parse(new, rel)
        except SyntaxError as error:
            try:
                ast.parse(read_bytes(root / rel, SOURCE), rel)
            except SyntaxError:
                continue
            return f"the patched {rel} does not compile: line {error.lineno}: {error.msg}"
    return None


def _fits(patch: Patch, root: Path, reverse: bool) -> bool:
    try:
        diffs.plan_diff(root, patch.diffs, reverse=reverse)
        return True
    except diffs.HunkError:
        return False


def _marker_present(patch: Patch, root: Path) -> bool:
    marker = (patch.fixes_marker or "").encode()
    return any(marker in read_bytes(root / rel, SOURCE)
               for rel in diffs.target_paths(patch.diffs) if regular_or_absent(root / rel, SOURCE))


def _files(patch: Patch) -> str:
    return ", ".join(diffs.target_paths(patch.diffs))


def _moe_status(patch: Patch, root: Path, status) -> PatchStatus:
    bundled = [f.name for f in patch.files if (root / MOE_CONFIGS_DIR / f.name).is_file()]
    if len(bundled) == len(patch.files):
        return status(Status.ALREADY_UPSTREAM, f"vLLM bundles {', '.join(bundled)}")
    detail = f"vLLM bundles no {patch.files[0].name}" if len(patch.files) == 1 else \
        f"vLLM bundles {len(bundled)} of {len(patch.files)} configs"
    return status(Status.APPLIES, detail + "; delivered through VLLM_TUNED_CONFIG_FOLDER")


def tree_status(series: Series, root: Path, version: Version, moe_device: str | None = None,
                install_path: list[str] | None = None, offline: bool = False,
                kinds: tuple[str, ...] | None = None) -> list[PatchStatus]:
    """Every patch's status (of `kinds` only, if given); see status_of for `install_path`."""
    statuses = [status_of(patch, root, version, install_path, offline) for patch in series.patches
                if kinds is None or patch.kind in kinds]
    return for_moe_device(_carried_by_variants(statuses, series), series, moe_device)


def _carried_by_variants(statuses: list[PatchStatus], series: Series) -> list[PatchStatus]:
    """A needed-not-carried patch whose fix another entry of the series carries on this tree (a
    variant refresh-patch wrote: the same upstream issue or PR and a file of its own, applying or
    upstream's there) is not-needed: the release does not go without the fix."""
    def fix_of(patch: Patch) -> set[tuple[str, int]]:
        upstream = patch.upstream or {}
        return {(key, upstream[key]) for key in ("issue", "pr") if upstream.get(key)}
    carrying = {s.id for s in statuses if s.status in (Status.APPLIES, Status.ALREADY_UPSTREAM)}
    result = []
    for status in statuses:
        if status.status == Status.NEEDED_NOT_CARRIED:
            patch = series.get(status.id)
            fix, files = fix_of(patch), set(patch.touches or ())
            variant = next((p.id for p in series.patches if p.id != status.id and p.id in carrying
                            and fix & fix_of(p) and files & set(p.touches or ())), None)
            if variant:
                status = PatchStatus(status.id, status.kind, str(Status.NOT_NEEDED),
                                     f"{variant} carries its fix on this release")
        result.append(status)
    return result


def moe_devices_of(patch: Patch) -> set[str]:
    """The GPUs a moe-config patch was tuned for: the device_name= field of its file names."""
    names = (parse_config_name(f.name) for f in patch.files)
    return {name.device for name in names if name is not None}


def shipped_moe_configs(version: str, series: Series | None = None) -> set[str]:
    """File names of the tuned MoE configs this series delivers to vLLM `version` (in range, not
    retired): what an image of that release carries, so what verify may expect vLLM to read."""
    # Verify calls this inside images, where the package index may be out of reach; MoE
    # configs need none of the index checks that dependency constraints get on load.
    series = series or load_series(check_index=False)
    parsed = Version(str(version))
    return {f.name for p in series.patches if p.kind == Kind.MOE_CONFIG and p.in_range(parsed)
            and not p.retired_for(parsed) for f in p.files}


def for_moe_device(statuses: list[PatchStatus], series: Series, moe_device: str | None
                   ) -> list[PatchStatus]:
    """One image's view of the series: a config tuned for another GPU is not-needed there, so
    an A100 image neither carries H200 tunes nor changes its patch-set hash when they change.
    None keeps every config (a user's venv: vLLM itself picks the file by device name)."""
    if moe_device is None:
        return statuses
    narrowed = []
    for status in statuses:
        patch = series.get(status.id)
        devices = moe_devices_of(patch) if patch.kind == Kind.MOE_CONFIG else set()
        if devices and moe_device not in devices and status.status != Status.NOT_NEEDED:
            status = PatchStatus(status.id, status.kind, str(Status.NOT_NEEDED),
                                 f"tuned for {', '.join(sorted(devices))}, not {moe_device}")
        narrowed.append(status)
    return narrowed


# --- statuses of releases from their real sdist trees, cached ---------------------------------

def _engine_digest() -> str:
    """Changes to the status engine invalidate cached statuses as surely as manifest changes."""
    digest = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for name in ("diffs.py", "status.py", "series.py", "dependencies.py", "vocabulary.py",
                 "moe_config_names.py"):
        digest.update(read_bytes(here / name, SOURCE))
    return digest.hexdigest()


def _status_cache_file(series: Series, version: str) -> Path:
    from forge.upstream.releases import cache_dir

    key = hashlib.sha256((series.digest + _engine_digest()).encode()).hexdigest()[:20]
    return cache_dir() / "patch-status" / key / f"{version}.json"


def _kept_statuses(cached: Path) -> list[PatchStatus] | None:
    """The statuses as release_status writes them (forge.patching.entries.PatchStatuses), or None
    when missing, damaged or of another shape."""
    from forge.patching.entries import PatchStatuses
    from forge.typed import entry_or_none

    kept = entry_or_none(PatchStatuses, load_json_entry(cached, CACHE))
    if kept is None:
        return None
    return [PatchStatus(entry.id, entry.kind, entry.status, entry.detail) for entry in kept.root]


def release_status(version: str, offline: bool = False, series: Series | None = None,
                   moe_device: str | None = None) -> list[PatchStatus]:
    """Status of every patch against release `version`'s real source tree (sdist from PyPI);
    with `moe_device`, as an image for that GPU sees it (see for_moe_device)."""
    from forge.upstream import releases

    series = series or load_series(offline=offline)
    parsed = releases.sdist_info(version, offline=offline).version
    cached = _status_cache_file(series, str(parsed))
    kept = _kept_statuses(cached)
    if kept is not None:
        statuses = kept
    else:                                # not cached yet, or damaged: computed again
        statuses = tree_status(series, releases.release_tree(str(parsed), offline=offline), parsed,
                               kinds=TREE_KINDS)
        write_entry(cached, dump_json([s.to_dict() for s in statuses], indent=1))
    # Dependency statuses also depend on what the package index publishes, which moves on its
    # own: computed each time (from the cached requirements and index), never cached here.
    by_id = {s.id: s for s in statuses}
    by_id.update({s.id: s for s in tree_status(series, Path("."), parsed, offline=offline,
                                               kinds=(Kind.DEPENDENCY,))})
    return for_moe_device([by_id[p.id] for p in series.patches], series, moe_device)


def matrix(versions, offline: bool = False, series: Series | None = None
           ) -> dict[str, list[PatchStatus]]:
    series = series or load_series(offline=offline)
    return {str(v): release_status(str(v), offline=offline, series=series) for v in versions}


def patch_set_hash(statuses: list[PatchStatus], series: Series | None = None) -> str:
    """12 hex chars naming exactly which patch files and dependency constraints an image applies
    (for immutable tags)."""
    series = series or load_series()
    digest = hashlib.sha256()
    for status in statuses:
        if status.status == Status.APPLIES:
            patch = series.get(status.id)
            if patch.kind == Kind.DEPENDENCY:
                digest.update(f"{status.id}\0{patch.package}{patch.specifier}\n".encode())
            for f in patch.files:
                digest.update(f"{status.id}\0{f.sha256}\n".encode())
    return digest.hexdigest()[:12]


def applied_statuses(statuses: list[PatchStatus], series: Series,
                     chosen: frozenset[str] = frozenset()) -> list[PatchStatus]:
    """The statuses an apply or an image build works on: every patch but a candidate (series.yaml
    `candidate: true`) not asked for with --with-candidate. The one place that leaves them out."""
    return [s for s in statuses if not series.skipped(s.id, chosen)]


def raise_on_conflict(statuses: list[PatchStatus], where: str) -> None:
    for s in statuses:
        if s.status == Status.CONFLICT:
            raise ConflictError(f"{where}: patch {s.id}: {s.detail}")
