"""Safe extraction on Pythons with and without tarfile's data filter (Debian 12's 3.11.2 has none)."""
import io
import tarfile

import pytest

from forge.errors import ForgeError
from forge.upstream import archives


def _archive(tmp_path, entries):
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w") as archive:
        for name, kind in entries:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size, info.mode = 5, 0o4777
                archive.addfile(info, io.BytesIO(b"hello"))
            else:
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                archive.addfile(info)
    return path


@pytest.fixture(params=[True, False], ids=["data-filter", "own-rule"])
def extraction_path(request, monkeypatch):
    monkeypatch.setattr(archives, "HAS_DATA_FILTER", request.param and archives.HAS_DATA_FILTER)
    return request.param


def test_plain_files_extract_without_setuid(tmp_path, extraction_path):
    with tarfile.open(_archive(tmp_path, [("pkg/a.py", "file")])) as archive:
        archives.extract_safely(archive, tmp_path / "out")
    extracted = tmp_path / "out" / "pkg" / "a.py"
    assert extracted.read_bytes() == b"hello"
    assert not extracted.stat().st_mode & 0o4022


@pytest.mark.parametrize("entry", [("../escape.py", "file"), ("pkg/link", "symlink")])
def test_escapes_and_links_are_refused(tmp_path, extraction_path, entry):
    with tarfile.open(_archive(tmp_path, [entry])) as archive:
        with pytest.raises((ForgeError, getattr(tarfile, "FilterError", ForgeError))):
            archives.extract_safely(archive, tmp_path / "out")
    assert not (tmp_path / "escape.py").exists()


def test_each_member_is_reported_once_it_is_on_disk(tmp_path, extraction_path):
    names = ["pkg/a.py", "pkg/b.py", "pkg/c.py"]
    reported = []

    def on_member(member):
        reported.append((member.name, (tmp_path / "out" / member.name).read_bytes()))
    with tarfile.open(_archive(tmp_path, [(name, "file") for name in names])) as archive:
        archives.extract_safely(archive, tmp_path / "out", on_member=on_member)
    assert reported == [(name, b"hello") for name in names]


def _stream(path):
    return tarfile.open(path, "r|")


def test_a_stream_extracts_plain_files_without_setuid(tmp_path, extraction_path):
    with _stream(_archive(tmp_path, [("pkg/a.py", "file"), ("pkg/b.py", "file")])) as archive:
        archives.extract_stream(archive, tmp_path / "out", iter(archive))
    for name in ("a.py", "b.py"):
        extracted = tmp_path / "out" / "pkg" / name
        assert extracted.read_bytes() == b"hello" and not extracted.stat().st_mode & 0o4022


@pytest.mark.parametrize("entry", [("../escape.py", "file"), ("pkg/link", "symlink")])
def test_a_stream_refuses_escapes_and_links_as_they_come(tmp_path, extraction_path, entry):
    with _stream(_archive(tmp_path, [("pkg/a.py", "file"), entry])) as archive:
        with pytest.raises((ForgeError, getattr(tarfile, "FilterError", ForgeError))):
            archives.extract_stream(archive, tmp_path / "out", iter(archive))
    assert not (tmp_path / "escape.py").exists() and not (tmp_path / "out" / "pkg" / "link").exists()


def test_a_stream_refuses_an_absolute_name(tmp_path, extraction_path):
    name = f"{tmp_path}/absolute.py"
    with _stream(_archive(tmp_path, [(name, "file")])) as archive:
        with pytest.raises(ForgeError, match="absolute.py"):
            archives.extract_stream(archive, tmp_path / "out", iter(archive))
    assert not (tmp_path / "absolute.py").exists()


# --- bounds: each member checked from its header, before its bytes are read ----------------------

def _members(tmp_path, names_sizes):
    path = tmp_path / "b.tar"
    with tarfile.open(path, "w") as archive:
        for name, size in names_sizes:
            info = tarfile.TarInfo(name)
            info.size = size
            archive.addfile(info, io.BytesIO(bytes(size)))
    return path


BOUNDS = archives.Bounds(size=1000, members=3, depth=4, name=40)


@pytest.mark.parametrize("names_sizes, says", [
    ([("a", 600), ("b", 600)], "decompress to more than"),
    ([("a", 1), ("b", 1), ("c", 1), ("d", 1)], "more than 3 members"),
    ([("a/b/c/d/e/f", 1)], "5 folders deep"),
    ([("x" * 41, 1)], "is 41 characters"),
])
def test_an_archive_past_its_bounds_is_refused_at_the_member_that_passes_them(tmp_path, names_sizes, says):
    with tarfile.open(_members(tmp_path, names_sizes)) as archive:
        with pytest.raises(ForgeError) as caught:
            for _ in archives.bounded(archive, BOUNDS, "the archive"):
                pass
    assert says in str(caught.value) and str(caught.value).startswith("the archive: ")
    assert "\n" not in str(caught.value)


def test_an_archive_within_its_bounds_yields_every_member(tmp_path):
    names_sizes = [("a", 500), ("b/c/d/e", 500), ("c" * 40, 0)]
    with tarfile.open(_members(tmp_path, names_sizes)) as archive:
        assert [m.name for m in archives.bounded(archive, BOUNDS, "the archive")] == [n for n, _ in names_sizes]
