"""The command lines the cases start from: each works on the pristine case tree (the control
cases in cases_faults.py run them as they are and expect exit 0), so a case that spoils one
input or one flag tests that input or flag alone."""
from __future__ import annotations

RECIPE = "gemma-4-26b-a4b-it"
DIGEST = "sha256:" + "a" * 64
REPOSITORY = "ghcr.io/example/vllm-forge"
TAG = "vllm0.27.1-gb10-3f2a9c1b7d4e"
# A lock pinning the bases the cases' releases use (the committed one is empty: no registry here).
LOCK = ("bases:\n"
        "  vllm/vllm-openai:v0.27.1: sha256:" + "1" * 64 + "\n"
        "  vllm/vllm-openai:v0.25.0: sha256:" + "2" * 64 + "\n"
        "platforms:\n"
        "  vllm/vllm-openai:v0.27.1: [linux/amd64, linux/arm64]\n"
        "  vllm/vllm-openai:v0.25.0: [linux/amd64, linux/arm64]\n")
WITH_LOCK = [("write", "work/lock.yaml", LOCK)]
LOCK_ENV = {"VLLM_FORGE_LOCK": "{work}/lock.yaml"}


def out_dir(rel: str) -> list[str]:
    """The globs of what a verify run may write: its --out folder and everything in it."""
    return [rel, rel + "/*"]


def build(*argv: str, **extra) -> dict:
    return {"run": "build", "argv": list(argv), "exit": 0, **extra}


SERVE = build("serve", "--recipe", RECIPE, "--target", "gb10", "--vllm", "0.27.1")
PLAN = build("--target", "gb10", "--vllm", "0.27.1", "--plan", "--locked", "--lock", "{work}/lock.yaml",
             setup=WITH_LOCK)
PLAN_JSON = build("--target", "h200", "--vllm", "0.27.1", "--plan", "--json", "--locked", "--lock",
                  "{work}/lock.yaml", setup=WITH_LOCK)
PATCHES = build("patches", "--vllm", "0.27.1", "--offline")
PATCHES_JSON = build("patches", "--vllm", "0.25.0", "--offline", "--json")
ROOFLINE = build("roofline", "--recipe", RECIPE, "--target", "h200", "--vllm", "0.27.1")
PUBLISHED = build("published", "--index", "{repo}/images/published.json")
PUBLISH = build("publish", "--index", "{work}/published.json", "--repository", REPOSITORY,
                "--target", "gb10", "--vllm", "0.27.1", "--immutable-tag", TAG, "--digest", DIGEST,
                "--verify-report", "{work}/report.json", creates=["work/published.json"])
# One target: a bake file unpacks each target's build context beside it (seconds per target).
BAKE = build("bake", "--vllm", "0.27.1", "--target", "h200", "--locked", "--lock", "{work}/lock.yaml",
             "-o", "{work}/bake.json", setup=WITH_LOCK,
             creates=["work/bake.json", "work/build-context", "work/build-context/**"])
RELEASE_MATRIX = build("release-matrix", "--vllm", "0.27.1", "--target", "h200", setup=WITH_LOCK,
                       env=LOCK_ENV)
PATCH_HEADERS = build("patch-headers", "--check")
UPSTREAM_WATCH = build("upstream-watch", "--offline", "--json")
TUNE_IMPORT = build("tune-moe", "--import-results", "{work}/tune.json")

SMOKE_OUT = "work/out"


def smoke(scenario: str, *extra: str, **fields) -> dict:
    """mtp_smoke.py --endpoint against the loopback server's scenario, with a real server log."""
    return {"run": "mtp_smoke", "argv": ["--recipe", RECIPE, "--target", "h200", "--endpoint",
                                         "{server}/" + scenario + "/{id}", "--server-log",
                                         "{work}/server.log", "--out", "{work}/out", *extra],
            "exit": 1, "creates": out_dir(SMOKE_OUT), "reports_in": SMOKE_OUT, **fields}


def bench_endpoint(scenario: str, *extra: str, **fields) -> dict:
    return {"run": "bench", "argv": ["--recipe", RECIPE, "--target", "h200", "--endpoint",
                                     "{server}/" + scenario + "/{id}", "--burst", "4", "--out",
                                     "{work}/bench-out", *extra],
            "exit": 1, "creates": out_dir("work/bench-out"), "reports_in": "work/bench-out", **fields}


MTP_SMOKE_HEALTHY = smoke("healthy", exit=0)
BENCH_RENDER = {"run": "bench", "argv": ["--render", "{work}/bench.json"], "exit": 0,
                "creates": ["work/bench.md", "work/bench.png", "work/bench.json"]}
PROFILE_REPORT = {"run": "profile", "argv": ["--report", "{work}/profile.json"], "exit": 0}
