"""The `vllm serve` flags, EngineArgs fields and environment variables of one vLLM release,
read from the release's real source (forge.upstream.releases.release_tree) without importing vllm.

`vllm serve`'s parser is built by `make_arg_parser` (imported by vllm/entrypoints/cli/serve.py
from a module that moved in 0.33: openai/cli_args.py -> common/cli_args.py). It adds a few
literal flags, then `FrontendArgs.add_cli_args` (one `--field-name` per dataclass field) and
`AsyncEngineArgs.add_cli_args` (literal `add_argument("--flag", **group_kwargs["field"])` calls
in vllm/engine/arg_utils.py). Boolean config fields get argparse.BooleanOptionalAction, which
also accepts `--no-<flag>`.

How each flag takes its values (ValueRule: nargs, type, Literal choices) follows the same
definitions: vLLM's get_kwargs derives them from the config field's type (_compute_kwargs names
per-field human-readable integer converters), then add_cli_args and the add_argument call itself
may override them. A converter is read as its name alone and judged by the project's own
function of that name (forge.serving.value_converters): nothing of the release ever runs here.
"""
from __future__ import annotations

import ast
import functools
import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from forge.data_formats import load_json_entry
from forge.errors import ForgeError
from forge.files import CACHE, SOURCE, read_bytes, read_text, write_entry
from forge.json_text import dump_json
from forge.serving import value_converters
from forge.untrusted import visible
from forge.upstream import releases

ARG_UTILS = "vllm/engine/arg_utils.py"
SERVE_CLI = "vllm/entrypoints/cli/serve.py"
ENVS = "vllm/envs.py"
ARGPARSE_UTILS = "vllm/utils/argparse_utils.py"
QUANTIZATION_INIT = "vllm/model_executor/layers/quantization/__init__.py"
# --attention-backend takes a member name of AttentionBackendEnum (not a Literal type).
ATTENTION_REGISTRY = "vllm/v1/attention/backends/registry.py"
# The two GPU model runners' modules: V1 (removed in 0.34.0, whose platforms/interface.py refuses
# VLLM_USE_V2_MODEL_RUNNER=0: "Model Runner V1 has been removed") and V2 (from 0.21.0 on).
RUNNER_MODULES = {"v1": "vllm/v1/worker/gpu_model_runner.py", "v2": "vllm/v1/worker/gpu/model_runner.py"}


@dataclass(frozen=True)
class ValueRule:
    """How the release's argparse takes the values after one flag, as its add_argument says."""
    nargs: int | str | None = None   # argparse's: None one value, 0 a switch, "?", "+" or a count
    converter: str = "str"           # the `type` callable: int, float, human_readable_int, ...
    accepts_none: bool = False       # vLLM's optional_type: "None" (or "") stands for None
    open_choices: bool = True        # False: only the flag's Literal choices (vLLM's `choices`)


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
    value_rules: dict = field(default_factory=dict)    # flag -> ValueRule
    aliases: dict = field(default_factory=dict)        # "-q" -> "--quantization"
    runners: frozenset[str] = frozenset({"v1", "v2"})  # the GPU model runners the release ships

    def canonical(self, flag: str) -> str:
        """The long name of the flag `flag` spells (an alias, underscores, `--x.key`)."""
        name = flag.split("=", 1)[0].split(".", 1)[0]
        return self.aliases.get(name) or self.aliases.get(name.replace("_", "-")) \
            or name.replace("_", "-")

    def has_flag(self, flag: str) -> bool:
        # FlexibleArgumentParser also accepts --flag=value, underscores for dashes, and
        # --json-flag.key value (one key of a JSON-valued flag).
        name = flag.split("=", 1)[0].split(".", 1)[0]
        return name in self.serve_flags or name.replace("_", "-") in self.serve_flags

    def value_problem(self, flag: str, values: list[str]) -> str | None:
        """Why the release's parser would refuse `values` after `flag` (its nargs, choices and
        type), or None when it takes them or the flag's reading is not known here."""
        name = flag.split("=", 1)[0]
        if "." in name:
            return None             # one key of a JSON flag: vLLM merges it into the JSON
        rule = self.value_rules.get(name) or self.value_rules.get(name.replace("_", "-"))
        if rule is None:
            return None
        problem = _count_problem(rule.nargs, values)
        if problem:
            return problem
        allowed = None if rule.open_choices else self.choices.get(name.replace("_", "-"))
        for value in values:
            if rule.accepts_none and value in ("", "None"):
                continue
            if allowed is not None and value not in allowed:
                return f"takes one of {' | '.join(sorted(allowed))}, not {value!r}"
            if allowed is None and value_converters.converts(rule.converter, value) is False:
                return f"takes {value_converters.words(rule.converter)}, not {value!r}"
        return None

    def unchecked_note(self, flag: str) -> str | None:
        """The one line saying that `flag`'s values are read by a converter the project does not
        know (so value_problem checks them as strings), or None."""
        name = flag.split("=", 1)[0]
        rule = self.value_rules.get(name) or self.value_rules.get(name.replace("_", "-"))
        if rule is None or "." in name or rule.converter in value_converters.AS_TEXT \
                or rule.converter in value_converters.CONVERTERS \
                or (not rule.open_choices and self.choices.get(name.replace("_", "-"))):
            return None
        return (f"note: vLLM {self.version}'s {visible(self.canonical(flag))} reads its values "
                f"with {visible(rule.converter)}, which vllm-forge does not know: checked as a "
                "string")


# What release_args reads is kept in the cache (`serve-args/<version>.json`), under the hash of this
# module's source: parsing a release's config modules costs ~0.3 s, and every `serve`, `--plan`
# and build reads them. A change to this file reads every release afresh.
_CODE = hashlib.sha256(read_bytes(__file__, SOURCE)).hexdigest()[:16]
_SETS = ("serve_flags", "engine_fields", "env_vars", "speculative_fields", "speculative_methods",
         "runners")


def _cached_args_file(version: str) -> Path:
    return releases.cache_dir() / "serve-args" / f"{version}.json"


def _to_cache(args: ReleaseArgs) -> str:
    return dump_json({
        "code": _CODE, "version": args.version,
        **{name: sorted(getattr(args, name)) for name in _SETS},
        "choices": {flag: sorted(values) for flag, values in args.choices.items()},
        "value_rules": {flag: asdict(rule) for flag, rule in args.value_rules.items()},
        "aliases": args.aliases}, "the serve-args cache", indent=1)


def _from_cache(version: str) -> ReleaseArgs | None:
    """The cached reading, or None when there is none for this code (or it does not hold: the
    typed model forge.serving.args_cache refuses it)."""
    from forge.serving.args_cache import parse_entry

    entry = parse_entry(load_json_entry(_cached_args_file(version), CACHE))
    if entry is None or entry.code != _CODE or entry.version != version:
        return None       # missing, damaged or of another shape: read the release again
    return ReleaseArgs(
        version, **{name: frozenset(getattr(entry, name)) for name in _SETS},
        choices={flag: frozenset(values) for flag, values in entry.choices.items()},
        value_rules={flag: ValueRule(**rule.model_dump()) for flag, rule in entry.value_rules.items()},
        aliases=dict(entry.aliases))


@functools.cache
def release_args(version: str) -> ReleaseArgs:
    # A linked tree is an installed vLLM (verify's --installed): it may be patched, read it each time.
    linked = releases.tree_path(version).is_symlink()
    cached = None if linked else _from_cache(version)
    if cached is not None:
        return cached
    args = _read_release_args(version)
    if linked:
        return args
    try:
        write_entry(_cached_args_file(version), _to_cache(args))
    except (ForgeError, OSError):
        pass              # a read-only cache: the reading stands, only the next run pays again
    return args


def _read_release_args(version: str) -> ReleaseArgs:
    tree = releases.release_tree(version)
    source = _SourceIndex(tree)
    choices: dict[str, frozenset[str]] = {}
    rules: dict[str, ValueRule] = {}
    aliases: dict[str, str] = {}
    flags = _engine_flags(source, choices, rules, aliases) | _frontend_flags(source, rules, aliases)
    backends = _attention_backends(source)
    if backends:
        choices["--attention-backend"] = backends
    flags |= _option_strings(source.parse(SERVE_CLI), source, {}, {}, rules, aliases)
    flags |= {"-h", "--help"}                      # argparse's own
    if _pairs_enable_with_disable(source):
        inverses = _enable_disable_inverses(flags)
        flags |= inverses
        rules.update(dict.fromkeys(inverses, SWITCH))
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
        else frozenset(),
        rules, aliases, runners_in(tree))


def runners_in(root: Path) -> frozenset[str]:
    """The GPU model runners of the vLLM whose vllm/ package sits in `root` (a release tree or
    an install's site-packages)."""
    return frozenset(name for name, module in RUNNER_MODULES.items() if (root / module).is_file())


BENCH_LATENCY = "vllm/benchmarks/latency.py"   # `vllm bench latency`: its add_cli_args


@functools.cache
def bench_latency_flags(version: str) -> frozenset[str]:
    """Every option string `vllm bench latency` of release `version` accepts: latency.py's own
    add_argument calls, then EngineArgs.add_cli_args (read as for serve, so the few flags only
    AsyncEngineArgs adds are in it too). Their values: ReleaseArgs.value_problem."""
    source = _SourceIndex(releases.release_tree(version))
    flags = _option_strings(source.parse(BENCH_LATENCY), source, {}, {}, {}, {})
    flags |= _engine_flags(source, {}, {}, {}) | {"-h", "--help"}
    if _pairs_enable_with_disable(source):
        flags |= _enable_disable_inverses(flags)
    return frozenset(flags)


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
            self._parsed[relative] = ast.parse(read_text(path, SOURCE), filename=str(path))
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


def _engine_flags(source: _SourceIndex, choices: dict, rules: dict, aliases: dict) -> set[str]:
    module = source.parse(ARG_UTILS)
    flags: set[str] = set()
    for cls in (n for n in module.body if isinstance(n, ast.ClassDef)
                and n.name in ("EngineArgs", "AsyncEngineArgs")):
        for function in cls.body:
            if isinstance(function, ast.FunctionDef) and function.name == "add_cli_args":
                classes_of = _kwargs_classes(function)
                overrides = {(classes_of[var], name): changes
                             for (var, name), changes in _overrides_in(function).items()
                             if isinstance(classes_of.get(var), str)}
                flags |= _option_strings(function, source, classes_of, choices, rules, aliases,
                                         overrides)
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


def _frontend_flags(source: _SourceIndex, rules: dict, aliases: dict) -> set[str]:
    """Flags of make_arg_parser: its literal add_argument calls plus every frontend dataclass
    whose add_cli_args it calls (each field becomes --field-name)."""
    relative = _make_arg_parser_module(source)
    module = source.parse(relative)
    classes = {n.name: n for n in module.body if isinstance(n, ast.ClassDef)}
    make = next((n for n in module.body if isinstance(n, ast.FunctionDef)
                 and n.name == "make_arg_parser"), None)
    if make is None:
        raise ForgeError(f"{source.tree / relative}: no make_arg_parser")
    flags = _option_strings(make, source, {}, {}, rules, aliases)
    special = _int_converters(source)
    for call in ast.walk(make):
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "add_cli_args" and isinstance(call.func.value, ast.Name)
                and call.func.value.id in classes):
            cls = call.func.value.id
            overrides = _kwargs_overrides(cls, classes)
            for name, annotation in _fields_with_bases(cls, classes).items():
                flag = "--" + name.replace("_", "-")
                flags.add(flag)
                rule = _overridden(_field_rule(annotation, name, source, special),
                                   overrides.get(name, {}))
                if rule is not None:
                    rules[flag] = rule
                if _is_bool(annotation):
                    flags.add("--no-" + flag[2:])
                    rules["--no-" + flag[2:]] = SWITCH
    return flags


def _kwargs_overrides(name: str, classes: dict[str, ast.ClassDef]) -> dict[str, dict[str, ast.expr | None]]:
    """The changes a frontend class's add_cli_args (or a base class's) makes to get_kwargs'
    result, by field (see _overrides_in)."""
    found: dict[str, dict[str, ast.expr | None]] = {}
    cls = classes[name]
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            found.update(_kwargs_overrides(base.id, classes))
    for (_, field_name), changes in _overrides_in(cls).items():
        found.setdefault(field_name, {}).update(changes)
    return found


def _overrides_in(tree: ast.AST) -> dict[tuple[str, str], dict[str, ast.expr | None]]:
    """What code changes in get_kwargs' result before adding the arguments:
    `frontend_kwargs["allowed_origins"]["type"] = json.loads` and
    `del frontend_kwargs["allowed_origins"]["nargs"]` ->
    {("frontend_kwargs", "allowed_origins"): {"type": json.loads, "nargs": None (deleted)}}."""
    found: dict[tuple[str, str], dict[str, ast.expr | None]] = {}
    for node in ast.walk(tree):
        pairs: list[tuple[ast.expr, ast.expr | None]]
        if isinstance(node, ast.Assign):
            pairs = [(target, node.value) for target in node.targets]
        elif isinstance(node, ast.Delete):
            pairs = [(target, None) for target in node.targets]
        else:
            continue
        for target, value in pairs:
            keys = _three_keys(target)
            if keys:
                found.setdefault(keys[:2], {})[keys[2]] = value
    return found


def _three_keys(target: ast.expr) -> tuple[str, str, str] | None:
    """("frontend_kwargs", "field", "type") of `frontend_kwargs["field"]["type"]`."""
    if (isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant)
            and isinstance(target.value, ast.Subscript)
            and isinstance(target.value.slice, ast.Constant)
            and isinstance(target.value.value, ast.Name)):
        return target.value.value.id, str(target.value.slice.value), str(target.slice.value)
    return None


def _overridden(rule: ValueRule, changes: dict[str, ast.expr | None]) -> ValueRule | None:
    """The rule after the class's own changes; None where a custom action reads the values (their
    reading is then not known here, and the flag's values are left to vLLM)."""
    nargs, converter, accepts_none = rule.nargs, rule.converter, rule.accepts_none
    for key, value in changes.items():
        text = ast.unparse(value) if value is not None else ""
        if key == "nargs":
            nargs = value.value if isinstance(value, ast.Constant) else None  # type: ignore[assignment]
        elif key == "type":
            # optional_type(X) is X that also takes "None"; a converter not known here
            # (json.loads, parse_reasoning_parser) leaves the value to vLLM.
            accepts_none = accepts_none or text.startswith("optional_type(")
            converter = text.removeprefix("optional_type(").removesuffix(")")
        elif key == "action":
            if text.strip("'\"") != "append":
                return None
            nargs = None
    return ValueRule(nargs, converter, accepts_none, rule.open_choices)


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
                    choices: dict, rules: dict, aliases: dict,
                    overrides: dict | None = None) -> set[str]:
    """Option strings of every add_argument call under `tree`; records Literal choices, how
    each flag takes its values and the long name of each short alias."""
    flags: set[str] = set()
    special = _int_converters(source)
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "add_argument"):
            continue
        names = [a.value for a in call.args
                 if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")]
        flags.update(names)
        long = next((n for n in names if n.startswith("--")), None)
        aliases.update({n: long for n in names if long and n != long})
        config, field_name, annotation = _config_field(call, source, kwargs_classes)
        rule = _call_rule(call, _field_rule(annotation, field_name, source, special)
                          if annotation is not None else ValueRule())
        changed = _overridden(rule, (overrides or {}).get((config, field_name), {}))
        if changed is not None:
            rules.update(dict.fromkeys(names, changed))
        if _is_boolean_optional(call, annotation):
            inverses = ["--no-" + n[2:] for n in names if n.startswith("--")]
            flags.update(inverses)
            rules.update(dict.fromkeys(inverses, SWITCH))
        values = source.literal_values(annotation) if annotation is not None else set()
        if values:
            choices.update({n: frozenset(values) for n in names})
    return flags


def _config_field(call: ast.Call, source: _SourceIndex,
                  kwargs_classes: dict[str, str]) -> tuple[str, str, ast.expr | None]:
    """The config field (class, name, type) behind `**cache_kwargs["enable_prefix_caching"]` (or
    `**{**cache_kwargs["..."], "default": None}`), if the call takes one."""
    for keyword in call.keywords:
        if keyword.arg is None:
            for node in ast.walk(keyword.value):
                field_ref = _kwargs_subscript(node, kwargs_classes)
                if field_ref:
                    found = source.find_class(field_ref[0])
                    annotation = _annotated_fields(found[0]).get(field_ref[1]) if found else None
                    return field_ref[0], field_ref[1], annotation
    return "", "", None


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


# --- how a flag takes its values: vLLM's get_kwargs (_compute_kwargs) read from the release ---

SWITCH = ValueRule(nargs=0)      # store_true, BooleanOptionalAction and their --no-/--disable-
# Wrappers whose first argument is the type argparse sees (Optional[int], Annotated[int, ...]).
_WRAPPERS = {"Optional", "Union", "Annotated", "SkipValidation"}
_COLLECTIONS = ("tuple", "list", "set")


def _field_rule(annotation: ast.expr, field_name: str, source: _SourceIndex,
                special: dict[str, str]) -> ValueRule:
    """The rule vLLM's _compute_kwargs derives from a config field's type, in its order: a
    nested config (JSON), `bool | str | None` (an optional value), bool (a switch), Literal
    (choices, open when str is allowed too), collections (nargs +), int (or the release's
    human-readable converter for the fields it names), float, anything else as text."""
    names = _type_names(annotation)
    optional = "None" in names
    if any(source.find_class(name) for name in names - {"None"}):
        return ValueRule(converter="json", accepts_none=optional)
    if names == {"bool", "str", "None"}:
        return ValueRule(nargs="?")
    if "bool" in names:
        return SWITCH
    if "Literal" in names or source.literal_values(annotation):
        return ValueRule(accepts_none=optional, open_choices="str" in names)
    for collection in _COLLECTIONS:
        if collection in names:
            nargs, element = _collection_shape(annotation, collection)
            return ValueRule(nargs=nargs, converter=element, accepts_none=optional)
    if "int" in names:
        return ValueRule(converter=special.get(field_name, "int"), accepts_none=optional)
    if "float" in names:
        return ValueRule(converter="float", accepts_none=optional)
    return ValueRule(accepts_none=optional)


def _call_rule(call: ast.Call, rule: ValueRule) -> ValueRule:
    """The add_argument call's own action, type and nargs override what the field implies."""
    for keyword in call.keywords:
        text = ast.unparse(keyword.value)
        if keyword.arg == "action" and ("store_true" in text or "store_false" in text
                                        or text.endswith("BooleanOptionalAction")):
            return SWITCH
        if keyword.arg == "type" and isinstance(keyword.value, ast.Name):
            rule = ValueRule(rule.nargs, keyword.value.id, rule.accepts_none, rule.open_choices)
        if keyword.arg == "nargs" and isinstance(keyword.value, ast.Constant) \
                and isinstance(keyword.value.value, (int, str)):
            rule = ValueRule(keyword.value.value, rule.converter, rule.accepts_none,
                             rule.open_choices)
    return rule


def _type_names(annotation: ast.expr) -> set[str]:
    """The outer types of an annotation: `list[int] | None` -> {"list", "None"}."""
    if isinstance(annotation, ast.BinOp):
        return _type_names(annotation.left) | _type_names(annotation.right)
    if isinstance(annotation, ast.Subscript):
        base = ast.unparse(annotation.value).rsplit(".", 1)[-1]
        if base in _WRAPPERS:
            inner = annotation.slice
            parts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            if base in ("Annotated", "SkipValidation"):
                parts = parts[:1]                   # the rest is metadata
            names = set().union(*(_type_names(p) for p in parts))
            return names | {"None"} if base == "Optional" else names
        return {base}
    if isinstance(annotation, ast.Constant):
        if annotation.value is None:
            return {"None"}
        if isinstance(annotation.value, str):        # a forward reference: "int | None"
            try:
                return _type_names(ast.parse(annotation.value, mode="eval").body)
            except SyntaxError:
                return set()
        return set()
    if isinstance(annotation, (ast.Name, ast.Attribute)):
        return {ast.unparse(annotation).rsplit(".", 1)[-1]}
    return set()


def _collection_shape(annotation: ast.expr, collection: str) -> tuple[int | str, str]:
    """(nargs, element converter) of vLLM's collection_to_kwargs: `+`, or the length of a
    fixed tuple; elements of int or float type are converted, others are text."""
    for node in ast.walk(annotation):
        if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith(collection):
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            element = _type_names(parts[0])
            converter = "int" if element == {"int"} else "float" if element == {"float"} else "str"
            fixed = collection == "tuple" and not any(
                isinstance(p, ast.Constant) and p.value is Ellipsis for p in parts)
            return (len(parts) if fixed else "+"), converter
    return "+", "str"


def _int_converters(source: _SourceIndex) -> dict[str, str]:
    """Field name -> the converter _compute_kwargs gives that int field in place of int
    (`if name == "max_model_len": kwargs[name]["type"] = human_readable_int_or_auto`, and
    `elif name in (...)` or a set bound to a name for human_readable_int)."""
    function = next((node for node in source.parse(ARG_UTILS).body
                     if isinstance(node, ast.FunctionDef) and node.name == "_compute_kwargs"), None)
    if function is None:
        return {}
    bound = {node.targets[0].id: node.value for node in ast.walk(function)
             if isinstance(node, ast.Assign) and len(node.targets) == 1
             and isinstance(node.targets[0], ast.Name)}
    table: dict[str, str] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.If):
            converter = _type_assigned(node.body)
            if converter:
                table.update(dict.fromkeys(_names_compared(node.test, bound), converter))
    return table


def _names_compared(test: ast.expr, bound: dict[str, ast.expr]) -> list[str]:
    if not (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "name" and len(test.comparators) == 1):
        return []
    other = test.comparators[0]
    if isinstance(other, ast.Name):
        other = bound.get(other.id, other)
    if isinstance(other, ast.Constant) and isinstance(other.value, str):
        return [other.value]
    if isinstance(other, (ast.Tuple, ast.Set, ast.List)):
        return [e.value for e in other.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _type_assigned(body: list[ast.stmt]) -> str | None:
    """X of `kwargs[name]["type"] = X` among the statements of one branch."""
    for node in body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                and ast.unparse(node.targets[0]).replace("'", '"') == 'kwargs[name]["type"]'):
            return node.value.id
    return None


def _count_problem(nargs: int | str | None, values: list[str]) -> str | None:
    count = len(values)
    if nargs == 0 and count:
        return f"is a switch: it takes no value (got {values[0]!r})"
    if nargs is None and count != 1:
        return f"takes one value (got {count})"
    if nargs == "?" and count > 1:
        return f"takes at most one value (got {count})"
    if nargs == "+" and not count:
        return "takes one or more values (got none)"
    if isinstance(nargs, int) and nargs and count != nargs:
        return f"takes {nargs} values (got {count})"
    return None
