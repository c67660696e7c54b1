"""The image commands: `build.py build` (the default), `lock`, `bake`, `release-matrix`, `publish`
and `published`. Each turns its arguments into values, calls forge.images, and prints; the
knowledge (plans, pins, BuildKit, the registry, the published index) stays in forge/images/."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from forge.errors import ForgeError
from forge.files import append_text
from forge.json_text import dump_json
from forge.untrusted import visible

# --- build.py build ----------------------------------------------------------------------------

def _locked_plan(args):
    """The build's plan, every local check done first; a base not pinned yet is pinned now (one
    line on stderr: stdout may be --json) unless --allow-unlocked (build from the registry's digest
    of the moment, lock untouched) or --locked (a plan shows it, then both refuse).

    Whether the base can be pinned is settled before the release is downloaded: a build that must
    pin it and cannot reach the registry says so first; a plan then shows the base it would pin,
    whose digest nobody can know offline, and exits 0."""
    from forge.images.lock import (
        BaseOutOfReach,
        out_of_reach,
        read_lock,
        refuse_added_pin,
        registry_pin,
        write_pin,
    )
    from forge.images.plan import format_plan, planned_base, resolve_plan

    def plan_with(allow_unlocked: bool):
        return resolve_plan(args.target, args.vllm, repository=args.repository,
                            base_image=args.base_image, allow_unlocked=allow_unlocked,
                            lock_path=args.lock)

    target, base = planned_base(args.target, args.vllm, args.base_image)
    pins, _ = read_lock(args.lock)   # a malformed lock is refused before anything else
    if base.ref in pins or args.allow_unlocked:
        return plan_with(allow_unlocked=True)
    if args.locked:
        if args.plan:
            # A plan shows the unlocked base before it fails as the build would (to inspect it).
            plan = plan_with(allow_unlocked=True)
            print(dump_json(plan.to_dict(), indent=1) if args.json else format_plan(plan), flush=True)
        raise refuse_added_pin(base.ref, args.vllm, args.lock)
    try:
        digest, offered = registry_pin(base.ref, target)
    except BaseOutOfReach as exc:
        if not args.plan:
            raise out_of_reach(base.ref, args.vllm, exc, args.lock) from exc
        print(_wrapped(f"note: {base.ref} is not locked and {exc.registry} cannot be reached "
                       f"({exc}): the plan below shows the base a build would lock, whose digest "
                       f"cannot be known offline. Where the registry answers, `python3 build.py "
                       f"lock --vllm {args.vllm}` pins it (a build with --allow-unlocked takes its "
                       f"digest then, unpinned)."), file=sys.stderr, flush=True)
        return plan_with(allow_unlocked=True)
    plan_with(allow_unlocked=True)   # every local check passes before the lock file is written
    # visible: the platforms are what the registry's manifest names
    print(visible(write_pin(base.ref, digest, offered, args.lock)), file=sys.stderr, flush=True)
    return plan_with(allow_unlocked=False)


def _wrapped(text: str) -> str:
    from forge.images.plan import WIDTH

    # visible first: the note quotes the registry's failure, and the escapes wrap as text
    return "\n".join(textwrap.wrap(visible(text), WIDTH, subsequent_indent="  ",
                                   break_on_hyphens=False))


def cmd_build(args) -> int:
    from forge.images import build, host
    from forge.images.plan import format_plan

    plan = _locked_plan(args)
    if args.plan:
        print(dump_json(plan.to_dict(), indent=1) if args.json else format_plan(plan))
        return 0
    client = host.connect()
    host.check_emulation(plan)
    plan = build.check_base(plan, allow_change=args.allow_base_change)
    docker_cli = build.find_buildx()
    attest = not args.no_attest and build.engine_keeps_attestations(client)
    # Before building: the push registry must answer, and we learn what the immutable tag names now.
    pushed_before = build.immutable_digest(plan) if args.push else None
    print(format_plan(plan), flush=True)
    print(build.attestation_note(attest, args.no_attest), flush=True)
    image_id, already_pushed = build.build_and_tag(client, plan, docker_cli, attest, pushed_before)
    print(visible(f"built {image_id} as {', '.join(plan.tags)}"), flush=True)   # the engine's id
    if args.push:
        build.push(client, plan, pushed_before if already_pushed else None)
    return 0


# --- build.py lock -----------------------------------------------------------------------------

def cmd_lock(args) -> int:
    from forge.images.lock import read_lock, resolve_bases, save_lock

    pins, platforms = read_lock(args.lock)   # a malformed lock is refused before the registry is asked
    resolved, offered = resolve_bases(args.vllm, args.target)
    for ref, digest in resolved.items():
        before = pins.get(ref)
        change = "unchanged" if before == digest else ("moved from " + before if before else "new")
        # visible: the digests and platforms are what the registry answered
        print(visible(f"{ref} -> {digest} ({change}; {', '.join(offered[ref])})"))
    path = save_lock({**pins, **resolved}, args.lock, {**platforms, **offered})
    print(visible(f"wrote {path}"))
    return 0


# --- build.py bake -----------------------------------------------------------------------------

def cmd_bake(args) -> int:
    from forge.images.bake import ATTEST_NEEDS, check_plans, plan_all, unlocked_bases, write_bake
    from forge.images.lock import (
        BaseOutOfReach,
        out_of_reach,
        refuse_added_pin,
        registry_pin,
        write_pin,
    )

    # What must be pinned, and whether the registry answers, before any release is downloaded;
    # the pins are written once every plan passed its local checks.
    found = {}
    for ref, target in unlocked_bases(args.vllm, args.target, args.lock):
        if args.locked:
            raise refuse_added_pin(ref, args.vllm, args.lock)
        try:
            found[ref] = registry_pin(ref, target)
        except BaseOutOfReach as exc:
            raise out_of_reach(ref, args.vllm, exc, args.lock, unlocked_flag=None) from exc
    if found:
        check_plans(args.vllm, args.target, args.repository, args.lock)
    for ref, (digest, offered) in found.items():
        print(visible(write_pin(ref, digest, offered, args.lock)), file=sys.stderr, flush=True)
    plans = plan_all(args.vllm, args.target, args.repository, args.lock)
    output = write_bake(plans, Path(args.output).resolve(), attest=not args.no_attest)
    for plan in plans:
        print(f"{plan.target.name:<6} {plan.target.platform:<12} {plan.tags[0]}")
    print(visible(f"wrote {output} (run from {output.parent}: docker buildx bake -f {output.name} "
                  "--push)"))       # a path given by --output
    print("without SBOM and provenance attestations (--no-attest)" if args.no_attest
          else f"with SBOM and provenance attestations: {ATTEST_NEEDS}")
    return 0


# --- build.py release-matrix -------------------------------------------------------------------

def cmd_release_matrix(args) -> int:
    from forge.images.release_matrix import parse_runner, release_matrix, vllm_of_tag

    if bool(args.tag) == bool(args.vllm):
        raise ForgeError("release-matrix: give exactly one of --tag or --vllm")
    vllm = args.vllm or vllm_of_tag(args.tag)
    runners = dict(parse_runner(r) for r in args.runner or [])
    matrix = release_matrix(vllm, args.target, args.repository, runners)
    print(dump_json(matrix, indent=1 if args.pretty else None, sort_keys=True))
    if args.github_output:
        # A job matrix takes only the include list; every other key would become a dimension.
        append_text(args.github_output,
                    f"vllm={vllm}\nmatrix={dump_json({'include': matrix['include']})}\n")
    return 0


# --- build.py publish / published --------------------------------------------------------------

def cmd_publish(args) -> int:
    """Record a pushed build; move its moving tag when verify passed.

    Prints one line per outcome. With --move-tag and a passing verify, the registry's moving tag
    moves first, then the index records it; without --move-tag nothing moves and the index says
    so. Exits 1 when a verify report did not pass (refused: nothing written, no tag moved) or none
    was given (recorded as not verified, tag not moved), so a release job shows red; 2 when a report is malformed or names another target, release or
    digest; 3 when the immutable tag already names another digest.
    """
    from forge import image_names
    from forge.images.published import publish, reference

    repository = args.repository or image_names.default_repository()
    tag = args.immutable_tag
    build, entry = publish(args.target, args.vllm, repository, tag, args.digest,
                           args.verify_report, args.index, move=args.move_tag)
    passed = build["verify"]["passed"]
    # the tag and digest are checked on load (forge.images.published), the repository by its flag
    print(f"recorded {reference(repository, tag)}@{build['digest']} "
          f"(verify {'passed' if passed else 'did not pass'})")
    moving = reference(repository, image_names.moving_tag(args.target, args.vllm))
    if entry is None:
        why = "without --move-tag; the index records no move" if passed else "verify did not pass"
        print(f"moving tag {moving} not moved ({why})")
        return 0 if passed else 1
    moving_ref = reference(repository, entry["moving_tag"])
    print(f"moved {moving_ref} -> {reference(repository, tag)}@{build['digest']}")
    if args.github_output:
        append_text(args.github_output,
                    f"moving_ref={moving_ref}\nsource_ref={repository}@{build['digest']}\n")
    return 0


def cmd_published(args) -> int:
    """Print the known-good image of each target x release."""
    from forge.images.published import known_good_entries, load_index, reference

    entries = known_good_entries(load_index(args.index), args.target, args.vllm)
    if args.json:
        print(dump_json(entries, indent=2, sort_keys=True))
        return 0
    if not entries:
        print(visible("no verified image published yet" + (f" for {args.target}" if args.target else "")))
        return 1 if (args.target or args.vllm) else 0
    for e in entries:
        # visible: every field is what the index file (--index) holds
        print(visible(f"{e['target']:6} vLLM {e['vllm']:8} {reference(e['repository'], e['moving_tag'])} -> "
                      f"{e['immutable_tag']}@{e['digest']}"))
    return 0
