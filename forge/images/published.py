"""The known-good index, images/published.json: which image serves each target x vLLM release.

Two lists, both validated on load (errors name the file and field):

  builds      every image the release workflow pushed and published with a passed verify report
              (or, pushed but not yet verified, with none): target, vLLM release, repository,
              immutable tag, digest and the summary of its verify report. An immutable tag names
              one digest forever: recording it again with another digest is refused.
  known_good  per target x release, the moving tag (`vllm0.27.1-gb10`) and the build it points at
              in the registry. It moves only to a build whose verify report passed, only by
              `publish --move-tag`, and only once the registry moved the tag.

A verify report that did not pass (by its checks, re-derived here, whatever its `passed` field
says) or that names another target, release or digest is refused before anything is written.

    verify = verify_result(reports, target, vllm, digest)  # refuses a report that did not pass
    index = load_index()
    record_build(index, build)      # refuses an immutable tag that already names another digest
    entry = promote(index, ...)     # with --move-tag, only when build.verify.passed
    move_tag(...)                   # the registry first; a refusal there writes nothing
    save_index(index)
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from forge import REPO_ROOT, files
from forge.data_formats import load_json
from forge.errors import ForgeError
from forge.files import write_text_atomically
from forge.json_text import dump_json
from forge.schema import Field, ListOf, pep440_version, validate
from forge.untrusted import visible
from forge.verify_report import REPORT_NAME, unmet_gates
from forge.versions import Release

if TYPE_CHECKING:
    from forge.verify_report_file import VerifyReport

DEFAULT_INDEX = REPO_ROOT / "images" / "published.json"
SCHEMA_VERSION = 1

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# Docker's tag grammar: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
# registry[:port]/path, lowercase path components (no tag, no digest)
_REPOSITORY = re.compile(r"[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+")


class ImmutableTagError(ForgeError):
    """Re-publishing an immutable tag with another digest."""

    exit_code = 3


def _matches(pattern: re.Pattern, what: str):
    def check(value: str) -> str | None:
        return None if pattern.fullmatch(value) else f"not {what}: {value!r}"
    return check


VERIFY_SCHEMA = {
    "passed": Field(bool),
    "report": Field(str, required=False, default=""),
    "checked_at": Field(str, required=False, default=""),
    # A flat mapping of the report's headline figures (acceptance rate, tok/s, ...).
    "summary": Field(dict, required=False, default={}),
}

BUILD_SCHEMA = {
    "target": Field(str, check=_matches(re.compile(r"[a-z0-9][a-z0-9-]*"), "a target name")),
    "vllm": Field(str, check=pep440_version),
    "repository": Field(str, check=_matches(_REPOSITORY, "an image repository")),
    "immutable_tag": Field(str, check=_matches(_TAG, "an image tag")),
    "digest": Field(str, check=_matches(_DIGEST, "a sha256 image digest")),
    "published_at": Field(str),
    "verify": Field(VERIFY_SCHEMA),
}

KNOWN_GOOD_SCHEMA = {
    "target": BUILD_SCHEMA["target"],
    "vllm": BUILD_SCHEMA["vllm"],
    "repository": BUILD_SCHEMA["repository"],
    "moving_tag": Field(str, check=_matches(_TAG, "an image tag")),
    "immutable_tag": BUILD_SCHEMA["immutable_tag"],
    "digest": BUILD_SCHEMA["digest"],
    "moved_at": Field(str),
}

INDEX_SCHEMA = {
    "schema_version": Field(int, choices=(SCHEMA_VERSION,)),
    "builds": Field(ListOf(BUILD_SCHEMA)),
    "known_good": Field(ListOf(KNOWN_GOOD_SCHEMA)),
}


def empty_index() -> dict:
    return {"schema_version": SCHEMA_VERSION, "builds": [], "known_good": []}


def now_utc() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def load_index(path: Path | str | None = None) -> dict:
    """The index at `path` (default images/published.json), validated; missing is empty."""
    path = Path(path or DEFAULT_INDEX)
    if not files.is_present(path):
        return empty_index()
    data = load_json(path, files.INDEX)
    index = validate(data, INDEX_SCHEMA, str(path))
    _check_consistent(index, str(path))
    return index


def _refuse_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    """json's object hook: a key named twice in one object is refused (json.loads would keep the
    last one silently, and a second `builds` list would hide the first)."""
    found: dict = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key {key!r} appears twice in one object")
        found[key] = value
    return found


def _check_consistent(index: dict, source: str) -> None:
    """Each build is recorded once (immutable tags are unique), each target x release has one
    known_good entry, and every moving tag points at a recorded, passed build."""
    seen: dict[tuple[str, str], tuple[int, str]] = {}
    for i, build in enumerate(index["builds"]):
        key = (build["repository"], build["immutable_tag"])
        if key in seen:
            first, digest = seen[key]
            if digest != build["digest"]:
                raise ImmutableTagError(f"{source}: builds[{i}].digest: immutable tag "
                                        f"{reference(*key)} already names {digest}")
            raise ForgeError(f"{source}: builds[{i}]: {reference(*key)} is recorded twice "
                             f"(also builds[{first}]); an index lists each build once")
        seen[key] = (i, build["digest"])
    releases: dict[tuple[str, str], int] = {}
    for i, entry in enumerate(index["known_good"]):
        key = (entry["target"], entry["vllm"])
        if key in releases:
            raise ForgeError(f"{source}: known_good[{i}]: {entry['target']} vLLM {entry['vllm']} "
                             f"has a known-good entry already (known_good[{releases[key]}]); one "
                             "moving tag names one build")
        releases[key] = i
    for i, entry in enumerate(index["known_good"]):
        build = find_build(index, entry["repository"], entry["immutable_tag"])
        if build is None or build["digest"] != entry["digest"]:
            raise ForgeError(f"{source}: known_good[{i}].immutable_tag: "
                             f"{reference(entry['repository'], entry['immutable_tag'])} "
                             f"@ {entry['digest']} is not a recorded build")
        if not build["verify"]["passed"]:
            raise ForgeError(f"{source}: known_good[{i}].immutable_tag: its verify report did not pass")


def save_index(index: dict, path: Path | str | None = None) -> None:
    """Write atomically, in a stable order, so the file diffs cleanly between releases."""
    path = Path(path or DEFAULT_INDEX)
    index = validate(index, INDEX_SCHEMA, str(path))
    _check_consistent(index, str(path))
    index["builds"].sort(key=lambda b: (b["target"], _version_key(b["vllm"]), b["published_at"]))
    index["known_good"].sort(key=lambda e: (e["target"], _version_key(e["vllm"])))
    write_text_atomically(path, dump_json(index, indent=2, sort_keys=True) + "\n")


def _version_key(version: str):
    from packaging.version import Version

    return Version(version)


def reference(repository: str, tag: str) -> str:
    return f"{repository}:{tag}"


def find_build(index: dict, repository: str, immutable_tag: str) -> dict | None:
    for build in index["builds"]:
        if build["repository"] == repository and build["immutable_tag"] == immutable_tag:
            return build
    return None


def known_good(index: dict, target: str, vllm: str) -> dict | None:
    """The entry users pull for target x release, or None when no build of it passed verify."""
    for entry in index["known_good"]:
        if entry["target"] == target and entry["vllm"] == vllm:
            return entry
    return None


def record_build(index: dict, build: dict) -> dict:
    """Add a build (or refresh the verify result of the same tag and digest); return it.

    Refuses an immutable tag that already names another digest: a tag that could be re-pointed
    would not be immutable, and a release's provenance would silently change under its users.
    """
    build = validate(build, BUILD_SCHEMA, "build")
    existing = find_build(index, build["repository"], build["immutable_tag"])
    if existing is None:
        index["builds"].append(build)
        return build
    if existing["digest"] != build["digest"]:
        raise ImmutableTagError(
            f"immutable tag {reference(build['repository'], build['immutable_tag'])} already names "
            f"{existing['digest']}; refusing to re-point it to {build['digest']}")
    if (existing["target"], existing["vllm"]) != (build["target"], build["vllm"]):
        raise ImmutableTagError(
            f"immutable tag {reference(build['repository'], build['immutable_tag'])} is recorded for "
            f"{existing['target']} vLLM {existing['vllm']}, not {build['target']} vLLM {build['vllm']}")
    if existing["verify"]["passed"] and not build["verify"]["passed"]:
        # Publishing again without a report must not un-verify what users already pull.
        raise ForgeError(
            f"immutable tag {reference(build['repository'], build['immutable_tag'])} is recorded as "
            "verified; publish it again only with a verify report that passes (--verify-report)")
    existing["verify"] = build["verify"]
    return existing


def promote(index: dict, build: dict, moving_tag: str) -> dict | None:
    """Point target x release's moving tag at `build` if its verify report passed.

    Returns the new known_good entry, or None when the tag stays where it was.
    """
    if not build["verify"]["passed"]:
        return None
    entry = {
        "target": build["target"], "vllm": build["vllm"], "repository": build["repository"],
        "moving_tag": moving_tag, "immutable_tag": build["immutable_tag"],
        "digest": build["digest"], "moved_at": now_utc(),
    }
    validate(entry, KNOWN_GOOD_SCHEMA, "known_good entry")
    current = known_good(index, build["target"], build["vllm"])
    if current is not None:
        if current["digest"] == build["digest"] and current["moving_tag"] == moving_tag:
            return current
        index["known_good"].remove(current)
    index["known_good"].append(entry)
    return entry


class VerifyNotPassed(ForgeError):
    """A verify report that did not pass: publish refuses it, writing and moving nothing."""

    exit_code = 1


def verify_result(report_paths: list | None, target: str, vllm: str, digest: str) -> dict:
    """Read verify reports (JSON written by verify/, one per recipe) into the index's verify record.

    Every report must name this target, vLLM release and image digest, and pass by its own checks
    (the verdict is re-derived; the report's `passed` field is not taken on trust): otherwise
    ForgeError, before anything is written. No report means not verified: the build is recorded
    and the moving tag does not move.
    """
    if not report_paths:
        return {"passed": False, "report": "", "checked_at": "", "summary": {"note": "not verified"}}
    from forge.verify_report_file import read_report

    reports = [(path, read_report(path)) for path in _report_files(report_paths)]
    for path, report in reports:
        _check_device(path, report)
        _check_identity(path, report, target, vllm, digest)
        _check_passed(path, report)
    summary = {_report_name(path, report): _report_summary(report) for path, report in reports}
    return {"passed": True,
            "report": ", ".join(str(report.report_url or path.name) for path, report in reports),
            "checked_at": max(str(report.checked_at or now_utc()) for _, report in reports),
            "summary": summary}


def _report_files(report_paths: list) -> list[Path]:
    """Report files as given; a directory stands for every verify report (mtp_smoke.json) below it."""
    paths: list[Path] = []
    for given in map(Path, report_paths):
        if given.is_dir():
            found = sorted(given.rglob(REPORT_NAME))
            if not found:
                raise ForgeError(f"{given}: no verify report ({REPORT_NAME}) in this directory")
            paths.extend(found)
        else:
            paths.append(given)
    return paths


def _check_identity(path: Path, report: VerifyReport, target: str, vllm: str, digest: str) -> None:
    """The report verified this very image: same target, vLLM release and digest."""
    if report.target != target:
        raise ForgeError(f"{path}: target: the report verified {report.target!r}, "
                         f"not {target!r} (--target)")
    if not _same_release(report.vllm, vllm):
        raise ForgeError(f"{path}: vllm: the report verified vLLM {report.vllm!r}, "
                         f"not {vllm!r} (--vllm)")
    if not report.image_digest:
        raise ForgeError(f"{path}: image_digest: the report names no image digest (run "
                         "verify/mtp_smoke.py with --image-digest or $VLLM_FORGE_IMAGE_DIGEST)")
    if report.image_digest != digest:
        raise ForgeError(f"{path}: image_digest: the report verified {report.image_digest}, "
                         f"not {digest} (--digest)")


def _same_release(reported, vllm: str) -> bool:
    """Same release; a local build label (`0.27.1+cu130`) is the same release."""
    from packaging.version import InvalidVersion, Version

    try:
        return isinstance(reported, str) and Version(reported).public == Release(vllm).version.public
    except InvalidVersion:
        return False


def _check_device(path: Path, report: VerifyReport) -> None:
    """A report of an engine on another device than a GPU (`device`: cpu, build.py smoke --device
    cpu) proves the release's code, never an image: refused before anything else is read."""
    if report.device != "cuda":
        raise VerifyNotPassed(f"{path}: device: the report ran on {visible(report.device)}, not a GPU: a CPU "
                              "smoke proves the release's code, never an image; nothing recorded, moving "
                              "tag not moved")


def _check_passed(path: Path, report: VerifyReport) -> None:
    """Re-derive the verdict from the checks, by the rule verify wrote it by (forge.verify_report)."""
    unmet = unmet_gates([entry.check() for entry in report.checks])
    if unmet:
        claim = " (its passed: true is contradicted by its checks)" if report.passed else ""
        raise VerifyNotPassed(f"{path}: verify did not pass{claim}: {'; '.join(unmet)}; "
                              "nothing recorded, moving tag not moved")
    if not report.passed:
        # Its writer said no: two readings that disagree are not a pass either.
        raise VerifyNotPassed(f"{path}: passed: the report says false although its checks pass; "
                              "nothing recorded, moving tag not moved")


def _report_name(path: Path, report: VerifyReport) -> str:
    return report.recipe or path.stem


def _report_summary(report: VerifyReport) -> dict:
    """The headline of one report: its verdict, its own summary or scalars, and failed checks."""
    summary: dict = {"passed": report.passed}
    if report.summary is not None:
        summary.update(report.summary)
    else:
        # what the report itself holds (exclude_unset: no default stands in for a field)
        scalars = report.model_dump(exclude_unset=True, exclude={"passed", "checks", "versions", "summary"})
        summary.update({k: v for k, v in scalars.items() if isinstance(v, (str, int, float, bool))})
    statuses = [entry.status for entry in report.checks]
    summary["checks_passed"] = statuses.count("PASS")
    summary["checks_failed"] = [entry.name for entry in report.checks if entry.status == "FAIL"]
    return summary


def publish(target: str, vllm: str, repository: str, immutable_tag: str, digest: str,
            verify_reports: list | None, index_path: Path | str | None = None,
            move: bool = False) -> tuple[dict, dict | None]:
    """Record a pushed build in the index; with `move`, when verify passed, point its moving tag at
    the digest in the registry and then record that move (known_good). Returns (the build, the new
    known_good entry or None when the tag stays where it was). Without `move` the index records
    no move: known_good says what the registry's moving tag names, never what it could name.

    Every check that can refuse (the tag's name, the verify reports, the immutable tag naming
    another digest) runs before the index or the registry is touched.
    """
    from forge import image_names

    if not _DIGEST.fullmatch(digest):
        raise ForgeError(f"--digest: not a sha256 image digest (sha256:<64 hex>): {digest!r}")
    moving = image_names.moving_tag(target, vllm)
    if not immutable_tag.startswith(moving + "-"):
        raise ForgeError(f"--immutable-tag {immutable_tag!r} is not a {target} vLLM {vllm} tag "
                         f"(expected {moving}-<hash>)")
    verify = verify_result(verify_reports, target, vllm, digest)
    index = load_index(index_path)
    build = record_build(index, {
        "target": target, "vllm": vllm, "repository": repository,
        "immutable_tag": immutable_tag, "digest": digest, "published_at": now_utc(),
        "verify": verify,
    })
    entry = promote(index, build, moving) if move else None
    if entry is not None:
        # Registry first: the index must never claim a move the registry did not make.
        from forge.images.retag import move_tag

        move_tag(reference(repository, entry["moving_tag"]), build["digest"])
    save_index(index, index_path)
    return build, entry


def known_good_entries(index: dict, target: str | None = None, vllm: str | None = None) -> list[dict]:
    """The known_good entries, only those of `target` and/or `vllm` when given."""
    return [e for e in index["known_good"]
            if (not target or e["target"] == target) and (not vllm or e["vllm"] == vllm)]
