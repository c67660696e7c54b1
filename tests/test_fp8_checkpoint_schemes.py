"""The FP8 checkpoints bench's dtype=fp8-dynamic and dtype=fp8-static write (forge/models.py
FP8_CHECKPOINT_SCHEMES) are schemes vLLM takes as FP8 W8A8, read from each checked release's own
source: `CompressedTensorsConfig._is_fp8_w8a8` run on the scheme as written, and the FP8 MoE
method's rule for static input scales (per tensor only)."""
import ast
import enum
from pathlib import Path
from types import SimpleNamespace

import pytest

from forge.models import FP8_CHECKPOINT_SCHEMES, load_family
from forge.upstream.releases import release_tree

RELEASES = ("0.25.0", "0.27.1", "0.33.0")
CT = Path("vllm/model_executor/layers/quantization/compressed_tensors")


class QuantizationType(str, enum.Enum):  # compressed-tensors' own values (quant_args.py)
    INT = "int"
    FLOAT = "float"


class QuantizationStrategy(str, enum.Enum):
    TENSOR = "tensor"
    CHANNEL = "channel"
    GROUP = "group"
    BLOCK = "block"
    TOKEN = "token"


def release_function(version: str, relative: Path, name: str):
    """A static method of the release's source, compiled on its own (it needs only the enums)."""
    tree = ast.parse((release_tree(version) / relative).read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)
    node.decorator_list = []
    scope = {"QuantizationType": QuantizationType, "QuantizationStrategy": QuantizationStrategy,
             "QuantizationArgs": object}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(relative), "exec"), scope)
    return scope[name]


def args(spec: dict) -> SimpleNamespace:
    return SimpleNamespace(**{**spec, "type": QuantizationType(spec["type"]),
                              "strategy": QuantizationStrategy(spec["strategy"])})


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("dtype", sorted(FP8_CHECKPOINT_SCHEMES))
def test_vllms_own_fp8_w8a8_test_accepts_the_scheme_as_written(version, dtype):
    is_fp8_w8a8 = release_function(version, CT / "compressed_tensors.py", "_is_fp8_w8a8")
    config = load_family("gemma4").fp8_checkpoint_config(dtype)
    (group,) = config["config_groups"].values()
    assert is_fp8_w8a8(args(group["weights"]), args(group["input_activations"])) is True
    # and the same function refuses what it should: static activations per token
    per_token_static = {**group["input_activations"], "strategy": "token", "dynamic": False}
    assert is_fp8_w8a8(args(group["weights"]), args(per_token_static)) is False


@pytest.mark.parametrize("version", RELEASES)
def test_the_fp8_moe_method_takes_static_input_scales_per_tensor_only(version):
    source = (release_tree(version) / CT / "compressed_tensors_moe" /
              "compressed_tensors_moe_w8a8_fp8.py").read_text()
    static = FP8_CHECKPOINT_SCHEMES["fp8-static"]
    assert (static["weights"]["strategy"], static["input_activations"]["strategy"]) == ("tensor", "tensor")
    # per_tensor: both TENSOR; the only refusal of static input scales is the per-channel case
    assert "self.weight_quant.strategy == QuantizationStrategy.TENSOR\n            and self.input_quant.strategy == QuantizationStrategy.TENSOR" in source
    assert "if self.static_input_scales and per_channel:" in source
    assert "kFp8StaticTensorSym if self.static_input_scales else" in source
