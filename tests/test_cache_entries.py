"""The cache is content, never trust (issue 48, item 3): every entry is read with no link
followed and written by renaming a new file over its name (forge.files.read_entry, open_entry,
write_entry), so an entry replaced by a symbolic link is neither read through nor written
through: the file the link names stays as it was, and the entry is made again beside it."""
from __future__ import annotations

import json
import os
import shutil
import stat

import pytest

from forge import files
from forge.data_formats import load_json_entry

OUTSIDE = b'{"a file": "outside the cache, which no cache write may touch"}\n'


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "outside" / "victim.json"
    path.parent.mkdir()
    path.write_bytes(OUTSIDE)
    os.chmod(path, 0o644)
    return path


def untouched(victim) -> bool:
    return victim.read_bytes() == OUTSIDE and stat.S_IMODE(victim.stat().st_mode) == 0o644


def test_an_entry_is_read_only_when_it_is_a_plain_regular_file(tmp_path, victim):
    entry = tmp_path / "entry.json"
    assert files.read_entry(entry, files.CACHE) is None                 # nothing there
    entry.symlink_to(victim)
    assert files.read_entry(entry, files.CACHE) is None                 # a link: not followed
    assert files.open_entry(entry) is None
    entry.unlink()
    os.mkfifo(entry)
    assert files.read_entry(entry, files.CACHE) is None                 # a FIFO: no wait
    assert files.open_entry(entry) is None
    entry.unlink()
    entry.symlink_to("/dev/zero")
    assert files.read_entry(entry, files.CACHE) is None and files.open_entry(entry) is None
    entry.unlink()
    entry.mkdir()
    assert files.read_entry(entry, files.CACHE) is None
    entry.rmdir()
    entry.write_bytes(b"x" * (files.INDEX.cap + 1))
    assert files.read_entry(entry, files.INDEX) is None                 # over its kind's cap
    entry.write_text('{"k": 1}')
    assert files.read_entry(entry, files.CACHE) == b'{"k": 1}'
    assert load_json_entry(entry, files.CACHE) == {"k": 1}
    with files.open_entry(entry) as stream:
        assert stream.read() == b'{"k": 1}'
    entry.write_text('{"k": NaN}')
    assert load_json_entry(entry, files.CACHE) is None                  # not strict JSON: damaged


def test_a_write_replaces_a_link_and_never_writes_through_it(tmp_path, victim):
    entry = tmp_path / "cache" / "serve-args" / "0.27.1.json"
    entry.parent.mkdir(parents=True)
    entry.symlink_to(victim)
    files.write_entry(entry, '{"new": true}')
    assert untouched(victim)
    assert not entry.is_symlink() and entry.read_text() == '{"new": true}'
    os.unlink(entry)
    os.mkfifo(entry)
    files.write_entry(entry, b"data")                               # a FIFO there: replaced too
    assert stat.S_ISREG(os.lstat(entry).st_mode) and entry.read_bytes() == b"data"
    assert sorted(p.name for p in entry.parent.iterdir()) == ["0.27.1.json"]   # no temp file left


def test_a_linked_lock_file_is_replaced_not_created_through(tmp_path):
    locks = tmp_path / "locks"
    locks.mkdir()
    target = tmp_path / "outside" / "made-through-the-link"
    (locks / "sdists-vllm-0.27.1.tar.gz.lock").symlink_to(target)
    with files.one_maker(tmp_path / "sdists" / "vllm-0.27.1.tar.gz", locks):
        pass
    assert not target.exists() and not target.parent.exists()
    assert stat.S_ISREG(os.lstat(locks / "sdists-vllm-0.27.1.tar.gz.lock").st_mode)


# --- every cache entry of forge, linked out, is made again beside the link --------------------

def own_cache(tmp_path, monkeypatch):
    """An empty cache but for the release's tree (its vllm/ and requirements/ linked from the
    run's cache), the release index and the sdists."""
    from forge.upstream import releases

    real = releases.cache_dir()
    cache = tmp_path / "cache"
    tree = releases.release_tree("0.27.1")
    (cache / "trees" / "0.27.1").mkdir(parents=True)
    for part in ("vllm", "requirements"):
        (cache / "trees" / "0.27.1" / part).symlink_to(tree / part)
    shutil.copyfile(real / "index.json", cache / "index.json")
    (cache / "sdists").symlink_to(real / "sdists")
    monkeypatch.setenv("VLLM_FORGE_CACHE", str(cache))
    return cache


def test_a_linked_serve_args_entry_is_rebuilt_beside_its_link(tmp_path, monkeypatch, victim):
    from forge.serving import vllm_args

    own_cache(tmp_path, monkeypatch)
    entry = vllm_args._cached_args_file("0.27.1")
    entry.parent.mkdir(parents=True)
    entry.symlink_to(victim)
    vllm_args.release_args.cache_clear()
    try:
        assert "--model" in vllm_args.release_args("0.27.1").serve_flags
    finally:
        vllm_args.release_args.cache_clear()
    assert untouched(victim)
    assert not entry.is_symlink() and json.loads(entry.read_text())["version"] == "0.27.1"


def test_a_linked_requirements_entry_is_rebuilt_beside_its_link(tmp_path, monkeypatch, victim):
    from forge.patching.dependencies import release_requirements

    cache = own_cache(tmp_path, monkeypatch)
    entry = cache / "requirements" / "0.27.1.json"
    entry.parent.mkdir()
    entry.symlink_to(victim)
    lines = release_requirements("0.27.1", offline=True)
    assert any(line.startswith("transformers") for line in lines)
    assert untouched(victim)
    assert not entry.is_symlink() and json.loads(entry.read_text()) == lines
    entry.write_text('{"a": "mapping, not the list of lines"}')     # another shape: read again
    assert release_requirements("0.27.1", offline=True) == lines


def test_a_linked_tree_manifest_is_rebuilt_beside_its_link(tmp_path, monkeypatch, victim):
    from forge.upstream import releases

    expected = releases.tree_manifest("0.27.1", offline=True)
    cache = own_cache(tmp_path, monkeypatch)
    entry = cache / "tree-manifests" / "0.27.1.json"
    entry.parent.mkdir()
    entry.symlink_to(victim)
    assert releases.tree_manifest("0.27.1", offline=True) == expected
    assert untouched(victim) and not entry.is_symlink()
    data = json.loads(entry.read_text())
    data["files"]["vllm/__init__.py"] = "0" * 64
    data["sdist_sha256"] = "f" * 64               # another sdist's: not this release's manifest
    entry.write_text(json.dumps(data))
    assert releases.tree_manifest("0.27.1", offline=True) == expected


def test_a_linked_index_is_rebuilt_beside_its_link(tmp_path, monkeypatch, victim):
    """Offline, a linked index is no index (one line); with the index answering (a real HTTP
    mirror on loopback) it is read again and written over the link, not through it."""
    from forge.errors import ForgeError
    from forge.upstream import releases
    from tests.sdist_mirror import cold_cache

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "index.json").symlink_to(victim)
    with cold_cache(cache) as env:          # lists what the run's own cache lists
        monkeypatch.setenv("VLLM_FORGE_CACHE", str(cache))
        assert releases._read_cached_index() is None
        with pytest.raises(ForgeError, match="^offline and no cached vLLM release index at "):
            releases.load_index(offline=True)
        monkeypatch.setenv("VLLM_FORGE_INDEX", env["VLLM_FORGE_INDEX"])
        assert "0.27.1" in releases.load_index()
    assert untouched(victim)
    assert not (cache / "index.json").is_symlink() and releases._read_cached_index() is not None


def test_files_outside_the_tree_are_read_from_the_sdist_and_kept_beside_a_link(tmp_path, monkeypatch,
                                                                              victim):
    """A tree made without requirements/ reads them from the sdist (bounded, in one pass), and a
    build file outside the tree (cmake/utils.cmake) is taken from the sdist once; its cached copy
    linked out is taken again, written over the link."""
    from forge.patching.dependencies import release_requirements
    from forge.upstream import releases

    expected = release_requirements("0.27.1", offline=True)
    cache = own_cache(tmp_path, monkeypatch)
    (cache / "trees" / "0.27.1" / "requirements").unlink()
    assert release_requirements("0.27.1", offline=True) == expected
    real = releases.release_tree("0.27.1")
    entry = cache / "build-files" / "0.27.1" / "cmake" / "utils.cmake"
    entry.parent.mkdir(parents=True)
    entry.symlink_to(victim)
    found = releases.release_build_file("0.27.1", "cmake/utils.cmake", offline=True)
    assert found == entry and not entry.is_symlink() and untouched(victim)
    assert "function(" in entry.read_text() and real.exists()
    assert releases.release_build_file("0.27.1", "cmake/no-such-file.cmake", offline=True) is None


def test_a_folder_shared_through_a_link_is_written_as_a_folder(tmp_path, victim):
    """A cache may link another's folders (tests/local_index.py's isolated caches): the entry is
    made in the shared folder; an entry there that is a link is still replaced, not written
    through."""
    shared = tmp_path / "shared" / "requirements"
    shared.mkdir(parents=True)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "requirements").symlink_to(shared)
    files.write_entry(cache / "requirements" / "0.27.1.json", "[]")
    assert (shared / "0.27.1.json").read_text() == "[]"
    (shared / "0.25.0.json").symlink_to(victim)
    files.write_entry(cache / "requirements" / "0.25.0.json", "[1]")
    assert untouched(victim) and not (shared / "0.25.0.json").is_symlink()

