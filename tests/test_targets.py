"""images/targets.yaml and forge.targets: the real file loads; bad files fail with one line naming file+field."""
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from forge.errors import ForgeError
from forge.targets import BaseImage, get_target, load_targets
from tests.build_cli import run_build

REPO = Path(__file__).resolve().parents[1]
REAL = REPO / "images" / "targets.yaml"
# The targets this project ships images for, with the hardware facts checked below.
SHIPPED = ("gb10", "a100", "h100", "h200")


def test_real_targets_load_with_the_expected_hardware():
    targets = load_targets()
    assert set(SHIPPED) <= set(targets)      # a new target joins them (tests/test_guides.py)
    gb10 = targets["gb10"]
    assert (gb10.platform, gb10.cuda, gb10.cuda_arch) == ("linux/arm64", "13.0", "12.1")
    assert gb10.device_names == ["NVIDIA GB10"] and gb10.moe_device_name == "NVIDIA_GB10"
    assert targets["a100"].cuda_arch == "8.0" and "NVIDIA A100-SXM4-80GB" in targets["a100"].device_names
    assert {targets[t].cuda_arch for t in ("h100", "h200")} == {"9.0"}
    assert targets["h200"].moe_device_name == "NVIDIA_H200"
    for target in targets.values():
        assert target.env["VLLM_TUNED_CONFIG_FOLDER"] == "/opt/vllm-forge/moe-configs"
        assert target.env["VLLM_FORGE_TARGET"] == target.name
        if target.name in SHIPPED:
            assert {"gemma-4-26b-a4b-it", "gemma-4-31b-it", "gemma-4-e4b-it"} <= set(target.recipes)
        assert target.gpu_memory_gib > 10
        # a bandwidth for every card, from a public page (build.py roofline's floor)
        assert set(target.memory_bandwidth_gb_s) == set(target.device_names)
        assert "nvidia.com" in target.memory_bandwidth_source
    assert [targets[t].bandwidth_gb_s() for t in SHIPPED] == [273, 2039, 3350, 4800]


@pytest.mark.parametrize("target, version, expected", [
    ("gb10", "0.27.1", BaseImage("vllm/vllm-openai", "v0.27.1")),
    ("gb10", "0.21.0", BaseImage("vllm/vllm-openai", "v0.21.0")),
    ("a100", "0.25.0", BaseImage("vllm/vllm-openai", "v0.25.0")),
    ("h200", "0.33.0", BaseImage("vllm/vllm-openai", "v0.33.0")),
])
def test_base_per_release_range(target, version, expected):
    assert load_targets()[target].base_for(version) == expected


def test_base_mirror_prefixes_the_repository(monkeypatch):
    monkeypatch.setenv("VLLM_FORGE_BASE_MIRROR", "127.0.0.1:5000/")
    assert load_targets()["a100"].base_for("0.25.0").ref == "127.0.0.1:5000/vllm/vllm-openai:v0.25.0"


def test_release_without_base_names_file_and_target():
    with pytest.raises(ForgeError, match=r"targets\.yaml: targets\.gb10\.bases: no base image for vLLM 0\.10\.0"):
        load_targets()["gb10"].base_for("0.10.0")


def test_unknown_target_lists_known_ones():
    known = ", ".join(sorted(load_targets()))
    with pytest.raises(ForgeError) as failure:
        get_target("tpu")
    assert str(failure.value) == f"{REAL}: unknown target 'tpu' (known: {known})"
    assert set(SHIPPED) <= set(known.split(", "))


def _write(tmp_path, mutate):
    data = yaml.safe_load(REAL.read_text())
    mutate(data)
    path = tmp_path / "targets.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["targets"]["gb10"].update(platform="linux/riscv64"),
     r"targets\.gb10\.platform: must be one of linux/amd64, linux/arm64"),
    (lambda d: d["targets"]["a100"].pop("cuda_arch"), r"targets\.a100\.cuda_arch: required field is missing"),
    (lambda d: d["targets"]["h100"].update(gpus=8), r"targets\.h100\.gpus: unknown field"),
    (lambda d: d["targets"]["h200"]["bases"][0].update(releases="latest"),
     r"targets\.h200\.bases\[0\]\.releases: not a PEP 440 version specifier"),
    (lambda d: d["targets"]["h200"]["bases"][0].update(image="vllm/vllm-openai"),
     r"targets\.h200\.bases\[0\]\.image: must name a tag"),
    (lambda d: d["targets"]["gb10"]["bases"].append({"releases": ">=0.27", "image": "x/y:v{version}"}),
     r"targets\.gb10\.bases\[1\]\.releases: overlaps bases\[0\]"),
    (lambda d: d["targets"]["gb10"].update(moe_device_name="NVIDIA GB10"),
     r"targets\.gb10\.moe_device_name: must be a file-name form"),
    (lambda d: d["targets"]["a100"]["env"].update(BAD=1), r"targets\.a100\.env: BAD: value must be a string"),
    (lambda d: d["targets"].update(GB10=d["targets"]["gb10"]), r"targets\.GB10: target names are lowercase"),
    (lambda d: d["targets"]["h200"]["memory_bandwidth_gb_s"].update({"NVIDIA H100 PCIe": 2000}),
     r"targets\.h200\.memory_bandwidth_gb_s\.NVIDIA H100 PCIe: not one of the target's device_names"),
    (lambda d: d["targets"]["gb10"]["memory_bandwidth_gb_s"].update({"NVIDIA GB10": "fast"}),
     r"targets\.gb10\.memory_bandwidth_gb_s: NVIDIA GB10: must be a positive number of GB/s"),
    (lambda d: d["targets"]["a100"].pop("memory_bandwidth_source"),
     r"targets\.a100\.memory_bandwidth_source: required with memory_bandwidth_gb_s"),
])
def test_bad_targets_file_is_one_line_naming_file_and_field(tmp_path, mutate, message):
    path = _write(tmp_path, mutate)
    with pytest.raises(ForgeError, match=message) as caught:
        load_targets(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_targets_are_read_once_per_file_version(tmp_path):
    path = _write(tmp_path, lambda d: None)
    first = load_targets(path)
    assert load_targets(path)["gb10"] is first["gb10"]          # validated once, not per lookup
    assert get_target("gb10", path) is first["gb10"]
    load_targets(path).pop("gb10")                               # a caller's edit stays its own
    assert "gb10" in load_targets(path)


def test_a_targets_file_written_since_is_read_again(tmp_path):
    import os

    path = _write(tmp_path, lambda d: d["targets"]["gb10"].update(cuda="13.0"))
    assert load_targets(path)["gb10"].cuda == "13.0"
    stat = path.stat()
    path.write_text(path.read_text().replace("cuda: '13.0'", "cuda: '13.1'"))   # same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert path.stat().st_size == stat.st_size
    assert load_targets(path)["gb10"].cuda == "13.1"
    path.write_text(path.read_text().replace("cuda: '13.1'", "cuda: '12.9'") + "# longer\n")
    assert load_targets(path)["gb10"].cuda == "12.9"


def test_cli_unknown_target_is_one_line_exit_2_and_builds_nothing():
    result = run_build("--target", "tpu", "--vllm", "0.25.0", "--plan", timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "unknown target 'tpu'" in result.stderr


def test_gpu_names_find_their_target_through_device_names():
    from forge.targets import target_for_device

    targets = load_targets()
    for target in targets.values():
        for device in target.device_names:
            assert target_for_device(device).name == target.name
    assert target_for_device("NVIDIA H200 NVL").name == "h200"


def test_a_gpu_no_target_lists_is_one_line_naming_the_file_and_field():
    from forge.targets import target_for_device

    with pytest.raises(ForgeError) as caught:
        target_for_device("NVIDIA H20")   # a fragment match would have said h200
    message = str(caught.value)
    assert message.startswith(f"{REAL}: no target lists GPU 'NVIDIA H20' in device_names")
    assert "'NVIDIA H200 NVL'" in message and "\n" not in message


# --- the image template: named fields only, checked when the file loads -------------------------

def _with_image(template: str):
    return lambda d: d["targets"]["gb10"]["bases"][0].update(image=template)


@pytest.mark.parametrize("template, message", [
    ("vllm/vllm-openai:v{vers}", r"\{vers\}: unknown field \(fields: \{version\}, \{cuda\}\)"),
    ("vllm/vllm-openai:v{version.__init__.__globals__[os].environ[HOME]}",
     r"attribute or index access is not allowed"),
    ("vllm/vllm-openai:v{version[0]}", r"attribute or index access is not allowed"),
    ("vllm/vllm-openai:v{version:>999999999}", r"format specs and conversions are not allowed"),
    ("vllm/vllm-openai:v{version!r}", r"format specs and conversions are not allowed"),
    ("vllm/vllm-openai:v{}", r"\{\}: unknown field"),
    ("vllm/vllm-openai:v{version", r"an unmatched '\{' or '\}'"),
])
def test_a_bad_image_template_is_a_load_error_naming_file_and_field(tmp_path, template, message):
    path = _write(tmp_path, _with_image(template))
    with pytest.raises(ForgeError, match=message) as caught:
        load_targets(path)
    assert str(caught.value).startswith(f"{path}: targets.gb10.bases[0].image: ")
    assert "\n" not in str(caught.value)


def test_the_template_fills_version_and_cuda_and_nothing_else(tmp_path):
    path = _write(tmp_path, _with_image("mirror.example/vllm:v{version}-cu{cuda}"))
    assert get_target("gb10", path).base_for("0.27.1") == BaseImage("mirror.example/vllm", "v0.27.1-cu13.0")


def test_a_template_reaching_the_environment_fails_in_the_cli_and_leaks_nothing(tmp_path):
    path = _write(tmp_path, _with_image(
        "vllm/vllm-openai:v{version.__init__.__globals__[os].environ[FORGE_SECRET]}"))
    result = run_build("--target", "gb10", "--vllm", "0.27.1", "--plan", timeout=120,
                       env={"VLLM_FORGE_TARGETS": str(path), "FORGE_SECRET": "s3cr3t-value"})
    assert result.returncode == 2, result.stderr
    assert "s3cr3t-value" not in result.stdout + result.stderr and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"error: {path}: targets.gb10.bases[0].image: {{version.__init__.__globals__[os].environ"
        "[FORGE_SECRET]}: attribute or index access is not allowed (fields: {version}, {cuda})"]


def test_no_module_fills_a_template_from_data_with_str_format():
    """The one template of the data files is filled by fill_template; str.format and format_map
    on text read from a file are not used anywhere in forge/."""
    import re

    offenders = []
    for source in sorted((REPO / "forge").rglob("*.py")):
        for number, line in enumerate(source.read_text().splitlines(), 1):
            if re.search(r"\.format_map\(|\b(image|template|rule\.\w+)\.format\(", line):
                offenders.append(f"{source.relative_to(REPO)}:{number}: {line.strip()}")
    assert offenders == []


# --- recipe files of the wrong shape stop the plan ------------------------------------------------

def test_a_recipe_file_whose_top_level_is_a_list_is_an_error_not_left_out(tmp_path):
    from forge.targets import recipes_for_target

    recipes = tmp_path / "recipes"
    recipes.mkdir()
    for source in sorted((REPO / "recipes").glob("*.yaml")):
        (recipes / source.name).write_bytes(source.read_bytes())
    assert "gemma-4-e4b-it" in recipes_for_target("gb10", recipes)
    (recipes / "gemma-4-e4b-it.yaml").write_text("- targets: {gb10: {}}\n")
    with pytest.raises(ForgeError) as caught:
        recipes_for_target("gb10", recipes)
    assert str(caught.value) == (f"{recipes / 'gemma-4-e4b-it.yaml'}: (top level): must be a mapping "
                                 "with targets: (got list); a recipe file holds one model")
    (recipes / "gemma-4-e4b-it.yaml").write_text("model: x\ntargets: [gb10]\n")
    with pytest.raises(ForgeError, match=r"gemma-4-e4b-it.yaml: targets: must be a mapping of target "
                                         r"name -> recipe \(got list\)"):
        recipes_for_target("gb10", recipes)


@pytest.mark.parametrize("command", [["--target", "gb10", "--vllm", "0.25.0", "--plan"],
                                     ["bake", "--vllm", "0.25.0", "-o", "out/docker-bake.json"]])
def test_the_plan_and_the_bake_stop_at_a_recipe_file_that_is_a_list(tmp_path, command):
    import shutil

    for name in ("forge", "patches", "images", "recipes", "models", "verify"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "build.py", tmp_path / "build.py")
    (tmp_path / "out").mkdir()
    recipe = tmp_path / "recipes" / "gemma-4-e4b-it.yaml"
    recipe.write_text("- targets: {gb10: {}}\n")      # an image would ship without this model
    # the base is pinned: the lock is settled before any download, and the recipes are read next
    from tests.test_images_plan import write_lock

    write_lock(tmp_path / "images" / "lock.yaml", "0.25.0")
    result = subprocess.run([sys.executable, "build.py", *command], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [f"error: {recipe}: (top level): must be a mapping with "
                                          "targets: (got list); a recipe file holds one model"]
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("make, problem", [
    (lambda path: "/dev/zero", "is a character device, not a regular file"),
    (lambda path: (__import__("os").mkfifo(path), path)[1], "is a FIFO (named pipe), not a regular file"),
    (lambda path: (path.write_bytes(b"# x\n" * (300 << 10)), path)[1], "larger than the 1 MiB cap"),
])
def test_targets_that_are_no_file_or_too_big_are_one_line_at_once(tmp_path, make, problem):
    targets = make(tmp_path / "targets.yaml")
    result = run_build("--target", "gb10", "--vllm", "0.25.0", "--plan", timeout=60,
                       env={"VLLM_FORGE_TARGETS": str(targets)})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"error: {targets}: {problem}")
