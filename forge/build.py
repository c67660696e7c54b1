"""`python build.py --target T --vllm V [--push] [--plan]`: resolve the plan, build through the Docker
SDK with progress, tag immutable + moving, push both (never overwriting an immutable tag that names
another digest: that is refused before any tag, local or remote, is set).
"""
from __future__ import annotations

import io
import json
import os
import re
import sys

from forge.errors import ConflictError, ForgeError
from forge.plan import Plan, finish, format_plan, resolve_plan

APPLY_CONFLICT_EXIT = 3
BUILD_REPOSITORY = "vllm-forge-build"  # local only: holds a fresh image until its real tags are set  # `build.py apply` exits 3 on a conflict; the engine reports the RUN's code


def cmd_build(args) -> int:
    # A plan shows an unlocked base before it fails as the build would (so it can be inspected).
    plan = resolve_plan(args.target, args.vllm, repository=args.repository,
                        base_image=args.base_image, allow_unlocked=args.allow_unlocked or args.plan,
                        lock_path=args.lock)
    if args.plan:
        if args.json:
            print(json.dumps(plan.to_dict(), indent=1))
        else:
            print(format_plan(plan))
        if not plan.base_locked and not args.allow_unlocked:
            sys.stdout.flush()
            # The same refusal, worded the same way, as the build itself gives.
            resolve_plan(args.target, args.vllm, repository=args.repository,
                         base_image=args.base_image, lock_path=args.lock)
        return 0
    client = connect()
    check_base(plan, allow_change=args.allow_base_change)
    # Before building: the push registry must answer, and we learn what the immutable tag names now.
    pushed_before = immutable_digest(plan) if args.push else None
    print(format_plan(plan), flush=True)
    try:
        image_id = build_image(client, plan)
        if args.push:
            refuse_repointing(client, plan, image_id, pushed_before)
        tag_image(client, plan, image_id)
    finally:
        _untag(client, build_tag(plan))
    print(f"built {image_id} as {', '.join(plan.tags)}", flush=True)
    if args.push:
        push(client, plan)
    return 0


def immutable_digest(plan: Plan) -> str | None:
    from forge.registry import manifest_digest

    return manifest_digest(plan.immutable_ref)


def connect():
    """A Docker SDK client that has answered a ping; ForgeError naming the engine address if not."""
    import docker

    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except docker.errors.DockerException as exc:
        raise ForgeError(f"cannot reach the Docker engine at {where}: {_one_line(exc)}") from exc
    return client


def check_base(plan: Plan, allow_change: bool = False) -> None:
    """Refuse a base whose tag moved since it was locked (the build would not be the locked one's
    twin); an unlocked base (allowed) is pinned here to what the registry says now."""
    from forge.registry import manifest_digest, platform_digest

    current = manifest_digest(plan.base.ref)
    if current is None:
        raise ForgeError(f"registry has no tag {plan.base.ref}")
    if plan.base_digest is None:
        plan.base_digest = current
        finish(plan)
    elif current != plan.base_digest and not allow_change:
        raise ForgeError(f"base {plan.base.ref} moved: locked {plan.base_digest}, registry now "
                         f"{current}; relock (`python build.py lock --vllm {plan.vllm}`) or pass "
                         f"--allow-base-change")
    plan.platform_digest = platform_digest(plan.base.ref, plan.base_digest, plan.target.platform)


def build_tag(plan: Plan) -> str:
    """A local-only tag the image holds between the build and tag_image (an untagged image could
    be pruned meanwhile); never pushed, removed again by cmd_build."""
    return f"{BUILD_REPOSITORY}:{plan.immutable_tag}-{os.getpid()}"


def _untag(client, tag: str) -> None:
    import docker

    try:
        client.api.remove_image(tag, noprune=True)
    except docker.errors.APIError:
        pass  # the build failed before it tagged anything


def build_image(client, plan: Plan) -> str:
    """Build with progress on stdout; returns the image id. Sets only build_tag: see tag_image."""
    import docker

    stream = client.api.build(
        fileobj=io.BytesIO(plan.context_bytes), custom_context=True, encoding=None,
        tag=build_tag(plan), buildargs=plan.build_args(), labels=plan.labels,
        platform=plan.target.platform, rm=True, forcerm=True, decode=True)
    image_id, last_error_line = None, ""
    try:
        for chunk in stream:
            if "stream" in chunk:
                sys.stdout.write(chunk["stream"])
                sys.stdout.flush()
                for line in chunk["stream"].splitlines():
                    if line.startswith("error:"):  # build.py's own one-line error inside the RUN
                        last_error_line = line
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
            if "error" in chunk:
                _raise_build_error(chunk["error"], last_error_line, plan)
    except docker.errors.APIError as exc:
        raise ForgeError(f"build of {plan.tags[0]} failed: {_one_line(exc)}") from exc
    if not image_id:
        raise ForgeError(f"build of {plan.tags[0]} ended without an image")
    _check_platform(client, image_id, plan)
    return image_id


def tag_image(client, plan: Plan, image_id: str) -> None:
    for tag in plan.tags:
        repo, name = tag.rsplit(":", 1)
        client.api.tag(image_id, repo, name)


def _raise_build_error(message: str, inner_error: str, plan: Plan):
    code = re.search(r"returned a non-zero code: (\d+)", message)
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


def refuse_repointing(client, plan: Plan, image_id: str, existing: str | None) -> None:
    """Refuse, before any tag is set here or there, when the immutable tag already names a digest
    in the registry (`existing`, read before the build) that this image is not."""
    from forge.registry import parse_reference

    if not existing:
        return
    immutable = parse_reference(plan.immutable_ref)
    local = client.api.inspect_image(image_id).get("RepoDigests") or []
    if f"{immutable.name}@{existing}" not in local:
        raise ForgeError(f"refusing to push {plan.immutable_ref}: that immutable tag already names "
                         f"{existing} in the registry, this build ({image_id}) is a different "
                         f"image; no tag was set or moved")


def push(client, plan: Plan) -> None:
    """Push the immutable tag then the moving one."""
    for tag in plan.tags:
        digest = _push_one(client, tag)
        print(f"pushed {tag} ({digest})", flush=True)


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
    except docker.errors.APIError as exc:
        raise ForgeError(f"push of {tag} failed: {_one_line(exc)}") from exc
    if not digest:
        raise ForgeError(f"push of {tag} reported no digest")
    return digest


def _one_line(value) -> str:
    # Engine and SDK errors end with the line that says what failed.
    text = str(value).strip()
    return text.splitlines()[-1][:300] if text else "(no message)"
