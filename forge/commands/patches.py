"""`build.py patches` (statuses per release), `build.py apply` (patch the vLLM installed here) and
`build.py readme-table` (README.md's per-release status table)."""
from __future__ import annotations

from pathlib import Path

from forge.commands.generated import check_or_write
from forge.errors import ConflictError
from forge.patching.apply import apply_series, install_statuses, read_install_record
from forge.patching.installed import find_vllm
from forge.patching.ownership import foreign_reason
from forge.patching.report import print_matrix, print_release
from forge.patching.series import load_series
from forge.patching.status import matrix, release_status
from forge.patching.vocabulary import Status
from forge.untrusted import visible
from forge.upstream import releases


def cmd_patches(args) -> int:
    series = load_series(offline=args.offline)
    if args.site_packages:
        return _installed_report(args, series)
    if args.vllm:
        statuses = release_status(args.vllm, offline=args.offline, series=series)
        print_release(args.vllm, statuses, series, as_json=args.json, wide=args.wide)
        results = {args.vllm: statuses}
    else:
        versions = releases.list_releases(minimum=series.checked_from, offline=args.offline)
        results = matrix(versions, offline=args.offline, series=series)
        print_matrix(results, series, as_json=args.json, wide=args.wide)
    conflicts = [(v, s) for v, statuses in results.items() for s in statuses
                 if s.status == Status.CONFLICT]
    if conflicts:
        version, s = conflicts[0]
        raise ConflictError(f"vLLM {version}: patch {s.id}: {s.detail}"
                            + (f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else ""))
    return 0


def _installed_report(args, series) -> int:
    """`patches --site-packages DIR`: statuses on an install as it is now (what apply would do)."""
    installed = find_vllm(args.site_packages)
    record = read_install_record(installed)
    statuses = install_statuses(series, installed, record)
    if not args.json:
        # visible: a path given by --site-packages, and the record's own words
        print(visible(f"installed at {installed.package_dir}" + _record_note(installed, record)))
    print_release(str(installed.version), statuses, series, as_json=args.json, wide=args.wide)
    return 0


def _record_note(installed, record) -> str:
    if record is None:
        return ""
    foreign = foreign_reason(installed, record)
    if foreign is not None:
        return (f" (the vllm-forge record there belongs to another install: {foreign}; "
                "`build.py apply --revert` drops it)")
    return " (vllm-forge record present)"


def cmd_apply(args) -> int:
    report = apply_series(site_packages=args.site_packages, expected_version=args.vllm,
                          revert=args.revert, moe_config_dir=args.moe_config_dir,
                          moe_device=args.moe_device, offline=args.offline,
                          find_links=args.find_links, pins=args.pin,
                          with_candidates=args.with_candidate)
    for line in report.lines():
        print(visible(line))     # a line quotes git's or pip's output and the install's paths
    return 0


def cmd_readme_table(args) -> int:
    from forge.patching.readme_table import COMMAND, README, regenerate

    readme, name = (Path(args.readme), args.readme) if args.readme else (README, "README.md")
    current, updated = regenerate(readme, name, offline=args.offline)
    return check_or_write(readme, name, "the patch table", current, updated, check=args.check,
                          command=COMMAND)
