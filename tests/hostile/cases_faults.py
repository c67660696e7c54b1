"""Environment variables, full disks, read-only trees, signals, hostile servers, and the controls.

Controls first: each command line of commands.py as it is, expecting success. They prove the
harness can pass (a tree, an environment and a server in which the commands work), so every
other case fails for its own hostile input alone.
"""
from __future__ import annotations

from tests.hostile.commands import (
    BAKE,
    BENCH_RENDER,
    LOCK_ENV,
    MTP_SMOKE_HEALTHY,
    PATCHES,
    PATCHES_JSON,
    PLAN,
    PLAN_JSON,
    PROFILE_REPORT,
    PUBLISH,
    PUBLISHED,
    RELEASE_MATRIX,
    ROOFLINE,
    SERVE,
    WITH_LOCK,
    bench_endpoint,
    build,
    smoke,
)
from tests.hostile.server import SCENARIOS

CONTROLS = {"serve": SERVE, "plan": PLAN, "plan-json": PLAN_JSON, "patches": PATCHES,
            "patches-json": PATCHES_JSON, "roofline": ROOFLINE, "published": PUBLISHED,
            "publish": PUBLISH, "bake": BAKE, "release-matrix": RELEASE_MATRIX,
            "patch-headers": build("patch-headers", "--check"), "mtp-smoke": MTP_SMOKE_HEALTHY,
            "bench-render": BENCH_RENDER, "profile-report": PROFILE_REPORT,
            "bench-endpoint": bench_endpoint("healthy", exit=0)}

SIZE = 64 * 1024          # the small tmpfs of a disk-full case (filled to the last byte)


def control_cases() -> list[dict]:
    return [{**command, "id": f"control-{name}", "stderr": None} for name, command in CONTROLS.items()]


# --- environment variables ------------------------------------------------------------------------

EPOCHS = {"abc": "abc", "negative": "-5", "huge": "9" * 40, "float": "1.5e9",
          "spaces": " 17 ", "year-10000": "253402300800", "hex": "0x10"}
CACHE_AT = {  # $VLLM_FORGE_CACHE -> setup
    "a-file": ("{work}/report.json", []),
    "fifo": ("{work}/fifo", [("fifo", "work/fifo")]),
    "dev-null": ("/dev/null", []),
    "under-a-file": ("{work}/report.json/cache", []),
    "root-owned": ("/root/.cache/hostile", []),
}
# An empty cache the command cannot fill (read-only, or a relative path it may create): the
# refusal is about what is missing from it, offline.
EMPTY_CACHE_AT = {
    "read-only": ("{work}/ro-cache", [("directory", "work/ro-cache"), ("read_only", "work/ro-cache")]),
    "relative-missing": ("no/such/cache", []),
}
PLAN_DEFAULT_LOCK = build("--target", "gb10", "--vllm", "0.27.1", "--plan", "--locked")
DATA_VARIABLES = {  # variable -> the command that reads the file it names
    "VLLM_FORGE_TARGETS": SERVE, "VLLM_FORGE_SERIES": PATCHES, "VLLM_FORGE_LOCK": PLAN_DEFAULT_LOCK,
}
BAD_PATHS = {"missing": "{work}/missing.yaml", "directory": "{work}", "dev-zero": "/dev/zero",
             "fifo": "{work}/fifo", "empty": ""}


def env_cases() -> list[dict]:
    cases = []
    for name, value in EPOCHS.items():
        for command_name, command in (("bake", BAKE),) if name not in ("abc", "negative") else (
                ("bake", BAKE), ("plan", PLAN)):
            cases.append({**command, "id": f"env-source-date-epoch-{name}-{command_name}",
                          "env": {**command.get("env", {}), "SOURCE_DATE_EPOCH": value},
                          "exit": 2, "stderr": "SOURCE_DATE_EPOCH", "creates": []})
    # Empty is unset, as for every variable here (forge.images.context.source_date_epoch): the
    # bake is dated from the commit, which is reproducible; it succeeds and writes what it writes.
    cases.append({**BAKE, "id": "env-source-date-epoch-empty-bake",
                  "env": {**BAKE.get("env", {}), "SOURCE_DATE_EPOCH": ""}, "exit": 0, "stderr": None})
    for name, (value, setup) in CACHE_AT.items():
        for command_name, command in (("patches", build("patches", "--vllm", "0.21.0", "--offline")),
                                      ("serve", SERVE)):
            cases.append({**command, "id": f"env-cache-{name}-{command_name}", "setup": setup,
                          "env": {"VLLM_FORGE_CACHE": value}, "exit": 2,
                          "stderr": ("$VLLM_FORGE_CACHE", value), "creates": []})
    for name, (value, setup) in EMPTY_CACHE_AT.items():
        cases.append({**build("patches", "--vllm", "0.21.0", "--offline"), "id": f"env-cache-{name}-patches",
                      "setup": setup, "env": {"VLLM_FORGE_CACHE": value}, "exit": 2,
                      "stderr": ("$VLLM_FORGE_CACHE", value), "creates": []})
    no_home = {"HOME": None, "VLLM_FORGE_CACHE": None, "XDG_CACHE_HOME": None}
    cases += [{**PATCHES, "id": "env-home-unset-patches", "env": no_home, "exit": 2,
               "stderr": "cache"},
              {**SERVE, "id": "env-home-unset-serve", "env": no_home, "exit": 2, "stderr": "cache"},
              {**build("patches", "--vllm", "0.21.0", "--offline"), "id": "env-xdg-cache-a-file",
               "env": {"VLLM_FORGE_CACHE": None, "XDG_CACHE_HOME": "{work}/report.json"},
               "exit": 2, "stderr": "{work}/report.json"}]
    for variable, command in DATA_VARIABLES.items():
        for name, value in BAD_PATHS.items():
            if name == "empty":
                continue            # an empty variable means "the default": not hostile
            setup = [*command.get("setup", []), *([("fifo", "work/fifo")] if name == "fifo" else [])]
            cases.append({**command, "id": f"env-{variable.lower().replace('_', '-')}-{name}",
                          "setup": setup, "env": {**command.get("env", {}), variable: value},
                          "exit": 2, "stderr": (variable, value if name != "fifo" else "{work}/fifo"),
                          "creates": [], "timeout": 4.0 if name in ("fifo", "dev-zero") else 10.0})
    cases += [
        {**PATCHES, "id": "env-pypi-not-a-url", "env": {"VLLM_FORGE_PYPI": "not a url"},
         "argv": ["patches", "--vllm", "0.21.0"], "exit": 2, "stderr": "not a url"},
        {**smoke("healthy"), "id": "env-target-bogus", "argv": ["--recipe", "gemma-4-26b-a4b-it",
                                                                "--endpoint", "{server}/healthy/{id}"],
         "env": {"VLLM_FORGE_TARGET": "nope\x1b[2J"}, "exit": 2, "stderr": "nope", "creates": []},
        {**smoke("healthy"), "id": "env-image-digest-bogus", "env": {"VLLM_FORGE_IMAGE_DIGEST": "nope"},
         "exit": 2, "stderr": "VLLM_FORGE_IMAGE_DIGEST", "creates": []},
        {**PLAN, "id": "env-base-mirror-bogus", "env": {"VLLM_FORGE_BASE_MIRROR": "not a mirror\x1b"},
         "exit": 2, "stderr": ("VLLM_FORGE_BASE_MIRROR", "not a mirror")},
        {**SERVE, "id": "env-lang-c-non-ascii-recipe", "env": {"LANG": "C", "LC_ALL": "C"},
         "argv": ["serve", "--recipe", "gemma-4-26b-a4b-it-\u00e9", "--target", "gb10", "--vllm", "0.27.1"],
         "exit": 2, "stderr": ("--recipe", "gemma-4-26b-a4b-it-\u00e9")},
        {**SERVE, "id": "env-path-empty-serve", "env": {"PATH": ""}, "exit": 0, "stderr": None},
    ]
    return cases


# --- full disks -----------------------------------------------------------------------------------

def full_disk_cases() -> list[dict]:
    full = [("tmpfs", "work/full", SIZE)]
    return [
        {**PUBLISH, "id": "disk-full-publish-index", "setup": full,
         "argv": [*PUBLISH["argv"][:2], "{work}/full/published.json", *PUBLISH["argv"][3:]],
         "exit": 2, "stderr": "{work}/full/published.json", "creates": []},
        {**PUBLISH, "id": "disk-full-publish-existing-index",
         "setup": [("tmpfs", "work/full", SIZE, "repo/images/published.json")],
         "argv": [*PUBLISH["argv"][:2], "{work}/full/published.json", *PUBLISH["argv"][3:]],
         "exit": 2, "stderr": "{work}/full/published.json", "creates": []},
        {**PUBLISH, "id": "disk-full-publish-github-output", "setup": full,
         "argv": [*PUBLISH["argv"], "--github-output", "{work}/full/out"], "exit": 2,
         "stderr": "{work}/full/out", "creates": []},
        {**BAKE, "id": "disk-full-bake-output", "setup": [*WITH_LOCK, *full],
         "argv": [*BAKE["argv"][:-1], "{work}/full/bake.json"], "exit": 2,
         "stderr": "{work}/full/bake.json", "creates": []},
        {**RELEASE_MATRIX, "id": "disk-full-release-matrix-github-output", "setup": [*WITH_LOCK, *full],
         "argv": [*RELEASE_MATRIX["argv"], "--github-output", "{work}/full/out"], "exit": 2,
         "stderr": "{work}/full/out", "env": LOCK_ENV},
        {**PATCHES, "id": "disk-full-cache", "setup": full, "env": {"VLLM_FORGE_CACHE": "{work}/full"},
         "argv": ["patches", "--vllm", "0.21.0", "--offline"], "exit": 2, "stderr": "{work}/full"},
        {**smoke("healthy"), "id": "disk-full-mtp-smoke-out", "setup": full,
         "argv": [*smoke("healthy")["argv"][:-1], "{work}/full/out"], "exit": 2,
         "stderr": "{work}/full/out", "creates": []},
        {**bench_endpoint("healthy"), "id": "disk-full-bench-out", "setup": full,
         "argv": [*bench_endpoint("healthy")["argv"][:-1], "{work}/full/bench-out"], "exit": 2,
         "stderr": "{work}/full/bench-out", "creates": []},
        {**BENCH_RENDER, "id": "disk-full-bench-render",
         "setup": [("tmpfs", "work/full", SIZE * 4, "work/bench.json")],
         "argv": ["--render", "{work}/full/bench.json"], "exit": 2, "stderr": "{work}/full", "creates": []},
        {**PROFILE_REPORT, "id": "disk-full-profile-json", "setup": full,
         "argv": [*PROFILE_REPORT["argv"], "--json", "{work}/full/p.json"], "exit": 2,
         "stderr": "{work}/full/p.json"},
        {**PROFILE_REPORT, "id": "disk-full-profile-md", "setup": full,
         "argv": [*PROFILE_REPORT["argv"], "--md", "{work}/full/p.md"], "exit": 2,
         "stderr": "{work}/full/p.md"},
    ]


# --- read-only trees (the child is nobody: a 0555 folder is read-only to it) -------------------------

def read_only_cases() -> list[dict]:
    stale_header = ("replace", "repo/patches/source/gemma4-mtp-share-embeddings.diff", "# ", "#  ")
    return [
        {**PUBLISH, "id": "read-only-publish-index", "setup": [("read_only", "repo/images")],
         "argv": [*PUBLISH["argv"][:2], "{repo}/images/published.json", *PUBLISH["argv"][3:]],
         "exit": 2, "stderr": "{repo}/images/published.json", "creates": []},
        {**PUBLISH, "id": "read-only-publish-index-file", "setup": [("chmod", "repo/images/published.json", 0o444),
                                                                   ("read_only", "repo/images")],
         "argv": [*PUBLISH["argv"][:2], "{repo}/images/published.json", *PUBLISH["argv"][3:]],
         "exit": 2, "stderr": "{repo}/images/published.json", "creates": []},
        {**build("patch-headers"), "id": "read-only-patch-headers",
         "setup": [stale_header, ("read_only", "repo/patches")], "exit": 2, "stderr": "{repo}/patches"},
        {**build("new-patch", "hostile-new", "--vllm", "0.27.1"), "id": "read-only-new-patch",
         "setup": [("read_only", "repo")], "exit": 2, "stderr": "{repo}/build"},
        {**BAKE, "id": "read-only-bake-output", "setup": [*WITH_LOCK, ("directory", "work/ro"),
                                                          ("read_only", "work/ro")],
         "argv": [*BAKE["argv"][:-1], "{work}/ro/bake.json"], "exit": 2, "stderr": "{work}/ro/bake.json",
         "creates": []},
        {**RELEASE_MATRIX, "id": "read-only-release-matrix-github-output",
         "setup": [*WITH_LOCK, ("directory", "work/ro"), ("read_only", "work/ro")],
         "argv": [*RELEASE_MATRIX["argv"], "--github-output", "{work}/ro/out"], "exit": 2,
         "stderr": "{work}/ro/out"},
        {**smoke("healthy"), "id": "read-only-mtp-smoke-out", "setup": [("read_only", "work")],
         "exit": 2, "stderr": "{work}/out", "creates": []},
        {**bench_endpoint("healthy"), "id": "read-only-bench-out", "setup": [("read_only", "work")],
         "exit": 2, "stderr": "{work}/bench-out", "creates": []},
        {**BENCH_RENDER, "id": "read-only-bench-render", "setup": [("read_only", "work")],
         "exit": 2, "stderr": "{work}", "creates": []},
        {**PROFILE_REPORT, "id": "read-only-profile-md", "setup": [("read_only", "work")],
         "argv": [*PROFILE_REPORT["argv"], "--md", "{work}/p.md"], "exit": 2, "stderr": "{work}/p.md"},
        # a read-only cache that holds what the command needs is no fault: it reads, writes nothing
        {**PATCHES, "id": "read-only-cache-holding-the-statuses", "setup": [("read_only", "cache")],
         "exit": 0, "stderr": None},
    ]


# --- SIGINT mid-run: one line, exit 130, nothing half-written --------------------------------------

def sigint_cases() -> list[dict]:
    # Ctrl-C while a command waits on something that really blocks: a server that stalls. (A FIFO
    # where a data file should be no longer blocks a reader: the file layer refuses it at once,
    # which the file-*-fifo cases check, so no read is left to interrupt.)
    rows = [
        ("mtp-smoke-models-stall", smoke("models-stall"), []),
        ("mtp-smoke-metrics-stall", smoke("metrics-stall"), []),
        ("mtp-smoke-completions-stall", smoke("completions-stall"), []),
        ("bench-endpoint-completions-stall", bench_endpoint("completions-stall"), []),
    ]
    return [{**command, "id": f"sigint-{name}", "setup": [*command.get("setup", []), *setup],
             "sigint_after": 1.0, "timeout": 6.0, "exit": 130, "stderr": "interrupt",
             "creates": []} for name, command, setup in rows]


# --- hostile servers ---------------------------------------------------------------------------------

TIMEOUT_SCENARIOS = {"models-stall", "metrics-stall", "completions-stall", "health-stall"}
BENCH_SCENARIOS = ("version-ansi", "version-deep", "version-endless", "version-nan",
                   "version-http-500", "completions-no-choices", "completions-ansi-text",
                   "completions-not-json", "completions-deep", "completions-http-500-ansi",
                   "completions-endless")
# A server that is hostile only in what it says about itself (its model id, its version) still
# serves: the smoke passes, and must print what it said escaped. A /version too deep or too long
# to read is a release the report calls unknown, as an HTTP 500 there is (bench's cases agree).
SMOKE_PASSES = {"healthy", "version-number", "version-nan", "version-http-500", "completions-ansi-text",
                "models-ansi-id", "version-ansi", "version-deep", "version-endless"}
BENCH_ONLY = {"health-stall"}


def server_cases() -> list[dict]:
    cases = []
    for scenario in (s for s in SCENARIOS if s not in BENCH_ONLY):
        extra = ("--timeout", "1") if scenario in TIMEOUT_SCENARIOS else ()   # the least it takes
        expected = 0 if scenario in SMOKE_PASSES else 1
        cases.append({**smoke(scenario, *extra), "id": f"server-mtp-smoke-{scenario}", "exit": expected,
                      "timeout": 15.0})
    for scenario in BENCH_SCENARIOS:
        expected = 0 if scenario.startswith("version") or scenario == "completions-ansi-text" else 1
        cases.append({**bench_endpoint(scenario), "id": f"server-bench-{scenario}", "exit": expected,
                      "timeout": 15.0})
    return cases
