"""The `vllm serve` flags, EngineArgs fields and environment variables of one vLLM release,
read from the release's real source (forge.releases.release_tree) without importing vllm.

`vllm serve`'s parser is built by `make_arg_parser` (imported by vllm/entrypoints/cli/serve.py
from a module that moved in 0.33: openai/cli_args.py -> common/cli_args.py). It adds a few
literal flags, then `FrontendArgs.add_cli_args` (one `--field-name` per dataclass field) and
`AsyncEngineArgs.add_cli_args` (literal `add_argument("--flag", **group_kwargs["field"])` calls
in vllm/engine/arg_utils.py). Boolean config fields get argparse.BooleanOptionalAction, which
also accepts `--no-<flag>`.
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

from forge import releases
from forge.errors import ForgeError

ARG_UTILS = "vllm/engine/arg_utils.py"
SERVE_CLI = "vllm/entrypoints/cli/serve.py"
ENVS = "vllm/envs.py"


@dataclass(frozen=True)
class ReleaseArgs:
    version: str
    serve_flags: frozenset[str]       # every option string `vllm serve` accepts
    engine_fields: frozenset[str]     # EngineArgs fields: the keywords vllm.LLM passes on
    env_vars: frozenset[str]          # variables vllm/envs.py reads

    def has_flag(self, flag: str) -> bool:
        # FlexibleArgumentParser also accepts --flag=value and underscores for dashes.
        name = flag.split("=", 1)[0]
        return name in self.serve_flags or name.replace("_", "-") in self.serve_flags


@functools.lru_cache(maxsize=None)
def release_args(version: str) -> ReleaseArgs:
    tree = releases.release_tree(version)
    source = _SourceIndex(tree)
    flags = set(_engine_flags(source)) | set(_frontend_flags(source))
    flags |= _option_strings(source.parse(SERVE_CLI), source, {})
    if "--model" not in flags or "--speculative-config" not in flags:
        raise ForgeError(f"vLLM {version}: could not read the serve flags from {tree} "
                         f"(no --model/--speculative-config found): the parser layout changed")
    return ReleaseArgs(str(version), frozenset(flags),
                       frozenset(_dataclass_fields(source.parse(ARG_UTILS), "EngineArgs", source)),
                       frozenset(_env_vars(source.parse(ENVS))))


class _SourceIndex:
    """Parsed files of one release tree, and where each config class is defined."""

    def __init__(self, tree: Path):
        self.tree = tree
        self._parsed: dict[str, ast.Module] = {}
        self._classes: dict[str, tuple[ast.ClassDef, str]] | None = None

    def parse(self, relative: str) -> ast.Module:
        if relative not in self._parsed:
            path = self.tree / relative
            if not path.exists():
                raise ForgeError(f"{path}: missing from the release tree")
            self._parsed[relative] = ast.parse(path.read_text(), filename=str(path))
        return self._parsed[relative]

    def find_class(self, name: str) -> tuple[ast.ClassDef, str] | None:
        if self._classes is None:
            self._classes = {}
            # Config dataclasses live under vllm/config; arg_utils and the frontend module too.
            files = [p for p in sorted((self.tree / "vllm" / "config").rglob("*.py"))]
            for path in files:
                relative = str(path.relative_to(self.tree))
                for node in self.parse(relative).body:
                    if isinstance(node, ast.ClassDef):
                        self._classes.setdefault(node.name, (node, relative))
        return self._classes.get(name)


def _engine_flags(source: _SourceIndex) -> set[str]:
    module = source.parse(ARG_UTILS)
    flags: set[str] = set()
    for cls in (n for n in module.body if isinstance(n, ast.ClassDef)
                and n.name in ("EngineArgs", "AsyncEngineArgs")):
        for function in cls.body:
            if isinstance(function, ast.FunctionDef) and function.name == "add_cli_args":
                flags |= _option_strings(function, source, _kwargs_classes(function))
    return flags


def _frontend_flags(source: _SourceIndex) -> set[str]:
    """Flags of make_arg_parser: its literal add_argument calls plus every frontend dataclass
    whose add_cli_args it calls (each field becomes --field-name)."""
    relative = _make_arg_parser_module(source)
    module = source.parse(relative)
    classes = {n.name: n for n in module.body if isinstance(n, ast.ClassDef)}
    make = next((n for n in module.body if isinstance(n, ast.FunctionDef)
                 and n.name == "make_arg_parser"), None)
    if make is None:
        raise ForgeError(f"{source.tree / relative}: no make_arg_parser")
    flags = _option_strings(make, source, {})
    for call in ast.walk(make):
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "add_cli_args" and isinstance(call.func.value, ast.Name)
                and call.func.value.id in classes):
            for name, annotation in _fields_with_bases(call.func.value.id, classes).items():
                flag = "--" + name.replace("_", "-")
                flags.add(flag)
                if _is_bool(annotation):
                    flags.add("--no-" + flag[2:])
    return flags


def _make_arg_parser_module(source: _SourceIndex) -> str:
    for node in ast.walk(source.parse(SERVE_CLI)):
        if isinstance(node, ast.ImportFrom) and node.module and any(
                alias.name == "make_arg_parser" for alias in node.names):
            return node.module.replace(".", "/") + ".py"
    raise ForgeError(f"{source.tree / SERVE_CLI}: does not import make_arg_parser")


def _fields_with_bases(name: str, classes: dict[str, ast.ClassDef]) -> dict[str, ast.expr]:
    cls = classes[name]
    fields: dict[str, ast.expr] = {}
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            fields.update(_fields_with_bases(base.id, classes))
    fields.update(_annotated_fields(cls))
    return fields


def _annotated_fields(cls: ast.ClassDef) -> dict[str, ast.expr]:
    return {node.target.id: node.annotation for node in cls.body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            and not _is_classvar(node.annotation)}


def _is_classvar(annotation: ast.expr) -> bool:
    return "ClassVar" in ast.unparse(annotation)


def _dataclass_fields(module: ast.Module, name: str, source: _SourceIndex) -> set[str]:
    classes = {n.name: n for n in module.body if isinstance(n, ast.ClassDef)}
    if name not in classes:
        raise ForgeError(f"{source.tree / ARG_UTILS}: no class {name}")
    return set(_fields_with_bases(name, classes))


def _kwargs_classes(function: ast.FunctionDef) -> dict[str, str]:
    """`model_kwargs = get_kwargs(ModelConfig)` -> {"model_kwargs": "ModelConfig"}."""
    found = {}
    for node in ast.walk(function):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "get_kwargs"
                and node.value.args and isinstance(node.value.args[0], ast.Name)):
            found[node.targets[0].id] = node.value.args[0].id
    return found


def _option_strings(tree: ast.AST, source: _SourceIndex, kwargs_classes: dict[str, str]) -> set[str]:
    flags: set[str] = set()
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "add_argument"):
            continue
        names = [a.value for a in call.args
                 if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")]
        flags.update(names)
        if _is_boolean_optional(call, source, kwargs_classes):
            flags.update("--no-" + n[2:] for n in names if n.startswith("--"))
    return flags


def _is_boolean_optional(call: ast.Call, source: _SourceIndex, kwargs_classes: dict[str, str]) -> bool:
    for keyword in call.keywords:
        if keyword.arg == "action":
            return ast.unparse(keyword.value).endswith("BooleanOptionalAction")
    # **cache_kwargs["enable_prefix_caching"] or **{**cache_kwargs["..."], "default": None}
    for keyword in call.keywords:
        if keyword.arg is None:
            for node in ast.walk(keyword.value):
                field_ref = _kwargs_subscript(node, kwargs_classes)
                if field_ref and _config_field_is_bool(*field_ref, source):
                    return True
    return False


def _kwargs_subscript(node: ast.AST, kwargs_classes: dict[str, str]) -> tuple[str, str] | None:
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
            and node.value.id in kwargs_classes and isinstance(node.slice, ast.Constant)):
        return kwargs_classes[node.value.id], node.slice.value
    return None


def _config_field_is_bool(class_name: str, field_name: str, source: _SourceIndex) -> bool:
    found = source.find_class(class_name)
    if found is None:
        return False
    annotation = _annotated_fields(found[0]).get(field_name)
    return annotation is not None and _is_bool(annotation)


def _is_bool(annotation: ast.expr) -> bool:
    """vLLM's get_kwargs makes BooleanOptionalAction for any hint containing bool, except
    `bool | str | None` (an optional-valued flag)."""
    names = {n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)}
    names |= {n.value for n in ast.walk(annotation) if isinstance(n, ast.Constant)
              and isinstance(n.value, str)}
    return "bool" in names and "str" not in names


def _env_vars(module: ast.Module) -> set[str]:
    """Keys of the `environment_variables` dict in vllm/envs.py."""
    for node in ast.walk(module):
        target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
        if (isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(target, ast.Name)
                and target.id == "environment_variables" and isinstance(node.value, ast.Dict)):
            return {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    raise ForgeError("vllm/envs.py: no environment_variables table found")
