"""Property-based tests of the parsers under the commands (issue 35, item 7): for any input, each
parser returns a value or refuses in one line naming its source, and never raises anything else.

The parsers: YAML data (forge.schema), unified diffs (forge.patching.diffs), Prometheus text
(verify.metrics), vLLM versions (forge.versions), the published index and verify reports
(forge.images.published). Inputs are drawn from each format's own alphabet, so the examples are
near misses of valid input rather than noise a parser refuses at its first byte."""
from __future__ import annotations

import json
import math
import os
import tempfile

# Hypothesis keeps caches in ./.hypothesis unless told: outside the checkout, which stays clean.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY",
                      os.path.join(tempfile.gettempdir(), "vllm-forge-hypothesis"))

from hypothesis import HealthCheck, example, given, settings  # noqa: E402 (after the storage folder is set)
from hypothesis import strategies as st  # noqa: E402

from forge.data_formats import parse_yaml
from forge.errors import ForgeError
from forge.images import published
from forge.patching.diffs import parse_diff
from forge.versions import Release
from verify.metrics import MetricsError, counters_from_prometheus

# No example database: the tests leave nothing behind in the checkout (.hypothesis/).
SETTINGS = settings(max_examples=300, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SOURCE = "/hostile/input"


def one_line_naming(exc: Exception, source: str) -> None:
    text = str(exc)
    assert "\n" not in text and source in text, text


# --- YAML data ------------------------------------------------------------------------------------

YAML_TOKENS = ["a", "b", "1", "-1.5", "null", "~", "true", ":", ": ", "- ", "? ", "[", "]", "{", "}",
               ",", "&x ", "*x", "!!str ", "!!python/name:os.system ", "'", '"', "#", "|", ">",
               "\n", "\n  ", "\n    ", "\t", "---\n", "...\n", "\ufeff", "\x00", "\x1b[2J", "é"]
yaml_text = st.lists(st.sampled_from(YAML_TOKENS), max_size=60).map("".join)


@SETTINGS
@given(yaml_text)
def test_yaml_parses_or_refuses_in_one_line(text):
    try:
        parse_yaml(text, SOURCE)
    except ForgeError as exc:
        one_line_naming(exc, SOURCE)


# --- unified diffs -------------------------------------------------------------------------------

DIFF_LINES = [b"--- a/vllm/x.py", b"+++ b/vllm/x.py", b"--- /dev/null", b"+++ /dev/null",
              b"--- a/../../etc/passwd", b"+++ b//abs", b"@@ -1,2 +1,2 @@", b"@@ -1 +1 @@",
              b"@@ -0,0 +1,3 @@", b"@@ -99999999999999999999,1 +1 @@", b"@@ bogus @@", b" context",
              b"+added", b"-removed", b"\\ No newline at end of file", b"", b"\xff\xfe", b"\x00",
              b"diff --git a/x b/x", b"# header"]
diff_bytes = st.lists(st.sampled_from(DIFF_LINES), max_size=40).map(lambda lines: b"\n".join(lines))


@SETTINGS
@given(diff_bytes)
# Diffs that parse, so the branch that checks what parsed runs on every run, not only when the
# random draw happens to build a whole hunk (the second once found that branch misspelled).
@example(b"--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-removed\n+added")
@example(b"--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n--- a/vllm/x.py\n+++ b/vllm/x.py")
def test_diff_parses_or_refuses_in_one_line(data):
    try:
        files = parse_diff(data, SOURCE)
    except ForgeError as exc:
        one_line_naming(exc, SOURCE)
        return
    for diff in files:   # what parsed names files inside the tree only
        for name in (diff.old_path, diff.new_path):
            assert name is None or not (name.startswith("/") or ".." in name.split("/")), name


# --- Prometheus text -----------------------------------------------------------------------------

COUNTERS = ["vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
            "vllm:spec_decode_num_accepted_tokens_total",
            "vllm:spec_decode_num_accepted_tokens_per_pos_total"]
VALUES = ["0", "1", "3.5", "1e3", "-1", "-0", "NaN", "+Inf", "-Inf", "1e309", "abc", ""]
LABEL_SETS = ["", '{engine="0"}', '{position="0"}', '{position="1"}', '{position="-1"}',
              '{position="\x1b[2J"}', '{engine="0",position="2"}', "{", '{a="\\"}']
sample_line = st.builds(lambda name, labels, value: f"{name}{labels} {value}",
                        st.sampled_from(COUNTERS), st.sampled_from(LABEL_SETS), st.sampled_from(VALUES))
other_line = st.sampled_from(["# HELP x", "# TYPE x counter", "", "garbage line", "\x00"])
# Every counter once, with a drawn value, so most examples get past "no such counter"...
LABELLED = [*COUNTERS[:3], COUNTERS[3] + '{position="0"}']
complete = st.builds(lambda values: "\n".join(f"{name} {value}" for name, value in zip(LABELLED, values)),
                     st.lists(st.sampled_from(VALUES), min_size=4, max_size=4))
# ...then shuffled among other samples and lines.
prometheus_text = st.builds(lambda head, rest: "\n".join([head, *rest]), complete,
                            st.lists(st.one_of(sample_line, other_line), max_size=20))


@SETTINGS
@given(prometheus_text)
def test_prometheus_counters_are_finite_and_non_negative_or_refused(text):
    try:
        counters = counters_from_prometheus(text)
    except MetricsError as exc:
        assert "\n" not in str(exc), str(exc)
        return
    readings = [counters.drafts, counters.draft_tokens, counters.accepted,
                *counters.accepted_per_position]
    assert all(math.isfinite(v) and v >= 0 for v in readings), readings


# --- versions ------------------------------------------------------------------------------------

version_text = st.one_of(
    st.text(alphabet="0123456789.vrcpostdevab+-_!* \x1b", max_size=20),
    st.builds(lambda *parts: ".".join(str(p) for p in parts),
              st.integers(0, 10**30), st.integers(0, 99), st.integers(0, 99)))


@SETTINGS
@given(version_text)
def test_release_parses_to_its_normal_form_or_refuses_in_one_line(text):
    try:
        release = Release(text, "--vllm")
    except ForgeError as exc:
        one_line_naming(exc, "--vllm")
        assert "\x1b" not in str(exc)
        return
    assert Release(str(release)) == release and str(release) == str(release.version)


# --- the published index and verify reports --------------------------------------------------------

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.sampled_from(["builds", "known_good", "schema_version",
                                                             "passed", "checks", "target", "vllm",
                                                             "image_digest", "summary", "x"]),
                                            inner, max_size=5)),
    max_leaves=20)


def written(tmp_path_factory, data) -> str:
    path = tmp_path_factory.mktemp("hostile") / "input.json"
    path.write_text(json.dumps(data))
    return str(path)


@SETTINGS
@given(json_values)
def test_index_loads_or_refuses_in_one_line(tmp_path_factory, data):
    path = written(tmp_path_factory, data)
    try:
        index = published.load_index(path)
    except ForgeError as exc:
        one_line_naming(exc, path)
        return
    json.dumps(index, allow_nan=False)       # what loads can be written back as JSON


@SETTINGS
@given(json_values)
def test_verify_report_is_read_or_refused_in_one_line(tmp_path_factory, data):
    path = written(tmp_path_factory, data)
    try:
        published.verify_result([path], "gb10", "0.27.1", "sha256:" + "a" * 64)
    except ForgeError as exc:
        one_line_naming(exc, path)
