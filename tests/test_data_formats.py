"""forge.data_formats: the one YAML and the one JSON loader refuse, in one line naming the file
(and line), what a plain load cannot hold; property tests (hypothesis) say that any text gives a
value or that one line, never another exception."""
import json
import math
import sys

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge.data_formats import MAX_DEPTH, MAX_EXPANDED_NODES, DataError, load_json, load_yaml, parse_json, parse_yaml
from forge.errors import FileError, ForgeError
from forge.files import INDEX

SOURCE = "recipes/x.yaml"


@pytest.fixture(autouse=True, params=["libyaml", "pure-python"])
def yaml_parser(request, monkeypatch):
    """Every test on both parsers: libyaml's where PyYAML has its C extension, PyYAML's own
    where it has not; the refusals are the same on each."""
    import forge.data_formats

    if request.param == "pure-python":
        monkeypatch.setattr(forge.data_formats, "StrictCLoader", None)
    return request.param


def refusal(parse, text, source=SOURCE) -> str:
    with pytest.raises(ForgeError) as failure:      # DataError; FileError for bytes not UTF-8
        parse(text, source)
    message = str(failure.value)
    assert "\n" not in message and message.startswith(f"{source}: ")
    return message


# --- YAML --------------------------------------------------------------------------------------

def test_a_list_or_mapping_as_a_key_is_one_line_naming_file_and_line():
    assert refusal(parse_yaml, "a: 1\n? [x, y]\n: 2\n") == (
        f"{SOURCE}: line 2: a list as a mapping key (keys must be plain values: text, numbers)")
    assert refusal(parse_yaml, "a: 1\nb:\n  {x: 1}: 2\n") == (
        f"{SOURCE}: line 3: a mapping as a mapping key (keys must be plain values: text, numbers)")
    assert "line 2: *k as a mapping key names a list" in refusal(parse_yaml, "a: &k [1]\n*k : 2\n")


def test_a_scalar_alias_as_a_key_and_merge_keys_still_load():
    assert parse_yaml("a: &k name\n*k : 2\n", SOURCE) == {"a": "name", "name": 2}
    assert parse_yaml("base: &b {x: 1}\nmore:\n  <<: *b\n  y: 2\n", SOURCE) == {
        "base": {"x": 1}, "more": {"x": 1, "y": 2}}


@pytest.mark.parametrize("text, problem", [
    ("a: .inf\n", "line 1: '.inf' is not a finite number"),
    ("a:\n  b: [1, -.Inf]\n", "line 2: '-.Inf' is not a finite number"),
    ("a: .nan\n", "line 1: '.nan' is not a finite number"),
    ("a: 1.0e+400\n", "line 1: '1.0e+400' is not a finite number"),
    ("a: !!float .inf\n", "line 1: '.inf' is not a finite number"),
    ("a: 1" + "0" * 400 + "\n", "is past the range of a number"),
    ("a: -0x" + "f" * 300 + "\n", "is past the range of a number"),
    ("1: x\n", "line 1: the key '1' is read as a number, not text"),
    ("a: {b: 1, 2.5: 2}\n", "the key '2.5' is read as a number"),
    ("true: x\n", "the key 'true' is read as true or false"),
    ("~: x\n", "the key '~' is read as null"),
    ("2026-01-01: x\n", "the key '2026-01-01' is read as a date"),
    ("a: &k 5\n*k : 2\n", "line 2: *k as a mapping key names a number, not text"),
])
def test_numbers_past_the_float_range_and_keys_that_are_not_text_are_one_line(text, problem):
    assert problem in refusal(parse_yaml, text)


def test_quoted_keys_and_finite_numbers_load_as_ever():
    assert parse_yaml("'1': x\n\"true\": y\na: 1.0e+300\nb: -1_000.5\nc: 9007199254740993\n", SOURCE) == {
        "1": "x", "true": "y", "a": 1e300, "b": -1000.5, "c": 9007199254740993}


def test_nesting_10000_deep_is_one_line_not_a_recursion_error():
    text = "a: " + "[" * 10000 + "]" * 10000 + "\n"
    assert refusal(parse_yaml, text) == f"{SOURCE}: line 1: nested deeper than {MAX_DEPTH} levels"
    block = "".join("  " * i + f"k{i}:\n" for i in range(200))
    assert f"line {MAX_DEPTH + 1}: nested deeper" in refusal(parse_yaml, block)


def test_the_depth_limit_itself_loads():
    text = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    value = parse_yaml(text, SOURCE)
    for _ in range(MAX_DEPTH - 1):
        value = value[0]
    assert value == []


def test_aliases_cannot_nest_past_the_limit_nor_expand_past_the_node_cap():
    deep = "[" * 40 + "]" * 40
    assert "nests the data deeper than 64" in refusal(parse_yaml, f"a: &d {deep}\nb: " + "[" * 30 + "*d" + "]" * 30)
    laughs = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    laughs += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    assert f"aliases expand the data past {MAX_EXPANDED_NODES} nodes" in refusal(parse_yaml, "\n".join(laughs))
    assert "(a cycle)" in refusal(parse_yaml, "a: &a [1, *a]\n")


def test_values_python_cannot_build_are_one_line():
    assert "a value Python cannot hold" in refusal(parse_yaml, "n: " + "1" * 5000 + "\n")
    assert "a value Python cannot hold" in refusal(parse_yaml, "date: 2026-13-45\n")


def test_duplicate_keys_and_bad_syntax_stay_one_line():
    assert refusal(parse_yaml, "a: 1\na: 2\n") == f"{SOURCE}: line 2: duplicate key 'a' (each key may appear once)"
    assert "not valid YAML" in refusal(parse_yaml, "a: [1\n")


def test_load_yaml_refuses_dev_zero_and_a_fifo(tmp_path):
    import os

    with pytest.raises(FileError, match="is a character device"):
        load_yaml("/dev/zero")
    os.mkfifo(tmp_path / "targets.yaml")
    with pytest.raises(FileError, match="is a FIFO"):
        load_yaml(tmp_path / "targets.yaml")


# --- JSON --------------------------------------------------------------------------------------

def test_json_nesting_duplicates_and_non_numbers_are_one_line():
    source = "published.json"
    assert refusal(parse_json, "[" * 10000 + "]" * 10000, source) == (
        f"{source}: line 1: nested deeper than {MAX_DEPTH} levels")
    assert parse_json('{"s": "' + "[" * 500 + '"}', source) == {"s": "[" * 500}   # text, not nesting
    assert refusal(parse_json, '{"a": 1, "a": 2}', source) == (
        f"{source}: duplicate key 'a' (each key may appear once)")
    for constant in ("NaN", "Infinity", "-Infinity"):
        assert refusal(parse_json, f'{{"rate": {constant}}}', source) == (
            f"{source}: {constant} is not a JSON number (write a finite number or null)")
    assert "not valid JSON" in refusal(parse_json, "1" * 5000, source)
    assert refusal(parse_json, '{"a": 1,\n "b": }', source).startswith(f"{source}: line 2: not valid JSON")
    assert "not UTF-8 text" in refusal(parse_json, b'{"a": "caf\xe9"}', source)


def test_load_json_reads_through_the_file_layer(tmp_path):
    path = tmp_path / "published.json"
    path.write_text('{"builds": []}')
    assert load_json(path, INDEX) == {"builds": []}
    with pytest.raises(FileError, match="is a directory"):
        load_json(tmp_path, INDEX)


# --- properties --------------------------------------------------------------------------------

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
keys = st.text(min_size=1, max_size=12)
data = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(keys, inner, max_size=4)),
                    max_leaves=30)

PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(data)
def test_json_round_trips_what_the_project_writes(value):
    assert parse_json(json.dumps(value), "x.json") == value


@PROPERTY
@given(data)
def test_yaml_round_trips_what_safe_dump_writes(value):
    assert parse_yaml(yaml.safe_dump(value), "x.yaml") == value


# Few examples: PyYAML's scanner looks up to 1024 characters ahead for a key at every opening
# bracket, so each of these takes about half a second.
@settings(max_examples=12, deadline=None)
@given(st.integers(MAX_DEPTH + 1, 3000), st.sampled_from(["[]", "{}"]))
def test_any_depth_past_the_limit_is_refused_in_both(depth, brackets):
    opening, closing = brackets
    inner = '"k": ' if opening == "{" else ""
    text = (opening + inner) * (depth - 1) + opening + closing + closing * (depth - 1)
    for parse in (parse_json, parse_yaml):
        with pytest.raises(DataError, match=f"nested deeper than {MAX_DEPTH} levels"):
            parse(text, "x")


@PROPERTY
@given(st.text(alphabet=st.sampled_from(list("[]{}:,-?&*!|>'\"# \n\tab1.")), max_size=200))
def test_any_text_is_a_value_or_one_line_never_another_exception(text):
    for parse in (parse_json, parse_yaml):
        try:
            parse(text, "x")
        except DataError as exc:
            assert "\n" not in str(exc) and str(exc).startswith("x: ")


@PROPERTY
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_no_float_json_cannot_write_gets_in(number):
    text = json.dumps({"figure": number})       # Python writes NaN/Infinity unless told not to
    if math.isfinite(number):
        assert parse_json(text, "r.json") == {"figure": number}
    else:
        with pytest.raises(DataError, match="is not a JSON number"):
            parse_json(text, "r.json")


def test_the_recursion_limit_is_untouched():
    assert sys.getrecursionlimit() <= 10000      # the limits hold without raising it


# --- through the CLI ---------------------------------------------------------------------------

def test_a_deep_index_and_a_report_with_nan_are_one_line_in_the_cli(tmp_path):
    from tests.build_cli import run_build
    from tests.test_bad_input_one_line import assert_one_line_refusal, publish_args
    from tests.test_published import write_report

    deep = tmp_path / "published.json"
    deep.write_text("[" * 10000 + "]" * 10000)         # was a RecursionError traceback
    assert_one_line_refusal(run_build("published", "--index", str(deep)),
                            f"{deep}: line 1: nested deeper than {MAX_DEPTH} levels")
    report = write_report(tmp_path, True)
    report.write_text(report.read_text().replace('"tok_per_s": 57.0', '"tok_per_s": NaN'))
    index = tmp_path / "new-index.json"
    assert_one_line_refusal(run_build(*publish_args(index, report)),
                            f"{report}: NaN is not a JSON number (write a finite number or null)")
    assert not index.exists()
