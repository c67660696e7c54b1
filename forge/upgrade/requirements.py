"""What the two releases declare on each package (requirements/cuda.txt and its includes, markers
evaluated for a Linux CUDA image as forge.patching.dependencies does), the pins and constraints
that change, and, per watched dependency (patches/dependency-watch.yaml), how far the drift check
went, the constraints that keep a known break out on the new release and the drift records
(benchmarks/results, kind drift) measured on it."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from forge.patching import dependencies
from forge.patching.dependencies import REQUIREMENTS_ENTRY
from forge.patching.vocabulary import Kind
from forge.upgrade.evidence import RESULTS_DIR, records_of


@dataclass(frozen=True)
class RequirementChange:
    package: str
    before: str | None         # the specifier text ("" for any version); None: not required
    after: str | None

    def to_dict(self) -> dict:
        return {"package": self.package, "from": self.before, "to": self.after}

    def line(self, before: str, after: str) -> str:
        def spell(spec):
            return "not required" if spec is None else (spec or "any version")
        return f"{self.package}: {spell(self.before)} ({before}) -> {spell(self.after)} ({after})"


def declared(version: str) -> dict[str, str]:
    """package -> the combined specifier text release `version` installs it with on CUDA."""
    found: dict[str, str] = {}
    for name, lines in sorted(lines_by_package(dependencies.release_requirements(version)).items()):
        # declared_in reads only the package's own lines: each line is parsed twice in all,
        # not once per package the release names (a few hundred each)
        spec = dependencies.declared_in(lines, name, REQUIREMENTS_ENTRY).specifier
        if spec is not None:
            found[name] = str(spec)
    return found


def lines_by_package(lines: list[str]) -> dict[str, list[str]]:
    """The requirement lines grouped by the package each names (unparsable lines left out)."""
    grouped: dict[str, list[str]] = {}
    for line in lines:
        try:
            name = canonicalize_name(Requirement(line).name)
        except InvalidRequirement:
            continue
        grouped.setdefault(name, []).append(line)
    return grouped


def changed_requirements(before: str, after: str) -> list[RequirementChange]:
    old, new = declared(before), declared(after)
    return [RequirementChange(name, old.get(name), new.get(name))
            for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)]


INDEX_OPTIONS = ("--extra-index-url", "--index-url", "--find-links", "-f", "-i")


def index_options(version: str) -> dict[str, str]:
    """The package-index options of the release's CUDA requirements (requirements/cuda.txt and
    its -r includes, read as pip reads them: `--extra-index-url URL` or `=URL`) -> where
    (`requirements/cuda.txt:16`). forge.patching.dependencies drops these lines: they are no
    requirement, but say where pip looks for the pinned wheels."""
    from forge import files
    from forge.upstream import releases

    root, found, seen = releases.release_tree(version), {}, set()

    def read(name: str) -> None:
        path = root / name
        if name in seen or not path.is_file():
            return
        seen.add(name)
        for number, raw in enumerate(files.read_text(path, files.SOURCE).splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if line.startswith("-r "):
                read(str(Path(name).parent / line.split(None, 1)[1]))
            elif line.startswith(INDEX_OPTIONS):
                option, _, value = line.replace("=", " ", 1).partition(" ")
                found[f"{option} {value.strip()}"] = f"{name}:{number}"
    read(REQUIREMENTS_ENTRY)
    return found


@dataclass(frozen=True)
class IndexChange:
    option: str                 # `--extra-index-url https://flashinfer.ai/whl/`
    before: str | None          # where the old release states it (None: it does not)
    after: str | None

    def to_dict(self) -> dict:
        return {"option": self.option, "from": self.before, "to": self.after}


def index_changes(before: str, after: str) -> list[IndexChange]:
    old, new = index_options(before), index_options(after)
    return [IndexChange(option, old.get(option), new.get(option))
            for option in sorted(set(old) ^ set(new))]


@dataclass(frozen=True)
class DriftNote:
    """A watched dependency (patches/dependency-watch.yaml) on the new release: how far the drift
    check went, what the release admits past it, and the constraints that keep a known break out."""
    package: str
    checked_through: str
    declared: str | None               # the new release's specifier on it (None: not required)
    unchecked: list[str]               # admitted published versions newer than checked_through
    covering: list[str]                # constraint ids in range on the new release
    fixed: list[str]                   # constraint ids in range on the old release only
    records: list[str]                 # "id: verdict" of the drift records on the new release
    newest_checked: str | None = None  # the newest admitted published version <= checked_through
    newest_published: str | None = None   # the newest final release on the index

    def to_dict(self) -> dict:
        return {"package": self.package, "checked_through": self.checked_through,
                "declared": self.declared, "unchecked": self.unchecked,
                "covering_constraints": self.covering, "no_longer_needed": self.fixed,
                "records": self.records, "newest_checked": self.newest_checked,
                "newest_published": self.newest_published}

    def brief(self, release: str) -> str:
        """The newest admitted version the check reached, and what is newer."""
        checked = f"checked through {self.newest_checked}" if self.newest_checked else \
            "no admitted version checked"
        if self.unchecked:
            newer = f"; newer, admitted, unchecked: {', '.join(self.unchecked)}"
        elif self.newest_published and self.newest_checked and \
                Version(self.newest_published) > Version(self.newest_checked):
            newer = f", the newest {release} admits; {self.newest_published} is out, not admitted"
        else:
            newer = ", the newest out"
        return f"drift {self.package}: {checked}{newer}"

    def line(self, release: str) -> str:
        """What the drift check covers on `release`: the newest admitted version it checked, and
        what is newer (admitted and unchecked, or published but outside the release's range)."""
        covered = (f"known break kept out by {', '.join(self.covering)}" if self.covering
                   else "no constraint on it applies")
        fixed = f"; {', '.join(self.fixed)} no longer applies" if self.fixed else ""
        checked = (f"checked through {self.newest_checked}, the newest {release} admits that the "
                   f"check reached" if self.newest_checked else "no admitted version checked")
        if self.unchecked:
            newer = f"; newer, admitted, not checked: {', '.join(self.unchecked)}"
        elif self.newest_published and self.newest_checked and \
                Version(self.newest_published) > Version(self.newest_checked):
            newer = f"; {self.newest_published} is out, outside what {release} admits"
        else:
            newer = "; nothing newer is out"
        records = f"; records: {', '.join(self.records)}" if self.records else \
            f"; no drift record on {release}"
        return (f"drift {self.package} ({self.declared or 'not required'}): {checked}{newer}; "
                f"{covered}{fixed}{records}")


def drift_notes(before: str, after: str, series, watch, offline: bool = False) -> list[DriftNote]:
    from packaging.specifiers import SpecifierSet

    from forge.upstream import pypi

    notes = []
    for entry in watch.dependencies:
        name = canonicalize_name(entry.package)
        spec = dependencies.release_declares(after, name, offline=offline).specifier
        published = pypi.published_versions(name, offline=offline)
        through = Version(entry.checked_through)
        admitted = SpecifierSet(str(spec)) if spec is not None else SpecifierSet()
        constraints = [p for p in series.patches if p.kind == Kind.DEPENDENCY and p.package == name]
        covering = [p for p in constraints if p.in_range(Version(after))]
        fixed = [p.id for p in constraints if p.in_range(Version(before)) and p not in covering]
        # What an image of `after` may carry past the drift check: admitted, newer, and let
        # through by every constraint in range there.
        allowed = [v for v in admitted.filter(published)
                   if all(p.specifier.contains(v, prereleases=True) for p in covering)]
        unchecked = [str(v) for v in allowed if v > through]
        checked = [v for v in allowed if v <= through]
        finals = [v for v in published if not v.is_prerelease]
        notes.append(DriftNote(entry.package, entry.checked_through,
                               None if spec is None else str(spec), unchecked,
                               [p.id for p in covering], fixed,
                               drift_records(name, after),
                               str(max(checked)) if checked else None,
                               str(max(finals)) if finals else None))
    return notes


def drift_records(package: str, release: str, results: Path = RESULTS_DIR) -> list[str]:
    """"id: verdict" of the drift records of `package` on `release` (a record names its package
    in settings.package or its command's --package; `build.py drift` checks transformers
    without one)."""
    found = []
    for record in records_of("drift", release, results):
        command = record.command.split()
        named = record.settings.get("package") or (command[command.index("--package") + 1]
                                                   if "--package" in command[:-1] else "transformers")
        if canonicalize_name(str(named)) == canonicalize_name(package):
            found.append(f"{record.id}: {record.verdict}")
    return found
