"""patches/series.yaml: validated on load, hash-checked, written back without losing comments."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from forge.errors import ForgeError
from forge.patching.headers import body_of, render_header
from forge.patching.series import load_series, render_series, save_series
from tests import build_cli
from tests.fixtures_patches import REAL_SERIES, real_patch_entry, write_series

REPO = Path(__file__).resolve().parent.parent


def run_build(*args: str, series: Path | None = None, **env) -> subprocess.CompletedProcess:
    if series is not None:
        env["VLLM_FORGE_SERIES"] = str(series)
    return build_cli.run_build(*args, env=env)


def test_the_committed_manifest_loads_with_its_first_patch():
    series = load_series()
    patch = series.get("gemma4-mtp-share-embeddings")
    assert patch.kind == "source" and patch.releases == ">=0.21.0"
    assert patch.upstream == {"issue": 47794, "pr": 47953, "fixed_in": "0.27.0",
                              "introduced_by": 43957}
    assert [d.path for d in patch.diffs] == ["vllm/v1/spec_decode/llm_base_proposer.py"]
    assert len(series.digest) == 64


def test_each_diff_header_is_what_its_manifest_entry_generates():
    series = load_series(check_index=False)
    sources = [(p, f) for p in series.patches if p.kind == "source" for f in p.files]
    assert len(sources) >= 5
    for patch, f in sources:
        content = f.absolute.read_bytes()
        assert content.startswith(render_header(patch)), f.path
        assert body_of(content).startswith(b"--- a/vllm/"), f.path
        assert f"# Description: {patch.title}\n".encode() in content
    result = run_build("patch-headers", "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_load_then_save_reproduces_the_committed_file_byte_for_byte():
    assert render_series(load_series()) == REAL_SERIES.read_text()


def test_save_series_keeps_the_comment_block_and_writes_valid_yaml(tmp_path):
    entry, diff = real_patch_entry()
    path = write_series(tmp_path, [entry], {"source/p.diff": diff})
    path.write_text("# my comment\n# second line\n" + path.read_text())
    series = load_series(path)
    series.checked_through = "0.34.0"
    series.patches[0].retired_in = "0.27.0"
    save_series(series)
    text = path.read_text()
    assert text.startswith("# my comment\n# second line\n")
    again = load_series(path)
    assert (again.checked_through, again.patches[0].retired_in) == ("0.34.0", "0.27.0")


BAD_CASES = [
    ("unknown field", {"colour": "red"}, "patches[0].colour: unknown field"),
    ("bad kind", {"kind": "diff"}, "patches[0].kind: must be one of source, moe-config"),
    ("bad specifier", {"releases": ">=banana"}, "patches[0].releases: not a PEP 440"),
    ("bad id", {"id": "has space"}, "patches[0].id: must be letters"),
    ("no upstream", {"upstream": None}, "patches[0].upstream: a source patch names"),
    ("bad fixed_in", {"upstream": {"pr": 1, "fixed_in": "soon"}},
     "patches[0].upstream.fixed_in: not a PEP 440 version"),
    ("missing why", {"why": None}, "patches[0].why: required field is missing"),
]


@pytest.mark.parametrize("name, change, message", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_manifest_is_a_one_line_error_naming_file_and_field(tmp_path, name, change, message):
    entry, diff = real_patch_entry(**change)
    path = write_series(tmp_path, [entry], {"source/p.diff": diff})
    before = path.read_bytes()
    result = run_build("patches", "--vllm", "0.25.0", "--offline", series=path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: {path}: ") and message in result.stderr
    assert path.read_bytes() == before      # nothing lost


def test_hash_mismatch_is_refused_by_patches_and_by_apply(tmp_path):
    entry, diff = real_patch_entry()
    path = write_series(tmp_path, [entry], {"source/p.diff": diff})
    (tmp_path / "source" / "p.diff").write_bytes(diff.replace(b"MTP drafts", b"MTP drafters"))
    for command in (["patches", "--vllm", "0.25.0", "--offline"],
                    ["apply", "--site-packages", str(tmp_path)]):
        if command[0] == "apply":
            (tmp_path / "vllm").mkdir(exist_ok=True)
            (tmp_path / "vllm" / "__init__.py").write_text("")
            (tmp_path / "vllm" / "_version.py").write_text("__version__ = '0.25.0'\n")
        result = run_build(*command, series=path)
        assert result.returncode == 2, result
        assert "patches[0].files[0].sha256: source/p.diff has sha256" in result.stderr
        assert result.stderr.count("\n") == 1


def test_duplicate_ids_missing_files_and_broken_yaml(tmp_path):
    entry, diff = real_patch_entry()
    twin = dict(entry, files=[{"path": "source/p.diff"}])
    path = write_series(tmp_path, [entry, twin], {"source/p.diff": diff})
    with pytest.raises(ForgeError, match=r"patches\[1\]\.id: duplicate patch id"):
        load_series(path)
    gone = write_series(tmp_path / "gone", [real_patch_entry()[0]], {"source/p.diff": diff})
    (tmp_path / "gone" / "source" / "p.diff").unlink()
    with pytest.raises(ForgeError, match=r"patches\[0\]\.files\[0\]\.path: cannot read"):
        load_series(gone)
    broken = tmp_path / "broken.yaml"
    broken.write_text("patches: [\n")
    with pytest.raises(ForgeError, match="broken.yaml: line .* not valid YAML"):
        load_series(broken)


def test_a_malformed_diff_names_the_diff_file(tmp_path):
    entry, diff = real_patch_entry()
    bad = diff.replace(b"@@ -1468,7 +1468,11 @@", b"@@ -1468,7 +1468,12 @@")
    path = write_series(tmp_path, [entry], {"source/p.diff": bad})
    with pytest.raises(ForgeError, match=r"p\.diff: hunk at line \d+: ends early"):
        load_series(path)


def test_moe_config_files_must_be_named_like_vllm_configs(tmp_path):
    entry = {"id": "moe", "title": "t", "kind": "moe-config", "releases": ">=0.24",
             "why": "w", "files": [{"path": "moe-configs/tuned.json"}]}
    path = write_series(tmp_path, [entry], {"moe-configs/tuned.json": b"{}"})
    with pytest.raises(ForgeError, match=r"patches\[0\]\.files: .*not named like a fused-MoE"):
        load_series(path)
    assert yaml.safe_load(path.read_text())["patches"][0]["id"] == "moe"


# --- diff paths and `touches` (issue 20, item 8) ------------------------------------------------

def minimal_vllm_site(root: Path, version: str = "0.25.0") -> Path:
    """A site-packages directory `apply` recognises: vllm/ with its version file."""
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    (root / "vllm" / "_version.py").write_text(f"__version__ = '{version}'\n")
    return root


def creating_diff(path_after_prefix: str) -> bytes:
    return (f"--- /dev/null\n+++ b/{path_after_prefix}\n@@ -0,0 +1 @@\n"
            "+ESCAPED = True\n").encode()


@pytest.mark.parametrize("escape", ["../escaped.py", "{outside}/escaped.py"])
def test_apply_refuses_a_diff_that_would_write_outside_site_packages(tmp_path, escape):
    site = minimal_vllm_site(tmp_path / "site")
    outside = tmp_path / "outside"
    outside.mkdir()
    relative = escape.format(outside=outside)       # b/../x, or b//abs/path
    entry, _ = real_patch_entry(touches=["vllm/escaped.py"])
    entry.pop("fixes_marker")
    diff = creating_diff(relative)
    path = write_series(tmp_path / "series", [entry], {"source/p.diff": diff})
    before = snapshot_of(tmp_path)
    result = run_build("apply", "--site-packages", str(site), series=path)
    assert result.returncode == 2, result
    assert result.stderr == (f"error: {path.parent / 'source' / 'p.diff'}: line 2: file name "
                             f"{'b/' + relative!r} is not a relative path inside the tree "
                             "(no leading /, no .., no backslash)\n")
    assert snapshot_of(tmp_path) == before
    assert not (tmp_path / "escaped.py").exists() and not (outside / "escaped.py").exists()


def snapshot_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_a_diff_changing_a_file_its_entry_does_not_list_is_refused_by_patches_and_apply(tmp_path):
    entry, diff = real_patch_entry(touches=["vllm/v1/spec_decode/gemma4.py"])
    path = write_series(tmp_path, [entry], {"source/p.diff": diff})
    site = minimal_vllm_site(tmp_path / "site")
    for command in (["patches", "--vllm", "0.25.0", "--offline"],
                    ["apply", "--site-packages", str(site)]):
        result = run_build(*command, series=path)
        assert result.returncode == 2, result
        assert result.stderr == (f"error: {path}: patches[0].touches: source/p.diff changes "
                                 "vllm/v1/spec_decode/llm_base_proposer.py, which the entry does "
                                 "not list\n")
    assert snapshot_of(site / "vllm") == {"__init__.py": b"", "_version.py": b"__version__ = '0.25.0'\n"}


@pytest.mark.parametrize("touches, message", [
    (None, "patches[0].touches: required field is missing (the vLLM files its diffs change)"),
    (["vllm/v1/spec_decode/llm_base_proposer.py", "vllm/v1/spec_decode/gemma4.py"],
     "patches[0].touches: lists vllm/v1/spec_decode/gemma4.py, which none of its diffs changes"),
    (["../vllm/x.py"], "patches[0].touches: must name files inside vllm/"),
    (["/abs/vllm/x.py"], "patches[0].touches: must name files inside vllm/"),
    (["transformers/x.py"], "patches[0].touches: must name files inside vllm/"),
])
def test_touches_must_list_exactly_the_vllm_files_the_diffs_change(tmp_path, touches, message):
    entry, diff = real_patch_entry(touches=touches)
    if touches is None:
        entry.pop("touches")
    path = write_series(tmp_path, [entry], {"source/p.diff": diff})
    with pytest.raises(ForgeError) as refused:
        load_series(path, check_index=False)
    assert str(refused.value).startswith(f"{path}: {message}")


def test_only_source_patches_list_touches(tmp_path):
    moe = {"id": "m", "title": "t", "kind": "moe-config", "releases": ">=0.25",
           "files": [{"path": "moe-configs/E=128,N=704,device_name=NVIDIA_H200.json"}],
           "touches": ["vllm/x.py"], "why": "w"}
    path = write_series(tmp_path, [moe], {"moe-configs/E=128,N=704,device_name=NVIDIA_H200.json": b"{}"})
    with pytest.raises(ForgeError, match=r"patches\[0\]\.touches: only source patches have one"):
        load_series(path, check_index=False)


def test_every_committed_source_patch_lists_what_its_diffs_change():
    for patch in load_series(check_index=False).patches:
        if patch.kind == "source":
            assert sorted(patch.touches) == sorted({d.path for d in patch.diffs}), patch.id
