"""The `vllm serve` flags, EngineArgs fields and environment variables of one vLLM release,
read from the release's real source (forge.upstream.releases.release_tree) without importing vllm.

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
from dataclasses import dataclass, field
from pathlib import Path

from forge.errors import ForgeError
from forge.upstream import releases

ARG_UTILS = "vllm/engine/arg_utils.py"
SERVE_CLI = "vllm/entrypoints/cli/serve.py"
ENVS = "vllm/envs.py"
ARGPARSE_UTILS = "vllm/utils/argparse_utils.py"
QUANTIZATION_INIT = "vllm/model_executor/layers/quantization/__init__.py"
# --attention-backend takes a member name of AttentionBackendEnum (not a Literal type).
ATTENTION_REGISTRY = "vllm/v1/attention/backends/registry.py"


@dataclass(frozen=True)
class ReleaseArgs:
    version: str
    serve_flags: frozenset[str]       # every option string `vllm serve` accepts
    engine_fields: frozenset[str]     # EngineArgs fields: the keywords vllm.LLM passes on
    env_vars: frozenset[str]          # variables vllm/envs.py reads
    # flag -> the values its Literal type admits (flags typed by a Literal only)
    choices: dict = field(default_factory=dict)
    speculative_fields: frozenset[str] = frozenset()   # SpeculativeConfig fields (JSON keys)
    speculative_methods: frozenset[str] = frozenset()  # SpeculativeConfig.method values

    def has_flag(self, flag: str) -> bool:
        # FlexibleArgumentParser also accepts --flag=value, underscores for dashes, and
        # --json-flag.key value (one key of a JSON-valued flag).
        name = flag.split("=", 1)[0].split(".", 1)[0]
        return name in self.serve_flags or name.replace("_", "-") in self.serve_flags


@functools.cache
def release_args(version: str) -> ReleaseArgs:
    tree = releases.release_tree(version)
    source = _SourceIndex(tree)
    choices: dict[str, frozenset[str]] = {}
    flags = _engine_flags(source, choices) | _frontend_flags(source)
    backends = _attention_backends(source)
    if backends:
        choices["--attention-backend"] = backends
    flags |= _option_strings(source.parse(SERVE_CLI), source, {}, {})
    flags |= {"-h", "--help"}                      # argparse's own
    if _pairs_enable_with_disable(source):
        flags |= _enable_disable_inverses(flags)
    speculative = source.find_class("SpeculativeConfig")
    if "--model" not in flags or "--speculative-config" not in flags:
        raise ForgeError(f"vLLM {version}: could not read the serve flags from {tree} "
                         f"(no --model/--speculative-config found): the parser layout changed")
    if speculative is None:
        raise ForgeError(f"vLLM {version}: no SpeculativeConfig class in {tree / 'vllm/config'}")
    spec_fields = _annotated_fields(speculative[0])
    return ReleaseArgs(
        str(version), frozenset(flags),
        frozenset(_dataclass_fields(source.parse(ARG_UTILS), "EngineArgs", source)),
        frozenset(_env_vars(source.parse(ENVS))), choices,
        frozenset(spec_fields),
        frozenset(source.literal_values(spec_fields["method"])) if "method" in spec_fields
        else frozenset())


class _SourceIndex:
    """Parsed files of one release tree, and where each config class is defined."""

    def __init__(self, tree: Path):
        self.tree = tree
        self._parsed: dict[str, ast.Module] = {}
        self._classes: dict[str, tuple[ast.ClassDef, str]] | None = None
        self._aliases: dict[str, ast.expr] | None = None

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
            for path in self._config_files():
                relative = str(path.relative_to(self.tree))
                for node in self.parse(relative).body:
                    if isinstance(node, ast.ClassDef):
                        self._classes.setdefault(node.name, (node, relative))
        return self._classes.get(name)

    def _config_files(self) -> list[Path]:
        # vllm/config/ is a package from 0.11; before that one module, vllm/config.py.
        package = self.tree / "vllm" / "config"
        return sorted(package.rglob("*.py")) + [p for p in [self.tree / "vllm" / "config.py"]
                                                  if p.exists()]

    def literal_values(self, annotation: ast.expr, seen: frozenset = frozenset()) -> set[str]:
        """Every string a Literal annotation admits, following aliases such as
        `SpeculativeMethod = Literal["ngram", EagleModelTypes, ...]` across modules."""
        values: set[str] = set()
        for node in _literal_parts(annotation):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                values.add(node.value)
            elif isinstance(node, ast.Name) and node.id not in seen:
                alias = self._literal_aliases().get(node.id)
                if alias is not None:
                    values |= self.literal_values(alias, seen | {node.id})
        return values

    def _literal_aliases(self) -> dict[str, ast.expr]:
        if self._aliases is None:
            self._aliases = {}
            for path in self._config_files() + [self.tree / QUANTIZATION_INIT]:
                if not path.exists():
                    continue
                for node in self.parse(str(path.relative_to(self.tree))).body:
                    target = _assigned_name(node)
                    value = getattr(node, "value", None)   # an Assign or AnnAssign (_assigned_name)
                    if target and value is not None and "Literal" in ast.unparse(value):
                        self._aliases.setdefault(target, value)
        return self._aliases


def _engine_flags(source: _SourceIndex, choices: dict) -> set[str]:
    module = source.parse(ARG_UTILS)
    flags: set[str] = set()
    for cls in (n for n in module.body if isinstance(n, ast.ClassDef)
                and n.name in ("EngineArgs", "AsyncEngineArgs")):
        for function in cls.body:
            if isinstance(function, ast.FunctionDef) and function.name == "add_cli_args":
                flags |= _option_strings(function, source, _kwargs_classes(function), choices)
    return flags


def _attention_backends(source: _SourceIndex) -> frozenset[str]:
    """Member names of AttentionBackendEnum, the values --attention-backend accepts."""
    if not (source.tree / ATTENTION_REGISTRY).exists():
        return frozenset()
    for node in source.parse(ATTENTION_REGISTRY).body:
        if isinstance(node, ast.ClassDef) and node.name == "AttentionBackendEnum":
            names = (_assigned_name(item) for item in node.body)
            return frozenset(name for name in names if name and name.isupper())
    return frozenset()


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
    flags = _option_strings(make, source, {}, {})
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


def _pairs_enable_with_disable(source: _SourceIndex) -> bool:
    """Newer releases register EnableDisableAction for BooleanOptionalAction in
    FlexibleArgumentParser: `--enable-x` then also accepts `--disable-x` (and back)."""
    path = source.tree / ARGPARSE_UTILS
    if not path.exists():
        return False
    return any(isinstance(node, ast.ClassDef) and node.name == "EnableDisableAction"
               for node in source.parse(ARGPARSE_UTILS).body)


def _enable_disable_inverses(flags: set[str]) -> set[str]:
    booleans = {f for f in flags if f.startswith("--") and "--no-" + f[2:] in flags}
    inverses = set()
    for flag in booleans:
        for prefix, inverse in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
            if flag.startswith(prefix):
                inverses.add(inverse + flag[len(prefix):])
    return inverses


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


def _kwargs_classes(function: ast.FunctionDef) -> dict:
    """`model_kwargs = get_kwargs(ModelConfig)` -> {"model_kwargs": "ModelConfig"}."""
    found: dict = {}
    for node in ast.walk(function):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "get_kwargs"
                and node.value.args and isinstance(node.value.args[0], ast.Name)):
            found[node.targets[0].id] = node.value.args[0].id
    # `moe_backend_kwargs = kernel_kwargs["moe_backend"]`: a name for one field's kwargs.
    for node in ast.walk(function):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            field_ref = _kwargs_subscript(node.value, found)
            if field_ref:
                found[node.targets[0].id] = field_ref
    return found


def _option_strings(tree: ast.AST, source: _SourceIndex, kwargs_classes: dict[str, str],
                    choices: dict) -> set[str]:
    """Option strings of every add_argument call under `tree`; records Literal choices."""
    flags: set[str] = set()
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "add_argument"):
            continue
        names = [a.value for a in call.args
                 if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")]
        flags.update(names)
        annotation = _config_annotation(call, source, kwargs_classes)
        if _is_boolean_optional(call, annotation):
            flags.update("--no-" + n[2:] for n in names if n.startswith("--"))
        values = source.literal_values(annotation) if annotation is not None else set()
        if values:
            choices.update({n: frozenset(values) for n in names})
    return flags


def _config_annotation(call: ast.Call, source: _SourceIndex,
                       kwargs_classes: dict[str, str]) -> ast.expr | None:
    """The config field type behind `**cache_kwargs["enable_prefix_caching"]` (or
    `**{**cache_kwargs["..."], "default": None}`), if the call takes one."""
    for keyword in call.keywords:
        if keyword.arg is None:
            for node in ast.walk(keyword.value):
                field_ref = _kwargs_subscript(node, kwargs_classes)
                if field_ref:
                    found = source.find_class(field_ref[0])
                    return _annotated_fields(found[0]).get(field_ref[1]) if found else None
    return None


def _is_boolean_optional(call: ast.Call, annotation: ast.expr | None) -> bool:
    for keyword in call.keywords:
        if keyword.arg == "action":
            return ast.unparse(keyword.value).endswith("BooleanOptionalAction")
    return annotation is not None and _is_bool(annotation)


def _kwargs_subscript(node: ast.AST, kwargs_classes: dict) -> tuple[str, str] | None:
    """(config class, field) named by `model_kwargs["field"]` or by a name bound to one."""
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
            and isinstance(kwargs_classes.get(node.value.id), str)
            and isinstance(node.slice, ast.Constant)):
        return kwargs_classes[node.value.id], str(node.slice.value)
    if isinstance(node, ast.Name) and isinstance(kwargs_classes.get(node.id), tuple):
        return kwargs_classes[node.id]
    return None


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
            return {str(k.value) for k in node.value.keys if isinstance(k, ast.Constant)}
    raise ForgeError("vllm/envs.py: no environment_variables table found")


def _literal_parts(annotation: ast.expr):
    """The elements of Literal[...] subscripts and bare names in an annotation (`A | None`)."""
    if isinstance(annotation, ast.BinOp):
        yield from _literal_parts(annotation.left)
        yield from _literal_parts(annotation.right)
    elif isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value).endswith("Literal"):
        inner = annotation.slice
        yield from (inner.elts if isinstance(inner, ast.Tuple) else [inner])
    elif isinstance(annotation, ast.Name):
        yield annotation


def _assigned_name(node: ast.stmt) -> str | None:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None
