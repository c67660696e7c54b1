"""A damaged apply record (`vllm/.vllm-forge/applied.json`: truncated, not an object, an entry
without its path) is one line naming the file and what is wrong, exit 2, nothing changed; and
`apply --revert` still restores the install byte for byte from what the run recorded next to its
saved originals. Real vLLM 0.25.0 release tree, real processes."""
from __future__ import annotations

import json

import pytest

from forge.patching.apply import RECORD_DIR
from tests.fixtures_patches import snapshot
from tests.test_patch_series import run_build

TARGET = "vllm/v1/spec_decode/llm_base_proposer.py"


def _truncated(text: str) -> str:
    return text[: len(text) // 2]


def _list_shaped(text: str) -> str:
    return json.dumps([json.loads(text)])


def _path_less(text: str) -> str:
    record = json.loads(text)
    del record["files"][1]["path"]
    return json.dumps(record)


def _package_less(text: str) -> str:
    record = json.loads(text)
    record["dependencies"] = [{"id": "transformers-gemma4-per-layer-config", "specifier": "<5.15",
                               "previous": "5.15.0", "installed": "5.14.1",
                               "vllm_requires": "transformers>=5.5.3"}]
    return json.dumps(record)


DAMAGE = {
    "truncated": (_truncated, "not valid JSON ("),
    "list-shaped": (_list_shaped, "holds a JSON list, not the object vllm-forge writes"),
    "path-less": (_path_less, "field files[1].path is missing"),
    "package-less": (_package_less, "field dependencies[0].package is missing or not text"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_record_is_one_line_and_revert_restores_from_the_saved_originals(vllm_site,
                                                                                   damage):
    site = vllm_site("0.25.0")
    original = snapshot(site)
    assert run_build("apply", "--site-packages", str(site)).returncode == 0
    record = site / "vllm" / RECORD_DIR / "applied.json"
    written = len(json.loads(record.read_text())["files"])     # the patched files and RECORD
    spoil, problem = DAMAGE[damage]
    record.write_text(spoil(record.read_text()))
    damaged = snapshot(site)
    for args in ([], ["--offline"]):
        refused = run_build("apply", "--site-packages", str(site), *args)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert refused.stderr.startswith(f"error: {record}: {problem}")
        assert "`build.py apply --revert` restores every file from the saved originals" \
            in refused.stderr
        assert snapshot(site) == damaged
    status = run_build("patches", "--site-packages", str(site), "--offline")
    assert status.returncode == 2 and f"{record}: {problem}" in status.stderr
    reverted = run_build("apply", "--site-packages", str(site), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert f"{written} file(s) restored byte for byte" in reverted.stdout
    assert snapshot(site) == original


def test_a_damaged_record_without_its_run_files_names_the_reinstall_and_changes_nothing(vllm_site):
    site = vllm_site("0.25.0")
    assert run_build("apply", "--site-packages", str(site)).returncode == 0
    record_dir = site / "vllm" / RECORD_DIR
    (record_dir / "applied.json").write_text('{"state": "applied", "files": [')
    (record_dir / "originals" / "files.json").unlink()
    damaged = snapshot(site)
    for args in ([], ["--revert"]):
        refused = run_build("apply", "--site-packages", str(site), *args)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert f"{record_dir / 'applied.json'}: not valid JSON" in refused.stderr
        assert "reinstall vLLM (pip install --force-reinstall --no-deps vllm==0.25.0)" \
            in refused.stderr
        assert snapshot(site) == damaged
    (record_dir / "applied.json").unlink()      # and gone altogether: the originals stay
    gone = snapshot(site)
    for args in ([], ["--revert"]):
        refused = run_build("apply", "--site-packages", str(site), *args)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert "applied.json: missing, while the originals it saved are there" in refused.stderr
        assert "reinstall vLLM" in refused.stderr and snapshot(site) == gone


def test_a_deleted_record_with_its_originals_left_is_refused_then_reverted(vllm_site):
    site = vllm_site("0.25.0")
    original = snapshot(site)
    assert run_build("apply", "--site-packages", str(site)).returncode == 0
    (site / "vllm" / RECORD_DIR / "applied.json").unlink()
    refused = run_build("apply", "--site-packages", str(site))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "applied.json: missing, while the originals it saved are there" in refused.stderr
    assert (site / "vllm" / RECORD_DIR / "originals" / "0").is_file()     # nothing lost
    reverted = run_build("apply", "--site-packages", str(site), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert snapshot(site) == original
