"""Print each requirement of the named requirements files that this Python does not satisfy, one
per line. .ci/run runs pip only when this prints something: pip takes seconds to find that a kept
machine has everything. Without `packaging` nothing can be judged: every requirement is printed."""
import importlib.metadata
import sys


def requirement_lines(paths: list[str]) -> list[str]:
    lines = []
    for path in paths:
        with open(path) as f:
            lines += [line.split("#", 1)[0].strip() for line in f]
    return [line for line in lines if line]


def missing(lines: list[str]) -> list[str]:
    try:
        from packaging.requirements import Requirement
    except ImportError:
        return lines
    unmet = []
    for line in lines:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        try:
            installed = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            unmet.append(line)
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            unmet.append(line)
    return unmet


if __name__ == "__main__":
    print("\n".join(missing(requirement_lines(sys.argv[1:]))))
