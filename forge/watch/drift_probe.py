"""The Gemma 4 config probe: run a vLLM release's own config code on configs loaded by a real
transformers, without torch and without installing vLLM.

This file runs as a script inside a cached environment that holds only transformers and its
dependencies (forge.upstream.pyenvs); it imports nothing from forge. It reads a JSON request on stdin:

    {"models": {"target": DIR, "assistant": DIR},     config.json directories (forge/models.py)
     "assistant_type": "gemma4_assistant",            the drafter's config type (models/<family>.yaml)
     "releases": {"0.27.1": TREE, ...},               release trees (forge.upstream.releases.release_tree)
     "manifests": {"0.27.1": {FILE: SHA256, ...}}}    each tree's files as extracted from its sdist
                                                      (forge.upstream.releases.tree_manifest)

and prints one JSON object: per release and model, what vLLM's engine start computes as the
attention head size, or the exception it raises there, with the release frame that raised it;
and per release, under "read", every file of its tree the probe read (relative path -> sha256 of
the bytes) or looked for and did not find (-> null): what the answer depends on, for
forge/watch/probe_cache.py to tell whether a kept answer still holds.

What runs is the release's code, taken from its files by name (ast) and compiled with the real
file name and line numbers, so tracebacks point at the release's own lines:
  1. the assistant only: the `if hf_config.model_type ...` block of vllm/config/speculative.py
     that names the assistant type (gemma4_assistant), which renames the drafter's model type
     (to `gemma4_mtp`);
  2. `get_hf_text_config` of vllm/transformers_utils/config.py;
  3. the convertor class that `MODEL_ARCH_CONFIG_CONVERTORS` in
     vllm/transformers_utils/model_arch_config_convertor.py maps the model type to (with its base
     classes), as `ModelConfig.get_model_arch_config` picks it;
  4. what its `convert()` does for the head size: per layer through
     `get_per_layer_hf_configs()` where the release has it (0.28.0 on, vLLM PR #49797), else
     `get_head_size()` once.
Module-level names the extracted code uses are bound from the release too when they are
functions (e.g. `gemma4_layer_config` from vllm/transformers_utils/configs/gemma4.py); other
vLLM or torch names are bound to a stand-in that raises ProbeError the moment it is touched, so a
code path that needs more than the probe loads fails loudly instead of passing.
A name the probe needs that a release lacks is a ProbeError too ("probe-error": never a pass).

Only a verified tree runs: every file is read once, and its bytes are compiled only when their
sha256 is the one the manifest recorded when the tree was extracted from the release's
hash-checked sdist; a file the manifest does not list counts as absent. A file changed since
stops the probe with one line on stderr naming it (exit 3), before any of its code runs.
"""
from __future__ import annotations
import __future__

import ast
import builtins
import gc
import hashlib
import importlib
import json
import sys
import traceback
from pathlib import Path
from typing import Any

SPECULATIVE = "vllm/config/speculative.py"
HF_CONFIG = "vllm/transformers_utils/config.py"
CONVERTORS = "vllm/transformers_utils/model_arch_config_convertor.py"
CONVERTOR_MAP = "MODEL_ARCH_CONFIG_CONVERTORS"
CONVERTOR_DEFAULT = "ModelArchConfigConvertorBase"  # what ModelConfig falls back to
# Annotations stay strings: they name torch and vLLM types the probe does not load, and Python
# evaluates them at definition time otherwise. Nothing at run time reads them.
_COMPILE_FLAGS = __future__.annotations.compiler_flag


class ProbeError(Exception):
    """The probe could not run the release's code (a name missing, a path it does not load)."""


class TreeChanged(Exception):
    """A file of the release tree is not as its sdist held it: nothing of it may run."""


TREE_CHANGED_EXIT = 3


class Unavailable:
    """Stands in for a module-level name the probe does not load (torch, vLLM internals)."""

    def __init__(self, name: str, where: str):
        object.__setattr__(self, "_what", f"{where}: {name}")

    def _refuse(self, *_args, **_kwargs):
        raise ProbeError(f"the release code used {self._what}, which the probe does not load")

    def __getattr__(self, _name):
        self._refuse()


# Every other way code can use a value refuses too (dunders bypass __getattr__): comparing,
# hashing, testing truth or membership, arithmetic, isinstance, subclassing.
for _dunder in ("call getitem iter len contains bool eq ne lt le gt ge hash add radd sub rsub "
                "mul rmul truediv floordiv mod neg index int float str format instancecheck "
                "subclasscheck mro_entries enter exit").split():
    setattr(Unavailable, f"__{_dunder}__", Unavailable._refuse)


_LOADING = object()  # what load() returns for a definition still being loaded (recursion)


class ReleaseCode:
    """Top-level definitions of one release's files, compiled on demand with their real lines.
    Each file gets one namespace, shared by everything loaded from it, as a module's globals are."""

    def __init__(self, tree: Path, manifest: dict[str, str]):
        self.tree = tree
        self.manifest = manifest        # file -> sha256, as extracted from the sdist
        self._modules: dict[str, ast.Module] = {}
        self._namespaces: dict[str, dict] = {}
        self._loading: set[tuple[str, str]] = set()
        self.loaded: set[str] = set()   # "file:name" of each definition taken from the release so far
        self.read: dict[str, str | None] = {}  # file -> sha256 of its bytes, None: looked for, absent

    def module(self, relative: str) -> ast.Module:
        if relative not in self._modules:
            path = self.tree / relative
            try:
                source = path.read_bytes()
            except OSError as exc:
                raise ProbeError(f"{relative}: cannot read it in {self.tree}: {exc.strerror}") from exc
            digest = hashlib.sha256(source).hexdigest()
            recorded = self.manifest.get(relative)
            if digest != recorded:
                what = (f"its sha256 is {digest}, not the {recorded} recorded" if recorded else
                        "the manifest of files recorded")
                raise TreeChanged(f"{path}: {what} when the tree was extracted from the "
                                  f"release's sdist; remove {self.tree} to extract it again")
            self.read[relative] = digest
            self._modules[relative] = ast.parse(source, filename=str(path))
        return self._modules[relative]

    def exists(self, relative: str) -> bool:
        if relative in self.manifest:
            return True
        self.read.setdefault(relative, None)
        return False

    def definition(self, relative: str, name: str):
        for node in self.module(relative).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
                return node
        raise ProbeError(f"{relative}: the release defines no top-level {name!r}")

    def load(self, relative: str, name: str):
        """The object `name` of file `relative` (with its same-file base classes and helpers)."""
        namespace = self._namespaces.setdefault(
            relative, {"__name__": f"release:{relative}", "__builtins__": builtins})
        if _loaded(namespace, name):
            return namespace[name]
        if (relative, name) in self._loading:
            return _LOADING  # mutual recursion: it lands in this same namespace shortly
        self._loading.add((relative, name))
        try:
            nodes = [n for n in self._with_local_bases(relative, name)
                     if not _loaded(namespace, n.name)]
            for bound, value in self._bindings(relative, nodes).items():
                if value is not _LOADING:
                    namespace.setdefault(bound, value)
            code = compile(ast.Module(body=nodes, type_ignores=[]), str(self.tree / relative),
                           "exec", flags=_COMPILE_FLAGS, dont_inherit=True)
            exec(code, namespace)  # noqa: S102 (the release's own source, by design)
            self.loaded.update(f"{relative}:{n.name}" for n in nodes)
        finally:
            self._loading.discard((relative, name))
        return namespace[name]

    def _with_local_bases(self, relative: str, name: str) -> list:
        node = self.definition(relative, name)
        nodes = []
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                if isinstance(base, ast.Name) and _defines(self.module(relative), base.id):
                    nodes += [n for n in self._with_local_bases(relative, base.id) if n not in nodes]
        return nodes + [node]

    def _bindings(self, relative: str, nodes: list) -> dict:
        """Module-level names the extracted nodes use, bound the way the module imports them."""
        used = {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}
        used -= {getattr(node, "name", None) for node in nodes}
        bindings = {}
        for statement in self.module(relative).body:
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                for alias in statement.names:
                    bound = (alias.asname or alias.name).split(".")[0]
                    if bound in used:
                        bindings[bound] = self._imported(relative, statement, alias)
            else:
                bindings.update(self._module_level(relative, statement, used))
        return bindings

    def _module_level(self, relative: str, statement, used: set[str]) -> dict:
        """Same-file helpers the nodes use: functions are loaded from the release, literal
        constants evaluated; anything else (`logger = init_logger(...)`, other classes) becomes a
        stand-in, so touching it is a probe error rather than a NameError taken for a break."""
        where = f"{relative}:{statement.lineno}"
        if isinstance(statement, ast.FunctionDef) and statement.name in used:
            return {statement.name: self.load(relative, statement.name)}
        if isinstance(statement, ast.ClassDef) and statement.name in used:
            return {statement.name: Unavailable(statement.name, where)}
        targets = statement.targets if isinstance(statement, ast.Assign) else \
            [statement.target] if isinstance(statement, ast.AnnAssign) else []
        names = [t.id for t in targets if isinstance(t, ast.Name) and t.id in used]
        if not names or statement.value is None:
            return {}
        try:
            value = ast.literal_eval(statement.value)
        except (ValueError, TypeError, SyntaxError):
            return {name: Unavailable(name, where) for name in names}
        return {name: value for name in names}

    def _imported(self, relative: str, statement, alias):
        where = f"{relative}:{statement.lineno}"
        if isinstance(statement, ast.Import):
            return _real_import(alias.name.split(".")[0], None, where)
        source = _absolute_module(relative, statement)
        if source.split(".")[0] == "vllm":
            return self._release_function(source, alias.name, where)
        return _real_import(source, alias.name, where)

    def _release_function(self, module_name: str, name: str, where: str):
        relative = module_name.replace(".", "/") + ".py"
        if self.exists(relative) and _defines(self.module(relative), name):
            if isinstance(self.definition(relative, name), ast.FunctionDef):
                return self.load(relative, name)
        return Unavailable(f"{module_name}.{name}", where)


def _loaded(namespace: dict, name: str) -> bool:
    """Defined from the release (a stand-in bound for a use is replaced once it is loaded)."""
    return name in namespace and not isinstance(namespace[name], Unavailable)


def _defines(module: ast.Module, name: str) -> bool:
    return any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name for n in module.body)


def _absolute_module(relative: str, statement: ast.ImportFrom) -> str:
    if not statement.level:
        return statement.module or ""
    package = relative[:-len(".py")].split("/")[:-statement.level]
    return ".".join(package + ([statement.module] if statement.module else []))


def _real_import(module_name: str, name: str | None, where: str):
    """Standard library and transformers names come from the real modules; torch and the rest
    the environment lacks become stand-ins that fail when touched."""
    try:
        module = importlib.import_module(module_name)
        return getattr(module, name) if name else module
    except (ImportError, AttributeError):
        return Unavailable(f"{module_name}.{name}" if name else module_name, where)


# --- the engine-start steps, per release and model -------------------------------------------

def rename_assistant(code: ReleaseCode, hf_config, assistant_type: str) -> int:
    """Run the release's own `if hf_config.model_type ... <assistant_type>` block; its line."""
    for node in ast.walk(code.module(SPECULATIVE)):
        if isinstance(node, ast.If) and _mentions(node.test, assistant_type):
            block = compile(ast.Module(body=[node], type_ignores=[]), str(code.tree / SPECULATIVE),
                            "exec", flags=_COMPILE_FLAGS, dont_inherit=True)
            exec(block, {"__builtins__": builtins, "hf_config": hf_config})  # noqa: S102
            return node.lineno
    raise ProbeError(f"{SPECULATIVE}: no `if hf_config.model_type ...` block for {assistant_type}")


def _mentions(node, text: str) -> bool:
    return any(isinstance(n, ast.Constant) and n.value == text for n in ast.walk(node))


def convertor_name(code: ReleaseCode, model_type: str) -> str:
    node: Any
    for node in code.module(CONVERTORS).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == CONVERTOR_MAP for t in targets):
            if not isinstance(node.value, ast.Dict):
                break
            for key, value in zip(node.value.keys, node.value.values):
                if isinstance(key, ast.Constant) and key.value == model_type:
                    return value.id  # type: ignore[attr-defined]  # a Name, or the AttributeError is the finding
            return CONVERTOR_DEFAULT
    raise ProbeError(f"{CONVERTORS}: no {CONVERTOR_MAP} dict")


def head_sizes(convertor) -> list[int]:
    """The head size(s) ModelArchConfigConvertorBase.convert() computes: per layer where the
    release resolves layers itself (get_per_layer_hf_configs, vLLM >= 0.28.0), else once."""
    per_layer = getattr(convertor, "get_per_layer_hf_configs", lambda: None)()
    if per_layer is None:
        return [convertor.get_head_size()]
    return [type(convertor)(*configs).get_head_size() for configs in per_layer]


def probe(code: ReleaseCode, model_dir: str, role: str, assistant_type: str) -> dict:
    from transformers import AutoConfig

    hf_config = AutoConfig.from_pretrained(model_dir)
    result: dict[str, object] = {"config_class": type(hf_config).__name__}
    try:
        if role == "assistant":
            result["renamed_at"] = f"{SPECULATIVE}:{rename_assistant(code, hf_config, assistant_type)}"
        hf_text_config = code.load(HF_CONFIG, "get_hf_text_config")(hf_config)
        name = convertor_name(code, hf_config.model_type)
        result["convertor"] = name
        convertor = code.load(CONVERTORS, name)(hf_config, hf_text_config)
        sizes = head_sizes(convertor)
        result.update(outcome="works", head_sizes=sorted(set(sizes)),
                      per_layer=hasattr(convertor, "get_per_layer_hf_configs"),
                      release_code=sorted(code.loaded))
    except TreeChanged:
        raise
    except ProbeError as exc:
        result.update(outcome="probe-error", error=_error(exc, code.tree))
    except Exception as exc:  # noqa: BLE001 (whatever the release raises is the finding)
        result.update(outcome="breaks", error=_error(exc, code.tree))
    return result


def _error(exc: BaseException, tree: Path) -> dict:
    frames = traceback.extract_tb(exc.__traceback__)
    in_release = [f for f in frames if f.filename.startswith(str(tree) + "/")]
    raised_at = None
    if in_release:
        frame = in_release[-1]
        raised_at = {"file": frame.filename[len(str(tree)) + 1:], "line": frame.lineno,
                     "function": frame.name, "code": (frame.line or "").strip()}
    return {"type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "runtime_error": isinstance(exc, RuntimeError), "message": str(exc),
            "raised_at": raised_at,
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))}


def main() -> int:
    # One short run whose live objects only grow (transformers' modules, each release's parsed
    # files): every full collection would walk all of them and find next to nothing to free.
    # Without the collector the probe takes about a sixth less CPU.
    gc.disable()
    import transformers

    request = json.load(sys.stdin)
    report: dict[str, Any] = {"transformers": transformers.__version__, "releases": {}, "read": {}}
    for release, tree in request["releases"].items():
        code = ReleaseCode(Path(tree), request["manifests"][release])
        try:
            report["releases"][release] = {
                role: probe(code, model_dir, role, request["assistant_type"])
                for role, model_dir in request["models"].items()}
        except TreeChanged as exc:
            print(f"error: {exc}", file=sys.stderr)
            return TREE_CHANGED_EXIT
        report["read"][release] = code.read
    json.dump(report, sys.stdout, indent=1, allow_nan=False)  # strict JSON, as forge.json_text writes it
    return 0


if __name__ == "__main__":
    sys.exit(main())
