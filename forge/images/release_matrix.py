"""What the release workflow builds: one job per target, on a runner of the target's architecture.

    python3 build.py release-matrix --tag vllm-0.27.1
    {"vllm": "0.27.1", "include": [{"target": "a100", "platform": "linux/amd64",
      "runner": "ubuntu-24.04", "immutable_ref": "ghcr.io/o/vllm-forge:vllm0.27.1-a100-<hash>",
      "moving_ref": "ghcr.io/o/vllm-forge:vllm0.27.1-a100", "recipes": [...]}, ...]}

Tags and references come from the same plan `build.py --target T --vllm V --plan` prints, so the
workflow pushes exactly the immutable tag a local build would name.
"""
from __future__ import annotations

import re

from forge.errors import ForgeError

# GitHub-hosted runners per image platform: each image is built natively, not under emulation.
RUNNERS = {"linux/amd64": "ubuntu-24.04", "linux/arm64": "ubuntu-24.04-arm"}
# A release tag names the vLLM release it builds; -rN marks a rebuild of the same release.
RELEASE_TAG = re.compile(r"vllm-(?P<version>[0-9][0-9A-Za-z.+]*?)(?:-r[0-9]+)?")


def vllm_of_tag(tag: str) -> str:
    match = RELEASE_TAG.fullmatch(tag.removeprefix("refs/tags/"))
    if not match:
        raise ForgeError(f"release tag {tag!r}: expected vllm-<version> or vllm-<version>-r<N> "
                         "(e.g. vllm-0.27.1)")
    return match["version"]


def release_matrix(vllm: str, only_targets: list[str] | None = None,
                   repository: str | None = None, runners: dict[str, str] | None = None) -> dict:
    from forge.images.plan import resolve_plan
    from forge.targets import get_target, load_targets

    runners = {**RUNNERS, **(runners or {})}
    names = only_targets or sorted(load_targets())
    include = []
    for name in names:
        target = get_target(name)      # an unknown name: the one message every command gives
        if target.platform not in runners:
            raise ForgeError(f"{target.source}: targets.{name}.platform: no runner for "
                             f"{target.platform} (known: {', '.join(sorted(runners))})")
        # The immutable tag names the image's content, base digest included: the base must be locked.
        plan = resolve_plan(name, vllm, repository=repository, unlocked_flag=None)
        include.append({
            "target": name, "platform": target.platform, "runner": runners[target.platform],
            "immutable_tag": plan.immutable_tag, "moving_tag": plan.moving_tag,
            "immutable_ref": f"{plan.repository}:{plan.immutable_tag}",
            "moving_ref": f"{plan.repository}:{plan.moving_tag}",
            "repository": plan.repository, "recipes": list(target.recipes),
        })
    return {"vllm": str(vllm), "include": include}


def parse_runner(value: str) -> tuple[str, str]:
    platform, sep, runner = value.partition("=")
    if not sep or not platform or not runner:
        raise ForgeError(f"--runner {value!r}: expected PLATFORM=RUNNER, e.g. linux/arm64=my-arm-runner")
    return platform, runner
