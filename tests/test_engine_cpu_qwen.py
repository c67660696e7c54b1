"""The engine tier for the Qwen3.5/3.6 MoE family (models/qwen3_5_moe.yaml: Gated DeltaNet and gated
full attention, MoE, the MTP layer inside the target's checkpoint) on vLLM's CPU build.

vLLM runs the family's Gated DeltaNet on a CPU (QwenGatedDeltaNetAttention.forward_cpu, with a
speculative-decoding path in layers/mamba/ops/cpu/gdn_attention.py, in every release 0.26.0-0.33.0).
What stands between a release and a CPU smoke of the family is elsewhere, and these tests state it:
- every Qwen3.5 class imports qwen3_vl.py, which imports transformers' Qwen2-VL image processor, and
  that imports torchvision; the CPU environments leave torchvision out (images/cpu-engines.yaml).
  Where the pinned torch is PyPI's own build (0.26.0) PyPI's torchvision of the same release loads
  beside it: `build.py smoke --vllm 0.26.0 --recipe qwen3.6-35b-a3b --drift torchvision==0.26.0`
  passed both controls and lossless (2-core machine, 2026-12-05, 299 s: too long for this tier);
  beside a +cpu torch (0.27.1, 0.32.0) PyPI's torchvision, built against CUDA torch, does not load.
- from 0.28.0 vLLM turns prefix caching on for hybrid models, which puts the Mamba state in "align"
  mode; with a drafter the runner then copies the state with a Triton-only kernel, and the CPU
  runner inherits that path from the GPU runner.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from forge.engines.cpu_builds import cpu_build
from forge.engines.cpu_env import cpu_env, python_of
from forge.engines.smoke import series_constraints
from forge.upstream.releases import release_tree

pytestmark = [pytest.mark.engine, pytest.mark.slow]
# One unit of the suite's workers with the other file that needs 0.27.1 or newer (tests/markers.py).
UNIT = "engine-0.27.1-on"

RECIPE = "qwen3.6-35b-a3b"


def test_0_32_0_qwen_model_code_needs_torchvision_which_its_cpu_environment_leaves_out(tmp_path):
    """In 0.32.0's CPU environment (torch 2.13.0+cpu, no torchvision) the family's model module
    does not import: qwen3_5.py imports qwen3_vl.py (line 88), which imports transformers'
    image_processing_qwen2_vl (line 38), which imports torchvision at module level."""
    build = cpu_build("0.32.0")
    assert build.left_out("torchvision") and build.torch.endswith("+cpu")
    env = cpu_env(build, series_constraints("0.32.0"), say=lambda line: None)
    scratch = {"VLLM_CACHE_ROOT": str(tmp_path / "vllm"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
               "TMPDIR": str(tmp_path), "HOME": str(Path.home()), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    done = subprocess.run([str(python_of(env)), "-c", "import vllm.model_executor.models.qwen3_5"],
                          capture_output=True, text=True, timeout=600, env=scratch)
    assert done.returncode != 0, "qwen3_5 imports now: the CPU smoke may run the family on 0.32.0"
    assert "No module named 'torchvision'" in done.stderr, done.stderr[-3000:]
    chain = [m.group(1) for m in re.finditer(r'File "[^"]*/site-packages/([^"]+)"', done.stderr)]
    assert "vllm/model_executor/models/qwen3_5.py" in chain and "vllm/model_executor/models/qwen3_vl.py" in chain
    assert chain[-1] == "transformers/models/qwen2_vl/image_processing_qwen2_vl.py", chain


def _source(tree: Path, path: str) -> str:
    return (tree / "vllm" / path).read_text()


def test_0_32_0_prefix_caching_puts_a_drafted_hybrid_model_on_a_triton_only_kernel():
    """vllm 0.32.0: prefix caching is on by default for hybrid models (engine/arg_utils.py line
    2991; 0.26.0 and 0.27.1 left it off for them); MambaModelConfig then sets mamba_cache_mode
    "align" (model_executor/models/config.py line 687); the runner's align path, with a drafter on
    a hybrid model, pre-copies the Mamba state with precopy_mamba_align_fused_kernel, a
    @triton.jit kernel (v1/worker/mamba_utils.py lines 548 and 1226); CPUModelRunner subclasses
    GPUModelRunner and keeps its execute_model. Without Triton the kernel is a plain function and
    the engine's first step fails ("'function' object is not subscriptable"): a CPU engine of this
    family needs prefix caching off."""
    tree = release_tree("0.32.0")
    args = _source(tree, "engine/arg_utils.py")
    assert "default_prefix_caching = model_config.is_prefix_caching_supported\n" in args
    assert "not model_config.is_hybrid" not in args.split("default_prefix_caching = ", 1)[1].split("\n\n", 1)[0]
    old = _source(release_tree("0.27.1"), "engine/arg_utils.py")
    assert re.search(r"default_prefix_caching = \(\s*model_config.is_prefix_caching_supported and not "
                     r"model_config.is_hybrid", old)
    config = _source(tree, "model_executor/models/config.py")
    assert re.search(r'if cache_config.enable_prefix_caching:\s+if cache_config.mamba_cache_mode == "none":\s+'
                     r'cache_config.mamba_cache_mode = "align"', config)
    runner = _source(tree, "v1/worker/gpu_model_runner.py")
    assert re.search(r"with_postprocess_align=\(\s*self.speculative_config is not None and "
                     r"self.model_config.is_hybrid", runner)
    call = runner.index("mamba_utils.preprocess_mamba(")
    assert 'if self.cache_config.mamba_cache_mode == "align":' in runner[call - 800:call]
    assert "align_ctx=mamba_bufs.postprocess_align" in runner[call:call + 600]
    mamba = _source(tree, "v1/worker/mamba_utils.py")
    assert '@triton.jit(do_not_specialize=["num_reqs"])\ndef precopy_mamba_align_fused_kernel(' in mamba
    assert "fused.ctx.run_fused_precopy(" in mamba and "precopy_mamba_align_fused_kernel[grid](" in mamba
    cpu_runner = _source(tree, "v1/worker/cpu_model_runner.py")
    assert "class CPUModelRunner(GPUModelRunner):" in cpu_runner
    assert "def execute_model" not in cpu_runner and "preprocess_mamba" not in cpu_runner
