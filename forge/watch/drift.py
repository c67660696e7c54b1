"""Dependency drift: does a published version of a dependency break Gemma 4 serving on a vLLM
release the patch series supports?

For one version of a dependency (today: transformers) the check installs that version from PyPI
into a cached environment (forge.upstream.pyenvs), writes the Gemma 4 target and assistant configs
(models/gemma4.yaml, as --dummy writes them), and runs each supported release's own engine-start code on them
(forge/watch/drift_probe.py: the code is taken from the real release sources). Per release:

    works                  the release's code computes the model's head size
    breaks                 it raises (the exception type, message and release line are kept)
    covered-by-constraint  it raises, but a `kind: dependency` entry of patches/series.yaml keeps
                           this version out of that release (the image build and `build.py apply`
                           install a version inside the constraint)
    excluded-by-vllm       the release's own declared requirement (requirements/cuda.txt and what
                           it includes) keeps this version out, so pip never pairs them
    probe-error            the probe could not run the release's code: a failed check, never a pass

A version that `breaks` a supported release is a finding: `build.py drift` exits 1 and
`build.py upstream-watch` opens an issue. A version the index cannot install (one of its own
requirements is met by no published release: forge.upstream.pyenvs.UninstallableError) is not
checked at all: the report says so (`uninstallable`, no per-release results), `build.py drift`
exits 2, and the upstream watch records it without counting it as checked.

Known case (vLLM issues #51744, #52768): transformers 5.15.0 makes Gemma 4's text config
heterogeneous (`per_layer_config`), reading `config.head_dim` raises
AmbiguousGlobalPerLayerAttributeError (a RuntimeError, which getattr's default does not absorb),
and vLLM 0.21.0-0.27.1 read it in `get_head_size` of
vllm/transformers_utils/model_arch_config_convertor.py; 0.28.0 resolves layers itself
(vllm/transformers_utils/configs/gemma4.py, `gemma4_layer_config`, vLLM PR #49797).
Release lines and declared requirements: docs/reference.md §7.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from forge.errors import ForgeError
from forge.json_text import dump_json
from forge.patching.vocabulary import Kind

PROBE_SCRIPT = Path(__file__).resolve().parent / "drift_probe.py"
TREE_CHANGED_EXIT = 3     # drift_probe.py's exit for a tree file its manifest does not hold
PROBE_TIMEOUT_S = 600
# Which reproduction covers which dependency (the watch list names them: forge/watch/dependencies.py).
PROBES = {"transformers": "gemma4-config"}
FINDING_EXIT = 1


@dataclass
class ReleaseResult:
    release: str
    outcome: str                   # works | breaks | probe-error: what the release's code did
    verdict: str                   # outcome, or covered-by-constraint / excluded-by-vllm
    constraint: str | None = None  # id of the series entry that keeps the version out
    declared: str = ""             # the release's own specifier for the package
    models: dict = field(default_factory=dict)   # "target"/"assistant" -> the probe's result


@dataclass
class DriftReport:
    package: str
    version: str
    probe: str
    results: list[ReleaseResult]
    environment: list[str] = field(default_factory=list)   # what pip installed next to it
    # Why the version was not checked: "cannot be installed from the index: it requires ..."
    uninstallable: str | None = None

    @property
    def findings(self) -> list[ReleaseResult]:
        return [r for r in self.results if r.verdict == "breaks"]

    @property
    def probe_errors(self) -> list[ReleaseResult]:
        return [r for r in self.results if r.verdict == "probe-error"]

    def to_dict(self) -> dict:
        return {**asdict(self), "findings": [r.release for r in self.findings]}


# --- which releases, which constraints ---------------------------------------------------------

def supported_releases(series, offline: bool = False, extra: tuple[str, ...] | list[str] = ()) -> list[str]:
    """Releases on PyPI from the series' checked_from through checked_through (plus `extra`,
    releases the upstream watch is about to add)."""
    from forge.upstream import releases

    low, high = Version(series.checked_from), Version(series.checked_through)
    found = {str(v) for v in releases.list_releases(offline=offline) if low <= v <= high}
    return sorted(found | set(extra), key=Version)


def dependency_constraints(series, package: str) -> list:
    """The series' `kind: dependency` entries for `package` (Patch.package, Patch.specifier)."""
    name = canonicalize_name(package)
    return [p for p in series.patches
            if p.kind == Kind.DEPENDENCY and canonicalize_name(p.package) == name]


def covering_constraint(constraints: list, release: str, version: str):
    """The constraint that keeps `version` out of `release`, if any."""
    for constraint in constraints:
        if constraint.in_range(Version(release)) and not SpecifierSet(str(constraint.specifier)) \
                .contains(Version(version), prereleases=True):
            return constraint
    return None


def declared_specifier(release: str, package: str, offline: bool = False) -> SpecifierSet:
    """What the release itself requires of the package (forge.patching.dependencies: its sdist's
    requirements/cuda.txt); an empty set when it names the package nowhere."""
    from forge.patching.dependencies import release_declares

    declared = release_declares(release, package, offline=offline).specifier
    return SpecifierSet() if declared is None else declared


def final_versions(package: str, newer_than: str | None = None, offline: bool = False) -> list[Version]:
    """Final releases of the package on the index (forge.upstream.pypi), oldest first; only those after
    `newer_than` when given."""
    from forge.upstream import pypi

    found = sorted(v for v in pypi.published_versions(package, offline=offline)
                   if not (v.is_prerelease or v.is_devrelease))
    return [v for v in found if newer_than is None or v > Version(newer_than)]


def newest_version(package: str, offline: bool = False) -> str:
    found = final_versions(package, offline=offline)
    if not found:
        raise ForgeError(f"the package index lists no final release of {package}")
    return str(found[-1])


# --- running the reproduction ----------------------------------------------------------------

def probe_for(package: str) -> str:
    name = canonicalize_name(package)
    if name not in PROBES:
        raise ForgeError(f"no drift reproduction for {package!r} (known: {', '.join(sorted(PROBES))})")
    return PROBES[name]


def run_probe(python: Path, trees: dict[str, Path],
              manifests: dict[str, dict[str, str]] | None = None, offline: bool = False) -> dict:
    """Run forge/watch/drift_probe.py in the environment of `python` over the given release trees:
    {"transformers": VERSION, "releases": {release: {role: answer}}}. A release whose answer is
    kept (forge/watch/probe_cache.py) and still holds is not asked again; with none to ask, the
    probe does not start. The probe runs a file of a tree only as `manifests` lists it (default:
    as each release's sdist held it, forge.upstream.releases.tree_manifest)."""
    from forge.models import first_dummy
    from forge.upstream import releases
    from forge.watch import probe_cache

    family, model = first_dummy()
    with tempfile.TemporaryDirectory(prefix="forge-drift-") as tmp:
        target_dir, assistant_dir = family.write_dummy_models(tmp, shape=model.name)
        models = {"target": str(target_dir), "assistant": str(assistant_dir)}
        assistant_type = family.config_types["assistant"]
        keys = probe_cache.keys(python, PROBE_SCRIPT, assistant_type, models, trees)
        kept = {r: probe_cache.load(keys[r], t, list(models)) for r, t in trees.items()}
        missing = {r: str(t) for r, t in trees.items() if kept[r] is None}
        raw: dict = {"transformers": next((found[0] for found in kept.values() if found), None)}
        if missing or not trees:
            listed = manifests or {}
            raw = _launch(python, {"models": models, "assistant_type": assistant_type,
                                   "releases": missing,
                                   "manifests": {r: listed[r] if r in listed else
                                                 releases.tree_manifest(r, offline) for r in missing}})
            for release in missing:
                probe_cache.store(keys[release], release, trees[release], raw["transformers"],
                                  raw["releases"][release], raw["read"][release], tmp)
    return {"transformers": raw["transformers"],
            "releases": {r: found[1] if found else raw["releases"][r] for r, found in kept.items()}}


def _launch(python: Path, request: dict) -> dict:
    try:
        done = subprocess.run([str(python), str(PROBE_SCRIPT)], input=dump_json(request),
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise ForgeError(f"{PROBE_SCRIPT.name}: no answer in {PROBE_TIMEOUT_S} s") from exc
    last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
    if done.returncode == TREE_CHANGED_EXIT:
        raise ForgeError(f"{PROBE_SCRIPT.name}: refused to run a changed release tree: "
                         f"{last.removeprefix('error: ')}")
    if done.returncode != 0:
        raise ForgeError(f"{PROBE_SCRIPT.name} failed under {python}: {last}")
    return json.loads(done.stdout)


def check(package: str, version: str, series, releases_to_check: list[str] | None = None,
          offline: bool = False) -> DriftReport:
    """Run the reproduction for package==version against every supported release."""
    from forge.upstream import pyenvs, releases

    probe = probe_for(package)
    targets = releases_to_check or supported_releases(series, offline=offline)
    pyenvs.env_dir(package, version)  # a bad version fails here, before any download
    trees = {r: releases.release_tree(r, offline=offline).resolve() for r in targets}
    try:
        python = real_location(pyenvs.package_env(package, version, offline=offline))
    except pyenvs.UninstallableError as exc:
        return DriftReport(package, version, probe, [], uninstallable=exc.reason)
    raw = run_probe(python, trees, offline=offline)
    if Version(raw["transformers"]) != Version(version):
        raise ForgeError(f"{python}: the probe ran transformers {raw['transformers']}, not {version}")
    constraints = dependency_constraints(series, package)
    results = [_verdict(release, raw["releases"][release], constraints, version,
                        declared_specifier(release, package, offline=offline))
               for release in targets]
    return DriftReport(package, version, probe, results, pyenvs.installed_set(python))


def real_location(python: Path) -> Path:
    """The environment's python under the environment's real folder. The probe's answers are
    kept by the paths of the environment and the trees (probe_cache.keys), and name the trees'
    files: a cache reached through a symlink, or one that links another cache's envs/ and trees/,
    then finds the answers that cache keeps. The python itself stays the venv's own link (run
    through its target it would not be the venv)."""
    return python.parent.parent.resolve() / python.parent.name / python.name


def _verdict(release: str, models: dict, constraints: list, version: str,
             declared: SpecifierSet) -> ReleaseResult:
    outcomes = {m["outcome"] for m in models.values()}
    # The worse of the two models decides: a probe error over a break over a pass.
    outcome = next((o for o in ("probe-error", "breaks") if o in outcomes), "works")
    result = ReleaseResult(release, outcome, outcome, models=models, declared=str(declared))
    constraint = covering_constraint(constraints, release, version)
    if constraint is not None:
        result.constraint = constraint.id
    if outcome == "probe-error":
        return result  # the check did not run: never hidden behind a constraint
    if not declared.contains(Version(version), prereleases=True):
        result.verdict = "excluded-by-vllm"
    elif constraint is not None and outcome == "breaks":
        result.verdict = "covered-by-constraint"
    return result


# --- report ----------------------------------------------------------------------------------

def model_cell(model: dict) -> str:
    if model["outcome"] == "works":
        return "head size " + "/".join(map(str, model["head_sizes"]))
    error = model["error"]
    where = error.get("raised_at")
    at = f" at {where['file']}:{where['line']}" if where else ""
    return f"{error['type'].rsplit('.', 1)[-1]}{at}"


def render(report: DriftReport) -> str:
    heading = (f"{report.package} {report.version}: Gemma 4 engine-start code of each vLLM release "
               f"({report.probe} probe)")
    if report.uninstallable:
        return "\n".join([heading, "", summary(report)]) + "\n"
    roles = list(report.results[0].models) if report.results else []
    lines = [heading, "",
             "| vLLM | verdict | " + " | ".join(roles) + " |", "|---|---|" + "---|" * len(roles)]
    for result in report.results:
        verdict = result.verdict + _verdict_note(result)
        lines.append(f"| {result.release} | {verdict} | "
                     + " | ".join(model_cell(result.models[r]) for r in roles) + " |")
    lines += ["", summary(report)]
    errors = [m["error"] for r in report.results for m in r.models.values() if m.get("error")]
    if errors:
        lines += ["", f"First error: {errors[0]['type']}: {errors[0]['message']}"]
    return "\n".join(lines) + "\n"


def _verdict_note(result: ReleaseResult) -> str:
    if result.verdict == "excluded-by-vllm":
        return f" (vLLM requires `{result.declared}`)"
    if result.verdict == "covered-by-constraint":
        return f" (`{result.constraint}`)"
    return f" (also kept out by `{result.constraint}`)" if result.constraint else ""


def runs(report: DriftReport, verdict: str) -> str:
    """The releases with `verdict` as runs of neighbours: '0.28.0–0.30.0, 0.32.0–0.33.0'."""
    spans, current = [], []
    for result in report.results + [None]:
        if result is not None and result.verdict == verdict:
            current.append(result.release)
        elif current:
            spans.append(current[0] if len(current) == 1 else f"{current[0]}–{current[-1]}")
            current = []
    return ", ".join(spans)


def summary(report: DriftReport) -> str:
    if report.uninstallable:
        return f"not checked: {unchecked_line(report)}; not a pass"
    if report.probe_errors:
        return (f"probe error on vLLM {', '.join(r.release for r in report.probe_errors)}: "
                "the check did not run; not a pass")
    if report.findings:
        return (f"FINDING: {report.package} {report.version} breaks Gemma 4 on vLLM "
                f"{', '.join(r.release for r in report.findings)} and no dependency constraint "
                "in the series keeps it out")
    return f"no finding: {report.package} {report.version} breaks no supported release uncovered"


def unchecked_line(report: DriftReport) -> str:
    """'transformers 5.25.0 cannot be installed from the index: it requires ...'."""
    return f"{report.package} {report.version} {report.uninstallable}"


def refuse_probe_errors(report: DriftReport) -> None:
    """A check that could not run (a probe error, a version the index cannot install) is a
    failure (exit 2), never a version passed."""
    if report.uninstallable:
        raise ForgeError(unchecked_line(report))
    if report.probe_errors:
        first = report.probe_errors[0]
        message = next(m["error"]["message"] for m in first.models.values() if m.get("error"))
        raise ForgeError(f"drift probe error on vLLM {first.release}: {message}")
