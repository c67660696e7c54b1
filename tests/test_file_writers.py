"""Every command that rewrites a file keeps its mode and its symlink, and a fault of the file
system (read-only, full) is one line with nothing changed: `patch-headers` (the diffs and
patches/series.yaml), `publish` (--index, --github-output), `bake -o`. Real commands in fresh
processes, run under umask 077 (a temp file's 0600 used to become the file's mode)."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from tests.build_cli import copy_checkout
from tests.file_faults import full_tmpfs, read_only
from tests.test_bad_input_one_line import assert_one_line_refusal, publish_args, tree_of
from tests.test_published import write_report

REPO = Path(__file__).resolve().parents[1]


def run_under_umask(*args: str, cwd: Path = REPO, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "build.py", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})}, preexec_fn=lambda: os.umask(0o077))


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _stale_header(repo: Path) -> Path:
    """Make one diff's header stale (its `why` changed in the manifest); return the diff."""
    manifest = repo / "patches" / "series.yaml"
    text = manifest.read_text()
    assert text.count("Terminating request.") == 1
    manifest.write_text(text.replace("Terminating request.", "Terminating request, every time."))
    return repo / "patches" / "source" / "structured-reasoning-trim.diff"


def test_patch_headers_keeps_modes_and_writes_through_a_symlinked_series(tmp_path):
    repo = copy_checkout(tmp_path / "checkout")
    diff = _stale_header(repo)
    manifest = repo / "patches" / "series.yaml"
    store = tmp_path / "store"
    store.mkdir()
    (store / "series.yaml").write_bytes(manifest.read_bytes())
    manifest.unlink()
    manifest.symlink_to(store / "series.yaml")
    (store / "series.yaml").chmod(0o644)
    diff.chmod(0o664)
    written = run_under_umask("patch-headers", cwd=repo)
    assert written.returncode == 0, written.stderr
    assert f"wrote {diff}" in written.stdout
    assert manifest.is_symlink() and os.readlink(manifest) == str(store / "series.yaml")
    assert mode_of(store / "series.yaml") == 0o644 and mode_of(diff) == 0o664
    assert run_under_umask("patch-headers", "--check", cwd=repo).returncode == 0
    assert sorted(p.name for p in store.iterdir()) == ["series.yaml"]


def test_patch_headers_on_a_read_only_checkout_is_one_line_and_changes_nothing(tmp_path):
    repo = copy_checkout(tmp_path / "checkout")
    _stale_header(repo)
    before = tree_of(repo / "patches")
    with read_only(repo / "patches"):
        result = run_under_umask("patch-headers", cwd=repo)
    line = assert_one_line_refusal(result, "the file system is read-only")
    assert "Traceback" not in result.stderr and str(repo / "patches") in line
    assert tree_of(repo / "patches") == before
    assert not (repo / "build" / "patch-work" / ".patch-headers.json").exists()   # nothing to replay


def test_publish_keeps_the_index_mode_and_its_symlink(tmp_path):
    report = write_report(tmp_path, True)
    store = tmp_path / "store"
    store.mkdir()
    first = run_under_umask(*publish_args(store / "published.json", report))
    assert first.returncode == 0, first.stderr
    assert mode_of(store / "published.json") == 0o600        # new: 0666 through the umask 077
    (store / "published.json").chmod(0o644)
    link = tmp_path / "published.json"
    link.symlink_to(store / "published.json")
    again = run_under_umask(*publish_args(link, report, "--immutable-tag", "vllm0.27.1-gb10-bbbbbbbbbbbb"))
    assert again.returncode == 0, again.stderr
    assert link.is_symlink() and mode_of(store / "published.json") == 0o644
    assert "vllm0.27.1-gb10-bbbbbbbbbbbb" in (store / "published.json").read_text()
    assert sorted(p.name for p in store.iterdir()) == ["published.json"]


def test_publish_to_a_full_disk_is_refused_before_it_writes_anything(tmp_path):
    report = write_report(tmp_path, True)
    with full_tmpfs(tmp_path / "disk") as disk:
        result = run_under_umask(*publish_args(disk / "published.json", report))
        assert_one_line_refusal(result, f"--index {disk / 'published.json'}: ", "no space left on the device")
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]
        assert result.stdout == ""


def test_publish_github_output_on_a_read_only_folder_writes_no_index(tmp_path):
    report = write_report(tmp_path, True)
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    (outputs / "github_output").write_text("")
    index = tmp_path / "published.json"
    with read_only(outputs):
        result = run_under_umask(*publish_args(index, report, "--github-output",
                                               str(outputs / "github_output")))
    assert_one_line_refusal(result, f"--github-output {outputs / 'github_output'}: ", "read-only")
    assert not index.exists()


def test_stdout_on_a_full_disk_is_one_line(tmp_path):
    with full_tmpfs(tmp_path / "disk") as disk:
        out = disk / "filler"
        with open(out, "ab") as stdout:
            result = subprocess.run([sys.executable, "build.py", "patches", "--vllm", "0.25.0", "--offline"],
                                    cwd=REPO, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=600)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        "error: standard output: no space left on the device; free some space or write elsewhere, "
        "and run again"]


# --- verify/ through the same layer ------------------------------------------------------------

def test_a_verify_report_on_a_full_disk_is_one_line_and_leaves_no_empty_report(tmp_path):
    import pytest

    from forge.errors import FileError
    from tests.test_published import gate_checks
    from verify.report import installed_versions
    from verify.report import write_report as write

    with full_tmpfs(tmp_path / "disk") as disk:
        with pytest.raises(FileError, match=r"mtp_smoke.json: cannot write it: no space left"):
            write(disk / "mtp_smoke.json", gate_checks(None) * 200, installed_versions(), target="gb10")
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]    # was a 0-byte mtp_smoke.json


def test_a_server_log_that_is_a_fifo_fails_its_check_at_once(tmp_path):
    from forge.serving.recipes import load_recipe
    from verify.mtp_smoke import server_log_checks

    fifo = tmp_path / "server.log"
    os.mkfifo(fifo)                         # a plain read would wait forever for a writer
    checks = server_log_checks(load_recipe("gemma-4-26b-a4b-it", "h200"), str(fifo))
    assert checks[0].name == "server log" and checks[0].status == "FAIL"
    assert checks[0].detail == (f"--server-log {fifo}: is a FIFO (named pipe), not a regular file; "
                                "a server log must be a regular file")
