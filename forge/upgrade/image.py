"""The image side of an upgrade: each release's plan for the target as `build.py --plan` resolves
it (base, digest locked or not, moving and immutable tags; nothing written: an unlocked base is
shown as such, never pinned here), and the exact commands that follow."""
from __future__ import annotations

import shlex
from dataclasses import dataclass

from forge.errors import ForgeError
from forge.image_names import image_ref, moving_tag
from forge.images.plan import resolve_plan

SMOKE = "/opt/vllm-forge/verify/mtp_smoke.py"
CONTAINER_OUT = "/verify-out"
CONTAINER_HF_CACHE = "/root/.cache/huggingface"


@dataclass(frozen=True)
class ImageSide:
    vllm: str
    base: str | None
    digest: str | None
    locked: bool
    moving_tag: str
    immutable_tag: str | None       # None until the base digest is known
    problem: str | None = None      # the plan's one-line refusal, if it has one

    def to_dict(self) -> dict:
        return {"vllm": self.vllm, "base": self.base, "digest": self.digest, "locked": self.locked,
                "moving_tag": self.moving_tag, "immutable_tag": self.immutable_tag,
                "problem": self.problem}

    def line(self) -> str:
        if self.problem:
            return f"vLLM {self.vllm}: {self.moving_tag}: no plan: {self.problem}"
        digest = f"{self.digest} (locked)" if self.locked else "not locked in images/lock.yaml"
        tag = self.immutable_tag or "immutable tag known once the base is locked"
        return f"vLLM {self.vllm}: {self.moving_tag} ({tag}); base {self.base} {digest}"


def image_side(target: str, vllm: str, repository: str | None = None) -> ImageSide:
    try:
        plan = resolve_plan(target, vllm, repository=repository, allow_unlocked=True,
                            unlocked_flag=None)
    except ForgeError as refusal:
        return ImageSide(str(vllm), None, None, False, moving_tag(target, vllm), None, str(refusal))
    return ImageSide(plan.vllm, plan.base.ref, plan.base_digest, plan.base_locked,
                     plan.moving_tag, plan.immutable_tag)


def smoke_argv(recipe: str, target: str, vllm: str, repository: str | None = None,
               hf_cache: str = "~/.cache/huggingface", out: str = "verify-out") -> list[str]:
    """verify/mtp_smoke.py inside the image, with the recipe's arguments; its report lands in
    OUT/RECIPE on the host."""
    from pathlib import Path

    host_out = Path(out).expanduser().resolve() / recipe
    return ["docker", "run", "--rm", "--gpus", "all", "--ipc=host", "-e", "HF_TOKEN",
            "-v", f"{Path(hf_cache).expanduser().resolve()}:{CONTAINER_HF_CACHE}",
            "-v", f"{host_out}:{CONTAINER_OUT}", "--entrypoint", "python3",
            image_ref(target, vllm, repository), SMOKE, "--recipe", recipe, "--target", target,
            "--out", CONTAINER_OUT]


def next_commands(target: str, after: ImageSide, recipes: list[str], refreshes: list[str],
                  unchecked: bool, repository: str | None = None) -> list[str]:
    """In order: what unblocks the upgrade, then lock, build, smoke each recipe, push, publish."""
    commands = list(refreshes)
    if unchecked:
        commands.append("python3 build.py upstream-watch --write")
    if not after.locked:
        commands.append(f"python3 build.py lock --vllm {after.vllm}")
    commands.append(f"python3 build.py --target {target} --vllm {after.vllm}")
    commands += [shlex.join(smoke_argv(name, target, after.vllm, repository)) for name in recipes]
    # The same content pushed: the immutable tag the local build printed, now in the registry.
    commands.append(f"python3 build.py --target {target} --vllm {after.vllm} --push")
    tag = after.immutable_tag or "<immutable tag the build printed>"
    commands.append(f"python3 build.py publish --target {target} --vllm {after.vllm} "
                    f"--immutable-tag {tag} --digest <pushed sha256 digest> "
                    f"--verify-report verify-out --move-tag")
    return commands
