"""What code a release's kernel build gives a target's GPU, read from the sdist as vLLM's CMake
computes it, never by running it:

1. The architectures a release image is built for: the `torch_cuda_arch_list` of vLLM's release
   pipeline (.buildkite/release-pipeline.yaml `env:` CUDA_ARCH_X86 / CUDA_ARCH_AARCH64, the
   `_CU129` lists for CUDA 12), filtered by the CMakeLists.txt's CUDA_SUPPORTED_ARCHS for the
   target's CUDA (`cuda_archs_loose_intersection(CUDA_ARCHS ...)`).
2. Each kernel variable's request (`cuda_archs_loose_intersection(VAR "archs" "${CUDA_ARCHS}")`)
   intersected with that list the way cmake/utils.cmake's function does (`loose_intersection`).
3. What the gencode flags give a compute capability C (cmake/utils.cmake
   set_gencode_flags_for_srcs): `X.Y` a cubin sm_XY, which runs on the same major at minor >= Y;
   `X.Y+PTX` that cubin and the compute_XY PTX, which the driver compiles at load on any C >= X.Y;
   `X.Ya` a cubin for exactly X.Y; `X.Yf` one cubin for the family (same major, minor >= Y).
   Per variable: native (a cubin runs), ptx (only PTX the driver JIT-compiles), or absent.

The branch for the target's CUDA is taken where the file tests the compiler version
(`if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0)` ... `else()`); any other
condition counts as true (the CUDA build path). The last request of a variable on the taken
branches wins, as CMake's last `set` does. The intersection follows 0.34.0's cmake/utils.cmake;
0.27.1's differs in how an `f` entry whose base the build list lacks falls back within its major
(any remaining arch of that major, not only one at or above it) and in keeping a plain entry a
suffixed build arch matched: with the pipeline's plain lists, where each major's base arch is
taken by its own `X.0f` entry first, the Marlin and FP4 requests of 0.21.0-0.34.0 give the same.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import Version

from forge import data_formats, files
from forge.upstream import releases

BUILD_FILE = "CMakeLists.txt"
PIPELINE_FILE = ".buildkite/release-pipeline.yaml"
# The pipeline's arch-list variable per image platform (CUDA 13; `_CU129` appended for CUDA 12).
PIPELINE_LISTS = {"linux/amd64": "CUDA_ARCH_X86", "linux/arm64": "CUDA_ARCH_AARCH64"}
SUPPORTED = "CUDA_SUPPORTED_ARCHS"
# Kernel families by the variables that carry their architectures. Marlin's FP8-activation
# kernels (MARLIN_FP8_ARCHS, MARLIN_MOE_FP8_ARCHS: "marlin arches for fp8 input", sm89_kernel_*,
# 0.27.1 CMakeLists.txt) are a family of their own: the W4A16 and W8A16 paths take 16-bit
# activations through the sm80 kernels; 0.34.0 deletes them in favour of Humming.
FAMILIES = {
    "Marlin": re.compile(r"MARLIN_(?!MOE_|FP8_)\w*ARCHS"),
    "Marlin FP8-activation": re.compile(r"MARLIN_FP8_ARCHS"),
    "Marlin MoE": re.compile(r"MARLIN_MOE_(?!FP8_)\w*ARCHS"),
    "Marlin MoE FP8-activation": re.compile(r"MARLIN_MOE_FP8_ARCHS"),
    "FP4": re.compile(r"FP4_\w*ARCHS"),
}
NATIVE, PTX, ABSENT = "native", "ptx", "absent"
STATE_WORDS = {NATIVE: "native", PTX: "PTX-JIT only", ABSENT: "absent"}
_RANK = {ABSENT: 0, PTX: 1, NATIVE: 2}
_INTERSECTION = re.compile(r'^cuda_archs_loose_intersection\(\s*(\w+)\s+"([^"]*)"')
_SUPPORTED_SET = re.compile(r'^set\(\s*' + SUPPORTED + r'\s+"([^"]*)"')
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
class BuildList:
    """The architectures a release image is compiled for (CUDA_ARCHS after the supported filter)."""
    archs: tuple[str, ...]
    source: str                # where the list came from, for the report

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
    built_before: tuple[str, ...] = ()   # the request intersected with the release's build list
    built_after: tuple[str, ...] = ()

    @property
    def state_before(self) -> str:
        return device_state(self.built_before, self.capability)

    @property
    def state_after(self) -> str:
        return device_state(self.built_after, self.capability)

    @property
    def native_before(self) -> bool:
        return self.state_before == NATIVE

    @property
    def native_after(self) -> bool:
        return self.state_after == NATIVE

    @property
    def changed(self) -> bool:
        return (self.before.archs if self.before else None) != (self.after.archs if self.after else None)

    @property
    def lost(self) -> bool:
        return _RANK[self.state_after] < _RANK[self.state_before]

    @property
    def gained(self) -> bool:
        return _RANK[self.state_after] > _RANK[self.state_before]

    def to_dict(self) -> dict:
        def side(request, built):
            return None if request is None else {"archs": request.text, "line": request.line,
                                                 "built": ";".join(built)}
        return {"family": self.family, "variable": self.variable,
                "from": side(self.before, self.built_before),
                "to": side(self.after, self.built_after),
                "state_from": self.state_before, "state_to": self.state_after,
                "native_from": self.native_before, "native_to": self.native_after}


def _split(arch: str) -> tuple[Version, str, bool]:
    """(base version, suffix a/f/'', +PTX) of an entry such as 8.0+PTX, 12.0f, 9.0a."""
    ptx = arch.endswith("+PTX")
    core = arch[:-4] if ptx else arch
    suffix = core[-1] if core[-1:] in ("a", "f") else ""
    return Version(core.rstrip("af")), suffix, ptx


def device_state(built: tuple[str, ...] | list[str], capability: str) -> str:
    """native, ptx or absent: what the gencode flags of `built` give compute capability C."""
    wanted = Version(capability)
    state = ABSENT
    for arch in built:
        base, suffix, ptx = _split(arch)
        same_major = base.major == wanted.major and base <= wanted
        if (suffix == "a" and base == wanted) or (suffix != "a" and same_major):
            return NATIVE
        if ptx and base <= wanted:
            state = PTX
    return state


def _major(text: str) -> str:
    return text.split(".", 1)[0]


def loose_intersection(source: list[str] | tuple[str, ...], target: list[str] | tuple[str, ...]
                       ) -> list[str]:
    """cmake/utils.cmake's cuda_archs_loose_intersection(OUT SRC TGT), step by step: per TGT arch
    the highest SRC arch not above it (same major, or any major for a +PTX entry), `a`/`f`
    entries matched by base first, then cross-suffix, then within the family; +PTX put back."""
    ptx_bases = [a[:-4] for a in source if a.endswith("+PTX")]
    src = list(dict.fromkeys(a[:-4] if a.endswith("+PTX") else a for a in source))
    tgt, out = list(target), []
    for arch in [a for a in src if a[-1:] in ("a", "f")]:
        base = arch[:-1]
        if base in tgt:
            src.remove(arch)
            tgt = [t for t in tgt if t not in (base, base + "a", base + "f")]
            out.append(arch)
    family_bases = []
    for arch in [a for a in src if a[-1:] in ("a", "f")]:
        src.remove(arch)
        base = arch[:-1]
        if base + "a" in tgt:
            tgt.remove(base + "a")
            out.append(base + "a")
        elif base + "f" in tgt:
            tgt.remove(base + "f")
            out.append(base + "f")
        elif arch.endswith("f"):
            family_bases.append(base)
    for base in sorted(family_bases, key=Version, reverse=True):
        for t in list(tgt):
            t_base = t.rstrip("af")
            if _major(t_base) == _major(base) and Version(t_base) >= Version(base):
                tgt.remove(t)
                out.append(t)
                break
    for t in list(tgt):
        if t[-1:] in ("a", "f") and t[:-1] in src:
            tgt.remove(t)
            out.append(t)
            if t[:-1] not in tgt:
                src.remove(t[:-1])
    src.sort(key=Version)
    for t in tgt:
        chosen = None
        for s in src:
            if Version(s) <= Version(t.rstrip("af")):
                if s in ptx_bases or _major(s) == _major(t):
                    chosen = s
            else:
                break
        if chosen:
            out.append(chosen)
    out = list(dict.fromkeys(out))
    return [f"{a}+PTX" if a in ptx_bases else a for a in out]


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
    """variable -> its request on the branches CUDA `cuda` takes (the last one wins); the
    supported-architecture list is kept under CUDA_SUPPORTED_ARCHS."""
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
        if not active:
            continue
        request = _INTERSECTION.match(statement)
        supported = _SUPPORTED_SET.match(statement)
        if request:
            archs = tuple(a for a in request.group(2).split(";") if a)
            found[request.group(1)] = ArchRequest(request.group(1), archs, number)
        elif supported:
            archs = tuple(a for a in supported.group(1).split(";") if a)
            found[SUPPORTED] = ArchRequest(SUPPORTED, archs, number)
    return found


def release_arch_requests(version: str, cuda: str) -> dict[str, ArchRequest]:
    path = releases.release_build_file(version, BUILD_FILE)
    if path is None:
        return {}
    return arch_requests(files.read_text(path, files.SOURCE, errors="replace"), cuda)


def pipeline_archs(version: str, platform: str, cuda: str) -> tuple[list[str], str] | None:
    """(torch_cuda_arch_list of the release pipeline for the platform and CUDA, where it is read),
    or None where the sdist has no pipeline file or no such list. A `+PTX` there is dropped, as
    CMake drops it ("top-level +PTX is stripped", the pipeline file's own comment)."""
    name = PIPELINE_LISTS.get(platform)
    path = releases.release_build_file(version, PIPELINE_FILE)
    if name is None or path is None:
        return None
    data = data_formats.load_yaml(path, files.SOURCE)
    env = data.get("env") if isinstance(data, dict) else None
    if not isinstance(env, dict):
        return None
    if Version(cuda).major < 13 and f"{name}_CU129" in env:
        name = f"{name}_CU129"
    listed = env.get(name)
    if not isinstance(listed, str):
        return None
    return [a.replace("+PTX", "") for a in listed.split()], f"{PIPELINE_FILE} {name}"


def build_list(version: str, requests: dict[str, ArchRequest], platform: str, cuda: str,
               capability: str) -> BuildList:
    """What the release image for the platform compiles for: the pipeline's list filtered by the
    supported list; where the sdist names no pipeline list, the target's capability alone."""
    found = pipeline_archs(version, platform, cuda)
    wanted, source = found if found else ([capability], "the target's capability (no pipeline list)")
    supported = requests.get(SUPPORTED)
    archs = loose_intersection(supported.archs, wanted) if supported else wanted
    return BuildList(tuple(archs), source)


def family_of(variable: str) -> str | None:
    return next((name for name, pattern in FAMILIES.items() if pattern.fullmatch(variable)), None)


def compare_builds(before: str, after: str, cuda: str, capability: str,
                   platform: str = "linux/amd64") -> list[KernelBuild]:
    """Every kernel-family variable of either release, in family order then name."""
    old, new = release_arch_requests(before, cuda), release_arch_requests(after, cuda)
    old_list = build_list(before, old, platform, cuda, capability)
    new_list = build_list(after, new, platform, cuda, capability)

    def built(request, archs):
        return tuple(loose_intersection(request.archs, archs.archs)) if request else ()
    builds = [KernelBuild(family, name, old.get(name), new.get(name), capability,
                          built(old.get(name), old_list), built(new.get(name), new_list))
              for name in sorted(set(old) | set(new)) if (family := family_of(name))]
    order = list(FAMILIES)
    return sorted(builds, key=lambda b: (order.index(b.family), b.variable))


def family_states(builds: list[KernelBuild], family: str) -> tuple[str, str]:
    """(before, after): the family's state for the capability, the best its variables give
    (the variables of one family are kernels of one job for different dtypes or shapes; which
    one a layer takes is in KernelBuild's per-variable states)."""
    mine = [b for b in builds if b.family == family]
    def best(states):
        return max(states, key=_RANK.__getitem__, default=ABSENT)
    return best(b.state_before for b in mine), best(b.state_after for b in mine)


def family_native(builds: list[KernelBuild], family: str) -> tuple[bool, bool]:
    """(before, after): whether any variable of `family` gives the capability native code."""
    before, after = family_states(builds, family)
    return before == NATIVE, after == NATIVE
