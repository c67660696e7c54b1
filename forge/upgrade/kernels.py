"""Which GPU architectures a release's build files compile each quantized-kernel family for, read
from the sdist's CMakeLists.txt (`cuda_archs_loose_intersection(VAR "archs" ...)` lines), and
whether a target's compute capability still gets native code after an upgrade.

The branch for the target's CUDA is taken where the file tests the compiler version
(`if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0)` ... `else()`); any other
condition counts as true (the CUDA build path). The last request of a variable on the taken
branches wins, as CMake's last `set` does.

Native code for capability C: an entry `C` or `Ca`, or a family entry `Xf` of the same major with
X <= C (one cubin for the family: vLLM builds sm_12x as `12.0f` with CUDA 13). `X+PTX` is PTX
only, which the driver compiles at load: reported apart, never as native.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import Version

from forge import files
from forge.upstream import releases

BUILD_FILE = "CMakeLists.txt"
# Kernel families by the variables that carry their architectures (the Marlin MoE kernels have
# their own variables, MARLIN_MOE_*; FP4 the FP4_SM1x0_ARCHS of each Blackwell family).
FAMILIES = {
    "Marlin": re.compile(r"MARLIN_(?!MOE_)\w*ARCHS"),
    "Marlin MoE": re.compile(r"MARLIN_MOE_\w*ARCHS"),
    "FP4": re.compile(r"FP4_\w*ARCHS"),
}
_INTERSECTION = re.compile(r'^cuda_archs_loose_intersection\(\s*(\w+)\s+"([^"]*)"')
_BRANCH = re.compile(r"^(if|elseif|else|endif)\s*\((.*)\)\s*$", re.DOTALL)
_VERSION_TEST = re.compile(r"CMAKE_CUDA_COMPILER_VERSION\}?\s+VERSION_(GREATER_EQUAL|GREATER|"
                           r"LESS_EQUAL|LESS|EQUAL)\s+([0-9.]+)")
_COMPARE = {"GREATER_EQUAL": Version.__ge__, "GREATER": Version.__gt__,
            "LESS_EQUAL": Version.__le__, "LESS": Version.__lt__, "EQUAL": Version.__eq__}


@dataclass(frozen=True)
class ArchRequest:
    variable: str
    archs: tuple[str, ...]     # as the file writes them: 8.0+PTX, 12.0f, 12.1a, 9.0
    line: int                  # 1-based line in CMakeLists.txt

    @property
    def text(self) -> str:
        return ";".join(self.archs)


@dataclass(frozen=True)
class KernelBuild:
    """One variable of one family in the two releases, for the target's capability."""
    family: str
    variable: str
    before: ArchRequest | None       # None: the release's file has no such request
    after: ArchRequest | None
    capability: str                  # the target's, e.g. "12.1"

    @property
    def native_before(self) -> bool:
        return native_for(self.before, self.capability)

    @property
    def native_after(self) -> bool:
        return native_for(self.after, self.capability)

    @property
    def ptx_after(self) -> list[str]:
        return ptx_for(self.after, self.capability)

    @property
    def changed(self) -> bool:
        return (self.before.archs if self.before else None) != (self.after.archs if self.after else None)

    @property
    def lost(self) -> bool:
        return self.native_before and not self.native_after

    @property
    def gained(self) -> bool:
        return self.native_after and not self.native_before

    def to_dict(self) -> dict:
        def side(request):
            return None if request is None else {"archs": request.text, "line": request.line}
        return {"family": self.family, "variable": self.variable, "from": side(self.before),
                "to": side(self.after), "native_from": self.native_before,
                "native_to": self.native_after}


def ptx_for(request: ArchRequest | None, capability: str) -> list[str]:
    """The `X+PTX` entries whose PTX the driver can compile for the capability (X <= it)."""
    if request is None:
        return []
    wanted = Version(capability)
    return [a for a in request.archs if a.endswith("+PTX") and Version(a[:-4]) <= wanted]


def native_for(request: ArchRequest | None, capability: str) -> bool:
    if request is None:
        return False
    wanted = Version(capability)
    for arch in request.archs:
        if arch.endswith("+PTX"):
            continue
        base = Version(arch.rstrip("af"))
        if arch.endswith("f") and base.major == wanted.major and base <= wanted:
            return True
        if base == wanted:
            return True
    return False


def statements(text: str):
    """(line number, statement) of a CMake file: comments dropped, a call over several lines
    joined into one (its parentheses balanced outside quoted strings)."""
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = _without_comment(raw).strip()
        if not line and not pending:
            continue
        if not pending:
            start = number
        pending = f"{pending} {line}".strip()
        unquoted = re.sub(r'"[^"]*"', "", pending)
        if unquoted.count("(") <= unquoted.count(")"):
            yield start, pending
            pending = ""


def _without_comment(line: str) -> str:
    """The line up to its first `#` outside a quoted string (CMake's line comment)."""
    quoted = False
    for index, char in enumerate(line):
        if char == '"':
            quoted = not quoted
        elif char == "#" and not quoted:
            return line[:index]
    return line


def _condition(text: str, cuda: Version) -> bool:
    tests = _VERSION_TEST.findall(text)
    if not tests:
        return True                    # not about the compiler: the CUDA build path takes it
    results = [_COMPARE[op](cuda, Version(bound)) for op, bound in tests]
    return any(results) if " OR " in text else all(results)


def arch_requests(text: str, cuda: str) -> dict[str, ArchRequest]:
    """variable -> its request on the branches CUDA `cuda` takes (the last one wins)."""
    version, found = Version(cuda), {}
    stack: list[list[bool]] = []       # [this branch active, some branch taken] per open if
    for number, statement in statements(text):
        branch = _BRANCH.match(statement)
        active = all(level[0] for level in stack)
        if branch:
            word, condition = branch.groups()
            if word == "if":
                taken = _condition(condition, version)
                stack.append([taken, taken])
            elif word == "elseif" and stack:
                taken = not stack[-1][1] and _condition(condition, version)
                stack[-1] = [taken, stack[-1][1] or taken]
            elif word == "else" and stack:
                stack[-1] = [not stack[-1][1], True]
            elif word == "endif" and stack:
                stack.pop()
            continue
        request = _INTERSECTION.match(statement)
        if request and active:
            archs = tuple(a for a in request.group(2).split(";") if a)
            found[request.group(1)] = ArchRequest(request.group(1), archs, number)
    return found


def release_arch_requests(version: str, cuda: str) -> dict[str, ArchRequest]:
    path = releases.release_build_file(version, BUILD_FILE)
    if path is None:
        return {}
    return arch_requests(files.read_text(path, files.SOURCE, errors="replace"), cuda)


def family_of(variable: str) -> str | None:
    return next((name for name, pattern in FAMILIES.items() if pattern.fullmatch(variable)), None)


def compare_builds(before: str, after: str, cuda: str, capability: str) -> list[KernelBuild]:
    """Every kernel-family variable of either release, in family order then name."""
    old, new = release_arch_requests(before, cuda), release_arch_requests(after, cuda)
    builds = [KernelBuild(family, name, old.get(name), new.get(name), capability)
              for name in sorted(set(old) | set(new)) if (family := family_of(name))]
    order = list(FAMILIES)
    return sorted(builds, key=lambda b: (order.index(b.family), b.variable))


def family_native(builds: list[KernelBuild], family: str) -> tuple[bool, bool]:
    """(before, after): whether any variable of `family` gives the capability native code."""
    mine = [b for b in builds if b.family == family]
    return any(b.native_before for b in mine), any(b.native_after for b in mine)
