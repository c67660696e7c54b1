"""Property-based tests of the cache entries and index answers (issue 48): whatever JSON is in an
entry or an answer, its reader returns a value of the shape the code uses, or no entry (to be made
again), or refuses in one line; never anything else.

Entries are near misses of real ones: a real serve-args reading or release index with one value
replaced by arbitrary JSON, a key dropped or a key added."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY",
                      os.path.join(tempfile.gettempdir(), "vllm-forge-hypothesis"))

import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402 (after the storage folder is set)
from hypothesis import strategies as st  # noqa: E402

from forge.errors import ForgeError  # noqa: E402
from forge.schema import sha256_hex  # noqa: E402
from forge.serving import vllm_args  # noqa: E402
from forge.upstream import pypi, releases  # noqa: E402

SETTINGS = settings(max_examples=200, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


def mutated(entry: dict) -> st.SearchStrategy:
    """`entry` with one key's value replaced, one key dropped or one key added, at the top or one
    level down."""
    def change(choice):
        kind, key, inner, value = choice
        copy = json.loads(json.dumps(entry))
        target = copy
        if inner and isinstance(copy.get(key), dict) and copy[key]:
            target = copy[key]
            key = sorted(target)[hash(key) % len(target)]
        if kind == "replace":
            target[key] = value
        elif kind == "drop":
            target.pop(key, None)
        else:
            target[f"{key}-added"] = value
        return copy
    return st.tuples(st.sampled_from(["replace", "drop", "add"]), st.sampled_from(sorted(entry)),
                     st.booleans(), json_values).map(change)


@pytest.fixture(scope="module")
def cache_folder():
    with tempfile.TemporaryDirectory(prefix="forge-entry-properties-") as folder:
        yield Path(folder)


@pytest.fixture(scope="module")
def serve_args_entry():
    return json.loads(vllm_args._to_cache(vllm_args.release_args("0.27.1")))


def in_cache(cache: Path, relative: str, data) -> None:
    path = cache / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_serve_args_entries_load_whole_or_not_at_all(serve_args_entry, cache_folder, monkeypatch):
    monkeypatch.setenv("VLLM_FORGE_CACHE", str(cache_folder))

    @SETTINGS
    @given(mutated(serve_args_entry))
    def check(data):
        in_cache(cache_folder, "serve-args/0.27.1.json", data)
        loaded = vllm_args._from_cache("0.27.1")
        if loaded is None:
            return
        assert data == serve_args_entry or set(data) == set(serve_args_entry)
        assert all(isinstance(flag, str) for flag in loaded.serve_flags)
        for flag, rule in loaded.value_rules.items():
            assert isinstance(rule.converter, str) and isinstance(rule.accepts_none, bool)
            loaded.value_problem(flag, ["1"])         # never raises
            loaded.unchecked_note(flag)

    check()
    in_cache(cache_folder, "serve-args/0.27.1.json", serve_args_entry)
    assert vllm_args._from_cache("0.27.1") is not None


def test_cached_release_indexes_load_whole_or_not_at_all(cache_folder, monkeypatch):
    real = {"fetched_at": 1.0, "index_url": releases.DEFAULT_INDEX_URL,
            "releases": {"0.27.1": {"url": "https://example.invalid/vllm-0.27.1.tar.gz",
                                    "sha256": "a" * 64, "size": 100}}}
    monkeypatch.setenv("VLLM_FORGE_CACHE", str(cache_folder))

    @SETTINGS
    @given(mutated(real) | json_values | json_values.map(lambda v: {**real, "releases": {str(v)[:9]: real["releases"]["0.27.1"]}}))
    def check(data):
        in_cache(cache_folder, "index.json", data)
        cached = releases._read_cached_index()
        if cached is None:
            return
        assert set(data) == set(real)
        for entry in cached.releases.values():
            assert isinstance(entry.url, str) and len(entry.sha256) == 64
            assert entry.size is None or type(entry.size) is int
        if cached.index_url != releases.index_url():      # another index's answer: not used
            with pytest.raises(ForgeError, match="^offline and no cached vLLM release index"):
                releases.list_releases(offline=True)
            return
        assert len(releases.list_releases(offline=True)) == len(cached.releases)
        try:
            releases.sdist_info("0.27.1", offline=True)
        except ForgeError as exc:
            assert "\n" not in str(exc)

    check()


@SETTINGS
@given(json_values | st.builds(lambda files: {"files": files}, st.lists(json_values, max_size=4)))
def test_index_and_project_pages_parse_or_refuse_in_one_line(page):
    url = "http://127.0.0.1:9/simple/x/"
    for parse in (lambda: releases.parse_json_index(page, url), lambda: pypi._parse_project_page(page, url)):
        try:
            found = parse()
        except ForgeError as exc:
            assert "\n" not in str(exc) and url in str(exc)
            continue
        assert isinstance(found, (dict, list))


def test_kept_patch_statuses_and_manifests_load_whole_or_not_at_all(cache_folder, monkeypatch):
    from forge.patching.status import PatchStatus, _kept_statuses

    status = {"id": "a-patch", "kind": "source", "status": "applies", "detail": "forward applies"}
    manifest = {"version": "0.27.1", "sdist_sha256": "b" * 64, "files": {"vllm/__init__.py": "c" * 64}}
    sdist = releases.Sdist(releases.Version("0.27.1"), "https://example.invalid/x", "b" * 64)
    assert releases.manifest_files(manifest, sdist) == manifest["files"]
    monkeypatch.setenv("VLLM_FORGE_CACHE", str(cache_folder))

    @SETTINGS
    @given(mutated(status).map(lambda entry: [entry]) | json_values, mutated(manifest))
    def check(statuses, entry):
        in_cache(cache_folder, "patch-status/key/0.27.1.json", statuses)
        kept = _kept_statuses(cache_folder / "patch-status" / "key" / "0.27.1.json")
        assert kept is None or all(isinstance(s, PatchStatus) and isinstance(s.detail, str)
                                   for s in kept)
        found = releases.manifest_files(entry, sdist)
        if found is not None:
            assert entry == manifest or set(entry) == set(manifest)
            assert all(isinstance(path, str) and len(sha) == 64 for path, sha in found.items())

    check()


def test_cached_pypi_pages_and_environment_markers_load_whole_or_not_at_all(cache_folder, monkeypatch):
    from forge.upstream import pyenvs

    monkeypatch.setenv("VLLM_FORGE_CACHE", str(cache_folder))
    pypi._write_cache("a-project", ["1.0", "2.0"])
    page = json.loads(pypi._cache_file("a-project").read_text())
    marker = json.loads(pyenvs.marker_text("a-project", "2.0", ["a-project==2.0", "b==1"]))
    env = cache_folder / "envs" / "an-env"

    @SETTINGS
    @given(mutated(page) | json_values, mutated(marker) | json_values)
    def check(cached_page, cached_marker):
        in_cache(cache_folder, "pypi/a-project.json", cached_page)
        in_cache(cache_folder, f"envs/an-env/{pyenvs.MARKER}", cached_marker)
        try:
            found = pypi.published_versions("a-project", offline=True)
        except ForgeError as exc:
            assert "\n" not in str(exc) and "nothing is cached" in str(exc)
        else:
            assert set(cached_page) == set(page) and found == sorted(found)
        try:
            installed = pyenvs.installed_set(env / "bin" / "python")
        except ForgeError as exc:
            assert "\n" not in str(exc) and str(env / pyenvs.MARKER) in str(exc)
        else:
            assert set(cached_marker) == set(marker) and all(isinstance(line, str) for line in installed)

    check()


def test_requirement_entries_work_tree_states_and_journals_load_whole_or_are_refused(cache_folder, monkeypatch):
    from forge.patching import journal, work_tree
    from forge.patching.entries import RequirementLines
    from forge.typed import entry_or_none

    monkeypatch.chdir(cache_folder)           # a journal naming a relative path writes here
    state = json.loads(work_tree.state_text("x-fix", "0.25.0", "new-patch"))
    record = cache_folder / "finish.json"
    target = cache_folder / "written" / "a.diff"
    target.parent.mkdir(exist_ok=True)
    journal.write_all(record, {target: b"new\n"}, remove=False)
    real_journal = json.loads(record.read_text())

    @SETTINGS
    @given(st.lists(st.text(max_size=20), max_size=5) | json_values, mutated(state) | json_values,
           mutated(real_journal) | json_values)
    def check(lines, cached_state, cached_journal):
        kept = entry_or_none(RequirementLines, lines)
        assert kept is None or (lines == kept.root and all(isinstance(line, str) for line in lines))
        in_cache(cache_folder, "state.json", cached_state)
        try:
            loaded = work_tree._state(cache_folder / "state.json")
        except ForgeError as exc:
            assert "\n" not in str(exc) and "state.json: " in str(exc)
        else:
            assert loaded.command in ("new-patch", "refresh-patch") and set(cached_state) == set(state)
        record.write_text(json.dumps(cached_journal))
        try:
            written = journal.replay(record, remove=False)
        except ForgeError as exc:
            assert "\n" not in str(exc) and str(record) in str(exc)
        else:
            assert [str(path) for path in written] == list(cached_journal)

    check()


def test_cpu_environment_markers_and_pip_reports_load_whole_or_are_refused(cache_folder):
    from forge.engines import cpu_env
    from forge.engines.cpu_builds import cpu_build

    build = cpu_build("0.27.1")
    marker = json.loads(cpu_env.marker_text(build, {"vllm": "0.27.1"}, ["transformers<5.15"], ["a-fix"], ["a==1"],
                                             "resolution"))
    report = {"version": "1", "install": [{"metadata": {"name": "Tiny_Pkg", "version": "1.2.3"},
                                           "download_info": {"archive_info": {"hashes": {"sha256": "ab" * 32}}}}]}
    env = cache_folder / "cpu-env"

    @SETTINGS
    @given(mutated(marker) | json_values, mutated(report) | json_values
           | mutated(report["install"][0]).map(lambda item: {"install": [item]}))
    def check(cached_marker, resolved):
        in_cache(cache_folder, f"cpu-env/{cpu_env.MARKER}", cached_marker)
        found = cpu_env.read_marker(env, build)
        assert found is None or (set(cached_marker) == set(marker) and found.sha256 == build.sha256)
        in_cache(cache_folder, "resolved.json", resolved)
        try:
            wheels = cpu_env.resolved_wheels(cache_folder / "resolved.json", build)
        except ForgeError as exc:
            assert "\n" not in str(exc) and str(cache_folder / "resolved.json") in str(exc)
        else:
            assert all(isinstance(w.version, str) and not sha256_hex(w.sha256) for w in wheels)

    check()


def test_verify_reports_load_whole_or_are_refused_in_one_line(cache_folder):
    """A report as verify's own writer writes it (tests/test_published.py), with one value replaced,
    a key dropped or added, at the top, in a check or in its summary."""
    from forge.verify_report_file import read_report
    from tests.test_published import write_report

    real = json.loads(write_report(cache_folder, True, "real-report.json").read_text())
    check_of = real["checks"][0]
    path = cache_folder / "report.json"

    @SETTINGS
    @given(mutated(real) | json_values | mutated(check_of).map(lambda c: {**real, "checks": [c]}))
    def check(report):
        path.write_text(json.dumps(report))
        try:
            loaded = read_report(path)
        except ForgeError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(f"{path}: ")
        else:
            assert isinstance(loaded.passed, bool) and all(isinstance(c.check().name, str) for c in loaded.checks)

    check()


RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def test_tune_results_load_whole_or_are_refused_in_one_line(cache_folder):
    """The H200 sweep's results as tune-moe wrote them, with one value replaced, a key dropped or
    added, at the top, in the provenance or in a token count's config."""
    from forge.serving import moe_tune

    real = json.loads((RESULTS / "h200-0.25.0-tune-moe-26b-a4b" / "tune-moe-bf16.json").read_text())
    path = cache_folder / "tune.json"

    @SETTINGS
    @given(mutated(real) | json_values | mutated(real["configs"]).map(lambda c: {**real, "configs": c})
           | mutated(real["decisions"][0]).map(lambda d: {**real, "decisions": [d]}))
    def check(results):
        path.write_text(json.dumps(results))
        try:
            loaded = moe_tune.load_results(path)
        except ForgeError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(f"{path}: ")
        else:
            assert all(int(m) >= 1 and isinstance(c.num_warps, int) for m, c in loaded.configs.items())
            assert all(d.kept in ("tuned", "default") for d in loaded.decisions)
            assert isinstance(moe_tune.provenance_text(loaded), str)

    check()


def test_bench_runs_give_an_end_to_end_proof_or_are_refused_in_one_line(cache_folder):
    """A bench.json of the measured runs with one value replaced, dropped or added, at the top, in
    an engine or in its figures."""
    from forge.serving import moe_tune

    real = json.loads((RESULTS / "h200-0.25.0-bench-26b-a4b-l30-moe-config" / "bench.json").read_text())
    with_, without = "fp8-mtp4-v2-moe-tuned-kplus1", "fp8-mtp4-v2-moe-none"
    name = "E=128,N=704,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
    engine = real["engines"][with_]
    path = cache_folder / "bench.json"

    @SETTINGS
    @given(mutated(real) | json_values
           | mutated(engine).map(lambda e: {**real, "engines": {**real["engines"], with_: e}})
           | mutated(engine["figures"]["sustained@agree"]).map(lambda f: {**real, "engines": {
               **real["engines"], with_: {**engine, "figures": {"sustained@agree": f}}}}))
    def check(bench):
        path.write_text(json.dumps(bench))
        try:
            proof = moe_tune.end_to_end([path], name, with_, without)
        except ForgeError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(f"{path}: ")
        else:
            assert all(isinstance(w, float) and isinstance(wo, float) for _, w, wo in proof.runs)

    check()


def test_engine_results_load_whole_or_are_an_engine_that_did_not_start(cache_folder):
    """A result a GPU run's worker wrote, with one value replaced, dropped or added, at the top or
    in its engine: read as the worker wrote it, or as an engine that did not start and why."""
    from verify.engine_worker import read_result

    real = json.loads((RESULTS / "h200-0.25.0-bench-26b-a4b-l6" / "engines" / "bf16-v1.result.json").read_text())
    path = cache_folder / "e.result.json"

    @SETTINGS
    @given(mutated(real) | json_values | mutated(real["engine"]).map(lambda e: {**real, "engine": e}))
    def check(result):
        path.write_text(json.dumps(result))
        read = read_result(path)
        if read.get("error", "").startswith("not the worker's result: "):
            assert read["engine"] == {"started": False} and "\n" not in read["error"]
        else:
            assert read == result and isinstance(read["engine"]["started"], bool)

    check()


def test_engine_specs_load_whole_or_are_refused_in_one_line(cache_folder):
    """A spec as bench.py writes it (its windows' prompts as token ids), with one value replaced,
    dropped or added, at the top, in its engine keywords or in a window."""
    from verify.engine_worker import read_spec

    real = json.loads((RESULTS / "h200-0.25.0-bench-26b-a4b-l6" / "engines" / "bf16-v1.spec.json").read_text())
    real["windows"] = [{**window, "prompts": [[2, 106, 1645]]} for window in real["windows"]]
    window = real["windows"][1]
    path = cache_folder / "e.spec.json"

    @SETTINGS
    @given(mutated(real) | json_values | mutated(real["engine_kwargs"]).map(lambda k: {**real, "engine_kwargs": k})
           | mutated(window).map(lambda w: {**real, "windows": [w]}))
    def check(spec):
        path.write_text(json.dumps(spec))
        try:
            read = read_spec(path)
        except ForgeError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(f"{path}: ")
        else:
            assert all("/" not in w.name and w.repeat >= 1 for w in read.windows)
            assert all(isinstance(value, str) for value in read.env.values())

    check()
