"""`build.py upgrade --from V1 --to V2 --target T`: what changes for the target's image and
recipes (forge.upgrade), as text or --json; exit 0 ready, 1 needs work, 2 bad input. With --run,
when ready: the image of V2 built as `build.py --target T --vllm V2` builds it, then each recipe's
smoke inside it on this host's GPU; nothing is pushed or published. On a host without a GPU, the CPU
smoke of V2 (`build.py smoke --device cpu`) runs first, where a CPU build of V2 is pinned, and a
failure there stops the run before any image is built."""
from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys

from forge.errors import ForgeError
from forge.json_text import dump_json
from forge.untrusted import visible

NEEDS_WORK = 1


def cmd_upgrade(args) -> int:
    from forge.upgrade.brief import render
    from forge.upgrade.compare import compare
    from forge.upgrade.report import render_verbose, to_dict
    from forge.upgrade.schema import check_report

    upgrade = compare(args.from_release, args.to_release, args.target, args.recipe,
                      allow_downgrade=args.allow_downgrade, repository=args.repository)
    if args.json:
        print(dump_json(check_report(to_dict(upgrade)), indent=1))
    else:
        print(render_verbose(upgrade) if getattr(args, "verbose", False) else render(upgrade))
    if upgrade.blocking:
        if args.run:
            _say(f"--run: not started: the upgrade needs work ({upgrade.blocking[0]})", sys.stderr)
        return NEEDS_WORK
    return _run(upgrade, args) if args.run else 0


def _run(upgrade, args) -> int:
    """Build, then smoke each recipe; the first step that fails stops the run, saying which."""
    from forge.commands.images import cmd_build
    from forge.upgrade.image import smoke_argv

    out = sys.stderr if args.json else sys.stdout
    gpu = gpu_problem()
    if gpu and cpu_verdict(upgrade, gpu, out) != 0:
        return NEEDS_WORK
    _say(f"--run: step 1: build the {upgrade.after} image for {upgrade.target.name}", out)
    try:
        cmd_build(_build_args(upgrade, args))
    except ForgeError as failure:
        raise ForgeError(f"--run: step 1 (build) failed: {failure}") from failure
    recipes = [c.recipe for c in upgrade.recipes if c.served_to]
    if gpu:
        commands = [shlex.join(smoke_argv(name, upgrade.target.name, upgrade.after,
                                          args.repository)) for name in recipes]
        _say(f"--run: built; step 2 (smoke) not run: {gpu}. On a GPU host run: "
             + (" && ".join(commands) or "(no recipe is served on this release)"), out)
        return NEEDS_WORK
    for step, name in enumerate(recipes, start=2):
        argv = smoke_argv(name, upgrade.target.name, upgrade.after, args.repository)
        _say(f"--run: step {step}: smoke {name}: {shlex.join(argv)}", out)
        code = subprocess.run(argv, check=False).returncode
        if code != 0:
            _say(f"--run: step {step} (smoke {name}) failed with exit {code}: its report is in "
                 f"verify-out/{name}; fix that before publishing", out)
            return NEEDS_WORK
    _say(f"--run: built and smoked; publish with: {upgrade.next[-1]}", out)
    return 0


def cpu_verdict(upgrade, gpu: str, out) -> int:
    """Without a GPU, the functional verdict this host can give before any image is built: the CPU
    smoke (`build.py smoke --device cpu`, forge.engines.smoke) of the --to release, once per model
    family among the target's served recipes whose tiny model the release's CPU build runs
    (images/cpu-engines.yaml families); 0 when it passed or cannot run here (the image steps
    follow), 1 when it failed."""
    from pathlib import Path

    from forge.engines.cpu_builds import cpu_build
    from forge.engines.smoke import SmokeRun, run_smoke
    from forge.serving.recipes import load_recipe

    release = str(upgrade.after)
    try:
        runs = cpu_build(release).families
    except ForgeError as why:
        _say(f"--run: no GPU here ({gpu}) and no CPU verdict: {why}", out)
        return 0
    families: dict[str, str] = {}
    for change in upgrade.recipes:
        recipe_family = load_recipe(change.recipe, upgrade.target.name).family_model[0]
        if change.served_to and recipe_family.tiny is not None and recipe_family.name in runs:
            families.setdefault(recipe_family.name, change.recipe)
    for family, name in families.items():
        folder = Path("verify-out") / f"cpu-{name}"
        _say(f"--run: no GPU here ({gpu}): CPU verdict first, {family} family: build.py smoke --vllm "
             f"{release} --device cpu --recipe {name} --target {upgrade.target.name} --out {folder}", out)
        code = run_smoke(SmokeRun(version=release, recipe=name, target=upgrade.target.name, out=folder),
                         say=lambda line: print(line, file=out, flush=True))   # shown escaped
        if code != 0:
            _say(f"--run: the CPU smoke of vLLM {release} failed (exit {code}): its report is "
                 f"{folder / 'mtp_smoke.json'}; no image built", out)
            return 1
        _say(f"--run: CPU verdict PASS for the {family} family on vLLM {release} (what a CPU proves: "
             "docs/cpu-smoke.md); the GPU checks follow on a GPU host", out)
    return 0


def _say(line: str, out) -> None:
    """One line of --run's progress: it quotes what blocks the upgrade (the data files), a
    failure's message and the smoke's own lines (pip's and git's output)."""
    print(visible(line), file=out, flush=True)


def _build_args(upgrade, args) -> argparse.Namespace:
    """What `build.py --target T --vllm V2` parses to: a local build, no push."""
    return argparse.Namespace(target=upgrade.target.name, vllm=upgrade.after,
                              repository=args.repository, push=False, plan=False, locked=False,
                              allow_unlocked=False, allow_base_change=False, base_image=None,
                              lock=None, json=False, no_attest=False)


def gpu_problem() -> str | None:
    """Why no smoke can run here (no NVIDIA GPU the driver lists), or None."""
    if shutil.which("nvidia-smi") is None:
        return "no NVIDIA GPU on this host (no nvidia-smi)"
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    if listed.returncode != 0 or "GPU" not in listed.stdout:
        return "no NVIDIA GPU on this host (`nvidia-smi -L` lists none)"
    return None
