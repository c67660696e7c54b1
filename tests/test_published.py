"""The known-good index (images/published.json) and tag immutability, through the real CLI."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from forge.errors import ForgeError
from forge.images import published
from tests.build_cli import run_build

REPO_ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = "ghcr.io/example/vllm-forge"
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
TAG = "vllm0.27.1-gb10-3f2a9c1b7d4e"


def run_cli(*args):
    return run_build(*args, timeout=120)


def gate_checks(failed_check: str | None = None, detail: str = "rate 0.0% (min 50%)"):
    """Every check of a passing mtp_smoke run, one of them failed if asked."""
    from verify.report import REQUIRED_GATES, failed, passed

    checks = [passed("server answers", "serves gemma-4-26b-a4b-it")]
    checks += [passed(name, "as the log says") for name in REQUIRED_GATES]
    return [failed(c.name, detail) if c.name == failed_check else c for c in checks]


def write_report(tmp_path: Path, passed: bool, name: str = "report.json", *, target="gb10",
                 vllm="0.27.1", digest=DIGEST_A, **context) -> Path:
    """A verify report of this image, written by verify's own writer (verify/report.py) as
    verify/mtp_smoke.py writes it."""
    from verify.report import installed_versions
    from verify.report import write_report as write

    checks = gate_checks(None if passed else "acceptance (temperature 0)")
    return write(tmp_path / name, checks, installed_versions(), target=target, vllm=vllm,
                 image_digest=digest,
                 summary={"acceptance_rate": 0.71 if passed else 0.0,
                          "mean_acceptance_length": 3.1, "tok_per_s": 57.0}, **context)


def publish(index: Path, *, tag=TAG, digest=DIGEST_A, report=None, target="gb10", vllm="0.27.1",
            extra=()):
    args = ["publish", "--index", str(index), "--repository", REPOSITORY, "--target", target,
            "--vllm", vllm, "--immutable-tag", tag, "--digest", digest, *extra]
    if report is not None:
        args += ["--verify-report", str(report)]
    return run_cli(*args)


def test_committed_index_is_valid():
    index = published.load_index(REPO_ROOT / "images" / "published.json")
    assert index["schema_version"] == published.SCHEMA_VERSION
    for entry in index["known_good"]:
        build = published.find_build(index, entry["repository"], entry["immutable_tag"])
        assert build["verify"]["passed"] is True


DEAD_REGISTRY = "127.0.0.1:9/example/vllm-forge"   # the discard port: nothing listens there


def moved_in_index(index_file: Path, *builds: tuple[str, str, str]) -> None:
    """An index whose moving tags point at (target, immutable tag, digest) builds, each passed, as
    `publish --move-tag` leaves it once the registry moved them (tests/test_release_registry.py
    runs that against a real registry); written by forge's own index functions."""
    index = published.load_index(index_file)
    for target, tag, digest in builds:
        build = published.record_build(index, {
            "target": target, "vllm": "0.27.1", "repository": REPOSITORY, "immutable_tag": tag,
            "digest": digest, "published_at": published.now_utc(),
            "verify": {"passed": True, "report": "report.json", "summary": {}}})
        published.promote(index, build, f"vllm0.27.1-{target}")
    published.save_index(index, index_file)


def test_a_passed_build_without_move_tag_is_recorded_and_moves_nothing(tmp_path):
    """Before: publish without --move-tag wrote the moving tag into the index, and `published`
    listed it as what users pull, though the registry's moving tag never moved."""
    index_file = tmp_path / "published.json"
    outputs = tmp_path / "github_output"
    result = publish(index_file, report=write_report(tmp_path, True),
                     extra=["--github-output", str(outputs)])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (f"moving tag {REPOSITORY}:vllm0.27.1-gb10 not moved "
                                              "(without --move-tag; the index records no move)")
    index = published.load_index(index_file)
    assert index["known_good"] == []
    assert index["builds"][0]["verify"]["summary"]["report"]["acceptance_rate"] == 0.71
    listed = run_cli("published", "--index", str(index_file), "--target", "gb10")
    assert listed.returncode == 1 and "no verified image published yet for gb10" in listed.stdout
    assert not outputs.exists(), "no moving_ref for a move that did not happen"


def test_a_move_the_registry_did_not_make_is_not_recorded(tmp_path):
    """--move-tag moves the registry's tag first; when that fails, the index is not written."""
    index_file = tmp_path / "published.json"
    args = ["publish", "--index", str(index_file), "--repository", DEAD_REGISTRY, "--target", "gb10",
            "--vllm", "0.27.1", "--immutable-tag", TAG, "--digest", DIGEST_A,
            "--verify-report", str(write_report(tmp_path, True)), "--move-tag"]
    result = run_cli(*args)
    assert result.returncode == 2
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith("error: registry 127.0.0.1:9 unreachable while reading")
    assert not index_file.exists()


def test_failed_verify_is_refused_and_nothing_is_written(tmp_path):
    index_file = tmp_path / "published.json"
    moved_in_index(index_file, ("gb10", TAG, DIGEST_A))
    before = index_file.read_bytes()
    newer_tag = "vllm0.27.1-gb10-0123456789ab"
    bad = write_report(tmp_path, False, "bad.json", digest=DIGEST_B)
    result = publish(index_file, tag=newer_tag, digest=DIGEST_B, report=bad)
    assert result.returncode == 1
    assert result.stderr == (f"error: {bad}: verify did not pass: acceptance (temperature 0): FAIL; "
                             "nothing recorded, moving tag not moved\n")
    assert index_file.read_bytes() == before
    index = published.load_index(index_file)
    assert published.find_build(index, REPOSITORY, newer_tag) is None
    assert published.known_good(index, "gb10", "0.27.1")["digest"] == DIGEST_A


def unchecked_report_claiming_to_pass(tmp_path: Path) -> Path:
    """What `mtp_smoke --endpoint` without --server-log wrote before issue 10: four checks not
    run, and passed: true."""
    unchecked = ("architectures", "draft shares target embedding", "CUDA graphs", "tuned MoE config")
    checks = ([{"name": "server answers", "status": "PASS", "detail": "serves gemma-4-26b-a4b-it"}]
              + [{"name": name, "status": "NOT CHECKED",
                  "detail": "needs the server's log: pass --server-log"} for name in unchecked]
              + [{"name": "acceptance (temperature 0)", "status": "PASS", "detail": "rate 80.0%"},
                 {"name": "acceptance (recipe sampling)", "status": "INFO", "detail": "rate 50.0%"}])
    report = tmp_path / "unchecked.json"
    report.write_text(json.dumps({"passed": True, "checks": checks, "recipe": "gemma-4-26b-a4b-it",
                                  "target": "gb10", "vllm": "0.27.1", "image_digest": DIGEST_A}))
    return report


def test_a_report_whose_checks_did_not_pass_is_refused_whatever_it_claims(tmp_path):
    report = unchecked_report_claiming_to_pass(tmp_path)
    index_file = tmp_path / "published.json"
    result = publish(index_file, report=report, extra=["--move-tag"])
    assert result.returncode == 1
    assert result.stderr == (
        f"error: {report}: verify did not pass (its passed: true is contradicted by its checks): "
        "architectures: NOT CHECKED; draft shares target embedding: NOT CHECKED; "
        "CUDA graphs: NOT CHECKED; tuned MoE config: NOT CHECKED; "
        "nothing recorded, moving tag not moved\n")
    assert result.stdout == "" and not index_file.exists()


def test_a_report_saying_it_failed_is_refused_even_when_its_checks_pass(tmp_path):
    report = write_report(tmp_path, True)
    report.write_text(json.dumps({**json.loads(report.read_text()), "passed": False}))
    result = publish(tmp_path / "published.json", report=report)
    assert result.returncode == 1
    assert result.stderr == (f"error: {report}: passed: the report says false although its checks "
                             "pass; nothing recorded, moving tag not moved\n")
    assert not (tmp_path / "published.json").exists()


@pytest.mark.parametrize("field, report_args, cause", [
    ("target", {"target": "h200"}, "the report verified 'h200', not 'gb10' (--target)"),
    ("vllm", {"vllm": "0.27.0"}, "the report verified vLLM '0.27.0', not '0.27.1' (--vllm)"),
    ("vllm", {"vllm": None}, "the report verified vLLM None, not '0.27.1' (--vllm)"),
    ("image_digest", {"digest": DIGEST_B}, f"the report verified {DIGEST_B}, not {DIGEST_A} (--digest)"),
    ("image_digest", {"digest": None}, "the report names no image digest (run verify/mtp_smoke.py "
                                       "with --image-digest or $VLLM_FORGE_IMAGE_DIGEST)"),
])
def test_a_report_of_another_image_is_refused(tmp_path, field, report_args, cause):
    report = write_report(tmp_path, True, **report_args)
    index_file = tmp_path / "published.json"
    result = publish(index_file, report=report, extra=["--move-tag"])
    assert result.returncode == 2
    assert result.stderr == f"error: {report}: {field}: {cause}\n"
    assert not index_file.exists()
    # The flags it names are the publish command's own, or those of the command it names.
    command = (["-m", "verify.mtp_smoke"] if "mtp_smoke.py with" in cause
               else ["build.py", "publish"])
    named = set(re.findall(r"--[a-z][a-z-]*", cause))
    assert named and named <= help_flags(*command)


def help_flags(*command) -> set[str]:
    text = subprocess.run([sys.executable, *command, "--help"], cwd=REPO_ROOT, capture_output=True,
                          text=True, check=True).stdout
    return set(re.findall(r"--[a-z][a-z-]*", text))


def test_a_local_build_label_is_the_same_release(tmp_path):
    result = publish(tmp_path / "published.json",
                     report=write_report(tmp_path, True, vllm="0.27.1+cu130"))
    assert result.returncode == 0, result.stderr


def test_a_report_without_checks_is_refused(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"passed": True, "target": "gb10", "vllm": "0.27.1",
                                  "image_digest": DIGEST_A}))
    result = publish(tmp_path / "published.json", report=report)
    assert result.returncode == 2
    assert result.stderr == (f"error: {report}: checks: Field required; not a verify report as "
                             "verify/report.py writes one: nothing recorded, moving tag not moved\n")
    assert not (tmp_path / "published.json").exists()


def test_unverified_build_never_moves_the_tag(tmp_path):
    index_file = tmp_path / "published.json"
    result = publish(index_file)  # no --verify-report
    assert result.returncode == 1
    index = published.load_index(index_file)
    assert index["builds"][0]["verify"]["passed"] is False
    assert published.known_good(index, "gb10", "0.27.1") is None


def test_republishing_an_immutable_tag_with_another_digest_is_refused(tmp_path):
    index_file = tmp_path / "published.json"
    assert publish(index_file, report=write_report(tmp_path, True)).returncode == 0
    before = index_file.read_bytes()
    result = publish(index_file, digest=DIGEST_B, report=write_report(tmp_path, True, digest=DIGEST_B))
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: immutable tag {REPOSITORY}:{TAG} already names {DIGEST_A}")
    assert index_file.read_bytes() == before  # nothing lost, nothing re-pointed


def test_republishing_the_same_digest_refreshes_its_verify_result(tmp_path):
    index_file = tmp_path / "published.json"
    assert publish(index_file).returncode == 1  # pushed, not yet verified
    assert publish(index_file, report=write_report(tmp_path, True)).returncode == 0
    index = published.load_index(index_file)
    assert len(index["builds"]) == 1
    assert index["builds"][0]["verify"]["passed"] is True


def test_republishing_a_verified_build_without_a_report_is_refused(tmp_path):
    index_file = tmp_path / "published.json"
    assert publish(index_file, report=write_report(tmp_path, True)).returncode == 0
    before = index_file.read_bytes()
    result = publish(index_file)  # no --verify-report
    assert result.returncode == 2
    assert result.stderr == (f"error: immutable tag {REPOSITORY}:{TAG} is recorded as verified; "
                             "publish it again only with a verify report that passes "
                             "(--verify-report)\n")
    assert index_file.read_bytes() == before


def test_tag_of_another_target_or_release_is_refused(tmp_path):
    index_file = tmp_path / "published.json"
    result = publish(index_file, target="h200", report=write_report(tmp_path, True))
    assert result.returncode == 2
    assert "--immutable-tag 'vllm0.27.1-gb10-3f2a9c1b7d4e' is not a h200 vLLM 0.27.1 tag" in result.stderr
    assert not index_file.exists()


@pytest.mark.parametrize("digest", ["sha256:1234", "sha256:xyz"])
def test_bad_digest_names_the_digest_flag(tmp_path, digest):
    result = publish(tmp_path / "published.json", digest=digest, report=write_report(tmp_path, True))
    assert result.returncode == 2
    # Not "build: digest": the user typed --digest, not a field of a file.
    assert result.stderr == f"error: --digest: not a sha256 image digest (sha256:<64 hex>): {digest!r}\n"
    assert not (tmp_path / "published.json").exists()


def test_damaged_index_names_file_and_field(tmp_path):
    index_file = tmp_path / "published.json"
    assert publish(index_file, report=write_report(tmp_path, True)).returncode == 0
    data = json.loads(index_file.read_text())
    data["builds"][0]["digest"] = "md5:0"
    index_file.write_text(json.dumps(data))
    result = run_cli("published", "--index", str(index_file))
    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: {index_file}: builds[0].digest: "
                                     "not a sha256 image digest: 'md5:0'")


def test_hand_edited_moving_tag_to_a_failed_build_is_rejected(tmp_path):
    index_file = tmp_path / "published.json"
    moved_in_index(index_file, ("gb10", TAG, DIGEST_A))
    data = json.loads(index_file.read_text())
    data["builds"][0]["verify"]["passed"] = False
    index_file.write_text(json.dumps(data))
    with pytest.raises(ForgeError, match=r"known_good\[0\]\.immutable_tag: its verify report did not pass"):
        published.load_index(index_file)


def test_hand_edited_duplicate_immutable_tag_is_rejected(tmp_path):
    index_file = tmp_path / "published.json"
    assert publish(index_file).returncode == 1
    data = json.loads(index_file.read_text())
    data["builds"].append(dict(data["builds"][0], digest=DIGEST_B))
    index_file.write_text(json.dumps(data))
    with pytest.raises(published.ImmutableTagError, match=r"builds\[1\]\.digest"):
        published.load_index(index_file)


def test_verify_report_without_passed_is_refused(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"acceptance_rate": 0.8}))
    result = publish(tmp_path / "published.json", report=report)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {report}: passed: Field required (and 1 more); not a "
                                    "verify report as verify/report.py writes one")


def test_published_lists_known_good_images(tmp_path):
    index_file = tmp_path / "published.json"
    moved_in_index(index_file, ("gb10", TAG, DIGEST_A), ("h200", "vllm0.27.1-h200-3f2a9c1b7d4e", DIGEST_B))
    result = run_cli("published", "--index", str(index_file), "--json")
    assert result.returncode == 0, result.stderr
    listed = {(e["target"], e["digest"]) for e in json.loads(result.stdout)}
    assert listed == {("gb10", DIGEST_A), ("h200", DIGEST_B)}
    result = run_cli("published", "--index", str(index_file), "--target", "a100")
    assert result.returncode == 1
    assert "no verified image published yet for a100" in result.stdout


def smoke_report(tmp_path: Path, recipe: str, failed_check: str | None = None) -> Path:
    """A report written by verify's own writer (verify/report.py), as mtp_smoke.py writes it."""
    from verify.report import installed_versions
    from verify.report import write_report as write

    return write(tmp_path / f"{recipe}.json", gate_checks(failed_check, "1.02 < 1.5"),
                 installed_versions(), recipe=recipe, target="gb10", vllm="0.27.1",
                 image_digest=DIGEST_A)


def test_every_recipe_report_must_pass(tmp_path):
    index_file = tmp_path / "published.json"
    good = smoke_report(tmp_path, "gemma-4-26b-a4b-it")
    bad = smoke_report(tmp_path, "gemma-4-31b-it", failed_check="acceptance (temperature 0)")
    result = run_cli("publish", "--index", str(index_file), "--repository", REPOSITORY,
                     "--target", "gb10", "--vllm", "0.27.1", "--immutable-tag", TAG,
                     "--digest", DIGEST_A, "--verify-report", str(good), "--verify-report", str(bad))
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: {bad}: verify did not pass: acceptance (temperature 0): FAIL")
    assert not index_file.exists()
    result = run_cli("publish", "--index", str(index_file), "--repository", REPOSITORY,
                     "--target", "gb10", "--vllm", "0.27.1", "--immutable-tag", TAG,
                     "--digest", DIGEST_A, "--verify-report", str(good))
    assert result.returncode == 0, result.stderr
    verify = published.load_index(index_file)["builds"][0]["verify"]
    assert verify["passed"] is True
    assert verify["summary"]["gemma-4-26b-a4b-it"] == {
        "passed": True, "recipe": "gemma-4-26b-a4b-it", "target": "gb10", "vllm": "0.27.1",
        "image_digest": DIGEST_A, "checks_passed": 5, "checks_failed": []}


def test_a_directory_of_reports_stands_for_every_report_in_it(tmp_path):
    reports = tmp_path / "verify-reports"
    for recipe in ("gemma-4-26b-a4b-it", "gemma-4-e4b-it"):
        (reports / recipe).mkdir(parents=True)
        smoke_report(reports / recipe, recipe).rename(reports / recipe / "mtp_smoke.json")
        # mtp_smoke.py's --out directory also holds the engine worker's spec and result JSON.
        (reports / recipe / "engine.spec.json").write_text(json.dumps({"model": "x"}))
        (reports / recipe / "engine.result.json").write_text(json.dumps({"engine": {"started": True}}))
    index_file = tmp_path / "published.json"
    result = publish(index_file, report=reports)
    assert result.returncode == 0, result.stderr
    verify = published.load_index(index_file)["builds"][0]["verify"]
    assert verify["passed"] is True
    assert sorted(verify["summary"]) == ["gemma-4-26b-a4b-it", "gemma-4-e4b-it"]
    (tmp_path / "empty").mkdir()
    result = publish(tmp_path / "other.json", report=tmp_path / "empty")
    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: {tmp_path / 'empty'}: no verify report "
                                     "(mtp_smoke.json) in this directory")


@pytest.mark.parametrize("figure, written", [("NaN", "nan"), ("Infinity", "inf"),
                                             ("-Infinity", "-inf"), ("1e999", "inf")])
def test_a_report_whose_figures_are_not_numbers_is_refused(tmp_path, figure, written):
    """Before: publish copied a report's NaN/Infinity summary into images/published.json (not
    JSON: jq and browsers refuse the whole index), and with --move-tag would have moved the tag
    first. Python's json reads NaN, Infinity and 1e999 as floats: the report is read whole and
    refused by the field, before the registry or the index is touched."""
    index_file = tmp_path / "published.json"
    moved_in_index(index_file, ("gb10", TAG, DIGEST_A))
    before = index_file.read_bytes()
    good = json.loads(write_report(tmp_path, True).read_text())
    text = json.dumps(good).replace('"acceptance_rate": 0.71', f'"acceptance_rate": {figure}')
    assert figure in text
    (tmp_path / "nan.json").write_text(text)
    result = publish(index_file, report=tmp_path / "nan.json",
                     extra=["--move-tag", "--repository", DEAD_REGISTRY])
    assert result.returncode == 2, result.stderr
    if figure == "1e999":  # a JSON number, read as inf: refused by the field
        assert result.stderr == (f"error: {tmp_path / 'nan.json'}: summary.acceptance_rate: Input should "
                                 "be a finite number; not a verify report as verify/report.py writes one: "
                                 "nothing recorded, moving tag not moved\n")
    else:  # not JSON at all: the loader refuses it before any figure is looked at
        assert result.stderr.startswith(f"error: {tmp_path / 'nan.json'}: {figure} is not a JSON "
                                        "number (write a finite number or null)")
    assert index_file.read_bytes() == before


def test_a_build_recorded_twice_is_refused_on_read(tmp_path):
    """Before: the same build (tag and digest) listed twice loaded without a word."""
    index_file = tmp_path / "published.json"
    assert publish(index_file).returncode == 1
    data = json.loads(index_file.read_text())
    data["builds"].append(dict(data["builds"][0]))
    index_file.write_text(json.dumps(data))
    with pytest.raises(ForgeError, match=r"builds\[1\]: .* is recorded twice \(also builds\[0\]\)"):
        published.load_index(index_file)


def test_two_known_good_entries_of_one_release_are_refused_on_read(tmp_path):
    index_file = tmp_path / "published.json"
    moved_in_index(index_file, ("gb10", TAG, DIGEST_A))
    data = json.loads(index_file.read_text())
    data["known_good"].append(dict(data["known_good"][0], moving_tag="vllm0.27.1-gb10-again"))
    index_file.write_text(json.dumps(data))
    result = run_cli("published", "--index", str(index_file))
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {index_file}: known_good[1]: gb10 vLLM 0.27.1 has a "
                                    "known-good entry already (known_good[0])")
    assert result.stderr.count("\n") == 1


def test_a_key_named_twice_in_the_index_is_refused(tmp_path):
    """json.loads keeps the last of two `builds` lists: the first would vanish on the next save."""
    index_file = tmp_path / "published.json"
    index_file.write_text('{"schema_version": 1, "builds": [], "builds": [], "known_good": []}')
    with pytest.raises(ForgeError, match="duplicate key 'builds' \\(each key may appear once\\)"):
        published.load_index(index_file)


def test_what_a_damaged_index_says_is_shown_not_obeyed(tmp_path):
    """Before: a key holding an escape sequence reached the terminal raw (here: clear the screen)
    through the one-line error that quotes it."""
    index_file = tmp_path / "published.json"
    index_file.write_text('{"schema_version": 1, "builds": [], "known_good": [], '
                          '"\\u001b[2Jevil": 1}')
    result = run_cli("published", "--index", str(index_file))
    assert result.returncode == 2
    assert "\x1b" not in result.stderr
    assert result.stderr == (f"error: {index_file}: \\x1b[2Jevil: unknown field (known: builds, "
                             "known_good, schema_version)\n")
