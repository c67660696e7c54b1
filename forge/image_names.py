"""Image names: repository, moving and immutable tags.

    moving_tag("gb10", "0.27.1")                 -> "vllm0.27.1-gb10"
    immutable_tag("gb10", "0.27.1", "3f2a9c1b7d4e...") -> "vllm0.27.1-gb10-3f2a9c1b7d4e"
    image_ref("gb10", "0.27.1")                  -> "ghcr.io/<owner>/vllm-forge:vllm0.27.1-gb10"
"""
from __future__ import annotations

import os
import re

from forge import REPO_ROOT
from forge.errors import ForgeError
from forge.files import SOURCE, read_text

# Upstream's unsuffixed release tag is the CUDA 13 build from vLLM 0.20.0 on (images/targets.yaml):
# what `new-target` writes for a base unless told.
DEFAULT_BASE_IMAGE = "vllm/vllm-openai:v{version}"

FALLBACK_REPOSITORY = "ghcr.io/vllm-forge/vllm-forge"
# 12 hex digits (48 bits) of the content digest: short enough to read, far from colliding among
# the builds of one target and release.
TAG_DIGEST_CHARS = 12
# github.com:owner/name(.git) or https://github.com/owner/name(.git)
_GITHUB_REMOTE = re.compile(r"github\.com[:/](?P<owner>[^/]+)/[^/]+?(?:\.git)?/?$")


# The OCI distribution spec's repository name (lowercase path components joined by / with
# . _ __ or dashes inside them), after an optional registry host[:port], 255 characters at most.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*(?::[0-9]+)?"
_REPOSITORY = re.compile(rf"(?:{_HOST}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*")


def checked_repository(value: str, source: str = "--repository") -> str:
    """`value` if it is a valid OCI repository name, else one line naming where it came from:
    an upper-case name would otherwise reach tags and bake files and fail only at push."""
    if len(value) > 255 or not _REPOSITORY.fullmatch(value):
        raise ForgeError(f"{source}: not a valid image repository: {value!r} (lowercase "
                         "[registry[:port]/]name/path, components of a-z 0-9 joined by . _ -)")
    return value


def check_repository_argument(args) -> None:
    """A parsed `--repository`, checked once for every command that takes one."""
    if getattr(args, "repository", None) is not None:
        checked_repository(args.repository)


def default_repository() -> str:
    """$VLLM_FORGE_REPOSITORY, else ghcr.io/<owner>/vllm-forge with the owner from $GITHUB_REPOSITORY_OWNER
    or the git remote, else ghcr.io/vllm-forge/vllm-forge."""
    explicit = os.environ.get("VLLM_FORGE_REPOSITORY", "").strip()
    if explicit:
        return checked_repository(explicit, "$VLLM_FORGE_REPOSITORY")
    given_owner = os.environ.get("GITHUB_REPOSITORY_OWNER", "").strip()
    owner = given_owner or _remote_owner()
    if not owner:
        return FALLBACK_REPOSITORY
    # GHCR repository names must be lowercase; an owner that makes no repository name (a space,
    # a control character, over 255 characters) would reach tags, bake files and the terminal.
    source = "$GITHUB_REPOSITORY_OWNER" if given_owner else f"{REPO_ROOT / '.git' / 'config'}: the remote's owner"
    return checked_repository(f"ghcr.io/{owner.lower()}/vllm-forge", source)


def _remote_owner() -> str | None:
    # Read .git/config directly: no git binary or GitPython import on the fast --plan path.
    config = REPO_ROOT / ".git" / "config"
    try:
        text = read_text(config, SOURCE, errors="replace")
    except ForgeError:      # none, or no regular file (a FIFO would block a plain read)
        return None
    section = None
    remotes: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif line.startswith("url") and section and section.startswith("[remote"):
            name = section.split('"')[1] if '"' in section else section
            remotes[name] = line.split("=", 1)[1].strip()
    url = remotes.get("origin") or next(iter(remotes.values()), None)
    match = _GITHUB_REMOTE.search(url or "")
    return match["owner"] if match else None


def _check_parts(target: str, vllm: str) -> None:
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", target or ""):
        raise ForgeError(f"not a target name: {target!r}")
    if not re.fullmatch(r"[0-9][0-9A-Za-z.+]*", str(vllm or "")):
        raise ForgeError(f"not a vLLM version: {vllm!r}")


# The OCI distribution spec's tag: [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}, 128 characters at most.
TAG_MAX = 128
# A target name's longest: with "vllm", a release, two dashes and the 12-digit digest, 64
# characters leave a release 46 (forge.targets refuses a longer name on load).
TARGET_NAME_MAX = 64


def _checked_tag(tag: str, target: str) -> str:
    if len(tag) > TAG_MAX:
        raise ForgeError(f"image tag {tag[:40]}... is {len(tag)} characters, over the "
                         f"{TAG_MAX} an OCI tag may have (target {target[:40]!r}: a shorter name)")
    return tag


def moving_tag(target: str, vllm: str) -> str:
    """The tag that follows the newest verified build of a release for a target."""
    _check_parts(target, vllm)
    # Docker tags allow [A-Za-z0-9_.-]: a local version's "+" becomes "_".
    return _checked_tag(f"vllm{str(vllm).replace('+', '_')}-{target}", target)


def immutable_tag(target: str, vllm: str, content_digest: str) -> str:
    """The tag that names one build's content (forge.images.plan's content digest: the build context, the
    build args, the labels and the base image digest), shortened to 12 hex digits: identical
    inputs give the identical tag, any change a new one. Never overwritten with another digest."""
    digest = str(content_digest or "").removeprefix("sha256:")
    if not re.fullmatch(r"[0-9a-f]{12,64}", digest):
        raise ForgeError(f"not a content digest (12 to 64 lowercase hex digits): {content_digest!r}")
    return _checked_tag(f"{moving_tag(target, vllm)}-{digest[:TAG_DIGEST_CHARS]}", target)


def image_ref(target: str, vllm: str, repository: str | None = None) -> str:
    """<repository>:<moving tag>, the reference users pull and recipes serve."""
    return f"{repository or default_repository()}:{moving_tag(target, vllm)}"
