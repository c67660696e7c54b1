"""YAML numbers and keys the data cannot hold, where the commands read them: a bandwidth of .inf,
a NaN in a model family, an integer of 400 digits (past the float range every number reaches),
a key that is a number or true beside text keys (sorted() would raise). Each is refused in one
line naming the file, at load (forge/data_formats.py), before anything uses it. And flag and
environment values out of range: a timeout of 10^10 s (past a socket's time_t), a burst of a
million requests, a DOCKER_HOST that is no URL. And names: a target name too long for a tag, an
id with a trailing newline, a pin nothing uses, a data file's escapes on the terminal."""
from __future__ import annotations

from tests.hostile.commands import PATCHES, PLAN, RECIPE, ROOFLINE, SERVE, bench_endpoint, build, smoke

TARGETS = "repo/images/targets.yaml"
FAMILY = "repo/models/gemma4.yaml"
RECIPE_FILE = f"repo/recipes/{RECIPE}.yaml"
H200_BANDWIDTH = '{"NVIDIA H200": 4800, "NVIDIA H200 NVL": 4800}'

# (id, command, file, text in it, its replacement)
ROWS = [
    ("targets-bandwidth-inf", ROOFLINE, TARGETS, H200_BANDWIDTH, '{"NVIDIA H200": .inf, "NVIDIA H200 NVL": 4800}'),
    ("targets-bandwidth-nan", ROOFLINE, TARGETS, H200_BANDWIDTH, '{"NVIDIA H200": .nan, "NVIDIA H200 NVL": 4800}'),
    ("targets-bandwidth-400-digits", ROOFLINE, TARGETS, H200_BANDWIDTH,
     '{"NVIDIA H200": 1' + "0" * 400 + ', "NVIDIA H200 NVL": 4800}'),
    ("targets-memory-float-overflow", SERVE, TARGETS, "gpu_memory_gib: 139.8", "gpu_memory_gib: 1.0e+400"),
    ("targets-bandwidth-number-key", ROOFLINE, TARGETS, H200_BANDWIDTH, '{"NVIDIA H200": 4800, 200: 4800}'),
    ("family-nan", ROOFLINE, FAMILY, "control_norm_zero_weight: 0.0", "control_norm_zero_weight: .nan"),
    ("family-vocab-400-digits", ROOFLINE, FAMILY, "vocab_size: 262144", "vocab_size: 1" + "0" * 400),
    ("family-bool-key", ROOFLINE, FAMILY, "control_norm_zero_weight: 0.0",
     "control_norm_zero_weight: 0.0\nyes: 1"),
    ("recipe-utilization-inf", SERVE, RECIPE_FILE, "gpu_memory_utilization: 0.9",
     "gpu_memory_utilization: .inf"),
    ("recipe-serve-number-key", SERVE, RECIPE_FILE, "max_num_seqs: 64", "max_num_seqs: 64\n    7: x"),
]


def _with(command: dict, flag: str, value: str) -> dict:
    argv = list(command["argv"])
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    return {**command, "argv": argv}


# The build itself (no --plan): the first thing it does with the host is reach the engine.
BUILD = {**PLAN, "argv": [a for a in PLAN["argv"] if a != "--plan"]}


def number_cases() -> list[dict]:
    cases = [{**command, "id": f"numbers-{name}",
              "setup": [*command.get("setup", []), ("replace", rel, old, new)],
              "exit": 2, "stderr": rel.removeprefix("repo/"), "creates": []}
             for name, command, rel, old, new in ROWS]
    # A target name of 150 characters made image tags of 170 (OCI caps a tag at 128)
    long_name = "t" * 150
    cases.append({**PLAN, "id": "names-target-150-characters",
                  "setup": [*PLAN["setup"], ("replace", TARGETS, "\n  gb10:\n", f"\n  {long_name}:\n")],
                  "argv": ["--target", long_name, *PLAN["argv"][2:]],
                  "exit": 2, "stderr": ["images/targets.yaml", "64 characters at most"], "creates": []})
    # A data file's text reaches the terminal escaped: a target's description in the plan
    cases.append({**PLAN, "id": "terminal-target-description-escapes",
                  "setup": [*PLAN["setup"], ("replace", TARGETS,
                                             "description: NVIDIA DGX Spark (GB10 Grace Blackwell "
                                             "superchip, 128 GB unified memory)",
                                             'description: "\\e[2J\\e]0;owned\\a DGX Spark"')],
                  "stdout": "\\x1b[2J", "stderr": None})
    # A pin no dependency constraint names was ignored without a word
    cases.append({**build("apply", "--site-packages", "{work}/site", "--offline", "--pin",
                          "nosuchpkg==1.0"), "id": "names-apply-pin-unknown-package",
                  "exit": 2, "stderr": ["--pin nosuchpkg==1.0", "no dependency constraint"],
                  "creates": []})
    # An id checked with `$` took a trailing newline (into a pip requirement, a report)
    cases.append({**PATCHES, "id": "names-series-package-trailing-newline",
                  "setup": [("replace", "repo/patches/series.yaml", "package: transformers",
                             'package: "transformers\\n"')],
                  "exit": 2, "stderr": ["patches/series.yaml", "not a valid Python project name"], "creates": []})
    cases += [
        {**_with(smoke("healthy"), "--timeout", "10000000000"), "id": "numbers-mtp-smoke-timeout-1e10",
         "exit": 2, "stderr": ["--timeout", "at most 604800"], "creates": []},
        {**_with(bench_endpoint("healthy"), "--burst", "1000000"), "id": "numbers-bench-burst-1e6",
         "exit": 2, "stderr": ["--burst", "at most 100000"], "creates": []},
        {**BUILD, "id": "numbers-docker-host-not-a-url", "env": {"DOCKER_HOST": "tcp://[::1"},
         "exit": 2, "stderr": ["$DOCKER_HOST", "tcp://[::1"], "creates": []},
    ]
    return cases
