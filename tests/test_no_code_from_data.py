"""No text from a data file, a cache entry or the network runs as code (issue 48, item 1).

Every exec/eval/compile call in forge/, verify/ and benchmarks/ is listed from the syntax tree;
the drift probe's are the only ones, and the probe runs a release file only when its bytes are
those recorded when the tree was extracted from the release's hash-checked sdist."""
from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from forge.upstream import releases

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("forge", "verify", "benchmarks")
RUNS_CODE = {"exec", "eval", "compile", "__import__", "execfile"}
# (file, enclosing function): the drift probe runs vLLM's config code on purpose, from a verified
# tree only (forge/watch/drift_probe.py: ReleaseCode.module refuses a file its manifest lacks).
ALLOWED = {("forge/watch/drift_probe.py", "ReleaseCode.load"),
           ("forge/watch/drift_probe.py", "rename_assistant")}


def calls_that_run_code() -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            relative = str(path.relative_to(ROOT))
            _walk(ast.parse(path.read_text(), relative), relative, "", found)
    return found


def _walk(node: ast.AST, relative: str, where: str, found: dict) -> None:
    for child in ast.iter_child_nodes(node):
        inner = where
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            inner = f"{where}.{child.name}" if where else child.name
        if isinstance(child, ast.Call) and _runs_code(child.func):
            found.setdefault((relative, where), []).append(f"{ast.unparse(child.func)} at line "
                                                           f"{child.lineno}")
        _walk(child, relative, inner, found)


def _runs_code(func: ast.expr) -> bool:
    """exec(...), eval(...), compile(...) and builtins.exec(...) (re.compile is no such call)."""
    if isinstance(func, ast.Name):
        return func.id in RUNS_CODE
    return (isinstance(func, ast.Attribute) and func.attr in RUNS_CODE
            and isinstance(func.value, ast.Name) and func.value.id in ("builtins", "__builtins__"))


def test_only_the_drift_probe_runs_code():
    found = calls_that_run_code()
    others = {key: calls for key, calls in found.items() if key not in ALLOWED}
    assert not others, f"code run outside the drift probe: {others}"
    assert set(found) == ALLOWED            # the scan sees the probe's own (it would see others)


def test_the_scan_finds_each_way_of_running_code():
    found: dict = {}
    _walk(ast.parse("import builtins, re\ndef f(t):\n    exec(t)\n    builtins.eval(t)\n"
                    "    re.compile(t)\nclass C:\n    def g(self, t):\n        compile(t, 'x', 'exec')\n"),
          "m.py", "", found)
    assert {key: len(calls) for key, calls in found.items()} == {("m.py", "f"): 2, ("m.py", "C.g"): 1}


# --- the drift probe runs a verified tree only ---------------------------------------------------

def tree_copy(tmp_path: Path, release: str) -> Path:
    real, tree = releases.release_tree(release), tmp_path / "trees" / release
    shutil.copytree(real / "vllm", tree / "vllm")
    return tree


def test_the_manifest_holds_every_file_of_the_tree_as_the_sdist_held_it():
    manifest = releases.tree_manifest("0.27.1", offline=True)
    tree = releases.release_tree("0.27.1")
    assert manifest == releases._hashes_under(tree)
    assert manifest == releases._hashes_in_sdist(releases.fetch_sdist("0.27.1", offline=True),
                                                 releases.sdist_info("0.27.1").version)
    assert "vllm/transformers_utils/model_arch_config_convertor.py" in manifest


def test_a_tree_extracted_afresh_records_its_manifest(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copyfile(releases.cache_dir() / "index.json", cache / "index.json")
    (cache / "sdists").symlink_to(releases.cache_dir() / "sdists")
    expected = releases.tree_manifest("0.25.0", offline=True)
    monkeypatch.setenv("VLLM_FORGE_CACHE", str(cache))
    tree = releases.release_tree("0.25.0", offline=True)
    entry = json.loads((cache / "tree-manifests" / "0.25.0.json").read_text())
    assert entry["files"] == expected == releases._hashes_under(tree)
    assert entry["sdist_sha256"] == releases.sdist_info("0.25.0", offline=True).sha256


def test_a_changed_file_of_the_tree_is_refused_before_any_of_it_runs(tmp_path):
    from forge.watch.drift_probe import HF_CONFIG, ReleaseCode, TreeChanged

    tree = tree_copy(tmp_path, "0.27.1")
    marker = tmp_path / "ran"
    changed = tree / HF_CONFIG
    changed.write_text(f"open({str(marker)!r}, 'w').close()\n" + changed.read_text())
    code = ReleaseCode(tree, releases.tree_manifest("0.27.1", offline=True))
    with pytest.raises(TreeChanged) as caught:
        code.load(HF_CONFIG, "get_hf_text_config")
    message = str(caught.value)
    assert message.startswith(f"{changed}: its sha256 is ") and "\n" not in message
    assert "recorded when the tree was extracted" in message
    assert not marker.exists()
    # A file the manifest does not list is refused too, and counts as absent.
    extra = "vllm/extra_module.py"
    (tree / extra).write_text("def f():\n    return 1\n")
    assert not code.exists(extra)
    with pytest.raises(TreeChanged, match="the manifest of files recorded"):
        code.module(extra)
    # The unchanged files load.
    untouched = ReleaseCode(tree_copy(tmp_path / "clean", "0.27.1"),
                            releases.tree_manifest("0.27.1", offline=True))
    assert callable(untouched.load(HF_CONFIG, "get_hf_text_config"))


@pytest.mark.slow
def test_build_py_drift_refuses_a_changed_tree_in_one_line(tmp_path):
    """The real command on a cache whose 0.27.1 tree had a line written into a file the probe
    runs: one line naming the file, exit 2, and the line never ran."""
    from tests.build_cli import run_build

    cache = tmp_path / "cache"
    tree = tree_copy(cache, "0.27.1")
    marker = tmp_path / "ran"
    changed = tree / "vllm/transformers_utils/model_arch_config_convertor.py"
    changed.write_text(f"open({str(marker)!r}, 'w').close()\n" + changed.read_text())
    shutil.copyfile(releases.cache_dir() / "index.json", cache / "index.json")
    for shared in ("envs", "sdists"):
        (cache / shared).symlink_to(releases.cache_dir() / shared)
    releases.tree_manifest("0.27.1", offline=True)        # made in the shared cache, if not yet
    (cache / "tree-manifests").mkdir()
    shutil.copyfile(releases.cache_dir() / "tree-manifests" / "0.27.1.json",
                    cache / "tree-manifests" / "0.27.1.json")
    result = run_build("drift", "--version", "5.15.0", "--vllm", "0.27.1", "--offline",
                       timeout=600, env={"VLLM_FORGE_CACHE": str(cache)})
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "refused to run a changed release tree" in result.stderr and str(changed) in result.stderr
    assert not marker.exists()


# --- serve: a converter not known here is a note, never code --------------------------------------

def test_serve_notes_a_flag_whose_converter_is_not_known_here(tmp_path):
    """0.34.0's --reasoning-parser is read by parse_reasoning_parser, the release's own function:
    the command is planned, its value passed as written, and one note says it was checked as a
    string."""
    import yaml

    from forge.serving.serve import plan_serve
    from tests.build_cli import run_build

    root = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", root, ignore=shutil.ignore_patterns("*.md"))
    path = root / "gemma-4-26b-a4b-it.yaml"
    data = yaml.safe_load(path.read_text())
    data["targets"]["gb10"]["serve"]["extra_args"] = ["--reasoning-parser", "gemma4"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    note = ("note: vLLM 0.34.0's --reasoning-parser reads its values with parse_reasoning_parser, "
            "which vllm-forge does not know: checked as a string")
    plan = plan_serve("gemma-4-26b-a4b-it", "gb10", "0.34.0", recipes_dir=str(root))
    assert note in plan.notes
    assert plan.argv[plan.argv.index("--reasoning-parser") + 1] == "gemma4"
    assert note not in plan_serve("gemma-4-26b-a4b-it", "gb10", "0.34.0").notes
    result = run_build("serve", "--recipe", "gemma-4-26b-a4b-it", "--target", "gb10", "--vllm",
                       "0.34.0", "--recipes-dir", str(root), timeout=300)
    assert result.returncode == 0, result.stderr
    assert note + "\n" in result.stderr and "Traceback" not in result.stderr
