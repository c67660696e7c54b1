"""Defaults that move between two releases, read from their sources (no import of vllm): the GPU
model runners shipped, the attention and MoE backends `vllm serve` offers, how Gemma 4 picks its
attention backend (Gemma4Config.verify_and_update_config and the GPU families it names), and the
MoE backends each weight format's oracle can choose."""
from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from forge import files
from forge.serving.vllm_args import ReleaseArgs
from forge.upstream import releases

MODEL_CONFIG = "vllm/model_executor/models/config.py"
GEMMA4_CONFIG = ("Gemma4Config", "verify_and_update_config")
# The MoE backend oracle of each weight format a recipe runs (weights -> file).
MOE_ORACLES = {"fp8": "vllm/model_executor/layers/fused_moe/oracle/fp8.py",
               "nvfp4": "vllm/model_executor/layers/fused_moe/oracle/nvfp4.py"}


@dataclass(frozen=True)
class Choices:
    """A flag's choices in the two releases."""
    flag: str
    removed: list[str]
    added: list[str]

    def to_dict(self) -> dict:
        return {"flag": self.flag, "removed": self.removed, "added": self.added}


@dataclass(frozen=True)
class SourceFunction:
    """One function of a release's source: where it is, a digest of its text and the GPU
    capability families it tests (`is_device_capability_family(N)`)."""
    path: str
    name: str
    lines: tuple[int, int] | None     # None: not in this release
    digest: str | None
    families: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"path": self.path, "function": self.name,
                "lines": list(self.lines) if self.lines else None, "families": self.families}


def choice_changes(before: ReleaseArgs, after: ReleaseArgs, flag: str) -> Choices:
    old, new = set(before.choices.get(flag, ())), set(after.choices.get(flag, ()))
    return Choices(flag, sorted(old - new), sorted(new - old))


def source_function(tree: Path, path: str, owner: str, name: str) -> SourceFunction:
    file = tree / path
    if not file.is_file():
        return SourceFunction(path, f"{owner}.{name}", None, None)
    text = files.read_text(file, files.SOURCE)
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef) and node.name == owner:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
                    body = ast.get_source_segment(text, item) or ""
                    return SourceFunction(path, f"{owner}.{name}",
                                          (item.lineno, item.end_lineno or item.lineno),
                                          hashlib.sha256(body.encode()).hexdigest()[:12],
                                          _families(item))
    return SourceFunction(path, f"{owner}.{name}", None, None)


def _families(function: ast.AST) -> list[int]:
    found: set[int] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "is_device_capability_family":
            found.update(arg.value for arg in node.args
                         if isinstance(arg, ast.Constant) and isinstance(arg.value, int))
    return sorted(found)


def gemma4_attention(version: str) -> SourceFunction:
    return source_function(releases.release_tree(version), MODEL_CONFIG, *GEMMA4_CONFIG)


def moe_oracle_backends(version: str, weights: str) -> list[str]:
    """The members of the `...MoeBackend` enum in the weight format's MoE oracle (empty where the
    release has no oracle for it)."""
    path = MOE_ORACLES.get(weights)
    file = releases.release_tree(version) / path if path else None
    if file is None or not file.is_file():
        return []
    members = []
    for node in ast.parse(files.read_text(file, files.SOURCE)).body:
        if isinstance(node, ast.ClassDef) and node.name.endswith("MoeBackend"):
            members += [target.id for item in node.body if isinstance(item, ast.Assign)
                        for target in item.targets if isinstance(target, ast.Name)]
    return members
