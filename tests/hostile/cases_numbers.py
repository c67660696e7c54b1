"""YAML numbers and keys the data cannot hold, where the commands read them: a bandwidth of .inf,
a NaN in a model family, an integer of 400 digits (past the float range every number reaches),
a key that is a number or true beside text keys (sorted() would raise). Each is refused in one
line naming the file, at load (forge/data_formats.py), before anything uses it."""
from __future__ import annotations

from tests.hostile.commands import RECIPE, ROOFLINE, SERVE

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


def number_cases() -> list[dict]:
    return [{**command, "id": f"numbers-{name}",
             "setup": [*command.get("setup", []), ("replace", rel, old, new)],
             "exit": 2, "stderr": rel.removeprefix("repo/"), "creates": []}
            for name, command, rel, old, new in ROWS]
