"""Status of every patch in patches/series.yaml against a vLLM tree, and the `patches` / `apply`
commands of build.py.

Statuses (the same engine for a release's sdist tree and for an installed site-packages):
  not-needed        outside the patch's `releases`, a target file absent, the code it fixes absent
                    (`fixes_marker` not in the file), or retired and the reverse does not apply
  applies           every hunk fits exactly one place (forge.diffs); moe-config: vLLM bundles no
                    file of that name
  already-upstream  the reverse applies (upstream holds the change); moe-config: bundled
  conflict          in range, the code it fixes is there, and neither forward nor reverse fits
  satisfied         dependency on an install: the installed version already satisfies it

Dependency constraints (kind `dependency`) are judged by forge.dependencies: against a release
from its declared requirements (applies / already-upstream / not-needed), against an install
from the installed version (applies / satisfied / not-needed).

Public API (other modules import these names): load_series, save_series, release_status,
matrix, patch_set_hash, apply_series, find_vllm, Series, Patch, PatchStatus, ApplyReport,
InstalledVllm.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from packaging.version import Version

from forge import diffs
from forge.errors import ConflictError
from forge.files import write_text_atomically
from forge.installed import InstalledVllm, find_vllm
from forge.patch_series import Patch, Series, load_series, save_series

__all__ = ["load_series", "save_series", "release_status", "matrix", "patch_set_hash",
           "apply_series", "find_vllm", "Series", "Patch", "PatchStatus", "ApplyReport",
           "InstalledVllm", "status_of", "tree_status", "for_moe_device", "moe_devices_of",
           "shipped_moe_configs",
           "MOE_CONFIGS_DIR"]

MOE_CONFIGS_DIR = "vllm/model_executor/layers/fused_moe/configs"
TREE_KINDS = ("source", "moe-config")      # judged from the release's vllm/ tree alone
STATUSES = ("applies", "already-upstream", "not-needed", "conflict", "satisfied")


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
        return PatchStatus(patch.id, patch.kind, name, detail)

    if patch.kind == "dependency":
        from forge import dependencies

        if install_path is not None:
            return status(*dependencies.install_status(patch, version, install_path))
        return status(*dependencies.release_status(patch, version, offline=offline))
    if not patch.in_range(version):
        return status("not-needed", f"{version} is outside releases {patch.releases}")
    if patch.kind == "moe-config":
        return _moe_status(patch, root, status)
    if patch.retired_for(version):
        if _fits(patch, root, reverse=True):
            return status("already-upstream", f"retired in {patch.retired_in}; reverse applies")
        return status("not-needed", f"retired in {patch.retired_in}")
    missing = [d.old_path for d in patch.diffs if d.old_path and not (root / d.old_path).is_file()]
    if missing:
        return status("not-needed", f"{missing[0]} is absent")
    try:
        broken = _breaks_python(root, diffs.plan_diff(root, patch.diffs))
        if broken:
            return status("conflict", f"the hunks fit but {broken}")
        hunks = sum(len(d.hunks) for d in patch.diffs)
        return status("applies", f"{hunks} hunk(s) fit in {_files(patch)}")
    except diffs.HunkError as forward_error:
        if _fits(patch, root, reverse=True):
            return status("already-upstream", f"reverse applies to {_files(patch)}")
        if patch.fixes_marker and not _marker_present(patch, root):
            return status("not-needed", f"the code it fixes is absent "
                                        f"({patch.fixes_marker!r} not in {_files(patch)})")
        return status("conflict", f"neither forward nor reverse applies: {forward_error}")


def _breaks_python(root: Path, planned: dict[str, bytes | None]) -> str | None:
    """A patched .py file that no longer compiles (where the original did) is no fit.

    Compared with the original because the host's Python may be older than vLLM's syntax."""
    for rel, new in planned.items():
        if not rel.endswith(".py") or new is None or not (root / rel).is_file():
            continue
        try:
            compile(new, rel, "exec", dont_inherit=True)
        except SyntaxError as error:
            try:
                compile((root / rel).read_bytes(), rel, "exec", dont_inherit=True)
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
    marker = patch.fixes_marker.encode()
    return any(marker in (root / rel).read_bytes()
               for rel in diffs.target_paths(patch.diffs) if (root / rel).is_file())


def _files(patch: Patch) -> str:
    return ", ".join(diffs.target_paths(patch.diffs))


def _moe_status(patch: Patch, root: Path, status) -> PatchStatus:
    bundled = [f.name for f in patch.files if (root / MOE_CONFIGS_DIR / f.name).is_file()]
    if len(bundled) == len(patch.files):
        return status("already-upstream", f"vLLM bundles {', '.join(bundled)}")
    detail = f"vLLM bundles no {patch.files[0].name}" if len(patch.files) == 1 else \
        f"vLLM bundles {len(bundled)} of {len(patch.files)} configs"
    return status("applies", detail + "; delivered through VLLM_TUNED_CONFIG_FOLDER")


def tree_status(series: Series, root: Path, version: Version, moe_device: str | None = None,
                install_path: list[str] | None = None, offline: bool = False,
                kinds: tuple[str, ...] | None = None) -> list[PatchStatus]:
    """Every patch's status (of `kinds` only, if given); see status_of for `install_path`."""
    statuses = [status_of(patch, root, version, install_path, offline) for patch in series.patches
                if kinds is None or patch.kind in kinds]
    return for_moe_device(statuses, series, moe_device)


def moe_devices_of(patch: Patch) -> set[str]:
    """The GPUs a moe-config patch was tuned for: the device_name= field of its file names."""
    return {field.split("=", 1)[1] for f in patch.files for field in f.name[:-len(".json")].split(",")
            if field.startswith("device_name=")}


def shipped_moe_configs(version: str, series: Series | None = None) -> set[str]:
    """File names of the tuned MoE configs this series delivers to vLLM `version` (in range, not
    retired): what an image of that release carries, so what verify may expect vLLM to read."""
    # Verify calls this inside images, where the package index may be out of reach; MoE
    # configs need none of the index checks that dependency constraints get on load.
    series = series or load_series(check_index=False)
    parsed = Version(str(version))
    return {f.name for p in series.patches if p.kind == "moe-config" and p.in_range(parsed)
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
        devices = moe_devices_of(patch) if patch.kind == "moe-config" else set()
        if devices and moe_device not in devices and status.status != "not-needed":
            status = PatchStatus(status.id, status.kind, "not-needed",
                                 f"tuned for {', '.join(sorted(devices))}, not {moe_device}")
        narrowed.append(status)
    return narrowed


# --- statuses of releases from their real sdist trees, cached ---------------------------------

def _engine_digest() -> str:
    """Changes to the status engine invalidate cached statuses as surely as manifest changes."""
    digest = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for name in ("diffs.py", "patches.py", "patch_series.py", "dependencies.py"):
        digest.update((here / name).read_bytes())
    return digest.hexdigest()


def _status_cache_file(series: Series, version: str) -> Path:
    from forge.releases import cache_dir

    key = hashlib.sha256((series.digest + _engine_digest()).encode()).hexdigest()[:20]
    return cache_dir() / "patch-status" / key / f"{version}.json"


def release_status(version: str, offline: bool = False, series: Series | None = None,
                   moe_device: str | None = None) -> list[PatchStatus]:
    """Status of every patch against release `version`'s real source tree (sdist from PyPI);
    with `moe_device`, as an image for that GPU sees it (see for_moe_device)."""
    from forge import releases

    series = series or load_series(offline=offline)
    parsed = Version(str(releases.sdist_info(version, offline=offline).version))
    cached = _status_cache_file(series, str(parsed))
    try:
        statuses = [PatchStatus(**entry) for entry in json.loads(cached.read_text())]
    except (OSError, ValueError, TypeError):
        statuses = tree_status(series, releases.release_tree(str(parsed), offline=offline), parsed,
                               kinds=TREE_KINDS)
        write_text_atomically(cached, json.dumps([s.to_dict() for s in statuses], indent=1))
    # Dependency statuses also depend on what the package index publishes, which moves on its
    # own: computed each time (from the cached requirements and index), never cached here.
    by_id = {s.id: s for s in statuses}
    by_id.update({s.id: s for s in tree_status(series, Path("."), parsed, offline=offline,
                                               kinds=("dependency",))})
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
        if status.status == "applies":
            patch = series.get(status.id)
            if patch.kind == "dependency":
                digest.update(f"{status.id}\0{patch.package}{patch.specifier}\n".encode())
            for f in patch.files:
                digest.update(f"{status.id}\0{f.sha256}\n".encode())
    return digest.hexdigest()[:12]


def raise_on_conflict(statuses: list[PatchStatus], where: str) -> None:
    for s in statuses:
        if s.status == "conflict":
            raise ConflictError(f"{where}: patch {s.id}: {s.detail}")


# --- apply (the implementation lives in forge.patch_apply) ------------------------------------

def apply_series(site_packages=None, expected_version=None, revert=False, moe_config_dir=None,
                 series_path=None, moe_device=None, offline=False, find_links=None, pins=None):
    from forge.patch_apply import apply_series as _apply

    return _apply(site_packages=site_packages, expected_version=expected_version, revert=revert,
                  moe_config_dir=moe_config_dir, series_path=series_path, moe_device=moe_device,
                  offline=offline, find_links=find_links, pins=pins)


def __getattr__(name):   # ApplyReport lives with the apply code; keep it importable from here
    if name == "ApplyReport":
        from forge.patch_apply import ApplyReport
        return ApplyReport
    raise AttributeError(name)


# --- build.py commands --------------------------------------------------------------------------

def cmd_patches(args) -> int:
    from forge.patch_report import print_matrix, print_release

    series = load_series(offline=args.offline)
    if args.site_packages:
        return _installed_report(args, series)
    if args.vllm:
        statuses = release_status(args.vllm, offline=args.offline, series=series)
        print_release(args.vllm, statuses, series, as_json=args.json)
        results = {args.vllm: statuses}
    else:
        from forge import releases

        versions = releases.list_releases(minimum=series.checked_from, offline=args.offline)
        results = matrix(versions, offline=args.offline, series=series)
        print_matrix(results, series, as_json=args.json)
    conflicts = [(v, s) for v, statuses in results.items() for s in statuses
                 if s.status == "conflict"]
    if conflicts:
        version, s = conflicts[0]
        raise ConflictError(f"vLLM {version}: patch {s.id}: {s.detail}"
                            + (f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else ""))
    return 0


def _installed_report(args, series) -> int:
    """`patches --site-packages DIR`: statuses on an install as it is now (what apply would do)."""
    from forge.installed import find_vllm
    from forge.patch_apply import install_statuses, read_install_record
    from forge.patch_report import print_release

    installed = find_vllm(args.site_packages)
    record = read_install_record(installed)
    statuses = install_statuses(series, installed, record)
    if not args.json:
        print(f"installed at {installed.package_dir}"
              + (" (vllm-forge record present)" if record is not None else ""))
    print_release(str(installed.version), statuses, series, as_json=args.json)
    return 0


def cmd_apply(args) -> int:
    report = apply_series(site_packages=args.site_packages, expected_version=args.vllm,
                          revert=args.revert, moe_config_dir=args.moe_config_dir,
                          moe_device=args.moe_device, offline=args.offline,
                          find_links=args.find_links, pins=args.pin)
    for line in report.lines():
        print(line)
    return 0
