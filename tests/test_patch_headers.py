"""`build.py patch-headers`: each source diff's header is written from its manifest entry, so the
manifest is the one home of a patch's provenance; `--check` fails on a header it did not write."""
from __future__ import annotations

import hashlib
import json

import pytest
import yaml

from forge.errors import ForgeError
from forge.patching import headers
from forge.patching.series import load_series, save_series
from tests.build_cli import copy_checkout, run_build

PATCH = "structured-reasoning-trim"


def _edit_why(repo, old: str, new: str) -> None:
    manifest = repo / "patches" / "series.yaml"
    text = manifest.read_text()
    assert text.count(old) == 1
    manifest.write_text(text.replace(old, new))


def _diff_of(repo, patch_id: str):
    return repo / "patches" / "source" / f"{patch_id}.diff"


def test_a_changed_why_makes_the_header_stale_until_patch_headers_writes_it(tmp_path):
    repo = copy_checkout(tmp_path)
    diff = _diff_of(repo, PATCH)
    before = diff.read_bytes()
    _edit_why(repo, "Terminating request.", "Terminating request, every time.")
    stale = run_build("patch-headers", "--check", cwd=repo)
    assert stale.returncode == 1 and f"{diff}: the header is not what" in stale.stdout
    assert diff.read_bytes() == before                  # --check writes nothing
    written = run_build("patch-headers", cwd=repo)
    assert written.returncode == 0, written.stderr
    assert f"wrote {diff}" in written.stdout
    after = diff.read_bytes()
    assert b"#  \"Unexpected: grammar rejected tokens ... Terminating request, every time.\"" in after
    assert headers.body_of(after) == headers.body_of(before)    # the change itself is untouched
    entry = next(p for p in yaml.safe_load((repo / "patches/series.yaml").read_text())["patches"]
                 if p["id"] == PATCH)
    assert entry["files"][0]["sha256"] == hashlib.sha256(after).hexdigest()
    assert run_build("patch-headers", "--check", cwd=repo).returncode == 0


def test_a_killed_patch_headers_run_is_finished_by_the_next(tmp_path):
    repo = copy_checkout(tmp_path)
    _edit_why(repo, "Terminating request.", "Terminating request, every time.")
    series = load_series(repo / "patches" / "series.yaml", check_index=False)
    writes = headers.header_writes(series)
    # What a run killed between its two writes leaves: the journal, and the new diff on disk
    # while the manifest still records the old sha256, so nothing can load the series.
    journal = repo / "build" / "patch-work" / ".patch-headers.json"
    journal.parent.mkdir(parents=True)
    journal.write_text(json.dumps({str(k): v.decode() for k, v in writes.items()}))
    first = next(iter(writes))
    first.write_bytes(writes[first])
    with pytest.raises(ForgeError, match="sha256"):
        load_series(repo / "patches" / "series.yaml", check_index=False)
    unfinished = run_build("patch-headers", "--check", cwd=repo)
    assert unfinished.returncode == 1 and "was interrupted" in unfinished.stdout
    assert journal.exists()                                     # --check finishes nothing
    again = run_build("patch-headers", cwd=repo)
    assert again.returncode == 0, again.stderr
    assert not journal.exists()
    load_series(repo / "patches" / "series.yaml", check_index=False)
    assert run_build("patch-headers", "--check", cwd=repo).returncode == 0


def test_what_the_upstream_watch_edits_leaves_every_header_current(tmp_path):
    """The watch moves checked_through and sets retired_in through the manifest alone: neither
    is in a header, so its pull requests never leave a stale one."""
    repo = copy_checkout(tmp_path)
    series = load_series(repo / "patches" / "series.yaml", check_index=False)
    series.checked_through = "0.34.0"
    series.get("gemma4-mtp-share-embeddings").retired_in = "0.27.0"
    save_series(series)
    assert "retired_in: 0.27.0" in (repo / "patches" / "series.yaml").read_text()
    assert run_build("patch-headers", "--check", cwd=repo).returncode == 0
