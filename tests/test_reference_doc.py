"""docs/reference.md: every section the repository cites exists, and the file-and-line facts it
states about vLLM releases hold on the real release trees (PyPI sdists, cached)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from forge.upstream import releases

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "reference.md"
CITATION = re.compile(r"docs/reference\.md §(\d+)")
# The maintainers' private notes, which users never see: joined at run time so that neither this
# test nor its compiled form is a citation of them (the compiler folds "a" + "b" into one constant).
PRIVATE_NOTES = ".".join(["REFERENCE", "md"])


def _sections() -> dict[int, str]:
    return {int(n): title for n, title in re.findall(r"^## (\d+)\. (.+)$", DOC.read_text(), re.M)}


def test_every_cited_section_exists_and_sections_run_1_to_11():
    sections = _sections()
    assert sorted(sections) == list(range(1, 12))
    cited = set()
    for path in REPO.rglob("*"):
        if path.is_file() and ".git" not in path.parts and path.suffix in (
                ".py", ".md", ".yaml", ".yml", ".sh", ".txt", ".json", ".toml"):
            cited |= {int(n) for n in CITATION.findall(path.read_text(errors="replace"))}
    assert cited and cited <= set(sections), sorted(cited - set(sections))


def test_the_doc_names_no_private_file():
    text = DOC.read_text()
    # The project's notes are this file: it names no private notes and no shared/ folder.
    assert PRIVATE_NOTES not in text and "shared/" not in text


def test_no_file_cites_the_private_notes():
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True,
                             check=True).stdout.decode().split("\0")
    citing = [name for name in tracked if name and (REPO / name).is_file()
              and PRIVATE_NOTES.encode() in (REPO / name).read_bytes()]
    assert citing == []


def _line(version: str, rel: str, number: int) -> str:
    return (releases.release_tree(version) / rel).read_text().splitlines()[number - 1]


def test_cited_release_lines_say_what_the_doc_says():
    # (release, file, line, text the line holds): the anchors of §1, §2, §7 and §8.
    anchors = [
        ("0.25.0", "vllm/v1/spec_decode/llm_base_proposer.py", 1412, "def _maybe_share_embeddings"),
        ("0.25.0", "vllm/v1/spec_decode/llm_base_proposer.py", 1471, "if share_embeddings:"),
        ("0.27.0", "vllm/v1/spec_decode/llm_base_proposer.py", 1483,
         'if share_embeddings and hasattr(self.model, "has_own_embed_tokens"):'),
        ("0.27.0", "vllm/v1/spec_decode/gemma4.py", 169, "def _maybe_share_embeddings"),
        ("0.25.0", "vllm/config/speculative.py", 550, '"gemma4_assistant", "gemma4_unified_assistant"'),
        ("0.25.0", "vllm/model_executor/layers/fused_moe/fused_moe.py", 1034,
         "def get_config_file_name("),
        ("0.25.0", "vllm/model_executor/layers/fused_moe/fused_moe.py", 1077,
         "we prioritize user defined config"),
        ("0.21.0", "vllm/transformers_utils/model_arch_config_convertor.py", 538,
         'head_dim = getattr(self.hf_text_config, "head_dim", 0)'),
        ("0.25.0", "vllm/transformers_utils/model_arch_config_convertor.py", 591,
         'head_dim = getattr(self.hf_text_config, "head_dim", 0)'),
        ("0.27.1", "vllm/transformers_utils/model_arch_config_convertor.py", 608,
         'head_dim = getattr(self.hf_text_config, "head_dim", 0)'),
        ("0.28.0", "vllm/transformers_utils/configs/gemma4.py", 10, "def gemma4_layer_config("),
        ("0.21.0", "vllm/v1/spec_decode/gemma4.py", 88,
         "cm.block_table_tensor = self._per_group_block_tables[gid]"),
        ("0.25.0", "vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py", 627,
         "    if ADVANCE_DRAFT_POSITIONS:"),
        ("0.25.0", "vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py", 639,
         "        tl.store(seq_lens_ptr + req_idx, seq_len)"),
        ("0.25.0", "vllm/v1/worker/gpu/spec_decode/gemma4/speculator.py", 31, "return False"),
        ("0.27.0", "vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py", 650,
         "    tl.store(seq_lens_ptr + req_idx, seq_len)"),
        ("0.24.0", "vllm/v1/structured_output/__init__.py", 283, "for token in token_iter:"),
        ("0.25.0", "vllm/v1/structured_output/__init__.py", 449, "def trim_reasoning_for_advance("),
        ("0.25.0", "vllm/v1/core/sched/scheduler.py", 1647, "trim_reasoning_for_advance("),
        ("0.25.0", "vllm/platforms/cuda.py", 556, "return cls.has_device_capability(89)"),
        ("0.25.0", "vllm/v1/attention/backends/triton_attn.py", 120,
         "self.num_heads_kv = model_config.get_num_kv_heads(vllm_config.parallel_config)"),
        ("0.21.0", "vllm/v1/attention/backends/triton_attn.py", 143,
         "self.num_heads_kv = model_config.get_num_kv_heads(vllm_config.parallel_config)"),
        ("0.33.0", "vllm/v1/attention/backends/triton_attn.py", 117,
         "self.num_heads_kv = model_config.get_num_kv_heads(vllm_config.parallel_config)"),
        ("0.25.0", "vllm/v1/attention/backends/triton_attn.py", 139,
         "self.seq_threshold_3D = MIN_LAUNCH_GRID_SIZE_2D // self.num_heads_kv"),
        ("0.25.0", "vllm/v1/attention/ops/triton_unified_attention.py", 928,
         "num_kv_heads = k.shape[2]"),
        ("0.25.0", "vllm/model_executor/models/gemma4.py", 584,
         'config, "num_global_key_value_heads", config.num_key_value_heads'),
        ("0.25.0", "vllm/transformers_utils/model_arch_config_convertor.py", 593,
         "return max(head_dim, global_head_dim) or super().get_head_size()"),
    ]
    doc = " ".join(DOC.read_text().split())   # the doc wraps lines anywhere
    for version, rel, number, text in anchors:
        line = _line(version, rel, number)
        assert text in line, (version, rel, number, line)
        assert re.search(rf"\blines? {number}\b", doc), (rel, number)   # the doc cites it
