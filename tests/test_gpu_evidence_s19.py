"""What docs/gpu-evidence.md §10 reads out of the third one-H200 session of 2026-12-01 (vLLM 0.25.0,
0.27.1 and 0.33.0 side by side, tests/gpu/session/s19.sh), rebuilt in CI from the committed raw
results (tests/fixtures/gpu/s19-h200-2026-12-01/) with verify's own code: the smokes' controls from
vLLM's counters, their log checks from the engine logs, FlashAttention 4 on 0.27.1's stock engine,
and the causes of what did not run. The tables of §10 are rendered here from the data and must
appear in the document as they are."""
from __future__ import annotations

import pytest

from forge.models import load_family
from tests.gpu_evidence import Session, assert_candidate_copy, assert_controls_hold, control_rows, doc_section
from verify import checks as gate
from verify.mtp_smoke import _token_ids
from verify.report import FAIL, PASS
from verify.vllm_logs import parse_engine_log

SESSION = Session("s19-h200-2026-12-01")
M1, M2 = "machine1", "machine2"
# folder: (recipe, release, runner, compile backend, k, table cells naming the release)
SMOKES = {
    "smoke25-26b-v2": ("gemma-4-26b-a4b-it", "0.25.0", "v2", "eager", 4, "0.25.0 + #47920's backport"),
    "smoke271-splitkv-v2": ("gemma-4-26b-a4b-it", "0.27.1", "v2", "eager", 4,
                            "0.27.1 + split-KV candidate"),
    "smoke271-qwen-v1": ("qwen3.6-35b-a3b", "0.27.1", "v1", "inductor", 2, "0.27.1"),
}
TORCH = {"0.25.0": "2.11.0", "0.27.1": "2.13.0"}
SECTION = doc_section(10)


def result(folder: str, name: str = "engine") -> dict:
    return SESSION.result(f"{M1}/{folder}", name)


def report(folder: str) -> dict:
    return SESSION.report(f"{M1}/{folder}")


def facts(path: str):
    return parse_engine_log(SESSION.log(path))


def smoke_rows(folder: str) -> list[str]:
    recipe, _, runner, compile_backend, k, release = SMOKES[folder]
    return control_rows(result(folder), recipe, f"| {folder} | {release} | {runner}, {compile_backend} | {k}")


# --- the smokes: controls from vLLM's counters, lossless from the token ids ------------------

@pytest.mark.parametrize("folder", list(SMOKES))
def test_each_smoke_passes_the_agreeing_model_and_fails_the_random_one(folder):
    recipe, release, runner, compile_backend, k, _ = SMOKES[folder]
    assert_controls_hold(result(folder), recipe, k)
    rep = report(folder)
    assert (rep["runner"], rep["compile_backend"], rep["recipe"]) == (runner, compile_backend, recipe)
    assert rep["versions"] == {"vllm": release, "torch": TORCH[release], "transformers": "5.12.1"}


@pytest.mark.parametrize("folder", list(SMOKES))
def test_each_smoke_is_lossless_on_both_models(folder):
    draft, plain = result(folder), result(folder, "engine-no-draft")
    for window in ("greedy_agree", "greedy_random"):
        check = gate.check_lossless(_token_ids(draft, window), _token_ids(plain, window))
        assert check.status == PASS and check.detail == "8 prompts, 1024 tokens identical"


@pytest.mark.parametrize("folder", list(SMOKES))
def test_the_smoke_tables_of_section_10_are_the_data(folder):
    for row in smoke_rows(folder):
        assert row in SECTION, row


@pytest.mark.parametrize("folder", ["smoke25-26b-v2", "smoke271-splitkv-v2"])
def test_the_gemma_smokes_passed_every_gating_check_on_cuda_graphs_and_triton(folder):
    rep = report(folder)
    assert rep["passed"] is True
    assert [c["name"] for c in rep["checks"] if c["status"] not in (PASS, "INFO")] == []
    engine = facts(f"{M1}/{folder}/engine.log")
    assert engine.v2_runner and engine.cudagraph_mode == "FULL_AND_PIECEWISE"
    assert set(engine.attention_backends) == {"TRITON_ATTN"}


def test_the_0250_install_holds_47920s_fix_where_the_smoke_ran():
    applied = SESSION.log(f"{M1}/logs/apply25.txt").splitlines()[0]
    assert applied.startswith("applied 2 patch(es) to vLLM 0.25.0")
    assert "gemma4-mtp-draft-seq-lens" in applied and "gemma4-mtp-share-embeddings" in applied
    lines = dict(line.split(":", 1) for line in SESSION.log(f"{M1}/logs/47920-lines25.txt").splitlines())
    load = next(n for n, text in lines.items() if "target_seq_len = tl.load" in text)
    branch = next(n for n, text in lines.items() if "if ADVANCE_DRAFT_POSITIONS:" in text and int(n) > int(load))
    store = next(n for n, text in lines.items()
                 if text.strip() == "tl.store(seq_lens_ptr + req_idx, seq_len)" and int(n) > int(branch))
    # the fix: the load before the branch, the store after it at the load's own indentation
    assert int(load) < int(branch) < int(store)
    assert lines[store].index("tl.store") == lines[load].index("target_seq_len")
    assert (load, branch, store) == ("627", "630", "638")


def test_the_split_kv_candidate_was_applied_to_the_copy_the_smoke_ran_on():
    assert_candidate_copy(SESSION, f"{M1}/logs/apply-splitkv.txt", "site-splitkv",
                          "triton-spec-decode-split-kv", (f"{M1}/smoke271-splitkv-v2/engine.log",))


# --- the Qwen smoke: one failing check, and why ---------------------------------------------

def test_the_qwen_smoke_fails_only_on_the_drafters_attention_backend():
    rep = report("smoke271-qwen-v1")
    assert rep["passed"] is False
    failed = [(c["name"], c["detail"]) for c in rep["checks"] if c["status"] == FAIL]
    assert failed == [("attention backend", "expected TRITON_ATTN only, log also: FLASH_ATTN")]


def test_the_qwen_target_took_the_pin_and_its_mtp_drafter_vllms_own_choice():
    log = SESSION.log(f"{M1}/smoke271-qwen-v1/engine.log")
    engine = parse_engine_log(log)
    assert engine.attention_backends == ["TRITON_ATTN", "FLASH_ATTN"]
    assert engine.flash_attn_version == 3 and not engine.v2_runner
    drafter = log.index("Loading drafter model...")
    assert log.index("Using AttentionBackendEnum.TRITON_ATTN backend.") < drafter
    assert drafter < log.index("Using FLASH_ATTN attention backend out of potential backends")


def test_the_qwen_smoke_saw_the_family_datas_sharing_lines():
    qwen = load_family("qwen3_5_moe")
    engine = facts(f"{M1}/smoke271-qwen-v1/engine.log")
    assert gate.check_shared_embedding(engine, False, qwen).status == PASS
    assert engine.cudagraph_mode == "FULL_AND_PIECEWISE" and engine.graph_capture_s == 31.0


# --- FlashAttention 4 on 0.27.1's stock engine ----------------------------------------------

def test_fa4_imports_once_libs_core_is_staged():
    for release in ("271", "33"):
        install = SESSION.log(f"{M1}/logs/install{release}.txt")
        assert "cutlass.cute from /tmp/extra" in install and "dsl_packages/cutlass/__init__.py" in install


def test_the_0271_stock_engine_ran_fa4_for_every_layer_on_v1_with_cuda_graphs():
    log = SESSION.log(f"{M2}/bench10/engines/stock.log")
    engine = parse_engine_log(log)
    assert engine.attention_backends == ["FLASH_ATTN"] and engine.flash_attn_version == 4
    assert "Using FA4 for all layers" in log
    assert not engine.v2_runner
    assert engine.cudagraph_mode == "FULL_AND_PIECEWISE" and engine.graph_capture_s == 40.0
    started = SESSION.result(f"{M2}/bench10/engines", "stock")
    assert started["engine"]["started"] is True and started["windows"] == {}
    assert started["versions"] == {"vllm": "0.27.1", "torch": "2.13.0", "transformers": "5.12.1"}


def test_no_engine_of_the_session_measured_a_window():
    for path in ("bench10/engines/stock", "bench10/engines/fp8-mtp4-v2"):
        folder, name = path.rsplit("/", 1)
        assert SESSION.result(f"{M2}/{folder}", name)["windows"] == {}
    for name in ("fp8-v1", "fp8-mtp1-v1", "fp8-mtp2-v1"):
        assert SESSION.result(f"{M1}/bench-qwen/engines", name)["windows"] == {}
    assert "no speed" in SECTION.lower()


# --- what did not run, and why ---------------------------------------------------------------

def test_the_first_0271_job_stopped_at_vllms_import_under_protobuf_6():
    stopped = SESSION.log(f"{M1}/attempt1/logs/profile-k4-splitkv.txt")
    assert "ImportError: cannot import name 'LLM' from 'vllm'" in stopped
    cause = SESSION.log(f"{M1}/attempt1/call-output.txt")
    assert "no attribute 'FrozenInstanceError'" in cause and "LLM ok, protobuf 7.36.2" in cause
    assert "restart 271: protobuf 6.33.5 removed" in SESSION.log(f"{M1}/timeline.txt")


def test_the_serve_case_stopped_at_a_negative_kv_cache_on_the_shared_gpu():
    log = SESSION.log(f"{M1}/serve/server.log")
    assert "Available KV cache memory: -43.62 GiB" in log
    assert "No available memory for the cache blocks" in log
    assert "-43.62 GiB" in SECTION and "--kv-cache-gib" in SECTION
