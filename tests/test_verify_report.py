"""verify/report.py: the verdict a report passes by, and reading it back from a JSON report (as
`build.py publish` does), on checks shaped like the ones mtp_smoke.py writes."""
import importlib.util
import json

import packaging
import pytest
import yaml

from forge.errors import ForgeError
from verify.report import (
    FAIL,
    INFO,
    NOT_CHECKED,
    NOT_INSTALLED,
    PASS,
    RAN_ON,
    REQUIRED_GATES,
    Check,
    installed_versions,
    not_checked,
    passed,
    release_in,
    render_table,
    unknown_versions,
    unmet_gates,
    verdict,
    versions_line,
    write_report,
)


def all_required_passed() -> list[Check]:
    return [passed("server answers", "serves m")] + [passed(name, "ok") for name in REQUIRED_GATES]


def test_every_required_gate_passed_is_a_pass():
    assert verdict(all_required_passed()) is True
    assert unmet_gates(all_required_passed()) == []


def test_a_gate_that_could_not_run_is_not_a_pass():
    checks = all_required_passed() + [not_checked("tuned MoE config", "needs --server-log")]
    assert verdict(checks) is False
    assert unmet_gates(checks) == ["tuned MoE config: NOT CHECKED"]


def test_a_required_gate_cannot_opt_out_of_gating():
    checks = all_required_passed()
    checks[3] = not_checked("CUDA graphs", "no log", gating=False)
    assert verdict(checks) is False and unmet_gates(checks) == ["CUDA graphs: NOT CHECKED"]
    checks[3] = Check("CUDA graphs", INFO, "said nothing")
    assert verdict(checks) is False


def test_a_missing_required_gate_is_not_a_pass():
    checks = [c for c in all_required_passed() if c.name != "acceptance (temperature 0)"]
    assert unmet_gates(checks) == ["acceptance (temperature 0): missing"]
    assert verdict([]) is False


def test_info_and_non_gating_unchecked_entries_do_not_block_a_pass():
    checks = all_required_passed() + [
        Check("tuned MoE config", INFO, "none expected by the recipe"),
        not_checked("acceptance (recipe sampling)", "no drafts in the window", gating=False)]
    assert verdict(checks) is True


def test_any_fail_fails_even_a_non_gating_check():
    checks = all_required_passed() + [Check("acceptance (recipe sampling)", FAIL, "HTTP 500", False)]
    assert verdict(checks) is False


def test_info_never_gates():
    assert Check("x", INFO, "", gating=True).gating is False


def test_unknown_status_is_refused():
    with pytest.raises(ValueError, match="status: 'passed' is not one of"):
        Check("x", "passed", "")


def test_report_round_trips_through_json(tmp_path):
    checks = all_required_passed() + [not_checked("tuned MoE config", "needs --server-log")]
    report = json.loads(write_report(tmp_path / "r.json", checks, installed_versions(),
                                     target="h200").read_text())
    assert report["passed"] is False
    assert checks_read(report) == checks


def test_installed_versions_say_an_absent_package_is_not_installed():
    # This CPU host has neither vLLM nor torch (they live inside the images): their metadata is
    # absent, so the report says so instead of naming a version.
    assert importlib.util.find_spec("vllm") is None and importlib.util.find_spec("torch") is None
    versions = installed_versions()
    assert list(versions) == list(RAN_ON) == ["vllm", "torch", "transformers"]
    assert versions["vllm"] == versions["torch"] == NOT_INSTALLED == "not installed"
    assert release_in(versions) is None


def test_installed_versions_read_a_present_package_from_its_dist_info():
    # The same function on packages this host has: the version in their dist-info, which the
    # modules themselves confirm (PyYAML's distribution name differs from its module's).
    assert installed_versions(("pyyaml", "packaging")) == {
        "pyyaml": yaml.__version__, "packaging": packaging.__version__}
    assert release_in(installed_versions(("packaging",)), "packaging") == packaging.__version__


def test_report_names_the_versions_it_ran_on_and_refuses_to_be_written_without(tmp_path):
    checks = all_required_passed()
    report = json.loads(write_report(tmp_path / "r.json", checks, installed_versions()).read_text())
    assert report["versions"] == installed_versions() and report["versions"]["torch"] == NOT_INSTALLED
    for versions, missing in (({"vllm": "0.25.0", "torch": "2.11.0"}, "transformers"),
                              ({"vllm": "0.25.0", "torch": "", "transformers": "5.14.1"}, "torch")):
        with pytest.raises(ValueError, match=f"versions: names no version for {missing} "):
            write_report(tmp_path / "bad.json", checks, versions)
    assert not (tmp_path / "bad.json").exists()


def test_versions_read_elsewhere_are_unknown_with_the_reason():
    versions = unknown_versions("--endpoint: another process", vllm="0.27.1")
    assert versions == {"vllm": "0.27.1", "torch": "unknown: --endpoint: another process",
                        "transformers": "unknown: --endpoint: another process"}
    assert release_in(versions) == "0.27.1" and release_in(versions, "torch") is None
    assert versions_line(versions) == ("vllm 0.27.1, torch unknown: --endpoint: another process, "
                                       "transformers unknown: --endpoint: another process")


def test_older_reports_without_the_gating_field_gate_every_check():
    report = {"checks": [{"name": n, "status": PASS, "detail": ""} for n in REQUIRED_GATES]
              + [{"name": "tuned MoE config", "status": NOT_CHECKED, "detail": ""}]}
    assert verdict(checks_read(report)) is False


def checks_read(report: dict) -> list[Check]:
    """The checks of a report as publish reads them back (forge.verify_report_file)."""
    from forge.verify_report_file import VerifyReport

    return [entry.check() for entry in VerifyReport.model_validate({"passed": False, "versions": {}, **report}).checks]


@pytest.mark.parametrize("report, message", [
    ({}, r"r.json: checks: Field required"),
    ({"checks": []}, r"r.json: checks: List should have at least 1 item"),
    ({"checks": [{"name": "x"}]}, r"r.json: checks\[0\]\.status: Field required"),
    ({"checks": [{"name": "x", "status": "ok", "detail": ""}]}, r"r.json: checks\[0\]\.status: Value error, must be one of"),
    ({"checks": [{"name": ["x"], "status": "PASS", "detail": ""}]}, r"r.json: checks\[0\]\.name: must be a string \(got a list\);"),
    ({"checks": [{"name": "x", "status": "PASS", "detail": "", "gating": 1}]}, r"r.json: checks\[0\]\.gating: must be a boolean \(got an integer\);"),
])
def test_malformed_checks_name_the_field(tmp_path, report, message):
    from forge.verify_report_file import read_report

    path = tmp_path / "r.json"
    path.write_text(json.dumps({"passed": True, "versions": {}, **report}))
    with pytest.raises(ForgeError, match=message) as refused:
        read_report(path)
    assert "\n" not in str(refused.value) and str(refused.value).endswith("moving tag not moved")


def test_table_says_why_a_run_without_failures_is_not_a_pass():
    checks = all_required_passed()[:2] + [not_checked("CUDA graphs", "needs the server's log: "
                                                                     "pass --server-log")]
    table = render_table(checks)
    assert "RESULT: FAIL (2 passed, 0 failed, 1 not checked)" in table
    assert ("not a pass: CUDA graphs: NOT CHECKED; draft shares target embedding: missing; "
            "acceptance (temperature 0): missing") in table
