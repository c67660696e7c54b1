"""`build.py new-patch` and `refresh-patch` (make or refresh a source patch in a work tree of a
release) and `build.py patch-headers` (write each diff's header from the manifest)."""
from __future__ import annotations

from forge import REPO_ROOT
from forge.errors import ForgeError
from forge.patching import authoring, headers, journal, work_tree
from forge.patching.series import load_series, patch_id_problem
from forge.patching.status import status_of
from forge.patching.vocabulary import Kind, Status
from forge.schema import pep440_specifier, pep440_version
from forge.untrusted import visible
from forge.upstream import releases
from forge.versions import Release

# A killed `patch-headers` run leaves this; the next one finishes it before reading the series.
HEADERS_JOURNAL = REPO_ROOT / "build" / "patch-work" / ".patch-headers.json"


def cmd_patch_headers(args) -> int:
    if args.check and HEADERS_JOURNAL.exists():
        print(f"a patch-headers run was interrupted ({work_tree.shown(HEADERS_JOURNAL)} is left); "
              f"run `{headers.COMMAND}` to finish it")
        return 1
    journal.replay(HEADERS_JOURNAL)
    series = load_series(check_index=False)    # provenance only: no package-index facts needed
    if args.check:
        stale = headers.stale_files(series)
        for _, f, _ in stale:
            print(f"{f.absolute}: the header is not what {series.path.name} generates; "
                  f"run `{headers.COMMAND}`")
        if not stale:
            print(f"every diff header is what {series.path.name} generates")
        return 1 if stale else 0
    written = journal.write_all(HEADERS_JOURNAL, headers.header_writes(series))
    for path in written:
        print(f"wrote {path}")
    if not written:
        print("every diff header is already current")
    return 0


def cmd_new_patch(args) -> int:
    _check_id_form("new-patch", args.id)
    if args.finish and _resumed("new-patch", args):
        return 0
    series = load_series()
    _check_new_id(series, args.id, finishing=args.finish)
    authoring.check_release(series, args.vllm)
    if not args.finish:
        _refuse_finish_flags(args)
        work = work_tree.create("new-patch", args.id, args.vllm)
        print(f"vLLM {args.vllm}'s vllm/ package is in {work.shown()}/vllm: edit it there, then:")
        print(f"  python3 build.py new-patch {args.id} --vllm {args.vllm} --finish --title TITLE "
              "--why WHY --issue N [--pr N] [--releases SPEC] [--fixes-marker TEXT]")
        return 0
    fields = _new_fields(args)
    work = work_tree.open_tree("new-patch", args.id, args.vllm)
    return _finish(work, series, authoring.new_entry(series, work.root, args.vllm, fields))


def cmd_refresh_patch(args) -> int:
    _check_id_form("refresh-patch", args.id)
    if args.finish and _resumed("refresh-patch", args):
        return 0
    series = load_series()
    patch = _refreshable(series, args.id)
    authoring.check_release(series, args.vllm)
    _check_refreshable_on(patch, args.vllm)
    if not args.finish:
        return _start_refresh(args, patch)
    work = work_tree.open_tree("refresh-patch", args.id, args.vllm)
    left = work_tree.rejects(work)
    if left:
        raise ForgeError(f"--finish: {work_tree.shown(left[0])} is left: apply its hunks by hand "
                         "and delete it")
    outcome = authoring.refreshed_entry(series, work.root, args.vllm, args.id, args.releases)
    return _finish(work, series, outcome)


def _start_refresh(args, patch) -> int:
    if args.releases:
        raise ForgeError("--releases: only with --finish")
    work = work_tree.create("refresh-patch", args.id, args.vllm)
    how = work_tree.apply_existing(work, patch)
    print(f"vLLM {args.vllm}'s vllm/ package is in {work.shown()}/vllm with {args.id}: {how}.")
    left = work_tree.rejects(work)
    print("Apply the hunks of each .rej file by hand and delete it, then:" if left else
          "Check or change the files there, then:")
    print(f"  python3 build.py refresh-patch {args.id} --vllm {args.vllm} --finish")
    return 1 if left else 0


def _check_id_form(command: str, patch_id: str) -> None:
    problem = patch_id_problem(patch_id)       # before the id names a directory
    if problem:
        raise ForgeError(f"{command} ID: {problem}")


def _check_new_id(series, patch_id: str, finishing: bool) -> None:
    if any(p.id == patch_id for p in series.patches):
        raise ForgeError(f"new-patch ID: {series.path} already has {patch_id!r}; change it with "
                         f"`python3 build.py refresh-patch {patch_id} --vllm VERSION`")
    diff = series.path.parent / authoring.diff_path(patch_id)
    if diff.exists() and not finishing:
        raise ForgeError(f"new-patch ID: {diff} exists though the series does not list it; "
                         "delete it or choose another id")


def _refreshable(series, patch_id: str):
    if not any(p.id == patch_id for p in series.patches):
        raise ForgeError(f"refresh-patch ID: {series.path} has no patch {patch_id!r}")
    patch = series.get(patch_id)
    if patch.kind != Kind.SOURCE or len(patch.files) != 1:
        raise ForgeError(f"refresh-patch ID: {patch_id} is a {patch.kind} patch with "
                         f"{len(patch.files)} file(s); refresh-patch refreshes one source diff")
    return patch


def _check_refreshable_on(patch, vllm: Release) -> None:
    """A refresh is for a release the patch is for and where its change is still to be made."""
    version = vllm.version
    if not patch.in_range(version):
        raise ForgeError(f"--vllm: {vllm} is outside {patch.id}'s releases {patch.releases}; "
                         "widen them in the manifest first")
    status = status_of(patch, releases.release_tree(vllm), version)
    if status.status in (Status.ALREADY_UPSTREAM, Status.NOT_NEEDED):
        raise ForgeError(f"--vllm: {patch.id} is {status.status} on vLLM {vllm} ({status.detail}); "
                         "nothing to refresh")


def _refuse_finish_flags(args) -> None:
    for flag in ("title", "why", "issue", "pr", "fixed_in", "introduced_by", "releases",
                 "fixes_marker"):
        if getattr(args, flag) is not None:
            raise ForgeError(f"--{flag.replace('_', '-')}: only with --finish (the entry is "
                             "written when the diff is)")


def _new_fields(args) -> dict:
    for flag in ("title", "why"):
        value = getattr(args, flag)
        if not value or not value.strip():
            raise ForgeError(f"--{flag}: required with --finish")
    if "\n" in args.title:
        raise ForgeError("--title: one line")
    if not (args.issue or args.pr):
        raise ForgeError("--issue: a source patch names its upstream issue (or --pr)")
    for flag, check in (("releases", pep440_specifier), ("fixed_in", pep440_version)):
        problem = getattr(args, flag) and check(getattr(args, flag))
        if problem:
            raise ForgeError(f"--{flag.replace('_', '-')}: {problem}")
    upstream = {"issue": args.issue, "pr": args.pr, "fixed_in": args.fixed_in,
                "introduced_by": args.introduced_by}
    return {"id": args.id, "title": args.title.strip(), "why": args.why.strip() + "\n",
            "releases": args.releases or f">={args.vllm}", "fixes_marker": args.fixes_marker,
            "upstream": {k: v for k, v in upstream.items() if v is not None}}


def _resumed(command: str, args) -> bool:
    """Complete a --finish that was killed while writing (before the series is read: until then
    a diff may not match the sha256 the manifest records)."""
    written = work_tree.resume(work_tree.open_tree(command, args.id, args.vllm))
    if written is None:
        return False
    print("completed the finish that was interrupted: wrote "
          + ", ".join(work_tree.shown(path) for path in written))
    return True


def _finish(work, series, outcome) -> int:
    if not outcome.writes:
        work_tree.finish(work, {})
        print(visible(f"{outcome.how}; removed {work.shown()}"))
        return 0
    authoring.validate(outcome.writes, series, work.root)
    for path in work_tree.finish(work, outcome.writes):
        print(f"wrote {work_tree.shown(path)}")
    print(visible(f"{outcome.how}; status on each release the series covers:"))
    for patch_id, by_release in outcome.statuses.items():
        for version, status in by_release.items():
            # visible: a detail quotes git's output or a cache entry
            print(visible(f"  {patch_id}  {version}  {status.status}  {status.detail}"))
    print("next: `python3 build.py readme-table`, and the statuses in tests/test_patch_status.py")
    return 0
