"""`build.py smoke`: verify's gate on vLLM's CPU build (forge.engines.smoke); `build.py cpu-lock`:
the wheels its environments install, pinned (forge.engines.cpu_lock)."""
from __future__ import annotations

from pathlib import Path

from forge.errors import ForgeError
from forge.files import check_output_dir


def cmd_smoke(args) -> int:
    from forge.engines.smoke import SmokeRun, run_smoke
    from forge.serving.recipes import load_recipe, recipe_targets

    if not 60 <= args.timeout <= 24 * 3600:
        raise ForgeError(f"--timeout: must be 60 to 86400 seconds (got {args.timeout})")
    if not 4 <= args.max_tokens <= 1024:
        raise ForgeError(f"--max-tokens: must be 4 to 1024 (got {args.max_tokens})")
    out = Path(check_output_dir(args.out, "--out"))
    target = args.target or recipe_targets(args.recipe)[0]
    load_recipe(args.recipe, target)          # a bad --recipe or --target: refused before any install
    run = SmokeRun(version=str(args.vllm), recipe=args.recipe, target=target, out=out,
                   patches=not args.no_patches, drift=tuple(args.drift), timeout_s=args.timeout,
                   offline=args.offline, max_tokens=args.max_tokens,
                   lossless=not args.no_lossless)
    status = run_smoke(run)
    return status


def cmd_cpu_lock(args) -> int:
    from forge.engines.cpu_builds import cpu_build, cpu_releases
    from forge.engines.cpu_env import lock_entry
    from forge.engines.cpu_lock import CPU_LOCK, current_entries, lock_text
    from forge.engines.smoke import series_constraints
    from forge.files import write_text_atomically

    lock = Path(args.lock) if args.lock else CPU_LOCK
    pinned = cpu_releases()
    builds = [cpu_build(str(version)) for version in args.vllm or pinned]
    entries = {version: entry for version, entry in current_entries(lock).items() if version in pinned}
    for build in builds:
        entries[build.version] = lock_entry(build, series_constraints(build.version))
        print(f"{build.version}: {len(entries[build.version][1])} wheels pinned by version and sha256")
    write_text_atomically(lock, lock_text(entries))
    print(f"wrote {lock}")
    return 0
