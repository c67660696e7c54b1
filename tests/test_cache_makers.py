"""One maker at a time per cache entry (forge.files.one_maker): a second process that wants an
entry being made waits for the first, then reads what it made. The background prefetch of a whole
test run (tests/prefetch.py) and the tests themselves rely on it, as two `build.py` runs on one
machine do."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forge.files import one_maker
from tests.sdist_mirror import cold_cache

REPO = Path(__file__).resolve().parents[1]
WAITER = ("import sys, time; from pathlib import Path; from forge.files import one_maker\n"
          "with one_maker(Path(sys.argv[1]), Path(sys.argv[2])):\n    print(time.time(), flush=True)\n")


def test_a_second_maker_waits_until_the_first_is_done(tmp_path):
    entry, locks = tmp_path / "envs" / "transformers-5.15.0-py311", tmp_path / "locks"
    entry.parent.mkdir()
    other = subprocess.run([sys.executable, "-c", WAITER, str(entry.with_name("other")), str(locks)],
                           cwd=REPO, capture_output=True, text=True, timeout=60)
    assert other.returncode == 0, other.stderr      # another entry's maker is not held up
    with one_maker(entry, locks):
        other = subprocess.run([sys.executable, "-c", WAITER, str(entry.with_name("other")), str(locks)],
                               cwd=REPO, capture_output=True, text=True, timeout=60)
        assert other.returncode == 0, other.stderr
        waiter = subprocess.Popen([sys.executable, "-c", WAITER, str(entry), str(locks)], cwd=REPO,
                                  stdout=subprocess.PIPE, text=True)
        with pytest.raises(subprocess.TimeoutExpired):
            waiter.wait(timeout=3)              # held here: it cannot get in
        released = time.time()
    out, _ = waiter.communicate(timeout=60)
    assert waiter.returncode == 0
    assert float(out) >= released
    assert os.listdir(entry.parent) == []     # the lock leaves no file among the entries


@pytest.mark.slow
def test_two_processes_extracting_one_release_on_a_cold_cache_download_it_once(tmp_path):
    cache = tmp_path / "cold"
    served: list[str] = []
    script = ("from forge.upstream import releases; "
              "print(releases.release_tree('0.25.0'))")
    with cold_cache(cache, served) as env:
        runs = [subprocess.Popen([sys.executable, "-c", script], cwd=REPO, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env={**os.environ, **env}) for _ in range(2)]
        outputs = [run.communicate(timeout=600) for run in runs]
    for run, (out, err) in zip(runs, outputs):
        assert run.returncode == 0, err
        assert out.strip() == str(cache / "trees" / "0.25.0")
    assert (cache / "trees" / "0.25.0" / "vllm" / "v1" / "spec_decode" / "llm_base_proposer.py").is_file()
    assert served == ["vllm-0.25.0.tar.gz"], "the second waited for the first's download"
    # one tree, no staging directory of the other left beside it, one sdist and no partial download
    assert sorted(os.listdir(cache / "trees")) == ["0.25.0"]
    assert sorted(os.listdir(cache / "sdists")) == ["vllm-0.25.0.tar.gz"]


def test_a_new_registry_seed_drops_the_superseded_seeds_of_its_name_only(tmp_path):
    from tests.fixtures_docker import drop_superseded_seeds

    def seed(name: str) -> Path:
        (tmp_path / name / "blobs").mkdir(parents=True)
        return tmp_path / name

    old = seed("registry-seed-standin-v0.25.0-0123456789ab")
    other_name = seed("registry-seed-standin-v0.25.0-arm64-0123456789ab")
    other_version = seed("registry-seed-standin-v0.27.1-0123456789ab")
    unfinished = seed("registry-seed-standin-v0.25.0-fedcba987654.partial")
    new = seed("registry-seed-standin-v0.25.0-fedcba987654")
    drop_superseded_seeds(new)
    assert not old.exists()
    assert new.is_dir() and other_name.is_dir() and other_version.is_dir() and unfinished.is_dir()


def test_a_new_rootfs_drops_the_renamed_recipes_tarballs_and_stand_in_records(tmp_path, monkeypatch):
    from tests import fixtures_docker as docker

    monkeypatch.setenv("VLLM_FORGE_CACHE", str(tmp_path))
    bases = docker.bases_cache()
    names = {"current": f"{docker.ROOTFS_NAME}-amd64.tar",
             "current_other_arch": f"{docker.ROOTFS_NAME}-arm64.tar",
             "renamed": f"{docker.ROOTFS_FAMILY}-essential-amd64.tar",
             "renamed_other_arch": f"{docker.ROOTFS_FAMILY}-essential-arm64.tar",
             "record": f"standin-{docker.ROOTFS_NAME}-vllm-forge-test_standin_v0.25.0-amd64.id",
             "renamed_record": f"standin-{docker.ROOTFS_FAMILY}-essential-vllm-forge-test_standin_v0.25.0-amd64.id"}
    for name in names.values():
        (bases / name).write_text("x")
    docker.drop_superseded_rootfs("amd64")
    left = {key for key, name in names.items() if (bases / name).exists()}
    # the other architecture's old tarball goes when that architecture's new one is made
    assert left == {"current", "current_other_arch", "renamed_other_arch", "record"}
