"""What `python3 build.py --target T --vllm V [--push]` (forge/commands/images.py) does with a plan:
build it with BuildKit from the very bake definition `build.py bake` writes (forge/images/bake.py),
tag immutable + moving in the local engine, push the immutable tag only (never re-pointing one that
names another image: that is refused before any tag, local or remote, is set). The moving tag moves
in the registry only through `build.py publish --move-tag`, after verify passed.

One build engine: the build runs `docker buildx bake --load` on a bake file for this one target,
written to a temporary directory, so a local build and a release build (`build.py bake`, then
`docker buildx bake --push`) are the same BuildKit build of the same inputs: same context, args,
labels, attestations and Dockerfile features. The command line overrides only where the result goes
(`--load`) and its tag (a local-only one until the real tags are set). The Docker SDK does the rest:
engine ping and queries, inspect, tag, push.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from forge.errors import ConflictError, ForgeError
from forge.images.plan import Plan, pin_base
from forge.json_text import dump_json
from forge.untrusted import visible

APPLY_CONFLICT_EXIT = 3  # `build.py apply` exits 3 on a conflict; BuildKit reports the RUN's code
BUILD_REPOSITORY = "vllm-forge-build"  # local only: holds a fresh image until its real tags are set
BAKE_FILE = "docker-bake.json"
BUILDX_NEEDED = ("`docker buildx` (the BuildKit CLI plugin) is needed to build; Debian 12 does not "
                 "package it: see the README, \"Set up\" (`bash tests/infra/install-buildx.sh`)")
# What an engine reports when its image store is containerd's: that store keeps attestations.
CONTAINERD_STORE = "io.containerd.snapshotter.v1"
# A RUN's own output in BuildKit's plain progress: "#12 0.345 <line>".
STEP_LINE = re.compile(r"^#\d+ \d+\.\d+ (.*)$")
# The engine's last push status: "<tag>: digest: sha256:... size: N".
PUSHED_DIGEST = re.compile(r"^\S+: digest: (sha256:[0-9a-f]{64}) size: \d+$")


def build_and_tag(client, plan: Plan, docker_cli: str, attest: bool,
                  pushed_before: str | None = None) -> tuple[str, bool]:
    """Build the plan and set its tags: (image id, whether the registry's immutable tag, naming
    `pushed_before` before the build, already names this image). Refuses, before any tag is set,
    when that tag names another image. The local build tag is removed whatever happens."""
    try:
        image_id = build_image(client, plan, docker_cli, attest)
        already_pushed = same_image_pushed(client, plan, image_id, pushed_before)
        tag_image(client, plan, image_id)
    finally:
        _untag(client, build_tag(plan))
    return image_id, already_pushed


def immutable_digest(plan: Plan) -> str | None:
    from forge.images.registry import manifest_digest

    return manifest_digest(plan.immutable_ref) if plan.immutable_ref else None


def check_base(plan: Plan, allow_change: bool = False) -> Plan:
    """Refuse a base whose tag moved since it was locked (the build would not be the locked one's
    twin). Returns the plan to build: an unlocked base (allowed) pinned to the registry's digest
    now. BuildKit takes the target's platform from the locked index itself."""
    from forge.images.registry import manifest_digest

    current = manifest_digest(plan.base.ref)
    if current is None:
        raise ForgeError(f"registry has no tag {plan.base.ref}")
    if plan.base_digest is None:
        return pin_base(plan, current)
    if current != plan.base_digest and not allow_change:
        raise ForgeError(f"base {plan.base.ref} moved: locked {plan.base_digest}, registry now "
                         f"{current}; relock (`python3 build.py lock --vllm {plan.vllm}`) or pass "
                         f"--allow-base-change")
    return plan


def find_buildx() -> str:
    """The docker CLI, checked to have the buildx plugin; ForgeError saying how to get it if not."""
    docker_cli = shutil.which("docker")
    if not docker_cli:
        raise ForgeError(f"the docker CLI is not on PATH; {BUILDX_NEEDED}")
    try:
        answer = subprocess.run([docker_cli, "buildx", "version"], capture_output=True, text=True,
                                timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ForgeError(f"`docker buildx version` failed: {exc}; {BUILDX_NEEDED}") from exc
    if answer.returncode != 0:
        raise ForgeError(f"`docker buildx version` failed ({_one_line(answer.stderr)}); "
                         f"{BUILDX_NEEDED}")
    return docker_cli


def engine_keeps_attestations(client) -> bool:
    """The build loads its result into the engine and pushes from there, so attestations survive
    only where the engine's image store can hold them: the containerd image store (Docker Engine
    26+ with it on). Debian 12's docker.io 20.10 (overlay2 store) cannot."""
    status = dict(tuple(pair) for pair in client.info().get("DriverStatus") or [] if len(pair) == 2)
    return status.get("driver-type") == CONTAINERD_STORE


def attestation_note(attest: bool, declined: bool) -> str:
    if attest:
        return "attestations: SBOM and provenance (the engine's containerd image store keeps them)"
    if declined:
        return "attestations: none (--no-attest)"
    return ("attestations: none (this engine's image store cannot keep them; Docker Engine 26+ with "
            "the containerd image store can, or `build.py bake` and `docker buildx bake --push` on "
            "a docker-container builder)")


def build_tag(plan: Plan) -> str:
    """A local-only tag the image holds between the build and tag_image (an untagged image could
    be pruned meanwhile); never pushed, removed again by build_and_tag."""
    return f"{BUILD_REPOSITORY}:{plan.immutable_tag}-{os.getpid()}"


def _untag(client, tag: str) -> None:
    import docker

    try:
        client.api.remove_image(tag, noprune=True)
    except docker.errors.APIError:
        pass  # the build failed before it tagged anything


def bake_command(docker_cli: str, plan: Plan) -> list[str]:
    """`docker buildx bake` of this plan's target from the bake file, loaded into the engine under
    build_tag only: the two overrides a local build makes to the release's definition."""
    name = plan.target.name
    return [docker_cli, "buildx", "bake", "-f", BAKE_FILE, "--load", "--progress", "plain",
            "--set", f"{name}.tags={build_tag(plan)}", name]


def build_image(client, plan: Plan, docker_cli: str, attest: bool) -> str:
    """Bake with progress on stdout; returns the image id. Sets only build_tag: see tag_image."""
    from forge.images.bake import write_bake

    with tempfile.TemporaryDirectory(prefix="vllm-forge-build-") as directory:
        write_bake([plan], Path(directory) / BAKE_FILE, attest=attest)
        code, inner_error, last_line = _run_streaming(bake_command(docker_cli, plan), directory)
    if code != 0:
        _raise_build_error(last_line, inner_error, plan)
    try:
        image_id = client.api.inspect_image(build_tag(plan))["Id"]
    except Exception as exc:  # noqa: BLE001 (docker.errors.ImageNotFound / APIError: say which build)
        raise ForgeError(f"build of {plan.tags[0]} ended without an image: {_one_line(exc)}") from exc
    _check_platform(client, image_id, plan)
    return image_id


def _run_streaming(command: list[str], cwd: str) -> tuple[int, str, str]:
    """Run `command` with its output copied line by line to stdout; returns (exit code, the last
    `error:` line a RUN printed, the last line of all)."""
    inner_error = last_line = ""
    with subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace") as process:
        for line in process.stdout or ():
            sys.stdout.write(line)
            sys.stdout.flush()
            step = STEP_LINE.match(line.rstrip("\n"))
            if step and step.group(1).startswith("error:"):  # build.py's own one-line error
                inner_error = step.group(1)
            if line.strip():
                last_line = line.strip()
    return process.returncode, inner_error, last_line


def tag_image(client, plan: Plan, image_id: str) -> None:
    for tag in plan.tags:
        repo, name = tag.rsplit(":", 1)
        client.api.tag(image_id, repo, name)


def _raise_build_error(message: str, inner_error: str, plan: Plan):
    # BuildKit 0.8 (Docker 20.10): "executor failed running [...]: exit code: 3"; later ones:
    # "process ... did not complete successfully: exit code: 3".
    code = re.search(r"exit code: (\d+)", message)
    why = inner_error.removeprefix("error:").strip() or _one_line(message)
    if code and int(code.group(1)) == APPLY_CONFLICT_EXIT:
        raise ConflictError(f"build of {plan.tags[0]}: the patch step failed on the base image's "
                            f"vLLM: {why}")
    raise ForgeError(f"build of {plan.tags[0]} failed: {why}")


def _check_platform(client, image_id: str, plan: Plan) -> None:
    attrs = client.api.inspect_image(image_id)
    built = f"{attrs.get('Os')}/{attrs.get('Architecture')}"
    if built != plan.target.platform:
        raise ForgeError(f"built image {image_id} is {built}, target {plan.target.name} needs "
                         f"{plan.target.platform} (base {plan.from_image})")


def same_image_pushed(client, plan: Plan, image_id: str, existing: str | None) -> bool:
    """Whether the registry's immutable tag (`existing`, read before the build) already names this
    image: same platform, layers, config and labels. Attestations (provenance records when it was
    built) make each build's index digest new, so the image inside is what is compared. Refuses,
    before any tag is set here or there, when the tag names another image."""
    from forge.images.registry import image_config

    if not existing:
        return False
    local = client.api.inspect_image(image_id)
    remote = image_config(plan.immutable_ref, existing, plan.target.platform) if plan.immutable_ref else None
    if remote is None or _identity(local) != _remote_identity(remote):
        raise ForgeError(f"refusing to push {plan.immutable_ref}: that immutable tag already names "
                         f"{existing} in the registry, this build ({image_id}) is a different "
                         f"image; no tag was set or moved")
    return True


def _identity(attrs: dict) -> tuple:
    """An image as the engine's inspect shows it: what makes two images the same image."""
    return (attrs.get("Os"), attrs.get("Architecture"), tuple(attrs["RootFS"].get("Layers") or ()),
            dump_json((attrs.get("Config") or {}).get("Labels") or {}, sort_keys=True))


def _remote_identity(config: dict) -> tuple:
    """The same for an image config blob from the registry."""
    return (config.get("os"), config.get("architecture"),
            tuple(config.get("rootfs", {}).get("diff_ids") or ()),
            dump_json((config.get("config") or {}).get("Labels") or {}, sort_keys=True))


def push(client, plan: Plan, already_pushed: str | None = None) -> str:
    """Push the immutable tag alone and return its digest. The moving tag, what users pull, moves
    only through `build.py publish --move-tag` once verify passed on this digest. When the
    immutable tag already names this image (`already_pushed`, its digest), it is left as it is (a
    new push would re-point it at a new index whenever attestations are on)."""
    immutable = plan.immutable_ref
    if not immutable:  # check_base pins every plan it passes on; this is a caller's mistake
        raise ForgeError(f"push of {plan.moving_ref}: the base digest is unknown, so is the immutable tag")
    if already_pushed:
        print(visible(f"{immutable} already names this image ({already_pushed}); not pushed again"),
              flush=True)     # the digest is the registry's answer
        digest = already_pushed
    else:
        digest = _push_one(client, immutable)
        print(visible(f"pushed {immutable} ({digest})"), flush=True)   # the engine's push stream
    print(visible(f"{plan.moving_ref} not moved: after verify passes on {digest}, "
                  f"`python3 build.py publish --immutable-tag {plan.immutable_tag} --digest {digest} "
                  "--verify-report DIR --move-tag` moves it"), flush=True)
    return digest


def _push_one(client, tag: str) -> str:
    import docker

    from forge.progress import PushProgress

    repo, name = tag.rsplit(":", 1)
    digest = None
    progress = PushProgress(tag)  # all layers' bytes in one line, ended by the digest or an error
    try:
        for chunk in client.api.push(repo, tag=name, stream=True, decode=True):
            progress.feed(chunk)
            if "error" in chunk:
                raise ForgeError(f"push of {tag} failed: {_one_line(chunk['error'])}")
            if chunk.get("aux", {}).get("Digest"):
                digest = chunk["aux"]["Digest"]
            elif pushed := PUSHED_DIGEST.match(str(chunk.get("status", ""))):
                # The containerd image store (Engine 26) says it only in the status line.
                digest = pushed.group(1)
                progress.feed({"aux": {"Digest": digest}})  # ends the line as the aux would
    except docker.errors.APIError as exc:
        raise ForgeError(f"push of {tag} failed: {_one_line(exc)}") from exc
    if not digest:
        raise ForgeError(f"push of {tag} reported no digest")
    return digest


def _one_line(value) -> str:
    # Engine and SDK errors end with the line that says what failed.
    text = str(value).strip()
    return text.splitlines()[-1][:300] if text else "(no message)"
