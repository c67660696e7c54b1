"""The drift probe's kept answers (forge/watch/probe_cache.py) on real parts: the real cached
transformers 5.15.0 environment, real vLLM release trees and copies of them, the real probe.

Each test keeps its answers in a folder of its own (probe_cache.probe_cache_dir pointed there);
the environments and trees are the shared cache's. Which releases the probe was asked for is
seen by wrapping subprocess.run (the probe still runs for real)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from forge.patching.series import load_series
from forge.upstream import pyenvs, releases
from forge.watch import drift, probe_cache
from tests.file_faults import read_only
from tests.test_dependency_drift import CONVERTORS, manifest_of, method_line

VERSION = "5.15.0"        # breaks 0.27.x, works on 0.28.0: both kinds of answer are kept
REAL = ("0.27.0", "0.27.1", "0.28.0")
# What the probe reads of a 0.27.x tree lies under these (a copy of them answers as the tree does).
PROBED = ("vllm/__init__.py", "vllm/version.py", "vllm/config", "vllm/transformers_utils", "vllm/utils")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def python():
    return pyenvs.package_env("transformers", VERSION)


@pytest.fixture(scope="module")
def probed(python, tmp_path_factory):
    """The real trees' answers, asked once, and the folder that keeps them (tests copy it)."""
    folder = tmp_path_factory.mktemp("probed") / "drift-probe"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(probe_cache, "probe_cache_dir", lambda: folder)
        answers = drift.run_probe(python, {r: releases.release_tree(r) for r in REAL})
    assert sorted(entries(folder)) == sorted(REAL)
    return folder, answers


@pytest.fixture
def kept(tmp_path, monkeypatch):
    folder = tmp_path / "drift-probe"
    monkeypatch.setattr(probe_cache, "probe_cache_dir", lambda: folder)
    return folder


@pytest.fixture
def asked(monkeypatch):
    """The releases each started probe was asked for, in order."""
    requests: list[list[str]] = []
    real_run = subprocess.run

    def run(command, *args, **kwargs):
        if str(drift.PROBE_SCRIPT) in [str(part) for part in command]:
            requests.append(sorted(json.loads(kwargs["input"])["releases"]))
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", run)
    return requests


def kept_entries(folder: Path) -> list[dict]:
    """Every entry kept in `folder`."""
    return [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]


def entries(folder: Path) -> dict[str, dict]:
    """release -> the entry kept for it, in a folder that keeps one tree per release."""
    found = kept_entries(folder)
    releases_kept = [entry["release"] for entry in found]
    assert len(set(releases_kept)) == len(releases_kept), f"two trees of one release in {folder}"
    return {entry["release"]: entry for entry in found}


def entry_of(folder: Path, tree: Path) -> dict:
    """The entry kept for this tree (the folder may keep other trees of its release)."""
    [entry] = [entry for entry in kept_entries(folder) if entry["tree"] == str(tree)]
    return entry


def probe(python, trees: dict) -> dict:
    """run_probe with each tree's own files as its manifest: a copy changed on purpose stands for
    a release whose code is so (the real trees answer to their sdists' manifests)."""
    return drift.run_probe(python, trees, {r: manifest_of(t) for r, t in trees.items()})


def tree_copy(tmp_path: Path, release: str) -> Path:
    real, tree = releases.release_tree(release), tmp_path / "trees" / release
    for part in PROBED:
        (tree / part).parent.mkdir(parents=True, exist_ok=True)
        if (real / part).is_dir():
            shutil.copytree(real / part, tree / part)
        else:
            shutil.copyfile(real / part, tree / part)
    return tree


def test_a_second_check_over_the_same_environment_and_releases_starts_no_probe(kept, asked):
    series = load_series()
    first = drift.check("transformers", VERSION, series, ["0.27.1", "0.28.0"])
    assert asked == [["0.27.1", "0.28.0"]]
    assert sorted(entries(kept)) == ["0.27.1", "0.28.0"]
    assert {r.release: r.outcome for r in first.results} == {"0.27.1": "breaks", "0.28.0": "works"}

    again = drift.check("transformers", VERSION, series, ["0.27.1", "0.28.0"], offline=True)
    assert asked == [["0.27.1", "0.28.0"]]          # no probe started the second time
    assert again.to_dict() == first.to_dict()
    assert json.dumps(again.to_dict()) == json.dumps(first.to_dict())   # same keys in the same order


def test_a_changed_file_the_probe_read_asks_again_for_that_release_only(
        tmp_path, kept, asked, probed, python):
    shutil.copytree(probed[0], kept)                  # 0.28.0's answer is kept already
    tree = tree_copy(tmp_path, "0.27.1")
    trees = {"0.27.1": tree, "0.28.0": releases.release_tree("0.28.0")}
    first = probe(python, trees)
    assert asked == [["0.27.1"]]
    line = method_line("0.27.1", "Gemma4ModelArchConfigConvertor", "get_head_size", '"head_dim"')
    assert first["releases"]["0.27.1"]["target"]["error"]["raised_at"]["line"] == line
    assert str(tree / CONVERTORS) in first["releases"]["0.27.1"]["target"]["error"]["traceback"]
    assert first["releases"]["0.28.0"] == probed[1]["releases"]["0.28.0"]
    read = entry_of(kept, tree)["read"]
    assert CONVERTORS in read and "vllm/__init__.py" not in read

    # A file of the tree the probe never read: nothing is asked again.
    (tree / "vllm" / "__init__.py").write_text("# changed\n")
    assert probe(python, trees) == first
    assert asked == [["0.27.1"]]

    # One byte more in the convertor module: 0.27.1 is asked again, and its answer moves a line.
    (tree / CONVERTORS).write_bytes(b"\n" + (tree / CONVERTORS).read_bytes())
    moved = probe(python, trees)
    assert asked == [["0.27.1"], ["0.27.1"]]
    for role in ("target", "assistant"):
        assert moved["releases"]["0.27.1"][role]["error"]["raised_at"]["line"] == \
            first["releases"]["0.27.1"][role]["error"]["raised_at"]["line"] + 1
    assert moved["releases"]["0.28.0"] == first["releases"]["0.28.0"]
    assert entry_of(kept, tree)["read"][CONVERTORS] != read[CONVERTORS]

    # A file the probe looked for and did not find appears: asked again.
    absent = next(relative for relative, sha in entry_of(kept, tree)["read"].items() if sha is None)
    (tree / absent).parent.mkdir(parents=True, exist_ok=True)
    (tree / absent).write_text("")
    assert probe(python, trees) == moved
    assert asked == [["0.27.1"], ["0.27.1"], ["0.27.1"]]


def test_a_damaged_entry_is_asked_again_and_rewritten(kept, asked, probed, python):
    shutil.copytree(probed[0], kept)
    paths = {entry["release"]: path for path in kept.glob("*.json")
             for entry in [json.loads(path.read_text())]}
    whole = paths["0.27.1"].read_bytes()
    paths["0.27.0"].write_bytes(b"\x00\xff\xfe not JSON \x80")
    paths["0.27.1"].write_bytes(whole[:len(whole) // 2])              # cut off mid-write
    paths["0.28.0"].write_text('["a list", "not an entry"]\n')        # JSON of another shape

    answers = drift.run_probe(python, {r: releases.release_tree(r) for r in REAL})
    assert asked == [list(REAL)]
    assert answers == probed[1]
    assert entries(kept) == entries(probed[0])                      # each rewritten whole
    drift.run_probe(python, {r: releases.release_tree(r) for r in REAL})
    assert asked == [list(REAL)]


def test_a_read_only_cache_folder_still_answers(kept, asked, probed, python):
    shutil.copytree(probed[0], kept)
    [gone] = [path for path in kept.glob("*.json") if json.loads(path.read_text())["release"] == "0.27.0"]
    gone.unlink()
    trees = {r: releases.release_tree(r) for r in REAL}
    with read_only(kept):
        with pytest.raises(OSError):
            (kept / "probe").write_text("")                       # the mount refuses writes
        for _ in range(2):                                        # 0.27.0 cannot be kept: asked each time
            assert probe(python, trees) == probed[1]
    assert asked == [["0.27.0"], ["0.27.0"]]
    assert sorted(entries(kept)) == ["0.27.1", "0.28.0"]


def test_answers_that_cannot_be_used_again_are_not_kept(tmp_path, kept, asked, probed, python):
    """A probe error (the release's code could not be run) and an answer naming the temporary
    model folder (gone after the run, named anew each time) are asked again on every run."""
    shutil.copytree(probed[0], kept)
    missing = tree_copy(tmp_path / "missing", "0.27.1")
    config = missing / "vllm/transformers_utils/config.py"
    config.write_text(config.read_text().replace("def get_hf_text_config(", "def get_text_config_renamed("))
    naming = tree_copy(tmp_path / "naming", "0.27.0")
    convertors = naming / CONVERTORS
    convertors.write_text(convertors.read_text().replace(
        "        # Gemma4 uses dual head dimensions",
        "        raise ValueError(f'no head size for {self.hf_config.name_or_path}')\n"
        "        # Gemma4 uses dual head dimensions", 1))
    trees = {"0.27.0": naming, "0.27.1": missing, "0.28.0": releases.release_tree("0.28.0")}

    first = probe(python, trees)
    assert first["releases"]["0.27.1"]["target"]["outcome"] == "probe-error"
    assert "'get_hf_text_config'" in first["releases"]["0.27.1"]["target"]["error"]["message"]
    named = first["releases"]["0.27.0"]["target"]
    assert named["outcome"] == "breaks" and named["error"]["message"].startswith("no head size for /")
    assert not Path(named["error"]["message"].removeprefix("no head size for ")).exists()

    second = probe(python, trees)
    assert asked == [["0.27.0", "0.27.1"], ["0.27.0", "0.27.1"]]
    assert second["releases"]["0.27.1"] == first["releases"]["0.27.1"]
    assert second["releases"]["0.27.0"]["target"]["error"]["message"] != named["error"]["message"]
    assert sorted(entry["tree"] for entry in kept_entries(kept)) == \
        sorted(entry["tree"] for entry in kept_entries(probed[0]))


def test_the_entry_model_holds_what_the_probe_kept_and_refuses_near_misses(probed):
    """forge.watch.probe_entry's model and store agree key for key: each real entry (a release
    that works and one that breaks) loads, and loads back as written; an answer with a key the
    probe never writes, or with the other outcome's fields, is damaged."""
    from forge.typed import entry_or_none
    from forge.watch.probe_entry import ProbeAnswer, ProbeEntry

    written = kept_entries(probed[0])
    assert {entry["models"]["target"]["outcome"] for entry in written} == {"works", "breaks"}
    for entry in written:
        assert set(entry) == set(ProbeEntry.model_fields) and entry["format"] == probe_cache.FORMAT
        loaded = entry_or_none(ProbeEntry, entry)
        assert loaded is not None
        assert [json.dumps(answer.model_dump(exclude_unset=True)) for answer in loaded.models.values()] \
            == [json.dumps(answer) for answer in entry["models"].values()]      # key order kept too
        for role, answer in entry["models"].items():
            assert set(answer) <= set(ProbeAnswer.model_fields)
            swapped = {**answer, "outcome": "breaks" if answer["outcome"] == "works" else "works"}
            for near_miss in ({**answer, "stray": 1}, swapped):
                assert entry_or_none(ProbeEntry, {**entry, "models": {**entry["models"], role: near_miss}}) is None
