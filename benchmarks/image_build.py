#!/usr/bin/env python3
"""Image build timings on a real Docker engine and a real local registry (same parts as the tests).

    python -m benchmarks.image_build [--out benchmarks/results/image_build.md]

Measures, for target a100 (amd64, native) and gb10 (arm64, under qemu) over the stand-in base of
vLLM 0.25.0 (already pulled, so "cached base"):
  - build with no forge layer cached (the images of earlier forge builds on that base are removed first)
  - rebuild with nothing changed
  - rebuild after changing one patch file (which steps rebuilt, which came from the cache)
  - `build.py --plan` with a warm cache and lock, no engine and a dead proxy (median of 5)
Works on a copy of the repository so the patch edit never touches the working tree.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from forge import REPO_ROOT as REPO
from forge.errors import exit_on_interrupt
from forge.files import write_text_atomically
from tests import fixtures_docker as infra  # the tests' real-infrastructure helpers

VERSION = infra.STANDIN_VERSION
PATCH = "patches/source/gemma4-mtp-share-embeddings.diff"


def copy_repo(into: Path) -> Path:
    root = into / "repo"
    ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.pyc")
    for name in ("forge", "patches", "verify", "recipes", "images"):
        shutil.copytree(REPO / name, root / name, ignore=ignore)
    shutil.copy2(REPO / "build.py", root / "build.py")
    return root


def edit_one_patch(root: Path) -> None:
    """A comment edit inside the patch's added lines: it still applies, its sha256 changes."""
    diff = root / PATCH
    old = diff.read_bytes()
    new = old.replace(b"# EAGLE drafts consume input embeddings", b"# EAGLE drafts read input embeddings")
    assert new != old, "the patch text this benchmark edits has changed"
    diff.write_bytes(new)
    series = root / "patches/series.yaml"
    series.write_text(series.read_text().replace(hashlib.sha256(old).hexdigest(),
                                                 hashlib.sha256(new).hexdigest()))


def forge(root: Path, env: dict, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "build.py", *args], cwd=root, capture_output=True,
                            text=True, env={**os.environ, **env}, timeout=1800)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"build.py {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr}")
    return elapsed, result


STEP = re.compile(r"^#(\d+) \[(?:[^\]]+ )?(\d+)/\d+\] (.*)$")


def steps(output: str) -> tuple[list[str], list[str]]:
    """(cached, rebuilt) Dockerfile instructions from BuildKit's plain progress (`#7 [3/9] COPY ...`,
    then `#7 CACHED` when it came from the cache)."""
    instructions, cached_ids = {}, set()
    for line in output.splitlines():
        match = STEP.match(line)
        if match and match.group(2) != "1":  # [1/N] is the FROM: no layer of ours
            instructions.setdefault(match.group(1), match.group(3)[:60])
        elif line.endswith(" CACHED"):
            cached_ids.add(line.split()[0].lstrip("#"))
    cached = [text for step, text in instructions.items() if step in cached_ids]
    rebuilt = [text for step, text in instructions.items() if step not in cached_ids]
    return cached, rebuilt


def remove_forge_images(client, repository: str, target: str | None = None) -> None:
    # A cold forge build: none of this run's images and no BuildKit cache (the base stays pulled).
    # Only this run's repository is touched; the build cache is the engine's, so other builds on
    # it run cold once too (slower, never wrong).
    label = f"io.vllm-forge.target={target}" if target else "io.vllm-forge.target"
    for image in client.images.list(name=repository, filters={"label": label}):
        client.images.remove(image.id, force=True)
    client.api.prune_builds()


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem = int(next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
              .split()[1]) / 2**20
    return f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB, {platform.system()} {platform.release()}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(REPO / "benchmarks/results/image_build.md"))
    args = parser.parse_args()
    started = infra.start_engine()
    client = infra.engine_client()
    registry = infra.start_registry()
    rows = []
    try:
        infra.publish_standin(client, registry)
        with tempfile.TemporaryDirectory() as tmp:
            root = copy_repo(Path(tmp))
            env = {"VLLM_FORGE_BASE_MIRROR": registry.host, "VLLM_FORGE_LOCK": f"{tmp}/lock.yaml",
                   "VLLM_FORGE_REPOSITORY": f"{registry.host}/bench"}
            forge(root, env, "lock", "--vllm", VERSION)
            dead = {"DOCKER_HOST": "unix:///tmp/none.sock", "HTTPS_PROXY": "http://127.0.0.1:9",
                    "HTTP_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
                    "http_proxy": "http://127.0.0.1:9"}
            plans = [forge(root, {**env, **dead}, "--target", "gb10", "--vllm", VERSION, "--plan")[0]
                     for _ in range(5)]
            rows.append(("--plan (warm cache + lock, no engine, dead proxy), median of 5",
                         "gb10", statistics.median(plans), "-"))
            for target in ("a100", "gb10"):
                remove_forge_images(client, env["VLLM_FORGE_REPOSITORY"], target)
                cold, out = forge(root, env, "--target", target, "--vllm", VERSION)
                rows.append(("build, base cached, no forge layer cached", target, cold,
                             f"{len(steps(out.stdout)[0])} cached, {len(steps(out.stdout)[1])} run"))
                warm, out = forge(root, env, "--target", target, "--vllm", VERSION)
                rows.append(("rebuild, nothing changed", target, warm,
                             f"{len(steps(out.stdout)[0])} cached, {len(steps(out.stdout)[1])} run"))
            edit_one_patch(root)
            for target in ("a100", "gb10"):
                changed, out = forge(root, env, "--target", target, "--vllm", VERSION)
                cached, rebuilt = steps(out.stdout)
                first = rebuilt[0] if rebuilt else "-"
                rows.append(("rebuild after changing one patch", target, changed,
                             f"{len(cached)} cached, {len(rebuilt)} run from `{first}`"))
            remove_forge_images(client, env["VLLM_FORGE_REPOSITORY"])
    finally:
        infra.forget_registry_images(client, registry)
        registry.stop()
        if started:
            subprocess.run(["bash", str(infra.INFRA / "stop-dockerd.sh")], check=False)
    engine = client.version()
    lines = [
        "# Image build timings",
        "",
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by `python -m benchmarks.image_build` on "
        f"{machine()}; Docker engine {engine['Version']} (BuildKit through `docker buildx bake --load`), "
        f"local docker-registry; stand-in base = Debian bookworm + vLLM {VERSION}'s real package tree "
        "(already pulled); arm64 runs under qemu-user-static. Other jobs shared the 2 cores.",
        "",
        "| what | target | seconds | steps |",
        "|---|---|---|---|",
    ] + [f"| {what} | {target} | {seconds:.2f} | {detail} |" for what, target, seconds, detail in rows]
    lines += ["", "BuildKit sets the labels in the image config (no step of their own). After a patch "
              "edit the build reuses every layer up to `COPY patches/` (tools, verify, recipes) and "
              "runs that step, the apply step and the record. The forge layers are the same few MB over upstream's real multi-GB "
              "base, so our steps should cost about the same there (not measured: no registry serves "
              "it here); pulling the base is not part of these figures."]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(exit_on_interrupt(main))
