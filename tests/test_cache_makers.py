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
