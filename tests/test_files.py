"""forge.files: a file is replaced whole, or left exactly as it was (mode and symlink kept, the
temp file gone on any failure); reads take regular files of at most their kind's cap; every
fault is one line. Faults are real: a FIFO, /dev/zero, a full tmpfs, a read-only bind mount, an
unprivileged user."""
import errno
import os
import stat
import tempfile
from pathlib import Path

import pytest

from forge import files
from forge.errors import FileError, ForgeError
from forge.files import (
    FileKind,
    append_text,
    check_output_dir,
    check_output_file,
    read_bytes,
    read_if_present,
    read_tail,
    read_text,
    regular_or_absent,
    write_bytes_atomically,
    write_text_atomically,
)
from tests.file_faults import full_tmpfs, make_fifo, python_as_nobody, read_only


def test_writes_new_and_replaces_existing(tmp_path):
    path = tmp_path / "sub" / "f.yaml"
    write_text_atomically(path, "a: 1\n")
    write_text_atomically(path, "a: 2\n")
    assert path.read_text() == "a: 2\n"
    assert [p.name for p in path.parent.iterdir()] == ["f.yaml"]


def test_refused_content_leaves_the_file_and_no_temp(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text("good\n")
    checked = []

    def refuse(candidate):
        checked.append(candidate.read_text())
        raise ForgeError("bad content")

    with pytest.raises(ForgeError, match="bad content"):
        write_text_atomically(path, "bad\n", check=refuse)
    assert checked == ["bad\n"]
    assert path.read_text() == "good\n"
    assert [p.name for p in tmp_path.iterdir()] == ["f.yaml"]


# --- reads: regular files only, at most the cap of their kind ----------------------------------

def one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text
    return text


def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path):
    fifo = make_fifo(tmp_path / "series.yaml")     # no writer: a plain open() would block forever
    with pytest.raises(FileError) as failure:
        read_bytes(fifo, files.DATA_YAML)
    assert one_line(failure.value) == (f"{fifo}: is a FIFO (named pipe), not a regular file; "
                                       "a data YAML file must be a regular file")


def test_dev_zero_and_a_directory_are_refused(tmp_path):
    with pytest.raises(FileError, match=r"^/dev/zero: is a character device, not a regular file; "
                                        r"a lock file must be"):
        read_bytes("/dev/zero", files.LOCK)
    with pytest.raises(FileError, match=rf"^{tmp_path}: is a directory, not a regular file"):
        read_text(tmp_path, files.REPORT)


def test_a_file_over_its_cap_is_refused_and_one_at_the_cap_is_read(tmp_path):
    kind = FileKind("test file", 1000)
    path = tmp_path / "f"
    path.write_bytes(b"x" * 1000)
    assert read_bytes(path, kind) == b"x" * 1000
    path.write_bytes(b"x" * 1001)
    with pytest.raises(FileError, match=rf"^{path}: larger than the 1000 bytes cap for a test file"):
        read_bytes(path, kind)


def test_every_cap_is_named_and_far_below_the_memory_a_command_may_use():
    assert {kind.what for kind in files.KINDS} >= {"data YAML file", "lock file", "index",
                                                  "report", "server log"}
    # Two kinds are read whole by nature and say so in their names: a pinned package's file (saved
    # byte for byte for a revert) and a torch profiler trace (tens to hundreds of MB on a GPU host).
    large = {files.PACKAGE_FILE, files.TRACE}
    assert all(0 < kind.cap <= 64 * files.MiB for kind in files.KINDS if kind not in large)
    assert all(kind.cap <= 1024 * files.MiB for kind in large)


def test_read_tail_keeps_the_end_of_a_long_log(tmp_path):
    log = tmp_path / "server.log"
    log.write_bytes(b"a" * 5000 + b"the end\n")
    assert read_tail(log, FileKind("server log", 100)) == (b"a" * 92 + b"the end\n")
    with pytest.raises(FileError, match="a FIFO"):
        read_tail(make_fifo(tmp_path / "fifo.log"))


def test_absent_is_none_but_a_directory_where_a_file_should_be_is_an_error(tmp_path):
    assert read_if_present(tmp_path / "absent.py", files.SOURCE) is None
    assert regular_or_absent(tmp_path / "absent.py", files.SOURCE) is False
    (tmp_path / "model.py").mkdir()
    with pytest.raises(FileError, match="model.py: is a directory, not a regular file"):
        read_if_present(tmp_path / "model.py", files.SOURCE)


def test_non_utf8_text_is_one_line_naming_the_line(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_bytes(b"a: 1\nb: caf\xe9\n")
    with pytest.raises(FileError, match=r"t.yaml: line 2: not UTF-8 text \(byte 0xe9\)"):
        read_text(path, files.DATA_YAML)


# --- listings: text paths that say what pathlib says -------------------------------------------

def test_files_under_lists_what_rglob_and_is_file_find_in_rglobs_order(tmp_path):
    """The order is by path component ('a/b' before 'a-b', which sorts before it as text); a link
    to a file counts, a link to a directory is not followed, a broken link, a link loop and a
    FIFO are no files; hidden files count."""
    for rel in ("a/b", "a-b", "a.py", ".hidden", "d/sub/deep.py", "d/x"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    (tmp_path / "link-to-file").symlink_to("d/x")
    (tmp_path / "link-to-dir").symlink_to("d")
    (tmp_path / "broken").symlink_to("nowhere")
    (tmp_path / "loop").symlink_to("loop")
    make_fifo(tmp_path / "fifo")
    by_pathlib = [str(p.relative_to(tmp_path)) for p in sorted(tmp_path.rglob("*")) if p.is_file()]
    assert files.files_under(tmp_path) == by_pathlib
    assert by_pathlib.index("a/b") < by_pathlib.index("a-b")
    assert files.files_under(tmp_path / "absent") == [] == files.files_under(tmp_path / "a.py")


def test_mode_of_is_zero_where_pathlib_finds_nothing(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "loop").symlink_to("loop")
    assert stat.S_ISREG(files.mode_of(str(tmp_path / "f")))
    assert stat.S_ISDIR(files.mode_of(str(tmp_path)))
    for nothing in ("absent", "f/under-a-file", "loop", "nul\0name"):
        assert files.mode_of(str(tmp_path / nothing)) == 0
        assert not (tmp_path / nothing).is_file() and not (tmp_path / nothing).exists()


# --- writes: mode, symlinks, faults ------------------------------------------------------------

def test_a_rewrite_keeps_the_mode_and_a_new_file_follows_the_umask(tmp_path):
    kept = tmp_path / "series.yaml"
    kept.write_text("old\n")
    kept.chmod(0o644)
    old = os.umask(0o077)        # a temp file made by mkstemp would be 0600 whatever this is
    try:
        write_text_atomically(kept, "new\n")
        assert stat.S_IMODE(kept.stat().st_mode) == 0o644
        os.umask(0o027)
        write_text_atomically(tmp_path / "new.json", "{}\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o640
    kept.chmod(0o755)
    write_text_atomically(kept, "newer\n")
    assert stat.S_IMODE(kept.stat().st_mode) == 0o755 and kept.read_text() == "newer\n"


def test_a_symlink_is_written_through_and_stays_a_link(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "series.yaml"
    target.write_text("old\n")
    target.chmod(0o640)
    link = tmp_path / "series.yaml"
    link.symlink_to(Path("real") / "series.yaml")
    assert write_text_atomically(link, "new\n") == link
    assert link.is_symlink() and os.readlink(link) == "real/series.yaml"
    assert target.read_text() == "new\n" and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["series.yaml"]


def test_a_full_disk_is_one_line_leaves_the_file_and_no_temp(tmp_path):
    with full_tmpfs(tmp_path / "disk", keep={"published.json": b'{"old": true}\n'}) as disk:
        before = sorted(p.name for p in disk.iterdir())
        with pytest.raises(FileError) as failure:
            write_text_atomically(disk / "published.json", '{"new": true}\n' * 10000)
        assert one_line(failure.value) == (f"{disk / 'published.json'}: cannot write it: no space "
                                           "left on the device; free some space and run again")
        assert (disk / "published.json").read_bytes() == b'{"old": true}\n'
        assert sorted(p.name for p in disk.iterdir()) == before


def test_a_read_only_file_system_is_one_line_and_changes_nothing(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "series.yaml").write_text("old\n")
    with read_only(folder):
        with pytest.raises(FileError) as failure:
            write_text_atomically(folder / "series.yaml", "new\n")
        assert one_line(failure.value).startswith(f"{folder / 'series.yaml'}: cannot write it: "
                                                  "the file system is read-only")
        with pytest.raises(FileError, match="read-only"):
            check_output_file(folder / "out.json", "-o")
        with pytest.raises(FileError, match="read-only"):
            check_output_dir(folder / "reports", "--out")
        with pytest.raises(FileError, match="read-only"):
            append_text(folder / "series.yaml", "x")
    assert sorted(p.name for p in folder.iterdir()) == ["series.yaml"]
    assert (folder / "series.yaml").read_text() == "old\n"


@pytest.fixture
def shared_dir():
    """A folder an unprivileged user can reach (pytest's tmp_path is root's, mode 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="vllm-forge-files-"))
    folder.chmod(0o755)
    yield folder
    import shutil

    shutil.rmtree(folder)


def test_permission_denied_as_an_unprivileged_user_is_one_line(shared_dir):
    (shared_dir / "lock.yaml").write_text("bases: {}\n")
    (shared_dir / "secret.yaml").write_text("a: 1\n")
    (shared_dir / "secret.yaml").chmod(0o600)
    code = (
        "from forge.errors import ForgeError\n"
        "from forge import files\n"
        f"for step in (lambda: files.write_text_atomically({str(shared_dir / 'lock.yaml')!r}, 'x'),\n"
        f"             lambda: files.read_bytes({str(shared_dir / 'secret.yaml')!r}, files.DATA_YAML),\n"
        f"             lambda: files.check_output_file({str(shared_dir / 'new.json')!r}, '-o')):\n"
        "    try:\n"
        "        step()\n"
        "    except ForgeError as exc:\n"
        "        print(exc)\n")
    result = python_as_nobody(code)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{shared_dir / 'lock.yaml'}: cannot write it: permission denied "
                               f"(uid 65534); give this user access to {shared_dir}")
    assert lines[1].startswith(f"{shared_dir / 'secret.yaml'}: cannot read it: permission denied")
    assert lines[2].startswith(f"-o {shared_dir / 'new.json'}: {shared_dir}: cannot write in it: "
                               "permission denied")
    assert len(lines) == 3
    assert sorted(p.name for p in shared_dir.iterdir()) == ["lock.yaml", "secret.yaml"]
    assert (shared_dir / "lock.yaml").read_text() == "bases: {}\n"


def test_check_output_file_finds_a_full_disk_before_any_effect(tmp_path):
    with full_tmpfs(tmp_path / "disk") as disk:
        with pytest.raises(FileError, match="no space left on the device"):
            check_output_file(disk / "github_output", "--github-output")
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]


def test_a_failed_write_of_bytes_to_a_directory_is_one_line(tmp_path):
    (tmp_path / "out.json").mkdir()
    with pytest.raises(FileError, match=r"out.json: cannot write it: is a directory"):
        write_bytes_atomically(tmp_path / "out.json", b"{}")
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileError, match=r"cannot write it: a part of the path is not a directory"):
        write_bytes_atomically(tmp_path / "file" / "below" / "x.json", b"{}")
    assert errno.ENOTDIR  # the errno the message stands for


def test_root_rewriting_another_users_file_keeps_its_owner(tmp_path):
    path = tmp_path / "lock.yaml"
    path.write_text("old\n")
    os.chown(path, 65534, 65534)
    write_text_atomically(path, "new\n")
    assert (path.stat().st_uid, path.stat().st_gid) == (65534, 65534) and path.read_text() == "new\n"
