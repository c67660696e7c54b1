"""Every read of a file and every parse of YAML or JSON in forge/, verify/ and benchmarks/gpu/
goes through the file layer (forge/files.py: regular files only, a cap per kind, atomic writes)
and the guarded loaders (forge/data_formats.py): a new direct `open(`, `.read_text(`,
`.read_bytes(`, `yaml.safe_load(`, `json.load(` or `json.loads(` fails here unless it is added
to ALLOWED below with the reason it may not go through them.

Calls are found in the syntax tree (comments and strings do not count) and named by file,
enclosing function and call, so an allowed call stays allowed when lines move, and a second
kind of call in the same function is a new finding."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("forge", "verify", "benchmarks/gpu")
THE_LAYER = {"forge/files.py", "forge/data_formats.py"}

# (file, enclosing function, call): why it does not go through forge.files / forge.data_formats
ALLOWED = {
    # importlib.metadata's own reader, the one dist.files reads a dist-info's RECORD with
    ("forge/patching/dependency_apply.py", "_listed_files", ".read_text"):
        "a distribution's RECORD, through its importlib.metadata Distribution",
    # /proc and /sys: kernel files (their size is not a file's size; they are never project data)
    ("forge/images/host.py", "emulation_registered", ".read_text"): "binfmt_misc entries under /proc",
    ("forge/serving/serve.py", "roce_devices", ".read_text"): "an RDMA port's link_layer under /sys",
    ("verify/device.py", "_cpu_model", ".read_text"): "the CPU's model name in /proc/cpuinfo",
    # JSON that is no file: an HTTP reply or a command's output, parsed from memory
    ("forge/serving/serve.py", "route_to", "json.loads"): "the output of `ip -json route get`",
    ("forge/serving/serve.py", "_interface_holding", "json.loads"): "the output of `ip -json addr`",
    ("forge/watch/drift.py", "_launch", "json.loads"): "the drift probe's standard output",
    ("verify/endpoint.py", "_json", "json.loads"): "a vLLM server's HTTP reply body",
    ("forge/serving/serve_flags.py", "_parse_value", "json.loads"):
        "a command-line value that may be JSON (else it stays text)",
    ("benchmarks/gpu/two_node_commands.py", "_swap_models", "json.loads"):
        "a JSON command-line argument of a vLLM command being rewritten",
    ("forge/models.py", "fp8_checkpoint_config", "json.loads"):
        "a round trip of forge's own dump_json output, to a plain dict",
    # The drift probe runs inside a vLLM environment of its own, importing nothing from forge
    ("forge/watch/drift_probe.py", "module", ".read_bytes"):
        "a vLLM module, in the probe's own environment (hashed as read)",
    ("forge/watch/drift_probe.py", "main", "json.load"): "its request on standard input",
    # Streams: a file read or written in chunks, larger than any cap, never held whole
    ("forge/upstream/releases.py", "sha256_of", "open"): "hashes in chunks a downloaded partial file, an extracted tree's files",
    # A child process's standard output, and a lock: handles another process writes or holds
    ("verify/supervisor.py", "start_worker", "open"): "an engine worker's log, its stdout",
    ("benchmarks/gpu/runner/processes.py", "start", "open"): "a job's log, its stdout",
    ("verify/engine_worker.py", "gpu_turn", "open"): "the GPU lock file, for flock (never read)",
}


def _call_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return "open" if func.id == "open" else None
    if not isinstance(func, ast.Attribute):
        return None
    owner = func.value.id if isinstance(func.value, ast.Name) else None
    if func.attr in ("read_text", "read_bytes") and owner != "files":   # files.read_text is the layer
        return f".{func.attr}"
    if owner == "yaml" and func.attr in ("safe_load", "load", "full_load", "unsafe_load"):
        return f"yaml.{func.attr}"
    if owner == "json" and func.attr in ("load", "loads"):
        return f"json.{func.attr}"
    return None


def direct_calls(path: Path) -> list[tuple[str, str, int]]:
    """(enclosing function, call, line) of each direct read or parse in one module."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Call) and (name := _call_name(child)):
                found.append((inner, name, child.lineno))
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), "<module>")
    return found


def scanned_modules() -> list[str]:
    return sorted(p.relative_to(ROOT).as_posix() for top in SCANNED for p in (ROOT / top).rglob("*.py")
                  if p.relative_to(ROOT).as_posix() not in THE_LAYER)


def findings() -> dict[tuple[str, str, str], int]:
    return {(module, function, name): line for module in scanned_modules()
            for function, name, line in direct_calls(ROOT / module)}


def test_every_read_and_parse_goes_through_the_file_layer():
    bypasses = [f"{module}:{line}: {name}( in {function}" for (module, function, name), line
                in sorted(findings().items()) if (module, function, name) not in ALLOWED]
    assert not bypasses, ("read through forge.files / forge.data_formats (or allow it in "
                          "tests/test_file_layer_used.py, saying why): " + "; ".join(bypasses))


def test_every_allowed_call_is_still_there():
    """An entry whose call is gone is removed, so the list never allows a future bypass."""
    stale = sorted(set(ALLOWED) - set(findings()))
    assert not stale, f"remove from ALLOWED (no such call now): {stale}"


def test_the_scan_finds_each_kind_of_direct_call(tmp_path):
    module = tmp_path / "sample.py"
    module.write_text("import json, yaml\n"
                      "def reader(p, files):\n"
                      "    open(p); p.read_text(); p.read_bytes(); yaml.safe_load(p); json.load(p)\n"
                      "    json.loads(p); files.read_text(p, 1); files.read_bytes(p, 1)\n"
                      "    # open(p) in a comment, 'json.loads(' in a string\n")
    assert [name for _, name, _ in direct_calls(module)] == [
        "open", ".read_text", ".read_bytes", "yaml.safe_load", "json.load", "json.loads"]
    assert {function for function, _, _ in direct_calls(module)} == {"reader"}
