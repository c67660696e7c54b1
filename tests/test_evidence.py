"""The result records (benchmarks/results/<id>/result.json) as one generic check: every record
validates and holds every figure its raw report makes, at that value; every id the repository cites exists;
docs/evidence.md is what the records make (and goes stale when one changes); every decimal figure
written next to a record id is one of that record's figures; recipe targets say why in a few
comment lines, not how a run went."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from forge.errors import ForgeError
from forge.evidence import page
from forge.evidence.figures import ARCH_LIST, CLOCK_TOLERANCE, arch_excerpts, derive, pair_verdict
from forge.evidence.records import KINDS, RESULTS, load_record, load_records
from forge.serving.recipes import load_recipe
from tests.build_cli import run_build

ROOT = Path(__file__).resolve().parent.parent
RECORDS = load_records()
# a record id as the repository cites it: <gpu>-<vLLM release>-<kind>-<what>
CITED_ID = re.compile(r"\b[a-z0-9]+-\d+\.\d+\.\d+-(?:" + "|".join(KINDS) + r")-[a-z0-9.-]*[a-z0-9]")
# where ids are cited (docs/guides belong to the guides; docs/evidence.md is generated from them)
CITING = [*sorted((ROOT / "recipes").glob("*.yaml")), *sorted((ROOT / "recipes").glob("*.md")),
          ROOT / "patches" / "series.yaml", *sorted((ROOT / "patches" / "source").glob("*.diff")),
          ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "evidence.md")]
MAX_TARGET_COMMENT_LINES = 8


def test_there_are_records_of_every_kind_the_docs_summarise():
    kinds = {r.kind for r in RECORDS.values()}
    assert {"smoke", "bench", "profile", "serve", "drift", "tune"} <= kinds
    assert all(r.id == r.folder.name for r in RECORDS.values())
    assert ARCH_RECORDS, "no record of a release's CMake arch lists"


@pytest.mark.parametrize("record_id", sorted(RECORDS))
def test_a_records_figures_are_what_its_raw_report_makes(record_id):
    record = RECORDS[record_id]
    derived = derive(record, RECORDS)
    if derived is None:
        # no raw report the code reads (a latency run, a build): the record states what it
        # measured, in figures or a verdict
        assert record.figures or record.verdict in ("pass", "fail"), record_id
    else:
        assert {k: record.figures.get(k) for k in derived} == derived


@pytest.mark.parametrize("record_id", sorted(r for r in RECORDS if "analysis.json" in RECORDS[r].files))
def test_a_profile_analysis_is_what_verify_profile_makes_of_its_raw_profile(record_id):
    from verify import profile

    record = RECORDS[record_id]
    args = ["--report", str(record.raw("profile.json")), "--roofline", "auto"]
    if record.settings.get("baseline"):
        args += ["--baseline", str(RECORDS[record.settings["baseline"]].raw("profile.json"))]
    _, entries = profile.report_text(profile.parse_args(args))
    assert json.loads(profile.report_json(entries)) == json.loads(record.raw("analysis.json").read_text())


def _latency_against_bench() -> list:
    found = [r for r in RECORDS.values() if r.kind == "latency" and r.settings.get("bench")]
    assert found, "no latency record names its bench counterpart"
    return found


def test_vllms_clock_agrees_with_verifys_zero_acceptance_step_or_the_record_says_why():
    """Every `vllm bench latency` record that names its bench (settings.bench, bench_engine):
    its ms per step within 5% of verify/bench.py's step at zero acceptance, or
    settings.clock_difference says why."""
    for record in _latency_against_bench():
        ratio = record.figures["vs_bench_zero_acc"]
        assert abs(ratio - 1) <= CLOCK_TOLERANCE or record.settings.get("clock_difference"), record.id


def test_a_spec_latency_run_compared_at_zero_acceptance_accepted_nothing_by_vllms_counters():
    spec = [r for r in _latency_against_bench() if r.settings.get("num_speculative_tokens")]
    assert spec
    for record in spec:
        k, f = record.settings["num_speculative_tokens"], record.figures
        assert "counters.json" in record.files, record.id
        assert f["spec_accepted_tokens"] == 0, record.id
        assert f["spec_draft_tokens"] == k * f["spec_drafts"] > 0, record.id


def test_a_candidates_verdict_follows_its_pairs():
    paired = [r for r in RECORDS.values() if r.pairs]
    assert paired
    for record in paired:
        assert record.verdict == pair_verdict(record), record.id
    record = paired[0]
    faster = {**record.figures, **{f"{n}_fused_x_plain": 0.9 for n in record.pairs}}
    assert pair_verdict(replace(record, figures=faster)) == "win"
    slower = {**faster, **{f"{n}_fused_x_plain": 1.1 for n in record.pairs}}
    assert pair_verdict(replace(record, figures=slower)) == "loss"


def test_a_latency_record_naming_a_missing_bench_is_refused():
    record = _latency_against_bench()[0]
    with pytest.raises(ForgeError, match=r"result.json: settings.bench: names no bench record 'nope'"):
        derive(replace(record, settings={**record.settings, "bench": "nope"}), RECORDS)


def _sdist_files(release: str, path_ends: set[str]) -> dict[str, list[str]]:
    """The lines of the one file in the release's sdist ending in each of `path_ends`, read in one
    pass over the archive (each lookup used to decompress the 50 MB sdist again)."""
    import tarfile

    from forge.upstream.releases import fetch_sdist

    top = f"vllm-{release}/"
    found: dict[str, list[tuple[str, list[str]]]] = {end: [] for end in path_ends}
    with tarfile.open(fetch_sdist(release, offline=True), mode="r|*") as sdist:
        for member in sdist:
            ends = [end for end in path_ends if member.name == top + end
                    or member.name.startswith(top) and member.name.endswith(f"/{end}")]
            handle = sdist.extractfile(member) if ends else None
            if handle is not None:
                lines = handle.read().decode().splitlines()
                for end in ends:
                    found[end].append((member.name, lines))
    for end, matches in found.items():
        assert len(matches) == 1, (release, end, [name for name, _ in matches])
    return {end: matches[0][1] for end, matches in found.items()}


def _excerpt_entry(entry: str) -> tuple[str, str, str]:
    """(file, line number, text) of `NNN:text` (file "": CMakeLists.txt) or `<file>:NNN:text`."""
    parts = entry.split(":", 2)
    return (parts[0], parts[1], parts[2]) if not parts[0].isdigit() else ("", *entry.split(":", 1))


ARCH_RECORDS = sorted(r for r in RECORDS if arch_excerpts(RECORDS[r]))


@pytest.mark.parametrize("record_id", ARCH_RECORDS)
def test_a_records_arch_list_excerpts_are_all_the_releases_own_lines(record_id):
    """`NNN:text` is line NNN of the release's CMakeLists.txt, `<file>:NNN:text` of its one
    source file of that name; every arch list of those kernels in CMakeLists.txt is there."""
    record = RECORDS[record_id]
    for kernels, release, name in arch_excerpts(record):
        excerpt = record.raw(name).read_text().splitlines()
        sources = _sdist_files(release, {"CMakeLists.txt"} | {_excerpt_entry(e)[0] for e in excerpt} - {""})
        cmake = sources[""] = sources["CMakeLists.txt"]
        for entry in excerpt:
            where, number, text = _excerpt_entry(entry)
            assert sources[where][int(number) - 1] == text, (record_id, name, entry)
        lists = {f"{n}:{line}" for n, line in enumerate(cmake, start=1)
                 if (m := ARCH_LIST.search(line)) and m.group(1).startswith(kernels.upper())}
        assert lists and lists <= set(excerpt), (record_id, name, lists - set(excerpt))


def test_a_smoke_verdict_is_its_reports():
    for record in RECORDS.values():
        if "mtp_smoke.json" in record.files:
            passed = json.loads(record.raw("mtp_smoke.json").read_text())["passed"]
            assert record.verdict == ("pass" if passed else "fail"), record.id


def cited_ids(text: str) -> list[str]:
    return CITED_ID.findall(text)


def test_every_cited_id_names_a_record():
    cited = {}
    for path in CITING:
        for record_id in cited_ids(path.read_text()):
            cited.setdefault(record_id, path.relative_to(ROOT))
    missing = {i: str(p) for i, p in cited.items() if i not in RECORDS}
    assert cited and not missing, missing
    for recipe in (load_recipe("gemma-4-26b-a4b-it", "h200"), load_recipe("qwen3.6-35b-a3b", "h200")):
        assert recipe.evidence and set(recipe.evidence) <= set(RECORDS)


def test_the_page_is_what_the_records_make():
    result = run_build("evidence", "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    text = page.PAGE.read_text()
    assert all(f"`{record_id}`" in text for record_id in RECORDS)


def test_the_page_goes_stale_when_a_figure_changes(tmp_path):
    results, copy = tmp_path / "results", tmp_path / "evidence.md"
    shutil.copytree(RESULTS, results)
    shutil.copy(page.PAGE, copy)
    files = ["--results", str(results), "--page", str(copy)]
    assert run_build("evidence", "--check", *files).returncode == 0
    path = results / "h200-0.27.1-bench-26b-a4b-l30-stock-splitkv" / "result.json"
    data = json.loads(path.read_text())
    data["figures"]["x_stock"] += 0.5
    path.write_text(json.dumps(data))
    stale = run_build("evidence", "--check", *files)
    assert stale.returncode == 1 and "stale" in stale.stdout
    assert copy.read_text() == page.PAGE.read_text()  # --check writes nothing
    written = run_build("evidence", *files)
    assert written.returncode == 0 and "| 2.62 |" in copy.read_text()


def _record_copy(tmp_path: Path, record_id: str, **changes) -> Path:
    folder = tmp_path / record_id
    shutil.copytree(RESULTS / record_id, folder)
    data = json.loads((folder / "result.json").read_text())
    data.update(changes)
    (folder / "result.json").write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize("changes, message", [
    ({"id": "other"}, r"id: must equal its folder's name"),
    ({"kind": "diary"}, r"kind: must be one of"),
    ({"date": "yesterday"}, r"date: not a date"),
    ({"figures": {"step_ms": "fast"}}, r"figures: step_ms: must be a finite number"),
    ({"versions": {"vllm": 0.27}}, r"versions: vllm: a package's version must be text"),
    ({"files": ["../result.json"]}, r"files\[0\]: not a file beside the record"),
    ({"files": ["missing.log"]}, r"files\[0\]: no such file beside the record"),
    ({"diary": 1}, r"diary: unknown field"),
    ({"pairs": {"run1": {"candidate": "mtp_smoke.json"}}}, r"pairs: run1: must be \{candidate: file"),
    ({"pairs": {"run1": {"candidate": "fused.latency.json", "baseline": "a/latency.json"}}},
     r"pairs\.run1\.candidate: 'fused.latency.json' is not one of its files"),
])
def test_a_bad_record_is_one_line_naming_the_file_and_field(tmp_path, changes, message):
    folder = _record_copy(tmp_path, "h200-0.27.1-smoke-26b-a4b-v2", **changes)
    with pytest.raises(ForgeError, match=message) as error:
        load_record(folder)
    assert str(error.value).startswith(f"{folder / 'result.json'}: ") and "\n" not in str(error.value)


def test_a_figure_that_is_not_finite_is_refused(tmp_path):
    folder = _record_copy(tmp_path, "h200-0.27.1-smoke-26b-a4b-v2")
    text = (folder / "result.json").read_text().replace('"agree_accepted": 832', '"agree_accepted": NaN')
    (folder / "result.json").write_text(text)
    with pytest.raises(ForgeError, match=r"result.json: NaN is not a JSON number"):
        load_record(folder)


def _recipe_tree(tmp_path: Path, old: str, new: str) -> Path:
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    shutil.copytree(RESULTS, tmp_path / "benchmarks" / "results")
    path = tmp_path / "recipes" / "gemma-4-26b-a4b-it.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return tmp_path / "recipes"


@pytest.mark.parametrize("cited, message", [
    ("h200-0.27.1-smoke-26b-a4b-v9", r"targets\.h200\.evidence\[3\]: no result record 'h200-0.27.1-smoke-26b-a4b-v9'"),
    ("h200-0.27.1-smoke-31b-v2", r"targets\.h200\.evidence\[3\]: record 'h200-0.27.1-smoke-31b-v2' measured "
                                 r"recipe 'gemma-4-31b-it', the recipe has 'gemma-4-26b-a4b-it'"),
    ("h200-0.25.0-smoke-26b-a4b-v1-l6-patched", r"measured num_speculative_tokens 3, the recipe has 4"),
])
def test_a_recipe_citing_a_missing_or_foreign_record_is_refused(tmp_path, cited, message):
    root = _recipe_tree(tmp_path, "h200-0.27.1-smoke-26b-a4b-v2,", f"{cited},")
    with pytest.raises(ForgeError, match=message) as error:
        load_recipe("gemma-4-26b-a4b-it", "h200", root)
    assert "gemma-4-26b-a4b-it.yaml: targets.h200.evidence[3]: " in str(error.value)
    assert "\n" not in str(error.value)


# --- traceability: a decimal figure written beside a record id is one of its figures ---------

DECIMAL = re.compile(r"(?<![\w./])(\d+\.\d+)(?![\w.]*\d)")
# release numbers are not figures: "vLLM 0.24+", "0.25-0.33", "0.27.1"
RELEASE = re.compile(r"(?:vLLM |release )?\d+\.\d+(?:\.\d+|\+|(?=-\d+\.\d+\b(?!x)))"
                     r"|(?<=\d-)\d+\.\d+(?:\.\d+|\b(?!x))")


def _spans(path: Path) -> list[str]:
    """The text spans that cite: a paragraph of Markdown, a YAML comment block or one YAML line."""
    text = path.read_text()
    if path == ROOT / "README.md":
        text = text.split("\n## Measurements", 1)[1].split("\n## ", 1)[0]
    if path.suffix == ".md":
        # a paragraph, a list item, a table row
        return re.split(r"\n\s*\n|\n(?=\s*[-*] |\|)", text)
    return text.splitlines()


def _matches(number: str, figures: list[float]) -> bool:
    places = len(number.split(".")[1])
    return any(round(f, places) == float(number) or round(f, places) == round(float(number), places)
               for f in figures)


def test_every_decimal_beside_a_record_id_is_one_of_its_figures():
    checked, wrong = 0, []
    for path in CITING:
        if path.parent.name in ("source", "patches") or path.name == "reference.md":
            # the series' why (and the diff headers made from it) states ratios across engines;
            # reference.md's figures are public sources'
            continue
        for span in _spans(path):
            ids = [i for i in cited_ids(span) if i in RECORDS]
            if not ids:
                continue
            figures = [v for i in ids for v in RECORDS[i].figures.values()]
            bare = RELEASE.sub(" ", CITED_ID.sub(" ", span))
            for number in DECIMAL.findall(bare):
                checked += 1
                if not _matches(number, figures):
                    wrong.append(f"{path.relative_to(ROOT)}: {number} not a figure of {', '.join(ids)}")
    assert checked >= 10 and not wrong, wrong


def _target_comment_lines(path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    pending, target, inside = 0, None, False
    for line in path.read_text().splitlines():
        if line.startswith("targets:"):
            inside = True
            continue
        if not inside:
            continue
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        if stripped.startswith("#"):
            if indent == 2:
                pending += 1
            elif target:
                counts[target] += 1
        elif indent == 2 and stripped.endswith(":"):
            target = stripped[:-1]
            counts[target] = pending
            pending = 0
        elif "#" in stripped and target:
            counts[target] += 1   # a trailing comment is a comment line too
    return counts


RECIPE_FILES = sorted(p for p in (ROOT / "recipes").glob("*.yaml") if p.name != "known-failures.yaml")


@pytest.mark.parametrize("path", RECIPE_FILES, ids=lambda p: p.name)
def test_a_recipe_target_says_why_in_a_few_comment_lines(path):
    counts = _target_comment_lines(path)
    assert counts, path
    long = {t: n for t, n in counts.items() if n > MAX_TARGET_COMMENT_LINES}
    assert not long, long


def test_derive_fills_a_records_figures_from_its_raw_report_and_refuses_an_unknown_id(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    path = results / "h200-0.27.1-smoke-26b-a4b-v2" / "result.json"
    data = json.loads(path.read_text())
    expected, data["figures"] = data["figures"], {}
    path.write_text(json.dumps(data))
    base = ["evidence", "--results", str(results), "--page", str(tmp_path / "e.md")]
    refused = run_build(*base, "--derive", "h200-0.27.1-smoke-26b-a4b-v2", "--derive", "nope")
    assert refused.returncode == 2 and "--derive: no result record 'nope'" in refused.stderr
    assert json.loads(path.read_text())["figures"] == {}  # nothing written
    data["figures"] = {"read_off_a_log": 1.5, "agree_accepted": 0}
    path.write_text(json.dumps(data))
    done = run_build(*base, "--derive", "h200-0.27.1-smoke-26b-a4b-v2")
    assert done.returncode == 0, done.stderr
    # the derived figures set (a stale one replaced), a figure of another name kept
    assert json.loads(path.read_text())["figures"] == {**expected, "read_off_a_log": 1.5}
    data["figures"] = expected
    path.write_text(json.dumps(data))
    subprocess.run([sys.executable, "build.py", *base], cwd=ROOT, check=True, capture_output=True)
    assert (tmp_path / "e.md").read_text() == page.PAGE.read_text()


def test_defaults_evidence_holds_for_every_target_and_is_checked_against_the_recipe(tmp_path):
    root = _recipe_tree(tmp_path, "\ndefaults:\n", "\ndefaults:\n  evidence: [h200-0.25.0-bench-26b-a4b-l30-first]\n")
    # k=3, fp8, this recipe: cited for every target, whatever its own target
    assert load_recipe("gemma-4-26b-a4b-it", "gb10", root).evidence == ("h200-0.25.0-bench-26b-a4b-l30-first",)
    # a target's own list replaces it
    assert "h200-0.27.1-smoke-26b-a4b-v2" in load_recipe("gemma-4-26b-a4b-it", "h200", root).evidence
    path = root / "gemma-4-26b-a4b-it.yaml"
    path.write_text(path.read_text().replace("[h200-0.25.0-bench-26b-a4b-l30-first]", "[h200-0.27.1-smoke-31b-v2]"))
    with pytest.raises(ForgeError, match=r"gemma-4-26b-a4b-it.yaml: defaults.evidence\[0\]: record "
                                         r"'h200-0.27.1-smoke-31b-v2' measured recipe 'gemma-4-31b-it'"):
        load_recipe("gemma-4-26b-a4b-it", "gb10", root)


def test_records_read_again_see_a_changed_record_and_a_raw_file_gone(tmp_path):
    """load_records keeps what it read while nothing under the results changed: a figure edited
    in place and a raw file removed from a subfolder are both seen by the next call."""
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    first = load_records(results)
    assert first == load_records(results) and first is not load_records(results)
    record_id = next(i for i, r in first.items() if r.figures and any("/" in f for f in r.files))
    path = results / record_id / "result.json"
    data = json.loads(path.read_text())
    name = next(iter(data["figures"]))
    data["figures"][name] = data["figures"][name] + 1
    path.write_text(json.dumps(data, indent=2))
    assert load_records(results)[record_id].figures[name] == first[record_id].figures[name] + 1
    raw = next(f for f in first[record_id].files if "/" in f)
    (results / record_id / raw).unlink()
    with pytest.raises(ForgeError, match=f"files\\[\\d+\\]: no such file beside the record: '{raw}'"):
        load_records(results)
