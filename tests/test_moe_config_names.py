"""forge.patching.moe_config_names: one grammar for vLLM's fused-MoE config file names, checked
against the names vLLM itself ships in a real release and against ours."""
from forge import REPO_ROOT
from forge.patching.moe_config_names import MoeConfigName, config_file_name, device_file_name, parse_config_name
from forge.patching.status import MOE_CONFIGS_DIR
from forge.upstream.releases import release_tree


def test_every_config_name_vllm_ships_parses_and_renders_back():
    names = [p.name for p in (release_tree("0.27.1") / MOE_CONFIGS_DIR).glob("E=*.json")]
    assert len(names) > 100          # the real directory, not an empty one
    for name in names:
        parsed = parse_config_name(name)
        assert parsed is not None and str(parsed) == name, name
    parsed = [parse_config_name(n) for n in names]
    assert any(p.block_shape for p in parsed) and any(p.backend for p in parsed)  # optional fields occur


def test_our_shipped_configs_follow_the_grammar():
    names = [p.name for p in (REPO_ROOT / "patches" / "moe-configs").glob("*.json")]
    assert names
    for name in names:
        assert str(parse_config_name(name)) == name


def test_fields_and_refusals():
    assert parse_config_name("E=128,N=704,device_name=NVIDIA_H200,dtype=fp8_w8a8,"
                             "block_shape=[128,128].json") == MoeConfigName(
        128, 704, "NVIDIA_H200", "fp8_w8a8", "[128,128]")
    assert parse_config_name("E=128,N=704,device_name=NVIDIA_H200.json").dtype is None
    for bad in ("E=128,N=704.json", "config.json", "E=x,N=704,device_name=A.json",
                "E=128,N=704,device_name=NVIDIA_H200.yaml"):
        assert parse_config_name(bad) is None, bad


def test_the_tuner_names_files_as_vllm_looks_them_up():
    assert device_file_name("NVIDIA H200 NVL") == "NVIDIA_H200"
    assert device_file_name("NVIDIA H100 80GB HBM3") == "NVIDIA_H100_80GB_HBM3"
    assert config_file_name("NVIDIA H200", "fp8_w8a8", 128, 704) == "E=128,N=704,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
    assert config_file_name("NVIDIA GB10", "bf16", experts=64, n=352) == "E=64,N=352,device_name=NVIDIA_GB10.json"
