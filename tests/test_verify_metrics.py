"""verify/metrics.py: spec-decode counters from Prometheus text and LLM.get_metrics() snapshots, and
the window deltas the gate uses; on the metrics captured from vLLM 0.25.0 on an H200."""
import json
from pathlib import Path

import pytest

from verify import checks
from verify.metrics import (
    MAX_POSITIONS,
    MetricsError,
    SpecCounters,
    counters_from_prometheus,
    counters_from_snapshot,
    parse_prometheus,
)
from verify.report import FAIL, PASS

SMOKE = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "h200-0.25.0-smoke-26b-a4b-v1-l6-patched"


def window_from_prometheus() -> SpecCounters:
    before = counters_from_prometheus((SMOKE / "prometheus" / "greedy.before.prom").read_text())
    after = counters_from_prometheus((SMOKE / "prometheus" / "greedy.after.prom").read_text())
    return after - before


def test_prometheus_text_and_in_process_snapshot_agree_on_the_same_window():
    result = json.loads((SMOKE / "engine.result.json").read_text())
    greedy = result["windows"]["greedy"]
    from_snapshot = (counters_from_snapshot(greedy["metrics_after"])
                     - counters_from_snapshot(greedy["metrics_before"]))
    assert window_from_prometheus() == from_snapshot


def test_dummy_weights_accept_nothing_and_drafts_are_k_tokens_each():
    window = window_from_prometheus()
    assert window.drafts > 500  # 8 prompts x 128 tokens, one draft per step
    assert window.draft_tokens == 3 * window.drafts
    assert window.accepted == 0 and window.accepted_per_position == (0, 0, 0)
    assert window.acceptance_rate == 0 and window.mean_acceptance_length == 1


def test_figures_follow_the_definitions():
    window = SpecCounters(drafts=100, draft_tokens=300, accepted=240, accepted_per_position=(95, 80, 65))
    assert window.acceptance_rate == pytest.approx(0.8)
    assert window.mean_acceptance_length == pytest.approx(3.4)
    assert window.per_position_rates == pytest.approx([0.95, 0.80, 0.65])
    assert SpecCounters().acceptance_rate is None and SpecCounters().per_position_rates is None


def test_delta_is_the_window_not_the_lifetime():
    lifetime_before = SpecCounters(1000, 3000, 0, (0, 0, 0))
    lifetime_after = SpecCounters(1100, 3300, 240, (95, 80, 65))
    window = lifetime_after - lifetime_before
    assert window == SpecCounters(100, 300, 240, (95, 80, 65))
    assert window.acceptance_rate == pytest.approx(0.8)
    assert lifetime_after.acceptance_rate < 0.1  # what a lifetime reading would have said


def test_a_counter_going_down_is_an_error():
    with pytest.raises(MetricsError, match="restarted"):
        SpecCounters(10, 30, 0, ()) - SpecCounters(20, 60, 0, ())


def test_a_counter_reset_names_the_counter():
    with pytest.raises(MetricsError, match=r"counter vllm:spec_decode_num_accepted_tokens_per_pos"
                                           r"\{position=1\} went down from 7 to 2"):
        SpecCounters(20, 60, 9, (7, 2)) - SpecCounters(10, 30, 9, (2, 7))


def test_missing_spec_decode_counters_are_an_error_not_zero():
    text = (SMOKE / "prometheus" / "greedy.after.prom").read_text()
    without_drafter = "\n".join(line for line in text.splitlines()
                                 if "spec_decode_num_draft" not in line)
    with pytest.raises(MetricsError, match=r"no vllm:spec_decode_num_drafts_total, "
                                           r"vllm:spec_decode_num_draft_tokens_total in the metrics"):
        counters_from_prometheus(without_drafter)
    with pytest.raises(MetricsError, match="--speculative-config"):
        counters_from_prometheus("")


def test_labels_are_summed_and_positions_ordered():
    text = "\n".join([
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 4.0',
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 6.0',
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 30.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 8.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 2.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 5.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",position="0"} 1.0',
    ])
    counters = counters_from_prometheus(text)
    assert counters.drafts == 10 and counters.accepted_per_position == (6, 2)


COUNTERS = "\n".join([
    'vllm:spec_decode_num_drafts_total{engine="0"} 4.0',
    'vllm:spec_decode_num_draft_tokens_total{engine="0"} 12.0',
    'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 8.0',
]) + "\n"
PER_POSITION = 'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{}"}} 1.0\n'


@pytest.mark.parametrize("position", [str(MAX_POSITIONS), "100000000", "9" * 5000])
def test_a_draft_position_beyond_the_bound_is_refused_not_made_a_vector(position):
    with pytest.raises(MetricsError, match=f"beyond the {MAX_POSITIONS} draft positions"):
        counters_from_prometheus(COUNTERS + PER_POSITION.format(position))


def test_the_last_position_within_the_bound_is_read():
    counters = counters_from_prometheus(COUNTERS + PER_POSITION.format(MAX_POSITIONS - 1))
    assert len(counters.accepted_per_position) == MAX_POSITIONS
    assert counters.accepted_per_position[-1] == 1.0 and sum(counters.accepted_per_position) == 1.0


def test_a_snapshot_with_more_positions_than_the_bound_is_refused():
    snapshot = {"vllm:spec_decode_num_drafts": 4.0, "vllm:spec_decode_num_draft_tokens": 12.0,
                "vllm:spec_decode_num_accepted_tokens": 8.0,
                "vllm:spec_decode_num_accepted_tokens_per_pos": [0.0] * (MAX_POSITIONS + 1)}
    with pytest.raises(MetricsError, match=f"at most {MAX_POSITIONS} are read"):
        counters_from_snapshot(snapshot)


def test_malformed_exposition_line_is_reported():
    with pytest.raises(MetricsError, match="not a Prometheus sample line"):
        parse_prometheus("vllm:spec_decode_num_drafts_total{engine=\"0\"}\n")
    with pytest.raises(MetricsError, match="not a sample value"):
        parse_prometheus("vllm:spec_decode_num_drafts_total 1.0abc\n")


def test_acceptance_gate_against_the_h200_recipe_thresholds():
    from forge.serving.recipes import load_recipe

    recipe = load_recipe("gemma-4-26b-a4b-it", "h200")
    t = recipe.thresholds
    collapsed = checks.check_acceptance(window_from_prometheus(), t.min_acceptance_rate,
                                        t.min_mean_acceptance_length)
    assert collapsed.status == FAIL and "all rejected" in collapsed.detail
    # Just above and just below the recipe's thresholds (length = 1 + k x rate).
    k, drafts = recipe.speculative.num_speculative_tokens, 1000
    rate = t.min_acceptance_rate + 0.01
    good = SpecCounters(drafts, k * drafts, rate * k * drafts, ())
    assert checks.check_acceptance(good, t.min_acceptance_rate, t.min_mean_acceptance_length).status == PASS
    weak_rate = t.min_acceptance_rate - 0.05
    weak = SpecCounters(drafts, k * drafts, weak_rate * k * drafts, ())
    low = checks.check_acceptance(weak, t.min_acceptance_rate, t.min_mean_acceptance_length)
    assert low.status == FAIL and "below the recipe's thresholds" in low.detail
    none = checks.check_acceptance(SpecCounters(), t.min_acceptance_rate, t.min_mean_acceptance_length)
    assert none.status == FAIL and "no drafts" in none.detail


def test_lossless_check():
    assert checks.check_lossless([[1, 2, 3]], [[1, 2, 3]]).status == PASS
    differs = checks.check_lossless([[1, 2, 3]], [[1, 9, 3]])
    assert differs.status == FAIL and "from token 1" in differs.detail
    assert checks.check_lossless(None, [[1]]).status == FAIL
