"""The smoke on a release with the V2 runner alone (vLLM 0.34.0): its engine sets no runner switch
and logs no "Using V2 Model Runner" line, so verify must read the runner from the install. The log
is the one 0.34.0 wrote on the H200 (benchmarks/results/h200-0.34.0-smoke-26b-a4b-k4-l10-v1-judged),
judged before and after; the installs are copies of the real 0.33.0 and 0.34.0 trees."""
import json
from pathlib import Path

from forge.serving.recipes import load_recipe
from forge.serving.serve import installed_runs_v2_only
from verify.checks import check_shared_embedding
from verify.mtp_smoke import engine_runs_v2
from verify.vllm_logs import parse_engine_log

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
FAILED = RESULTS / "h200-0.34.0-smoke-26b-a4b-k4-l10-v1-judged"
PASSED = RESULTS / "h200-0.34.0-smoke-26b-a4b-k4-l10"


def test_only_a_release_without_the_v1_runner_reads_as_v2_only(vllm_site):
    assert installed_runs_v2_only(str(vllm_site("0.34.0")))
    assert not installed_runs_v2_only(str(vllm_site("0.33.0")))


def test_the_0_34_0_engine_log_says_nothing_of_its_runner_nor_of_sharing():
    facts = parse_engine_log((FAILED / "engine.log").read_text())
    assert not facts.v2_runner and not facts.embedding_sharing_lines
    assert facts.cudagraph_mode == "FULL_AND_PIECEWISE"


def test_the_embedding_check_passes_that_log_on_0_34_0_and_fails_it_on_0_33_0(vllm_site):
    """The same log and environment (no switch: verify drops it on 0.34.0): on a V2-only install
    the speculator shares by construction; on 0.33.0, where V1 is still there, the absent line
    is a failure, as the H200 run reported before the fix."""
    family = load_recipe("gemma-4-26b-a4b-it", "h200").family_model[0]
    facts = parse_engine_log((FAILED / "engine.log").read_text())
    on_34 = check_shared_embedding(facts, engine_runs_v2({}, facts, str(vllm_site("0.34.0"))), family)
    on_33 = check_shared_embedding(facts, engine_runs_v2({}, facts, str(vllm_site("0.33.0"))), family)
    assert on_34.status == "PASS" and "V2 model runner" in on_34.detail
    assert on_33.status == "FAIL" and "drafter.shares.embedding" in on_33.detail
    assert engine_runs_v2({"VLLM_USE_V2_MODEL_RUNNER": "1"}, facts, str(vllm_site("0.33.0")))


def test_the_h200_reports_before_and_after_the_fix_differ_in_that_check_alone():
    before = {c["name"]: c["status"] for c in json.loads((FAILED / "mtp_smoke.json").read_text())["checks"]}
    after = {c["name"]: c["status"] for c in json.loads((PASSED / "mtp_smoke.json").read_text())["checks"]}
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {"draft shares target embedding"}
    assert before["draft shares target embedding"] == "FAIL" and after["draft shares target embedding"] == "PASS"
    assert json.loads((PASSED / "result.json").read_text())["verdict"] == "pass"


def test_an_endpoints_log_is_judged_v2_where_the_install_here_is_the_servers_release(vllm_site, monkeypatch):
    """--endpoint: the server is another process; verify, in the server's image, reads the
    installed vLLM for it only when the server's log names that release (the 0.34.0 log here)."""
    from verify.mtp_smoke import server_log_checks

    recipe = load_recipe("gemma-4-26b-a4b-it", "h200")

    def embedding_check(version: str):
        with monkeypatch.context() as m:
            m.syspath_prepend(str(vllm_site(version)))
            checks = server_log_checks(recipe, str(FAILED / "engine.log"))
        return next(c for c in checks if c.name == "draft shares target embedding")

    assert embedding_check("0.34.0").status == "PASS"
    # another release installed here says nothing about a 0.34.0 server: judged from its log alone
    assert embedding_check("0.33.0").status == "FAIL"
