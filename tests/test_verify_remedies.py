"""A failed engine start names its root cause and, for the causes the series fixes, the remedy."""
from verify.checks import check_engine_started
from verify.report import FAIL
from verify.vllm_logs import parse_engine_log

# The innermost lines of vLLM 0.25.0's start-up traceback with transformers 5.15.0 (the message is
# transformers 5.15.0's own, raised when vLLM's get_head_size reads config.head_dim).
TRANSFORMERS_515_LOG = """\
(EngineCore pid=7) ERROR 11-30 13:05:01 [core.py:1012] EngineCore failed to start.
  File "/tmp/site/vllm/transformers_utils/model_arch_config_convertor.py", line 591, in get_head_size
    return self.hf_text_config.head_dim
transformers.integrations.heterogeneity.configuration_utils.AmbiguousGlobalPerLayerAttributeError: \
'head_dim' is a per-layer attribute and may vary across layers. Access it via the individual layer \
configs instead (e.g. config.per_layer_config[i].head_dim).
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def test_transformers_515_failure_names_cause_and_remedy():
    facts = parse_engine_log(TRANSFORMERS_515_LOG)
    # The specific signature wins over the generic last error line.
    assert facts.root_cause.startswith("AmbiguousGlobalPerLayerAttributeError: 'head_dim'")
    check = check_engine_started(False, facts, None)
    assert check.status == FAIL
    assert "#51744" in check.detail and "0.28.0" in check.detail
    assert "build.py apply" in check.detail and "transformers<5.15" in check.detail


def test_unknown_failure_gets_no_remedy():
    facts = parse_engine_log("ValueError: something else broke\n")
    check = check_engine_started(False, facts, None)
    assert check.detail == "engine failed to start: ValueError: something else broke"
