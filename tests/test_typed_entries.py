"""Every typed model of a JSON cache entry or report (issue 48) holds exactly what the project's own
writer writes: the writer's output loads, its keys are the model's fields (a key written but not
modelled would make every entry damaged, one modelled but never written every entry too), and a
file the model refuses is refused in one line naming the file and the field."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from packaging.version import Version
from pydantic import BaseModel

from forge.data_formats import DataError
from forge.engines.cpu_lock import LockedWheel
from forge.errors import ForgeError
from forge.typed import STRICT, Name, loaded
from forge.upstream import pyenvs, pypi, releases


def test_a_refusal_names_the_file_and_the_field_in_one_line():
    class Check(BaseModel):
        model_config = STRICT
        name: Name
        gating: bool

    class Report(BaseModel):
        model_config = STRICT
        checks: list[Check]

    with pytest.raises(DataError) as refused:
        loaded(Report, {"checks": [{"name": "a", "gating": True}, {"name": ["x"], "gating": 1}]},
               "work/report.json")
    assert str(refused.value) == ("work/report.json: checks[1].name: must be a string (got a list) "
                                  "(and 1 more)")
    with pytest.raises(DataError, match=r"^r.json: \(top level\): must be a mapping \(got a list\)$"):
        loaded(Report, [1], "r.json")
    with pytest.raises(DataError, match=r"^r.json: figures\.a\[0\]: Input should be a finite number$"):
        loaded(Figures, {"figures": {"a": [1.0, float("inf")][::-1]}}, "r.json")


class Figures(BaseModel):
    model_config = STRICT
    figures: dict[Name, list[float]]


def test_the_pypi_entry_model_holds_what_the_cache_writer_writes(tmp_path, monkeypatch):
    from forge.upstream.entries import PypiEntry

    monkeypatch.setenv("VLLM_FORGE_CACHE", str(tmp_path))
    pypi._write_cache("Some_Package", ["1.0", "2.0.post1"])
    written = json.loads(pypi._cache_file("some-package").read_text())
    assert set(PypiEntry.model_fields) == set(written)
    assert pypi.published_versions("some-package", offline=True) == [Version("1.0"), Version("2.0.post1")]
    monkeypatch.setenv("VLLM_FORGE_PYPI", "http://127.0.0.1:9/other/simple/")
    assert pypi._read_cache("some-package") is None          # another index's answer


def test_the_release_index_model_holds_what_load_index_wrote():
    from forge.upstream.entries import ReleaseIndex, SdistEntry

    written = json.loads((releases.cache_dir() / "index.json").read_text())
    assert set(ReleaseIndex.model_fields) == set(written)
    assert {key for entry in written["releases"].values() for key in entry} == set(SdistEntry.model_fields)
    cached = releases._read_cached_index()
    assert cached is not None and releases._as_dicts(cached) == written["releases"]


def test_the_tree_manifest_model_holds_what_the_extraction_writes():
    from forge.upstream.entries import TreeManifest

    info = releases.Sdist(Version("0.27.1"), "https://example.invalid/x", "b" * 64)
    written = json.loads(releases._manifest_entry(info.version, info.sha256, {"vllm/a.py": "c" * 64}))
    assert set(TreeManifest.model_fields) == set(written)
    assert releases.manifest_files(written, info) == {"vllm/a.py": "c" * 64}
    assert releases.manifest_files({**written, "files": {"vllm/a.py": "C" * 64}}, info) is None


def test_the_environment_marker_model_holds_what_the_environment_build_writes(tmp_path):
    from forge.upstream.entries import EnvMarker

    written = json.loads(pyenvs.marker_text("transformers", "5.15.0", ["transformers==5.15.0"]))
    assert set(EnvMarker.model_fields) == set(written)
    (tmp_path / pyenvs.MARKER).write_text(json.dumps(written))
    assert pyenvs.installed_set(tmp_path / "bin" / "python") == ["transformers==5.15.0"]
    (tmp_path / pyenvs.MARKER).write_text(json.dumps({**written, "installed": "transformers==5.15.0"}))
    with pytest.raises(ForgeError, match="missing or damaged; remove"):
        pyenvs.installed_set(tmp_path / "bin" / "python")


def test_the_requirements_and_status_models_hold_what_the_cache_writers_write():
    from forge.patching import status
    from forge.patching.dependencies import release_requirements
    from forge.patching.entries import PatchStatuses, RequirementLines, StatusEntry
    from forge.patching.series import load_series

    lines = release_requirements("0.27.1", offline=True)
    written = json.loads((releases.cache_dir() / "requirements" / "0.27.1.json").read_text())
    assert RequirementLines.model_validate(written).root == lines == written
    statuses = status.release_status("0.27.1", offline=True)
    entry = status._status_cache_file(load_series(offline=True), "0.27.1")
    written = json.loads(entry.read_text())
    assert {frozenset(s) for s in written} == {frozenset(StatusEntry.model_fields)}
    assert PatchStatuses.model_validate(written).root
    assert {s.id for s in status._kept_statuses(entry) or []} <= {s.id for s in statuses}


def test_a_work_tree_state_and_journal_load_as_written_and_are_refused_by_field(tmp_path):
    from forge.patching import journal, work_tree
    from forge.patching.entries import Journal, WorkState

    written = json.loads(work_tree.state_text("x-fix", "0.25.0", "new-patch"))
    assert set(WorkState.model_fields) == set(written) and WorkState.model_validate(written).id == "x-fix"
    record = tmp_path / "finish.json"
    assert journal.write_all(record, {tmp_path / "a.diff": b"caf\xe9\n"}, remove=False) == [tmp_path / "a.diff"]
    assert list(Journal.model_validate(json.loads(record.read_text())).root) == [str(tmp_path / "a.diff")]
    for damaged, field in (([str(tmp_path / "a.diff")], "(top level)"),
                           ({str(tmp_path / "a.diff"): 7}, str(tmp_path / "a.diff"))):
        record.write_text(json.dumps(damaged))
        with pytest.raises(DataError) as refused:
            journal.replay(record)
        assert str(refused.value).startswith(f"{record}: {field}: ") and "\n" not in str(refused.value)
    assert (tmp_path / "a.diff").read_bytes() == b"caf\xe9\n"        # nothing written by a refusal


def tiny_wheel(folder) -> str:
    """A wheel of one empty module, for pip to resolve without an index."""
    import zipfile

    wheel = folder / "tiny_pkg-1.2.3-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("tiny_pkg/__init__.py", "")
        archive.writestr("tiny_pkg-1.2.3.dist-info/METADATA", "Metadata-Version: 2.1\nName: tiny-pkg\nVersion: 1.2.3\n")
        archive.writestr("tiny_pkg-1.2.3.dist-info/WHEEL",
                         "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr("tiny_pkg-1.2.3.dist-info/RECORD", "")
    return str(wheel)


def test_the_cpu_environment_marker_and_pips_report_load_as_written(tmp_path, monkeypatch):
    import sys

    from forge.engines import cpu_env
    from forge.engines.cpu_builds import cpu_build
    from forge.engines.env_entries import CpuEnvMarker
    from verify.device import _environment_marker

    build = cpu_build("0.27.1")
    versions = {"vllm": "0.27.1", "torch": build.torch, "transformers": "4.57.1"}
    written = json.loads(cpu_env.marker_text(build, versions, ["transformers<5.15"], [], ["a==1"], "lock"))
    assert set(CpuEnvMarker.model_fields) == set(written)
    (tmp_path / cpu_env.MARKER).write_text(json.dumps(written))
    assert cpu_env.read_marker(tmp_path, build) is not None
    assert cpu_env.read_marker(tmp_path, cpu_build("0.26.0")) is None               # another build's
    monkeypatch.setattr(sys, "prefix", str(tmp_path))      # verify/device.py, run in the environment
    assert _environment_marker() == {key: written[key] for key in ("package", "version", "sha256", "fixes",
                                                                     "constraints", "pinned_by")}
    (tmp_path / cpu_env.MARKER).write_text(json.dumps({**written, "installed": [1]}))
    assert cpu_env.read_marker(tmp_path, build) is None                              # damaged: made again
    assert _environment_marker() is None

    report = tmp_path / "resolved.json"
    tiny = tiny_wheel(tmp_path)
    cpu_env.run_pip(sys.executable, ["install", "--dry-run", "--ignore-installed", "--no-index", "--no-deps",
                                     "--report", str(report), tiny], "pip", with_python=False)
    tiny_sha256 = hashlib.sha256(Path(tiny).read_bytes()).hexdigest()
    assert cpu_env.resolved_wheels(report, build) == [LockedWheel("tiny-pkg", "1.2.3", tiny_sha256)]
    resolved = json.loads(report.read_text())
    del resolved["install"][0]["download_info"]["archive_info"]
    report.write_text(json.dumps(resolved))
    with pytest.raises(ForgeError) as unpinnable:
        cpu_env.resolved_wheels(report, build)                  # nothing to check the wheel against
    assert str(unpinnable.value) == (f"{report}: pip names no sha256 for tiny-pkg 1.2.3 (its index gave none): "
                                     f"it cannot be pinned")
    resolved["install"][0]["metadata"]["version"] = ["1.2.3"]
    report.write_text(json.dumps(resolved))
    with pytest.raises(DataError) as refused:
        cpu_env.resolved_wheels(report, build)
    assert str(refused.value).startswith(f"{report}: install[0].metadata.version: must be a string (got a list)")


def test_the_tune_moe_models_hold_what_tune_moe_and_bench_write(tmp_path):
    from pathlib import Path

    from forge.serving import moe_tune
    from forge.serving.moe_tune_files import BenchEngine, BenchRun, Decision, KernelConfig, Provenance, TuneResults

    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    tuned = sorted(results.glob("*/tune-moe-*.json"))
    assert tuned
    for path in tuned:                                 # every GPU run's results, as tune() wrote them
        written = json.loads(path.read_text())
        assert set(TuneResults.model_fields) == set(written) and set(Provenance.model_fields) == set(
            written["provenance"])
        assert moe_tune.load_results(path).file_name == written["file_name"]
    assert set(KernelConfig.model_fields) == set(moe_tune.CONFIG_KEYS)
    config = dict(zip(moe_tune.CONFIG_KEYS, (16, 64, 128, 1, 4, 3)))
    _, decisions = moe_tune.choose({8: {"config": config, "us": 9.0}}, {8: {"config": config, "us": 10.0}})
    assert set(Decision.model_fields) == set(decisions[0])
    shipped = tmp_path / "E=128,N=704,device_name=NVIDIA_H200.json"
    shipped.write_text(moe_tune.render_config_json({8: config, 64: config}, "3.6.0"))
    assert moe_tune.shipped_configs(shipped) == {"8": config, "64": config}
    shipped.write_text(json.dumps({"8": config, "08": config}))
    with pytest.raises(DataError, match=r"08.* is no token count"):
        moe_tune.shipped_configs(shipped)
    for bench in sorted(results.glob("*/bench.json")):       # the fields read are ones bench.py writes
        written = json.loads(bench.read_text())
        engines = BenchRun.model_validate(written).engines
        assert set(BenchRun.model_fields) <= set(written)
        assert all(set(BenchEngine.model_fields) <= set(written["engines"][name]) for name in engines)


def test_the_engine_spec_and_result_models_hold_what_verify_writes(tmp_path):
    """The specs bench.py builds load, every window kind included; every spec and result the GPU
    runs wrote has the models' keys (their prompts were left out when committed); a spec the model
    refuses stops the worker in one line, before vLLM is imported."""
    import subprocess
    import sys
    from pathlib import Path

    from forge.files import write_text_atomically
    from forge.json_text import dump_json
    from forge.serving.recipes import load_recipe
    from verify import bench, engine_worker
    from verify.engine_files import EngineResult, EngineSpec, Window
    from verify.prompts import load_prompts

    args = bench.parse_args(["--recipe", "gemma-4-26b-a4b-it", "--dummy", "--layers", "2", "--windows",
                             "burst,sustained,conc8,followup,long8k-conc24", "--max-model-len", "9000",
                             "--out", str(tmp_path)])
    spec = bench.engine_spec(load_recipe("gemma-4-26b-a4b-it", "h200"), args, bench.parse_engine("name=e"), tmp_path)
    spec.update(windows=bench.windows(args, load_prompts()), lock_file=str(tmp_path / "m.lock"),
                barrier={"dir": str(tmp_path / "b"), "name": "e", "count": 2, "timeout_s": 60})
    path = tmp_path / "e.spec.json"
    write_text_atomically(path, dump_json(spec, "spec", indent=1))      # as supervisor.start_worker
    assert [w.name for w in engine_worker.read_spec(path).windows] == [w["name"] for w in spec["windows"]]
    committed = sorted((Path(__file__).resolve().parents[1] / "benchmarks" / "results").glob("*/engines/*.spec.json"))
    assert committed
    for written in committed:
        data = json.loads(written.read_text())
        assert set(data) <= set(EngineSpec.model_fields)
        assert all(set(window) <= set(Window.model_fields) for window in data["windows"])
        result = written.with_name(written.name.replace(".spec.", ".result."))
        assert engine_worker.read_result(result) == json.loads(result.read_text())
    first = engine_worker.first_result("e")
    assert set(first) <= set(EngineResult.model_fields) and EngineResult.model_validate(first).engine.started is False
    for change, field in (({"windows": [{**spec["windows"][0], "name": "../x"}]}, "windows[0].name"),
                          ({"engine_kwargs": {"gpu_memory_utilization": "1e999"}},
                           "engine_kwargs.gpu_memory_utilization"),
                          ({"env": {"PATH": ["/bin"]}}, "env.PATH")):
        text = json.dumps({**spec, **change, "result_file": str(tmp_path / "r.json")})
        path.write_text(text.replace('"1e999"', "1e999"))           # json reads it as infinity
        run = subprocess.run([sys.executable, str(Path(engine_worker.__file__)), str(path)],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 2 and run.stderr.startswith(f"error: {path}: {field}: ")
        assert run.stderr.count("\n") == 1 and not (tmp_path / "r.json").exists()
