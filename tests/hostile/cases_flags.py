"""Bad flag values for every command of build.py and verify/: one row per (command, flag, value).

Each row: (command row, flag, value, needle). The flag is set to the value in the command's
argv (replacing its value there, or appended); the answer must be one stderr line naming the
flag or the value as given (quoted, or with its control characters escaped), exit 2, nothing
written. Only flags that a command reads in this corpus' setting have rows: verify's engine
flags (--layers, --gpu-memory-utilization, --windows, ...) are not read with --endpoint, and an
in-process engine needs vLLM, which this host does not have.
"""
from __future__ import annotations

from tests.hostile.commands import (
    BAKE,
    BENCH_RENDER,
    PATCHES,
    PLAN,
    PROFILE_REPORT,
    PUBLISH,
    PUBLISHED,
    RECIPE,
    RELEASE_MATRIX,
    ROOFLINE,
    SERVE,
    UPSTREAM_WATCH,
    build,
    smoke,
)

ESC = "\x1b[2J\x1b]0;owned\x07"
LONG = "9" * 5000
BAD_VERSIONS = ["abc", "", "0.27.1; rm -rf /", LONG, "0.27.1" + ESC, "../../0.27.1", "-1"]
BAD_NAMES = ["nope", "../../etc/passwd", "", "a" * 5000, "gb10" + ESC, "gb10\nRESULT: PASS", "/abs"]
BAD_INTS = ["abc", "", "1e3", "0x10", LONG]

DRIFT = build("drift", "--version", "5.14.1", "--vllm", "0.27.1", "--offline")
NEW_PATCH = build("new-patch", "hostile-new", "--vllm", "0.27.1")
REFRESH = build("refresh-patch", "gemma4-mtp-share-embeddings", "--vllm", "0.27.1")
README_TABLE = build("readme-table", "--check", "--offline")
# apply's other flags (--pin, --with-candidate, --moe-*, --find-links) act on an installed vLLM,
# which this corpus does not build: its rows are the two flags checked before the install is read.
APPLY = build("apply", "--site-packages", "{work}/site", "--offline")
LOCK_CMD = build("lock", "--vllm", "0.27.1", "--lock", "{work}/lock.yaml")
TUNE = build("tune-moe", "--dtype", "bf16")
TUNE_RECIPE = build("tune-moe", "--dtype", "bf16", "--recipe", RECIPE, "--target", "h200")
BENCH = {"run": "bench", "argv": ["--recipe", RECIPE, "--target", "h200", "--endpoint",
                                  "{server}/healthy/{id}", "--burst", "4", "--out", "{work}/bench-out"],
         "exit": 0, "creates": ["work/bench-out", "work/bench-out/*"]}
PROFILE_RUN = {"run": "profile", "argv": ["--recipe", RECIPE, "--target", "h200", "--dummy"], "exit": 0}
SMOKE = smoke("healthy", exit=0)

ROWS: list[tuple[dict, str, str, str | None]] = []


def rows(command: dict, flag: str, values, needle: str | None = None) -> None:
    ROWS.extend((command, flag, value, needle) for value in values)


# --- build.py ------------------------------------------------------------------------------------
for command in (SERVE, PLAN, PATCHES, ROOFLINE, BAKE, RELEASE_MATRIX, PUBLISH, DRIFT, NEW_PATCH,
                REFRESH, LOCK_CMD):
    rows(command, "--vllm", BAD_VERSIONS if command is SERVE else BAD_VERSIONS[:3])
rows(SERVE, "--target", BAD_NAMES)
rows(SERVE, "--recipe", BAD_NAMES)
rows(SERVE, "--port", [*BAD_INTS, "-1", "0", "70000"])
rows(SERVE, "--nodes", ["0", "-3", "abc", "100000"])
rows(SERVE, "--master-port", ["abc"])        # its range is checked with --nodes 2 and more
rows(SERVE, "--node-rank", ["abc"])
rows(SERVE, "--repository", ["UPPER/Case", "a b", "", "ghcr.io/x/" + ESC, "x" * 300])
rows(SERVE, "--recipes-dir", ["{work}/missing", "{work}/report.json", "/dev/zero"])
rows(PLAN, "--target", BAD_NAMES[:5])
rows(PLAN, "--base-image", ["not a ref", "UPPER:tag", "x@sha256:zz", ESC])
rows(PLAN, "--lock", ["{work}", "{work}/missing/lock.yaml", "/dev/null"])
rows(PLAN, "--repository", ["UPPER/Case", "a b", ""])
rows(ROOFLINE, "--target", BAD_NAMES[:4])
rows(ROOFLINE, "--recipe", BAD_NAMES[:4])
rows(ROOFLINE, "--dtype", ["fp4", ""])
rows(ROOFLINE, "--context", ["-5", "abc"])
rows(ROOFLINE, "--layers", ["0", "-1", "abc", "100000"])
rows(ROOFLINE, "--profile", ["abc", "1.5/0.2", "-0.1", "nan", "inf", "0.5//0.2", "NAME=", "x=0.5@",
                             "0.5@nan"])
rows(ROOFLINE, "--step-cost-ratio", ["nan", "inf", "-1", "0", "abc", "1e400"])
rows(ROOFLINE, "--device", ["NVIDIA_NOPE", ESC])
rows(ROOFLINE, "--recipes-dir", ["{work}/missing", "{work}/report.json"])
rows(PATCHES, "--site-packages", ["{work}/missing", "{work}/report.json", "/dev/null", ""])
rows(BAKE, "--output", ["{work}", "{work}/missing/bake.json", "{work}/report.json/x"])
rows(BAKE, "--target", ["nope", ""])
rows(BAKE, "--lock", ["{work}", "{work}/missing/lock.yaml"])
rows(BAKE, "--repository", ["UPPER/Case", ""])
rows(RELEASE_MATRIX, "--tag", ["vllm-", "v0.27.1", "vllm-abc", "vllm-0.27.1-rX", ESC])
rows(RELEASE_MATRIX, "--target", ["nope", ""])
rows(RELEASE_MATRIX, "--runner", ["nope", "linux/amd64", "=x"])
rows(RELEASE_MATRIX, "--github-output", ["{work}", "{work}/missing/out"])
rows(PUBLISH, "--digest", ["sha256:zz", "", "a" * 64, "sha256:" + "A" * 64, ESC])
rows(PUBLISH, "--immutable-tag", ["", "nope", "vllm0.27.1-gb10", "UPPER", "a" * 300, ESC])
rows(PUBLISH, "--target", ["nope", "h200"])
rows(PUBLISH, "--repository", ["UPPER/Case", ""])
rows(PUBLISH, "--verify-report", ["{work}/missing.json", "{work}/empty-dir", "/dev/null"])
rows(PUBLISH, "--index", ["{work}", "{work}/missing/index.json", "{work}/report.json/x"])
rows(PUBLISH, "--github-output", ["{work}", "{work}/missing/out"])
rows(PUBLISHED, "--index", ["{work}", "/dev/null"])
rows(PUBLISHED, "--vllm", BAD_VERSIONS[:3])
rows(APPLY, "--site-packages", ["{work}/missing", "{work}/report.json", "/dev/null"])
rows(APPLY, "--vllm", BAD_VERSIONS[:3])
rows(TUNE, "--batch-sizes", ["a,b", "", "1,,2", "-1", "0", LONG])
rows(TUNE, "--dtype", ["fp4"])
rows(TUNE, "--space", ["huge"])
rows(TUNE, "--results", ["{work}", "{work}/missing/r.json"])
rows(TUNE_RECIPE, "--k", ["a", "-1", "0", ""])
rows(TUNE_RECIPE, "--concurrency", ["a", "-1", "0", ""])
rows(TUNE_RECIPE, "--recipe", BAD_NAMES[:3])
rows(TUNE, "--import-results", ["{work}/missing.json", "{work}", "/dev/null"])
rows(build("tune-moe", "--import-results", "{work}/bench.json"), "--end-to-end", ["{work}/missing.json", "{work}"])
rows(UPSTREAM_WATCH, "--series", ["{work}/missing.yaml", "{work}", "/dev/null"])
rows(UPSTREAM_WATCH, "--dependency-watch", ["{work}/missing.yaml", "{work}"])
rows(UPSTREAM_WATCH, "--dependency-through", ["transformers", "transformers==abc", "==1"])
rows(UPSTREAM_WATCH, "--pr-body", ["{work}", "{work}/missing/body.md"])
rows(DRIFT, "--version", ["abc", "", ESC, "1.0; rm -rf /"])
rows(DRIFT, "--package", ["", "../../x", "no such package", ESC])
rows(DRIFT, "--series", ["{work}/missing.yaml", "{work}"])
rows(NEW_PATCH, "id", ["../escape", "", "a/b", "-x", ".hidden", "a" * 300, ESC], needle="ID")
rows(REFRESH, "id", ["nope", "../escape", ""], needle="ID")
rows(README_TABLE, "--readme", ["{work}/missing.md", "{work}"])

# --- verify/ -------------------------------------------------------------------------------------
rows(SMOKE, "--recipe", BAD_NAMES[:5])
rows(SMOKE, "--target", BAD_NAMES[:4])
rows(SMOKE, "--batch", ["0", "-1", "abc", LONG])
rows(SMOKE, "--timeout", ["0", "-1", "abc", "nan"])
rows(SMOKE, "--max-tokens", ["0", "-1", "abc"])
rows(SMOKE, "--image-digest", ["sha256:zz", "nope", "", ESC])
rows(SMOKE, "--expect-control", ["nope"])
rows(SMOKE, "--runner", ["v3"])
rows(SMOKE, "--out", ["{work}/report.json", "{work}/report.json/sub", "/dev/null"])
rows(SMOKE, "--endpoint", ["not a url", "ftp://127.0.0.1/", "http://[::1"])
rows(SMOKE, "--compile-backend", ["nope"])
rows(BENCH, "--burst", ["0", "-1", "abc"])
rows(BENCH, "--out", ["{work}/report.json", "/dev/null"])
rows(BENCH, "--endpoint", ["not a url", "http://127.0.0.1:9"])
rows(BENCH_RENDER, "--render", ["{work}/missing.json", "{work}", "/dev/null"])
rows(PROFILE_REPORT, "--report", ["{work}/missing.json", "{work}", "/dev/null"])
rows(PROFILE_REPORT, "--baseline", ["{work}/missing.json", "{work}/profile.json", "{work}"])
rows(PROFILE_REPORT, "--roofline", ["{work}/missing.json", "{work}", "{work}/report.json"])
rows(PROFILE_REPORT, "--family", ["nope", ESC])
rows(PROFILE_REPORT, "--md", ["{work}", "{work}/missing/p.md"])
rows(PROFILE_REPORT, "--json", ["{work}", "{work}/missing/p.json"])
rows(PROFILE_REPORT, "--plot", ["{work}/missing/p.png"])
rows(PROFILE_RUN, "--k", ["-1", "abc"])
rows(PROFILE_RUN, "--tokens", ["0", "-1"])
rows(PROFILE_RUN, "--prompt-tokens", ["1", "-1"])
rows(PROFILE_RUN, "--control", ["nope"])
rows(PROFILE_RUN, "--profiler", ["nope"])
rows(PROFILE_RUN, "--max-model-len", ["0", "-5"])


def with_flag(argv: list[str], flag: str, value: str) -> list[str]:
    if flag == "id":                       # the positional patch id, after the command word
        return [argv[0], value, *argv[2:]]
    if flag == "--wait-server":
        return [*argv, flag, *value.split(" ")]
    if flag in argv:
        at = argv.index(flag)
        return [*argv[:at + 1], value, *argv[at + 2:]]
    return [*argv, flag, value]


def slug(value: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in ".-_" else "-" for c in value)[:24].strip("-")
    return cleaned or "empty"


def named(flag: str, value: str) -> tuple[str, ...]:
    """What a refusal may name: the flag, or the value as given, quoted or escaped."""
    forms = {flag, repr(value), repr(value)[1:-1]}
    if value.isprintable():
        forms.add(value)
    return tuple(sorted(form for form in forms if form))


def flag_cases() -> list[dict]:
    cases, seen = [], {}
    for command, flag, value, needle in ROWS:
        name = command["run"] if command["run"] != "build" else command["argv"][0].lstrip("-")
        key = f"flag-{name}-{flag.lstrip('-')}-{slug(value)}"
        seen[key] = seen.get(key, 0) + 1
        case_id = key if seen[key] == 1 else f"{key}-{seen[key]}"
        cases.append({**command, "id": case_id, "argv": with_flag(command["argv"], flag, value),
                      "exit": 2, "stderr": needle or named(flag, value), "creates": [], "reports_in": None,
                      "setup": [*command.get("setup", []), ("directory", "work/empty-dir")]})
    return cases
