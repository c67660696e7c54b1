"""verify/vllm_logs.py and the gate's log checks, on engine logs captured on an H200 with vLLM 0.25.0
(the raw files of the result records under benchmarks/results/)."""
import re
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge.models import load_family
from verify import checks, vllm_logs
from verify.report import FAIL, INFO, PASS
from verify.vllm_logs import parse_engine_log, root_cause

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
# the records whose raw engine logs these tests read
RECORD_OF = {"smoke-unpatched-L30": "h200-0.25.0-smoke-26b-a4b-v1-l30-unpatched",
             "smoke-patched-L6": "h200-0.25.0-smoke-26b-a4b-v1-l6-patched",
             "smoke-patched-L30-timeout": "h200-0.25.0-smoke-26b-a4b-v1-l30-patched-timeout",
             "bench-L6": "h200-0.25.0-bench-26b-a4b-l6"}
GEMMA4 = load_family("gemma4")
SHAPE_ERROR = "a and b must have same reduction dim, but got [s47, 3840] X [5632, 1024]"


def _raw(relative: str) -> Path:
    folder, _, name = relative.partition("/")
    return RESULTS / RECORD_OF[folder] / name


def facts(relative: str):
    return parse_engine_log(_raw(relative).read_text())


def test_unpatched_v1_engine_fails_with_the_47794_shape_error():
    unpatched = facts("smoke-unpatched-L30/engine.log")
    assert unpatched.root_cause.startswith(SHAPE_ERROR)
    check = checks.check_engine_started(False, unpatched, "RuntimeError: Engine core initialization failed")
    assert check.status == FAIL
    assert SHAPE_ERROR in check.detail and "#47794" in check.detail and "build.py apply" in check.detail


def test_unpatched_draft_keeps_its_own_embedding_and_the_gate_says_so():
    unpatched = facts("smoke-unpatched-L30/engine.log")
    # vLLM 0.25.0 logs "Sharing" first, then its width guard takes it back: the guard line wins.
    assert unpatched.embedding_sharing_lines == [
        "Detected MTP model. Sharing target model embedding weights with the draft model."]
    assert unpatched.separate_embedding_lines == [
        "Target embedding dim (2816) differs from draft embedding dim (1024). "
        "Keeping separate embedding weights."]
    check = checks.check_shared_embedding(unpatched, v2_runner=False, family=GEMMA4)
    assert check.status == FAIL and "2816" in check.detail


def test_smoke_output_of_the_unpatched_run_names_the_shape_error():
    stdout = _raw("smoke-unpatched-L30/stdout.txt").read_text()
    assert SHAPE_ERROR in stdout and "exit 1" in stdout


def test_patched_engine_facts():
    patched = facts("smoke-patched-L6/engine.log")
    assert patched.root_cause is None
    assert patched.architectures == ["Gemma4ForCausalLM", "Gemma4MTPModel"]
    assert patched.separate_embedding_lines == []
    assert patched.cudagraph_mode == "FULL_AND_PIECEWISE" and patched.enforce_eager is False
    assert patched.graph_capture_s == 15.0
    assert patched.moe_backends == ["TRITON Fp8"]
    assert patched.moe_config_missing[0].endswith("E=128,N=704,device_name=NVIDIA_H200,dtype=fp8_w8a8.json")
    assert [c.status for c in (checks.check_architectures(patched, GEMMA4),
                               checks.check_shared_embedding(patched, False, GEMMA4),
                               checks.check_cuda_graphs(patched, None))] == [PASS, PASS, PASS]


def test_v2_runner_shares_without_a_log_line_and_is_recognised():
    v2 = facts("bench-L6/engines/fp8-mtp3-v2.log")
    assert v2.v2_runner and not v2.embedding_sharing_lines and not v2.separate_embedding_lines
    assert checks.check_shared_embedding(v2, v2_runner=True, family=GEMMA4).status == PASS
    # The same log read as if it came from V1 proves nothing about sharing.
    assert checks.check_shared_embedding(v2, v2_runner=False, family=GEMMA4).status == FAIL


def test_bf16_engine_runs_the_unquantized_triton_moe_backend():
    bf16 = facts("bench-L6/engines/bf16-v1.log")
    assert bf16.moe_backends == ["TRITON Unquantized"]
    assert bf16.moe_config_missing[0].endswith("E=128,N=704,device_name=NVIDIA_H200.json")


def test_moe_config_check_expected_and_not():
    patched = facts("smoke-patched-L6/engine.log")
    name = "E=128,N=704,device_name=NVIDIA_H200,dtype=fp8_w8a8.json"
    missing = checks.check_moe_config(patched, name, expected=True)
    assert missing.status == FAIL and "Config file not found" in missing.detail
    assert checks.check_moe_config(patched, name, expected=False).status == INFO
    used = parse_engine_log("INFO 11-29 22:00:00 [fused_moe.py:1088] Using configuration from "
                            f"/opt/vllm-forge/moe-configs/{name} for MoE layer.\n")
    assert checks.check_moe_config(used, name, expected=True).status == PASS


def test_timed_out_start_is_a_failed_check_not_a_traceback():
    timed_out = facts("smoke-patched-L30-timeout/engine.log")
    assert timed_out.root_cause == "TimeoutError: engine run exceeded 230 s"
    assert checks.check_engine_started(False, timed_out, None).status == FAIL


def test_eager_engine_fails_the_cuda_graph_check():
    eager = parse_engine_log("INFO 11-29 [core.py:114] Initializing a V1 LLM engine (v0.25.0) with "
                             "config: enforce_eager=True, compilation_config={'cudagraph_mode': "
                             "<CUDAGraphMode.NONE: 0>}\n")
    assert eager.enforce_eager and eager.cudagraph_mode == "NONE"
    assert checks.check_cuda_graphs(eager, None).status == FAIL


def test_a_servers_unresolved_mode_is_not_read_as_a_mode():
    # vLLM's API server logs its arguments ("'cudagraph_mode': None") before the engine resolves
    # them; the two-node run of 2026-11-30 15:20 reported "mode N" until the parser took the last
    # resolved mode (benchmarks/results/h200-0.25.0-serve-26b-a4b-two-node-burst/rank0.log).
    server = parse_engine_log("(APIServer pid=1) INFO non-default args: {'compilation_config': "
                              "{'cudagraph_mode': None, 'cudagraph_num_of_warmups': 0}}\n"
                              "(EngineCore pid=2) INFO [core.py:114] Initializing a V1 LLM engine "
                              "(v0.25.0) with config: compilation_config={'cudagraph_mode': "
                              "<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>}\n")
    assert server.cudagraph_mode == "FULL_AND_PIECEWISE"
    assert parse_engine_log("{'cudagraph_mode': None}\n").cudagraph_mode is None
    assert checks.check_cuda_graphs(parse_engine_log("{'cudagraph_mode': None}\n"), None).status == FAIL


@pytest.mark.parametrize("text, expected", [
    ("Traceback (most recent call last):\n  File x\nValueError: bad max_model_len\n",
     "ValueError: bad max_model_len"),
    ("(EngineCore pid=9) ERROR 11-29 22:00:01 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. "
     "Tried to allocate 2.00 GiB\n", "CUDA out of memory. Tried to allocate 2.00 GiB"),
    ("INFO all good\n", None),
])
def test_root_cause_picks_the_deciding_line(text, expected):
    assert root_cause(text) == expected


# --- quantization, MoE backend, attention backend (recipe `expect`) ------------------------------

from forge.upstream.releases import release_tree  # noqa: E402

# Each line as the release's source writes it (file, the literal in that file, the line it makes).
LOG_SOURCES = [
    ("vllm/platforms/cuda.py", '"Using %s backend."',
     "Using %s backend." % "AttentionBackendEnum.TRITON_ATTN"),  # noqa: UP031 (vLLM's own %-format)
    ("vllm/platforms/cuda.py", '"Using %s attention backend out of potential backends: %s."',
     "Using %s attention backend out of potential backends: %s." % ("FLASH_ATTN", "['FLASH_ATTN']")),  # noqa: UP031
    ("vllm/v1/attention/backends/flash_attn.py", '"Using FlashAttention version %s"',
     "Using FlashAttention version %s" % 4),  # noqa: UP031 (vLLM's own %-format)
    ("vllm/model_executor/layers/fused_moe/oracle/nvfp4.py",
     "f\"Using '{backend.value}' NvFp4 MoE backend out \"",
     "Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend out of potential backends: ['FLASHINFER_CUTLASS']."),
    ("vllm/model_executor/layers/fused_moe/oracle/fp8.py",
     'f"Using {backend.value} Fp8 MoE backend out "',
     "Using MARLIN Fp8 MoE backend out of potential backends: ['TRITON', 'MARLIN']."),
    ("vllm/config/vllm.py", 'f"quantization={self.model_config.quantization}, "',
     "tensor_parallel_size=2, pipeline_parallel_size=1, quantization=modelopt_fp4, "
     "quantization_config=None, enforce_eager=False,"),
    ("vllm/config/vllm.py", 'f"tensor_parallel_size={self.parallel_config.tensor_parallel_size}, "',
     None),
]


@pytest.mark.parametrize("version", ["0.25.0", "0.26.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0",
                                     "0.31.0", "0.32.0", "0.33.0"])
def test_the_lines_verify_reads_are_in_every_recipe_release(version):
    tree = release_tree(version)
    for relative, literal, _ in LOG_SOURCES:
        assert literal in (tree / relative).read_text(), f"{version} {relative}: {literal}"


def test_lines_rendered_as_vllm_writes_them_are_read_back():
    log = "\n".join(f"(Worker pid=7) INFO 11-30 12:00:00 [x.py:1] {line}"
                    for _, _, line in LOG_SOURCES if line)
    read = parse_engine_log(log)
    assert read.attention_backends == ["TRITON_ATTN", "FLASH_ATTN"]
    assert read.flash_attn_version == 4
    assert read.moe_backends == ["FLASHINFER_CUTLASS NvFp4", "MARLIN Fp8"]
    assert read.quantization == "modelopt_fp4" and read.tensor_parallel_size == 2
    assert checks.check_quantization(read, "modelopt_fp4").status == PASS
    assert checks.check_quantization(read, "compressed-tensors").status == FAIL
    assert checks.check_moe_backend(read, "FLASHINFER_CUTLASS NvFp4").status == PASS
    assert checks.check_moe_backend(read, "TRITON Fp8").status == FAIL
    assert checks.check_moe_backend(read, None).status == INFO
    # two backends in one engine is not what a recipe pins
    assert checks.check_attention_backend(read, "TRITON_ATTN").status == FAIL


def test_captured_h200_engines_report_what_they_ran():
    fp8 = facts("smoke-patched-L6/engine.log")
    assert fp8.quantization == "fp8" and fp8.tensor_parallel_size == 1
    assert fp8.attention_backends == ["TRITON_ATTN"] and fp8.flash_attn_version is None
    assert checks.check_quantization(fp8, "fp8").status == PASS
    assert checks.check_attention_backend(fp8, "TRITON_ATTN").status == PASS
    assert checks.check_attention_backend(fp8, "FLASH_ATTN", 4).status == FAIL
    assert checks.check_moe_backend(fp8, "TRITON Fp8").status == PASS
    assert checks.check_moe_backend(fp8, "MARLIN Fp8").status == FAIL   # the A100 expectation
    bf16 = facts("bench-L6/engines/bf16-v1.log")
    assert bf16.quantization == "None"
    assert checks.check_quantization(bf16, None).status == PASS
    assert checks.check_quantization(bf16, "fp8").status == FAIL
    nothing = parse_engine_log("INFO nothing here\n")
    assert checks.check_quantization(nothing, "fp8").status == FAIL
    assert checks.check_attention_backend(nothing, "TRITON_ATTN").status == FAIL


WARMUP_LOG = Path(__file__).parent / "fixtures" / "logs" / "h200-0.27.1-chat-template-warmup.log"


def test_a_passing_run_names_no_root_cause():
    """Lines of the engine log of a passing H200 run (vLLM 0.27.1, 11 of 11 checks passed,
    2026-12-01): vLLM logs its chat-template warm-up failing under skip_tokenizer_init as a
    WARNING and serves on. Before, that report carried `root_cause: "ValueError: Tokenizer not
    available ..."`: a reader could not tell a cause from noise."""
    from verify.vllm_logs import UNRELATED_ERROR, report_log_facts

    facts = parse_engine_log(WARMUP_LOG.read_text())
    assert facts.graph_capture_s == 41.0 and facts.vllm_version == "0.27.1"
    tokenizer = "ValueError: Tokenizer not available when `skip_tokenizer_init=True`"
    assert facts.root_cause == tokenizer     # the line is there; it caused nothing
    passed = report_log_facts(facts.to_dict(), run_passed=True)
    assert passed["root_cause"] is None and passed[UNRELATED_ERROR] == tokenizer
    failed = report_log_facts(facts.to_dict(), run_passed=False)
    assert failed["root_cause"] == tokenizer and UNRELATED_ERROR not in failed


def test_an_engine_run_eager_fails_the_cuda_graph_check_whatever_else_the_log_says():
    """check_cuda_graphs' enforce_eager branch, which no test reached before: the real 0.27.1
    engine config line of the run above, once as it was (graphs captured: PASS) and once as
    `--enforce-eager` would have it (enforce_eager=True), where the configured cudagraph mode and
    a capture line must not make it pass."""
    text = WARMUP_LOG.read_text()
    assert text.count("enforce_eager=False") == 1
    as_run = parse_engine_log(text)
    assert as_run.enforce_eager is False and as_run.cudagraph_mode == "FULL_AND_PIECEWISE"
    assert checks.check_cuda_graphs(as_run, None).status == PASS
    eager = parse_engine_log(text.replace("enforce_eager=False", "enforce_eager=True"))
    assert eager.enforce_eager is True and eager.graph_capture_s == 41.0
    check = checks.check_cuda_graphs(eager, "FULL_AND_PIECEWISE")
    assert (check.status, check.detail) == (FAIL, "engine ran eager (enforce_eager=True)")


# The fast scans against the regexes they replace, on texts made of the pieces that matter.
LOG_PIECES = st.lists(st.sampled_from(
    ["\n", "\r", " ", "x", "_", "é", "kv_", "quantization=fp8,", "tensor_parallel_size=2",
     "Keeping separate embedding weights", "Keeping separate lm_head weights", "ValueError: bad",
     "INFO 11-29 22:00:00 [x.py:1] ", "Error: ", "RuntimeError:"]), max_size=30).map("".join)


@given(LOG_PIECES)
@settings(max_examples=300)
def test_lines_containing_is_the_whole_line_regex(text):
    for literal in (vllm_logs.SEPARATE_EMBEDDINGS, vllm_logs.SEPARATE_LM_HEAD):
        whole_lines = re.compile(rf"^[^\n]*{re.escape(literal)}[^\n]*", re.M)
        assert vllm_logs.lines_containing(text, literal) == whole_lines.findall(text)


@given(LOG_PIECES)
@settings(max_examples=300)
def test_search_word_is_a_leading_word_boundary(text):
    for pattern in (vllm_logs.ENGINE_QUANTIZATION, vllm_logs.TENSOR_PARALLEL):
        bounded = re.compile(r"\b" + pattern.pattern).search(text)
        found = vllm_logs.search_word(pattern, text)
        assert (found and (found.start(), found.group(1))) == (bounded and (bounded.start(), bounded.group(1)))


@given(LOG_PIECES)
@settings(max_examples=300)
def test_root_cause_reads_every_error_line(text):
    errors = [m for line in text.splitlines()
              if (m := vllm_logs.ERROR_LINE.match(vllm_logs._strip_prefix(line).strip()))]
    if not any(p.search(text) for p in vllm_logs.KNOWN_CAUSES):
        assert root_cause(text) == (f"{errors[-1].group(1)}: {errors[-1].group(2).strip()}"
                                    if errors else None)


SHARING_PIECES = st.lists(st.sampled_from(
    ["\n", "\r", " ", "]", "] ", "x", "S", "s", "haring target model", "Sharing target model",
     "sharing target model", "INFO 11-29 22:00:00 [x.py:1] "]), max_size=30).map("".join)


@given(SHARING_PIECES)
@settings(max_examples=500)
def test_sharing_lines_are_what_the_quadratic_regex_found(text):
    # The regex sharing_lines replaced, tried at every "] " (quadratic in a line's length).
    regex = re.compile(r"\] ([^\n]*[Ss]haring target model[^\n]*)")
    assert vllm_logs.sharing_lines(text) == [line.strip() for line in regex.findall(text)]


LONG_LINES = {"brackets": "] " * 102400, "brackets-then-sharing": "] " * 102400 + "Sharing target model",
              "sharing-repeated": "Sharing target model " * 10000, "mode": "cudagraph_mode=" * 13653,
              "using": "Using " * 34133, "dotted-error": "a." * 102400 + "Error: x",
              "parens-error": "(" * 204800 + " Error: x", "open-escape": "\x1b[" + "0;" * 102400}


@pytest.mark.parametrize("name", LONG_LINES)
def test_a_200_kib_log_line_parses_in_linear_time(name):
    # "brackets" took minutes with the regex; each of these takes a few ms, 1 s is a wide margin.
    line = "INFO 11-29 22:00:00 [x.py:1] " + LONG_LINES[name]
    started = time.monotonic()
    facts = parse_engine_log(line + "\n")
    assert time.monotonic() - started < 1.0
    sharing = "Sharing target model" in line
    assert facts.embedding_sharing_lines == ([line[line.find("] ") + 2:].strip()] if sharing else [])
