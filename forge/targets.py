"""Hardware targets (images/targets.yaml): platform, CUDA, device names, environment and the
upstream base image for each range of vLLM releases; a target's recipes are the recipe files
(recipes/<model>.yaml) that name it.

    targets = load_targets()
    targets["gb10"].base_for("0.27.1")   # BaseImage(repo="vllm/vllm-openai", tag="v0.27.1")
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from forge import REPO_ROOT
from forge.errors import ForgeError
from forge.image_names import TARGET_NAME_MAX
from forge.schema import Field, ListOf, load_yaml, pep440_specifier, validate
from forge.versions import Release

DEFAULT_TARGETS_FILE = REPO_ROOT / "images" / "targets.yaml"
RECIPES_DIR = REPO_ROOT / "recipes"
# recipes/ holds one file that is no recipe: the upstream failures recipes are checked against.
KNOWN_FAILURES_FILE = "known-failures.yaml"
PLATFORMS = ("linux/amd64", "linux/arm64")
# A mirror that serves upstream's bases under another registry (same digests), e.g. 127.0.0.1:5000
BASE_MIRROR_ENV = "VLLM_FORGE_BASE_MIRROR"


def _dotted(example: str):
    """A check for MAJOR.MINOR numbers, its message showing the field's own kind of value."""
    def check(value: str) -> str | None:
        return None if re.fullmatch(r"\d+\.\d+", value) else f"must look like {example} (got {value!r})"
    return check


# The fields an `image:` template may name, filled by base_for: nothing else (a str.format
# template could reach any attribute: {version.__init__.__globals__...}).
IMAGE_FIELDS = ("version", "cuda")
_FIELD = re.compile(r"\{([^{}]*)\}")


def _template_problem(value: str) -> str | None:
    for match in _FIELD.finditer(value):
        name = match[1]
        if name in IMAGE_FIELDS:
            continue
        known = ", ".join(f"{{{f}}}" for f in IMAGE_FIELDS)
        if re.search(r"[.\[]", name):
            return f"{{{name}}}: attribute or index access is not allowed (fields: {known})"
        if re.search(r"[:!]", name):
            return f"{{{name}}}: format specs and conversions are not allowed (fields: {known})"
        return f"{{{name}}}: unknown field (fields: {known})"
    if "{" in _FIELD.sub("", value) or "}" in _FIELD.sub("", value):
        return "an unmatched '{' or '}' (fields are written {version})"
    return None


def fill_template(template: str, fields: dict[str, str]) -> str:
    """`template` with each {name} replaced by fields[name] (names checked on load)."""
    return _FIELD.sub(lambda match: fields[match[1]], template)


def _image_template(value: str) -> str | None:
    problem = _template_problem(value)
    if problem:
        return problem
    if ":" not in value.rsplit("/", 1)[-1]:
        return f"must name a tag, e.g. vllm/vllm-openai:v{{version}} (got {value!r})"
    if "@" in value:
        return "must be a tag, not a digest (digests live in images/lock.yaml)"
    return None


def _env_mapping(value: dict) -> str | None:
    for key, val in value.items():
        if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            return f"{key!r} is not an environment variable name"
        if not isinstance(val, str):
            return f"{key}: value must be a string (quote it)"
    return None


def _positive(value: float) -> str | None:
    return None if value > 0 else "must be positive"


def _bandwidths(value: dict) -> str | None:
    for card, gb_s in value.items():
        if isinstance(gb_s, bool) or not isinstance(gb_s, (int, float)) or gb_s <= 0:
            return f"{card}: must be a positive number of GB/s (got {gb_s!r})"
    return None


BASE_SCHEMA = {
    "releases": Field(str, check=pep440_specifier),
    "image": Field(str, check=_image_template),
}

TARGET_SCHEMA = {
    "description": Field(str),
    "platform": Field(str, choices=PLATFORMS),
    "cuda": Field(str, check=_dotted("13.0")),            # the CUDA release
    "cuda_arch": Field(str, check=_dotted("12.1")),       # the compute capability, sm_121 -> 12.1
    "device_names": Field(ListOf(str, min_items=1)),
    "moe_device_name": Field(str, check=lambda v: None if re.fullmatch(r"[A-Za-z0-9_.\-]+", v)
                             else f"must be a file-name form without spaces or '/' (got {v!r})"),
    "gpu_memory_gib": Field(float, check=_positive),
    "memory_bandwidth_gb_s": Field(dict, required=False, default={}, check=_bandwidths),
    "memory_bandwidth_source": Field(str, required=False),
    "env": Field(dict, required=False, default={}, check=_env_mapping),
    "bases": Field(ListOf(BASE_SCHEMA, min_items=1)),
}

FILE_SCHEMA = {
    "env": Field(dict, required=False, default={}, check=_env_mapping),
    "targets": Field(dict),
}


@dataclass(frozen=True)
class BaseImage:
    repo: str
    tag: str

    @property
    def ref(self) -> str:
        return f"{self.repo}:{self.tag}"

    def __str__(self) -> str:
        return self.ref


@dataclass(frozen=True)
class BaseRule:
    releases: SpecifierSet
    image: str  # "repo:tag" with {version}


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    platform: str
    cuda: str
    cuda_arch: str
    device_names: list[str]
    moe_device_name: str
    gpu_memory_gib: float
    memory_bandwidth_gb_s: dict[str, float]
    memory_bandwidth_source: str | None
    env: dict[str, str]
    bases: list[BaseRule] = field(repr=False)
    source: str = field(default=str(DEFAULT_TARGETS_FILE), repr=False)

    @property
    def recipes(self) -> list[str]:
        """The models with a recipe for this target: the recipe files that name it under
        `targets:` (recipes/<model>.yaml), in file-name order."""
        return recipes_for_target(self.name)

    @property
    def arch(self) -> str:
        return self.platform.split("/", 1)[1]

    def bandwidth_gb_s(self, device: str | None = None) -> float:
        """Peak memory bandwidth of one of the target's cards (default: the first listed)."""
        device = device or self.device_names[0]
        if device not in self.memory_bandwidth_gb_s:
            raise ForgeError(f"{self.source}: targets.{self.name}.memory_bandwidth_gb_s: no figure for "
                             f"{device!r} (cards: {', '.join(self.device_names)})")
        return float(self.memory_bandwidth_gb_s[device])

    def base_for(self, vllm_version: Release | str) -> BaseImage:
        """The upstream base image for a release; ForgeError naming the file and target if none fits."""
        version = Release(vllm_version).version
        for rule in self.bases:
            if rule.releases.contains(version, prereleases=True):
                image = fill_template(rule.image, {"version": str(version), "cuda": self.cuda})
                repo, tag = image.rsplit(":", 1)
                return BaseImage(_mirrored(repo), tag)
        ranges = ", ".join(str(rule.releases) for rule in self.bases)
        raise ForgeError(f"{self.source}: targets.{self.name}.bases: no base image for vLLM "
                         f"{version} (ranges: {ranges})")


def _mirrored(repo: str) -> str:
    mirror = os.environ.get(BASE_MIRROR_ENV, "").strip().rstrip("/")
    return f"{mirror}/{repo}" if mirror else repo


def recipes_for_target(target: str, root: Path | None = None) -> list[str]:
    """The recipe files (recipes/<model>.yaml) whose `targets:` name `target`. Only the keys are
    read here; forge.serving.recipes validates each recipe when it is loaded."""
    root = root or RECIPES_DIR
    found = []
    for path in sorted(root.glob("*.yaml"), key=lambda p: p.stem):
        if path.name == KNOWN_FAILURES_FILE:
            continue
        data = load_yaml(path)
        # A recipe file of the wrong shape stops the plan: left out, an image would ship
        # without that model's recipe and nobody would be told.
        if not isinstance(data, dict):
            raise ForgeError(f"{path}: (top level): must be a mapping with targets: "
                             f"(got {type(data).__name__}); a recipe file holds one model")
        targets = data.get("targets")
        if not isinstance(targets, dict):
            raise ForgeError(f"{path}: targets: must be a mapping of target name -> recipe "
                             f"(got {type(targets).__name__})")
        if target in targets:
            found.append(path.stem)
    return found


def targets_file() -> Path:
    return Path(os.environ.get("VLLM_FORGE_TARGETS") or DEFAULT_TARGETS_FILE)


# Validated loads by file version: every command looks targets up many times (plan, recipes,
# serve, lock), and each lookup must not parse and validate the file again.
_LOADED: dict[tuple[str, int, int], dict[str, Target]] = {}


def load_targets(path: Path | str | None = None) -> dict[str, Target]:
    """Every target in images/targets.yaml (or `path`), validated; keyed by target name.

    Read once per process and file version: the cache is keyed on the path, modification time
    and size, so a file written since (as tests write theirs) is read again."""
    path = Path(path) if path else targets_file()
    try:
        stat = path.stat()
    except OSError:
        return _read_targets(path)          # its error names the file
    version = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if version not in _LOADED:
        _LOADED[version] = _read_targets(path)
    return dict(_LOADED[version])           # a caller's edit of the mapping stays its own


def _read_targets(path: Path) -> dict[str, Target]:
    source = str(path)
    data = validate(load_yaml(path), FILE_SCHEMA, source)
    if not data["targets"]:
        raise ForgeError(f"{source}: targets: must name at least one target")
    targets = {}
    for name, body in data["targets"].items():
        if target_name_problem(str(name)):
            raise ForgeError(f"{source}: targets.{name}: {target_name_problem(str(name))}")
        item = validate(body, TARGET_SCHEMA, source, f"targets.{name}")
        _check_bandwidths(item, source, name)
        rules = [BaseRule(SpecifierSet(b["releases"]), b["image"]) for b in item.pop("bases")]
        _check_no_overlap(rules, source, name)
        item["env"] = {**data["env"], **item["env"]}
        targets[name] = Target(name=name, bases=rules, source=source, **item)
    return targets


def target_name_problem(name: str) -> str | None:
    """A target's name is part of image tags (128 characters at most: TARGET_NAME_MAX leaves room
    for the release and digest) and file names."""
    if len(name) > TARGET_NAME_MAX:
        return (f"a target name is {TARGET_NAME_MAX} characters at most (it is part of image "
                f"tags, which OCI caps at 128); this one is {len(name)}")
    if re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
        return None
    return "target names are lowercase letters, digits and '-'"


def _check_bandwidths(item: dict, source: str, name: str) -> None:
    """Bandwidths are per card the target lists, with the page they come from."""
    where = f"{source}: targets.{name}.memory_bandwidth_gb_s"
    unknown = sorted(set(item["memory_bandwidth_gb_s"]) - set(item["device_names"]))
    if unknown:
        raise ForgeError(f"{where}.{unknown[0]}: not one of the target's device_names")
    if item["memory_bandwidth_gb_s"] and not item["memory_bandwidth_source"]:
        raise ForgeError(f"{source}: targets.{name}.memory_bandwidth_source: required with "
                         f"memory_bandwidth_gb_s (the public page the figures come from)")


def _check_no_overlap(rules: list[BaseRule], source: str, name: str) -> None:
    # Probe every version mentioned in any range: two rules that both contain one overlap.
    probes = set()
    for rule in rules:
        for spec in rule.releases:
            try:
                probes.add(Version(spec.version))
            except InvalidVersion:  # wildcards such as ==0.25.*: probe the prefix
                probes.add(Version(spec.version.rstrip(".*") or "0"))
    for probe in sorted(probes):
        matching = [i for i, rule in enumerate(rules) if rule.releases.contains(probe, True)]
        if len(matching) > 1:
            raise ForgeError(f"{source}: targets.{name}.bases[{matching[1]}].releases: overlaps "
                             f"bases[{matching[0]}] at vLLM {probe}")


def get_target(name: str, path: Path | str | None = None) -> Target:
    targets = load_targets(path)
    if name not in targets:
        raise ForgeError(f"{path or targets_file()}: unknown target {name!r} "
                         f"(known: {', '.join(sorted(targets))})")
    return targets[name]


def target_for_device(device_name: str, path: Path | str | None = None) -> Target:
    """The target whose `device_names` lists this card (torch.cuda.get_device_name(), exactly)."""
    targets = load_targets(path)
    for target in targets.values():
        if device_name in target.device_names:
            return target
    known = ", ".join(f"{n!r}" for t in targets.values() for n in t.device_names)
    raise ForgeError(f"{path or targets_file()}: no target lists GPU {device_name!r} in device_names "
                     f"(listed: {known})")
