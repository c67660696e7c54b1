"""The watch commands: `build.py drift` (does a dependency version break Gemma 4 on a supported vLLM
release?) and `build.py upstream-watch` (what new vLLM and dependency releases change). The checks
and the proposal's text live in forge/watch/; here arguments become values and results output."""
from __future__ import annotations

from forge.errors import ForgeError
from forge.files import append_text, write_text_atomically
from forge.json_text import dump_json
from forge.schema import pep440_version
from forge.untrusted import visible, visible_lines


def cmd_drift(args) -> int:
    """Exit 0: no finding; 1: the version breaks a supported release no constraint covers;
    2: the check could not run (probe error, a version the index cannot install, bad input)."""
    from forge.patching.series import load_series
    from forge.watch import drift

    series = load_series(args.series)
    version = drift.newest_version(args.package, offline=args.offline) if args.newest else args.version
    report = drift.check(args.package, version, series, args.vllm, offline=args.offline)
    # the probe's errors quote what the dependency's own code raised: shown, never obeyed
    print(dump_json(report.to_dict(), indent=1) + "\n" if args.json else visible_lines(drift.render(report)),
          end="")
    drift.refuse_probe_errors(report)
    return drift.FINDING_EXIT if report.findings else 0


def cmd_upstream_watch(args) -> int:
    """Exit 0: nothing new, or edits proposed (written with --write); 3: a patch conflicts or a
    new dependency version breaks a supported release (the workflow opens an issue)."""
    from forge.patching.series import load_series
    from forge.watch import upstream
    from forge.watch.dependencies import load_watch

    series = load_series(args.series)
    watch = load_watch(args.dependency_watch or series.path.parent / "dependency-watch.yaml")
    through = dict(_package_version(p) for p in args.dependency_through or [])
    proposal = upstream.propose(series, offline=args.offline, watch=watch, through=through)
    if args.json:
        print(dump_json(proposal.to_dict(), indent=1))
    else:
        print(visible(upstream.title(proposal)))
        print(visible_lines(upstream.body(proposal)), end="")
    if args.pr_body:
        write_text_atomically(args.pr_body, upstream.body(proposal))
    if args.github_output:
        _write_outputs(proposal, args.github_output)
    upstream.refuse_if_blocked(proposal)
    if args.write:
        upstream.apply(proposal, series, watch)
    return 0


def _package_version(text: str) -> tuple[str, str]:
    """--dependency-through PACKAGE==VERSION -> (package, version)."""
    package, _, version = text.partition("==")
    if not package or pep440_version(version or "?"):
        raise ForgeError(f"--dependency-through: expected PACKAGE==VERSION (got {text!r})")
    return package, version


def _write_outputs(proposal, path: str) -> None:
    """The GitHub Actions step outputs the upstream-watch workflow branches on."""
    from forge.watch.upstream import title

    changed = proposal.changes_manifest or proposal.changes_watch_list
    append_text(path, f"newest={proposal.newest or ''}\n"
                      f"changed={'true' if changed else 'false'}\n"
                      f"conflicts={'true' if proposal.conflicts else 'false'}\n"
                      f"findings={'true' if proposal.drift_findings else 'false'}\n"
                      f"branch={proposal.branch}\n"
                      f"title={title(proposal)}\n")
