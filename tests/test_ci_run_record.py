"""benchmarks/ci_run.py (`python3 -m benchmarks.ci_run`): a fresh clone's `.ci/run`, timed, kept as a `suite` result record. Run here
on a small real repository whose `.ci/run` prints the phase lines the real one prints and runs a
real pytest, so the record's figures are read from real output."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from forge.evidence.records import load_record

ROOT = Path(__file__).resolve().parent.parent

CI_RUN = """\
set -u
echo "=== [ci] Python packages"
echo "=== [ci] Python packages took 3 s"
echo "=== [ci] tests"
python3 -m pytest -p no:cacheprovider -p no:xdist tests
STATUS=$?
echo "=== [ci] tests cpu: suite 6 s (cgroup), machine busy 7 s, idle 2 s, stolen 1 s"
echo "=== [ci] tests took 5 s"
echo "=== [ci] total 8 s"
exit $STATUS
"""
# What the clone's tests check is what a CI run must see: CI set, bytecode written, and on a cold
# run a cache folder of its own that starts empty.
TESTS = """\
import os
from pathlib import Path

def test_as_ci_runs():
    assert os.environ["CI"] == "true"
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ
    cache = os.environ.get("VLLM_FORGE_CACHE")
    if os.environ["EXPECT"] == "cold":
        assert cache and not (Path(cache).exists() and any(Path(cache).iterdir()))
    else:
        assert cache is None

def test_engine_data():
    fresh = [os.environ.get(name) for name in ("DOCKER_STATE_DIR", "DOCKER26_STATE_DIR")]
    if os.environ.get("EXPECT_ENGINE") == "fresh":
        assert all(f and "vllm-forge-ci-run-" in f and not Path(f).exists() for f in fresh), fresh
    else:
        assert fresh == [None, None]

def test_second():
    assert os.environ["EXPECT"] != "fail"
"""


def tiny_repo(path: Path) -> Path:
    (path / ".ci").mkdir(parents=True)
    (path / ".ci" / "run").write_text(CI_RUN)
    (path / "tests").mkdir()
    (path / "tests" / "test_tiny.py").write_text(TESTS)
    for command in (["init", "-q"], ["add", "."],
                    ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "tiny"]):
        subprocess.run(["git", "-C", str(path), *command], check=True)
    return path


def ci_run(tmp_path: Path, cache: str, expect: str, *extra: str, **more_env: str) -> subprocess.CompletedProcess:
    results = tmp_path / "results"
    results.mkdir(exist_ok=True)
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path), "EXPECT": expect,
           "PYTHONDONTWRITEBYTECODE": "1", "VLLM_FORGE_CACHE": str(tmp_path / "kept"), **more_env}
    return subprocess.run([sys.executable, "-m", "benchmarks.ci_run", "--cache", cache, "--repo", str(tmp_path / "repo"),
                           "--results", str(results), *extra], env=env, capture_output=True, text=True,
                          cwd=ROOT)


@pytest.fixture
def repo(tmp_path):
    return tiny_repo(tmp_path / "repo")


def commit_of(repo: Path) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=7", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.mark.parametrize("cache", ["warm", "cold"])
def test_a_passing_run_is_a_record_of_its_phases_and_counts(tmp_path, repo, cache):
    done = ci_run(tmp_path, cache, cache)
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "results" / f"ci-{cache}-{commit_of(repo)}"
    record = load_record(folder)
    assert (record.kind, record.verdict, record.settings["cache"]) == ("suite", "pass", cache)
    figures = record.figures
    assert (figures["passed"], figures["failed"], figures["error"], figures["exit_status"]) == (3, 0, 0, 0)
    assert (figures["phase.python_packages_s"], figures["phase.tests_s"], figures["total_s"]) == (3, 5, 8)
    assert [figures[f"phase.tests_cpu_{spent}_s"] for spent in ("suite", "busy", "idle", "stolen")] \
        == [6, 7, 2, 1]
    assert figures["pytest_s"] >= 0 and figures["cores"] >= 1
    log = (folder / "ci-run.log").read_text().splitlines()
    assert log[0] == "=== [ci] Python packages" and log[-1] == "=== [ci] total 8 s"
    assert [line for line in log if " 3 passed in " in line and line.startswith("=")], log
    assert not [p for p in (tmp_path / "results").iterdir() if p.name.startswith(".")], "staging left"


def test_options_added_to_pytest_through_the_environment_are_a_setting_of_the_record(tmp_path, repo):
    plain = ci_run(tmp_path, "warm", "warm")
    assert plain.returncode == 0, plain.stderr
    folder = tmp_path / "results" / f"ci-warm-{commit_of(repo)}"
    assert "pytest_addopts" not in load_record(folder).settings
    added = ci_run(tmp_path, "warm", "warm", PYTEST_ADDOPTS=f"--junitxml={tmp_path / 'times.xml'}")
    assert added.returncode == 0, added.stderr
    assert load_record(folder).settings["pytest_addopts"] == f"--junitxml={tmp_path / 'times.xml'}"
    assert (tmp_path / "times.xml").is_file()        # the clone's pytest took the option


def test_a_failing_run_is_kept_with_a_fail_verdict_and_replaces_the_same_commits_record(tmp_path, repo):
    assert ci_run(tmp_path, "warm", "warm").returncode == 0
    done = ci_run(tmp_path, "warm", "fail")
    assert done.returncode == 0, done.stderr
    assert "exited 1" in done.stdout
    [folder] = (tmp_path / "results").iterdir()
    record = json.loads((folder / "result.json").read_text())
    assert record["verdict"] == "fail"
    assert (record["figures"]["passed"], record["figures"]["failed"], record["figures"]["exit_status"]) == (2, 1, 1)


def test_a_results_folder_that_is_not_there_is_named(tmp_path, repo):
    done = ci_run(tmp_path, "warm", "warm", "--results", str(tmp_path / "nowhere"))
    assert done.returncode == 2
    assert "--results: no such directory" in done.stderr
    assert not (tmp_path / "nowhere").exists()


def test_a_suite_record_is_a_row_of_the_evidence_page_and_its_log_makes_its_figures(tmp_path, repo):
    from forge.evidence import page
    from forge.evidence.figures import derive
    from forge.evidence.records import load_records

    assert ci_run(tmp_path, "cold", "cold").returncode == 0
    records = load_records(tmp_path / "results")
    [record] = records.values()
    assert derive(record, records) == {k: v for k, v in record.figures.items()
                                       if k not in ("cores", "memory_gib", "exit_status")}
    row = f"| `{record.id}` | {record.date} | {commit_of(repo)} | cold | {record.figures['cores']} | 5 | 8 | 6 | 7 | 1 | 3 | 0 | pass |"
    assert row in page.render(records).splitlines()


def test_fresh_engine_data_is_refused_while_an_engine_answers_and_given_to_the_run_otherwise(
        tmp_path, repo, monkeypatch, capsys):
    import socket

    from benchmarks import ci_run
    results = tmp_path / "results"
    results.mkdir()
    argv = ["--cache", "warm", "--engine", "fresh", "--repo", str(repo), "--results", str(results)]
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(tmp_path / "engine.sock"))
    listening.listen()
    monkeypatch.setattr(ci_run, "ENGINE_SOCKETS", (tmp_path / "none.sock", tmp_path / "engine.sock"))
    with listening, pytest.raises(SystemExit) as refused:
        ci_run.main(argv)
    assert refused.value.code == 2
    assert f"--engine fresh: an engine answers on {tmp_path / 'engine.sock'}" in capsys.readouterr().err
    assert not list(results.iterdir())
    monkeypatch.setattr(ci_run, "ENGINE_SOCKETS", (tmp_path / "none.sock",))
    monkeypatch.setenv("EXPECT", "warm")
    monkeypatch.setenv("EXPECT_ENGINE", "fresh")
    monkeypatch.delenv("VLLM_FORGE_CACHE", raising=False)
    assert ci_run.main(argv) == 0
    [record] = load_records_in(results)
    assert (record.verdict, record.settings["engine_data"], record.figures["passed"]) == ("pass", "fresh", 3)
    assert record.command.endswith("--cache warm --engine fresh")


def load_records_in(results: Path):
    from forge.evidence.records import load_records

    return list(load_records(results).values())



SUITE_ID = re.compile(r"\bci-(?:warm|cold)-[0-9a-f]{7}\b")
MINUTES = re.compile(r"\b(\d+) min (\d+) s\b")


def test_the_development_guide_quotes_the_suite_time_from_its_records():
    """The suite times of docs/development.md ("How long a run takes"; the README sends a reader
    there) are figures of the suite records it cites beside them (a warm and a cold one), with
    their dates; the README itself quotes none."""
    from forge.evidence.records import load_records

    records = load_records()
    assert not SUITE_ID.search((ROOT / "README.md").read_text())
    paragraphs = [p for p in (ROOT / "docs" / "development.md").read_text().split("\n\n")
                  if SUITE_ID.search(p)]
    cited = {i for p in paragraphs for i in SUITE_ID.findall(p)}
    assert {i.split("-")[1] for i in cited} == {"warm", "cold"}, cited
    assert cited <= set(records), cited - set(records)
    for paragraph in paragraphs:
        ids = SUITE_ID.findall(paragraph)
        seconds = {round(v) for i in ids for k, v in records[i].figures.items() if k.endswith("_s")}
        quoted = [int(m) * 60 + int(s) for m, s in MINUTES.findall(paragraph)]
        assert quoted and all(q in seconds for q in quoted), (quoted, seconds)
        assert all(records[i].date in paragraph for i in ids), ids
