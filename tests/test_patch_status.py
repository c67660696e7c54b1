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


# --- a release the patch is needed on but does not fit ---------------------------------------

SPLIT_KV = "triton-spec-decode-split-kv"
LAUNCHER = "vllm/v1/attention/ops/triton_unified_attention.py"


def _forces_2d(version: str) -> bool:
    """Whether the release's Triton launcher keeps every batch with max_seqlen_q > 1 off the 3D
    split-KV path (the bug), read from its `use_3d = not (...)` gate."""
    import ast

    text = (releases.release_tree(version) / LAUNCHER).read_text()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "use_3d" for t in node.targets):
            gate = node.value.operand if isinstance(node.value, ast.UnaryOp) else node.value
            if isinstance(gate, ast.BoolOp) and isinstance(gate.op, ast.Or):
                return any(ast.unparse(v) == "max_seqlen_q > 1" for v in gate.values)
    raise AssertionError(f"{version}: no use_3d gate in {LAUNCHER}")


def test_a_capped_patch_whose_bug_is_still_there_is_needed_not_carried():
    """0.32.0 still forces the 2D grid for max_seqlen_q > 1 and has no MAX_3D_QUERY_LEN (0.33.0's
    upstream equivalent); the patch's releases stop at <0.32.0 because its diff no longer fits.
    So 0.32.0 is `needed-not-carried`, never `not-needed`; 0.33.0 carries the fix."""
    series = load_series()
    patch = series.get(SPLIT_KV)
    assert not patch.in_range(Version("0.32.0")) and patch.in_range(Version("0.31.0"))
    for version in ("0.31.0", "0.32.0", "0.33.0", "0.34.0"):
        fixed = "MAX_3D_QUERY_LEN" in (releases.release_tree(version) / LAUNCHER).read_text()
        status = _status(release_status(version, series=series), SPLIT_KV)
        if not patch.in_range(Version(version)):
            expected = "not-needed" if fixed or not _forces_2d(version) else "needed-not-carried"
        else:
            expected = "applies"
        assert status.status == expected, (version, status)
    status = _status(release_status("0.32.0", series=series), SPLIT_KV)
    assert _forces_2d("0.32.0") and not _forces_2d("0.33.0")
    assert LAUNCHER in status.detail and "does not fit" in status.detail
    # Below the range nothing says the bug is the patch's: not-needed keeps its meaning there.
    assert _status(release_status("0.25.0", series=series), SPLIT_KV).status == "not-needed"


def test_patches_cli_and_readme_table_show_needed_not_carried_on_0_32_0():
    from forge.patching.readme_table import BEGIN, END
    from tests.build_cli import REPO_ROOT

    result = run_build("patches", "--vllm", "0.32.0")
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith(SPLIT_KV))
    assert row.split()[2] == "needed-not-carried"
    readme = (REPO_ROOT / "README.md").read_text()
    table = readme[readme.index(BEGIN):readme.index(END)]
    head = next(line for line in table.splitlines() if line.startswith("| vLLM |"))
    column = [cell.strip() for cell in head.split("|")].index(f"`{SPLIT_KV}`")
    cells = next(line for line in table.splitlines() if line.startswith("| 0.32.0 |")).split("|")
    assert cells[column].strip() == "needed-not-carried"
    assert "`needed-not-carried`:" in table


def test_a_variant_that_carries_the_fix_makes_the_capped_entry_not_needed(tmp_path):
    """refresh-patch's convention: a variant entry with the same upstream numbers carries the fix
    from the release on; where it applies, the capped entry is no longer needed there."""
    import yaml

    from tests.test_images_plan import copy_repo

    repo = copy_repo(tmp_path / "repo")
    path = repo / "patches" / "series.yaml"
    data = yaml.safe_load(path.read_text())
    capped = next(p for p in data["patches"] if p["id"] == SPLIT_KV)
    # A stand-in variant: the group-KV-heads diff, which fits 0.32.0, under the split-KV's numbers.
    donor = next(p for p in data["patches"] if p["id"] == "triton-attn-group-kv-heads")
    variant = {**donor, "id": f"{SPLIT_KV}-0.32", "releases": ">=0.32.0,<0.33",
               "upstream": capped["upstream"]}
    variant.pop("retired_in", None)
    variant.pop("candidate", None)
    data["patches"].append(variant)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    series = load_series(path)
    tree = releases.release_tree("0.32.0")
    statuses = {s.id: s for s in tree_status(series, tree, Version("0.32.0"))}
    assert statuses[variant["id"]].status == "applies"
    assert statuses[SPLIT_KV].status == "not-needed"
    assert statuses[SPLIT_KV].detail == f"{variant['id']} carries its fix on this release"
    # Without it, the same tree reads needed-not-carried.
    assert _status(tree_status(load_series(), tree, Version("0.32.0")), SPLIT_KV).status == \
        "needed-not-carried"
