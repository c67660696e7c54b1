"""Patch status per vLLM release, computed on the real release trees (PyPI sdists, cached)."""
from __future__ import annotations

import json

import pytest
from packaging.version import Version

from forge.errors import ConflictError
from forge.patching.apply import apply_series
from forge.patching.series import load_series
from forge.patching.status import matrix, patch_set_hash, release_status, status_of, tree_status
from forge.upstream import releases
from tests.fixtures_patches import real_patch_entry, snapshot, write_series
from tests.test_patch_series import run_build

PATCH = "gemma4-mtp-share-embeddings"
TARGET = "vllm/v1/spec_decode/llm_base_proposer.py"
# docs/reference.md §1, re-checked here against the real sdists.
EXPECTED = {
    "0.21.0": "not-needed", "0.22.0": "not-needed", "0.22.1": "not-needed",
    "0.23.0": "not-needed", "0.24.0": "not-needed",
    "0.25.0": "applies", "0.25.1": "applies", "0.26.0": "applies",
    "0.27.0": "already-upstream", "0.27.1": "already-upstream", "0.28.0": "already-upstream",
    "0.29.0": "already-upstream", "0.30.0": "already-upstream", "0.31.0": "already-upstream",
    "0.32.0": "already-upstream", "0.33.0": "already-upstream",
    "0.34.0": "not-needed",   # vllm/v1/spec_decode/llm_base_proposer.py went with the V1 runner
}


def _status(statuses, patch_id=PATCH):
    return next(s for s in statuses if s.id == patch_id)


@pytest.mark.slow
def test_first_patch_matrix_on_every_checked_release_computed_fresh():
    series = load_series()
    covered = [str(v) for v in releases.list_releases(minimum=series.checked_from)
               if v <= Version(series.checked_through)]
    assert set(EXPECTED) <= set(covered)
    for version, expected in EXPECTED.items():
        tree = releases.release_tree(version)
        found = _status(tree_status(series, tree, Version(version)))
        assert found.status == expected, (version, found)
    # The details say why: no guard before 0.25.0, the reverse fits from 0.27.0.
    assert "the code it fixes is absent" in _status(
        tree_status(series, releases.release_tree("0.24.0"), Version("0.24.0"))).detail
    assert "reverse applies" in _status(
        tree_status(series, releases.release_tree("0.33.0"), Version("0.33.0"))).detail


@pytest.mark.slow
def test_release_without_gemma4_mtp_is_outside_the_range():
    status = _status(release_status("0.20.2"))
    assert status.status == "not-needed" and "outside releases >=0.21.0" in status.detail
    assert releases.release_file("0.20.2", "vllm/model_executor/models/gemma4_mtp.py") is None


def test_cached_matrix_equals_the_fresh_computation():
    series = load_series()
    versions = ["0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.33.0"]
    cached = matrix(versions, series=series)
    for version in versions:
        fresh = tree_status(series, releases.release_tree(version), Version(version))
        assert cached[version] == fresh
        assert cached[version][0].status == EXPECTED[version]


def test_edited_patched_lines_are_a_conflict_naming_file_and_hunk(tmp_path):
    tree = tmp_path / "tree"
    source = releases.release_file("0.25.0", TARGET)
    (tree / TARGET).parent.mkdir(parents=True)
    edited = source.read_bytes().replace(b"            if share_embeddings:\n",
                                         b"            if share_embeddings and True:\n", 1)
    assert edited != source.read_bytes()
    (tree / TARGET).write_bytes(edited)
    before = snapshot(tree)
    status = status_of(load_series().get(PATCH), tree, Version("0.25.0"))
    assert status.status == "conflict"
    assert f"{TARGET}: hunk 1 (line 1468): its old lines match nowhere" in status.detail
    assert snapshot(tree) == before     # nothing written


def test_absent_target_file_is_not_needed(tmp_path):
    (tmp_path / "vllm").mkdir()
    status = status_of(load_series().get(PATCH), tmp_path, Version("0.25.0"))
    assert (status.status, status.detail) == ("not-needed", f"{TARGET} is absent")


def test_conflict_in_the_cli_exits_3_and_names_file_and_hunk(tmp_path):
    entry, diff = real_patch_entry()
    # A diff whose trailing context no release has: neither forward nor reverse fits.
    broken = diff.replace(b" # Guard with isinstance", b" # Guarded with isinstance")
    path = write_series(tmp_path, [entry], {"source/p.diff": broken})
    result = run_build("patches", "--vllm", "0.25.0", series=path)
    assert result.returncode == 3, result
    assert "conflict" in result.stdout
    assert result.stderr.startswith(f"error: vLLM 0.25.0: patch {PATCH}: neither forward nor "
                                    f"reverse applies: {TARGET}: hunk 1")
    older = run_build("patches", "--vllm", "0.24.0", series=path)   # no guard: not-needed
    assert older.returncode == 0 and "not-needed" in older.stdout


def test_retired_patch_is_upstream_where_the_reverse_fits_else_not_needed(tmp_path):
    entry, diff = real_patch_entry(retired_in="0.27.0")
    series = load_series(write_series(tmp_path, [entry], {"source/p.diff": diff}))
    patch = series.patches[0]
    on_0_27 = status_of(patch, releases.release_tree("0.27.0"), Version("0.27.0"))
    assert (on_0_27.status, on_0_27.detail) == ("already-upstream",
                                                "retired in 0.27.0; reverse applies")
    # A 0.25.0 tree claiming to be 0.28.0: retired, the reverse does not fit -> never applied.
    assert status_of(patch, releases.release_tree("0.25.0"), Version("0.28.0")).status == \
        "not-needed"
    assert status_of(patch, releases.release_tree("0.26.0"), Version("0.26.0")).status == \
        "applies"


def test_moe_config_status_follows_what_the_release_bundles(tmp_path):
    ours = "E=128,N=704,device_name=NVIDIA_H200.json"
    bundled = "E=128,N=704,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json"
    patches = [{"id": name, "title": "t", "kind": "moe-config", "releases": ">=0.24.0",
                "why": "w", "files": [{"path": f"moe-configs/{file}"}]}
               for name, file in (("h200", ours), ("h100", bundled))]
    path = write_series(tmp_path, patches, {f"moe-configs/{ours}": b"{}\n",
                                            f"moe-configs/{bundled}": b"{}\n"})
    series = load_series(path)
    on_0_25 = tree_status(series, releases.release_tree("0.25.0"), Version("0.25.0"))
    assert [s.status for s in on_0_25] == ["applies", "already-upstream"]
    on_0_21 = tree_status(series, releases.release_tree("0.21.0"), Version("0.21.0"))
    assert [s.status for s in on_0_21] == ["not-needed", "not-needed"]


def test_patch_set_hash_names_exactly_the_applied_patches(tmp_path):
    on_0_25, on_0_27 = release_status("0.25.0"), release_status("0.27.0")
    assert len(patch_set_hash(on_0_25)) == 12
    assert patch_set_hash(on_0_25) == patch_set_hash(release_status("0.25.1"))
    # 0.26.0 adds gemma4-mtp-draft-kv-scales (>=0.26.0) to 0.25.x's set
    assert patch_set_hash(on_0_25) != patch_set_hash(release_status("0.26.0"))
    assert patch_set_hash(on_0_25) != patch_set_hash(on_0_27)
    entry, diff = real_patch_entry(id=PATCH)
    other = load_series(write_series(tmp_path, [entry], {"source/p.diff": diff + b"\n"}))
    other_on_0_25 = release_status("0.25.0", series=other)
    assert patch_set_hash(other_on_0_25, series=other) != patch_set_hash(on_0_25)


def test_cli_table_and_json(tmp_path):
    table = run_build("patches", "--vllm", "0.25.0")
    assert table.returncode == 0 and PATCH in table.stdout and "applies" in table.stdout
    as_json = json.loads(run_build("patches", "--vllm", "0.27.0", "--json").stdout)
    assert _status_named(as_json["patches"], PATCH) == "already-upstream"
    everything = run_build("patches", "--all", "--json")
    assert everything.returncode == 0, everything.stderr
    rows = json.loads(everything.stdout)["releases"]
    for version, expected in EXPECTED.items():
        assert _status_named(rows[version]["patches"], PATCH) == expected
    assert min(Version(v) for v in rows) == Version("0.21.0")
    header = run_build("patches", "--all", "--wide").stdout.splitlines()[0].split()
    # a candidate (series.yaml `candidate: true`) is marked ID*
    assert header[0] == "release" and header[1:] == [p.id + "*" * p.candidate
                                                     for p in load_series().patches]


def _status_named(statuses: list[dict], patch_id: str) -> str:
    (status,) = [s["status"] for s in statuses if s["id"] == patch_id]
    return status


def test_unknown_release_is_a_one_line_error():
    result = run_build("patches", "--vllm", "9.9.9")
    assert result.returncode == 2
    assert result.stderr.startswith("error: vLLM 9.9.9 has no sdist")
    assert result.stderr.count("\n") == 1
    garbage = run_build("patches", "--vllm", "not-a-version")
    assert garbage.returncode == 2 and "not a vLLM version" in garbage.stderr


def test_hunks_that_fit_but_break_python_are_a_conflict(tmp_path, vllm_site):
    entry, diff = real_patch_entry()
    broken = diff.replace(b'+            if share_embeddings and hasattr(self.model, "has_own_embed_tokens"):',
                          b'+            if share_embeddings and hasattr(self.model, "has_own_embed_tokens")')
    assert broken != diff
    series = load_series(write_series(tmp_path / "series", [entry], {"source/p.diff": broken}))
    status = tree_status(series, releases.release_tree("0.25.0"), Version("0.25.0"))[0]
    assert status.status == "conflict"
    assert f"the patched {TARGET} does not compile: line 1471" in status.detail
    site = vllm_site("0.25.0")
    before = snapshot(site)
    with pytest.raises(ConflictError, match="does not compile"):
        apply_series(site_packages=site, series_path=series.path)
    assert snapshot(site) == before
