"""The import graph of forge/ and of the code above it (verify/, benchmarks/), read with ast (nothing
is imported): no cycle between modules, and no module imports from a higher layer than its own
(the layers are written down in forge/__init__.py), so nothing in forge imports verify. Command
handlers (`cmd_*`) live in forge/commands only, apart from the knowledge they call."""
import ast
from pathlib import Path

import forge

FORGE = Path(forge.__file__).resolve().parent
ROOT = FORGE.parent
TOP_LEVELS = ("forge", *forge.ABOVE_FORGE)
RANK = {**forge.LAYERS, **forge.ABOVE_FORGE}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, known: set[str]) -> set[str]:
    """The walked modules `path` imports (at the top or inside a function alike)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            # `from forge.patching import status` imports the module forge.patching.status
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name in known}


def _sources(top: str) -> list[Path]:
    return [path for path in (ROOT / top).rglob("*.py") if "__pycache__" not in path.parts]


def import_graph(tops: tuple[str, ...] = TOP_LEVELS) -> dict[str, set[str]]:
    paths = {_module_name(p): p for top in tops for p in _sources(top)}
    known = set(paths)
    return {name: _imports(path, known) - {name} for name, path in paths.items()}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "forge":
        return parts[0]                  # verify, benchmarks: one layer each
    return parts[1] if len(parts) > 2 or f"forge.{parts[-1]}" in _PACKAGES else "core"


_PACKAGES = {f"forge.{name}" for name in forge.LAYERS}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules, or None (depth-first search with colours)."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_every_subpackage_has_a_layer():
    packages = {p.parent.name for p in FORGE.glob("*/__init__.py")}
    assert packages == set(forge.LAYERS) - {"core"}
    assert min(forge.ABOVE_FORGE.values()) > max(forge.LAYERS.values())
    assert all((ROOT / top).is_dir() for top in forge.ABOVE_FORGE)


def test_there_is_no_import_cycle():
    graph = import_graph()
    # the walk found the modules of each part (a wrong root would find none)
    assert sum(layer_of(m) == "verify" for m in graph) > 15
    assert sum(layer_of(m) == "benchmarks" for m in graph) >= 4
    assert len(graph) > 80
    assert _cycle(graph) is None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
                  for module, targets in graph.items() for target in targets
                  if layer_of(target) != layer_of(module)
                  and RANK[layer_of(target)] >= RANK[layer_of(module)])


def test_no_import_from_a_higher_layer():
    assert upward_imports(import_graph()) == []


def test_verify_imports_forge_and_forge_imports_no_verify():
    graph = import_graph()
    assert any(layer_of(t) != "verify" for m, ts in graph.items() if layer_of(m) == "verify" for t in ts)
    assert sorted(f"{m} imports {t}" for m, ts in graph.items() if m.startswith("forge")
                  for t in ts if not t.startswith("forge")) == []


def verify_scripts() -> set[str]:
    """verify's scripts: the modules run as programs (`if __name__ == "__main__"`)."""
    return {_module_name(path) for path in _sources("verify")
            if '__name__ == "__main__"' in path.read_text()}


def test_verify_shared_modules_import_no_script():
    scripts = verify_scripts()
    assert {"verify.mtp_smoke", "verify.bench", "verify.profile"} <= scripts
    graph = import_graph(("verify",))
    assert sorted(f"{m} imports {t}" for m, ts in graph.items() if m not in scripts
                  for t in ts & scripts) == []


def test_the_layer_check_catches_forge_importing_verify():
    graph = {"forge.images.published": {"verify.report"}, "verify.report": {"forge.errors"}}
    assert upward_imports(graph) == ["forge.images.published (images) imports verify.report (verify)"]


def test_the_checks_catch_a_cycle_and_an_upward_import():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    assert layer_of("forge.images.plan") == "images" and layer_of("forge.errors") == "core"
    assert layer_of("verify.bench") == "verify" and layer_of("benchmarks.gpu.serve_local") == "benchmarks"
    assert forge.LAYERS["core"] < forge.LAYERS["patching"] < forge.LAYERS["commands"]


def command_handlers(source: str) -> list[str]:
    """The `cmd_*` functions a module's source defines (at any depth)."""
    return [node.name for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("cmd_")]


def test_command_handlers_live_only_in_forge_commands():
    outside = {str(path.relative_to(FORGE.parent)): found for path in sorted(FORGE.rglob("*.py"))
               if path.parent.name != "commands" and (found := command_handlers(path.read_text()))}
    assert outside == {}
    inside = [name for path in (FORGE / "commands").glob("*.py")
              for name in command_handlers(path.read_text())]
    assert len(inside) >= 13        # the walk saw the handlers (a wrong root would see none)


def test_the_handler_check_catches_a_cmd_function():
    assert command_handlers("def cmd_lock(args):\n    return 0\n") == ["cmd_lock"]
    assert command_handlers("class C:\n    def cmd_x(self): ...\n") == ["cmd_x"]
    assert command_handlers("def lock(args): ...\ndef _cmd_helper(): ...\n") == []


def test_every_cli_command_runs_a_handler_in_forge_commands():
    import importlib

    from forge.commands.cli import Handler, build_parser

    choices = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    handlers = {name: sub.get_default("handler") for name, sub in choices.items()}
    assert len(handlers) >= 13
    for name, handler in handlers.items():
        # cli.py's handlers name a module of forge/commands and a cmd_ function in it (imported
        # when the command runs); data_writers' are its own functions
        if isinstance(handler, Handler):
            function = getattr(importlib.import_module(f"forge.commands.{handler.module}"), handler.name)
            assert repr(handler) == f"{function.__module__}.{function.__name__}", (name, handler)
        else:
            function = handler
        assert callable(function) and function.__name__.startswith("cmd_"), (name, handler)
        assert function.__module__.startswith("forge.commands."), (name, handler)