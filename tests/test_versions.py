"""vLLM release numbers are parsed once, at the command line (forge.versions.Release): every spelling
of a release gives the same answer in every command, a non-version is one clear refusal, and the
parsed value flows down unparsed."""
import json

import pytest
from packaging.version import Version

from forge.commands.cli import build_parser
from forge.errors import ForgeError
from forge.versions import Release
from tests.build_cli import run_build


@pytest.mark.parametrize("text, normal", [
    ("0.27.1", "0.27.1"), ("0.27.01", "0.27.1"), ("v0.27.1", "0.27.1"), ("V0.27.1", "0.27.1"),
    ("0.28.0rc1", "0.28.0rc1"), ("0.28.0-rc1", "0.28.0rc1"), ("0.27.1+cu130", "0.27.1+cu130"),
])
def test_spellings_of_one_release_share_one_normal_form(text, normal):
    release = Release(text)
    assert release == normal and str(release) == normal and release.version == Version(normal)


@pytest.mark.parametrize("text", ["latest", "", "0.27.x", "nightly-2026"])
def test_a_non_version_is_refused_in_one_line(text):
    with pytest.raises(ForgeError) as caught:
        Release(text, where="--vllm")
    assert str(caught.value) == (f"--vllm: not a vLLM version: {text!r} (a PEP 440 release such "
                                 f"as 0.27.1)")


def test_a_release_is_text_where_files_record_releases():
    release = Release("v0.27.01")
    assert {"0.27.1": "recorded"}[release] == "recorded"
    assert json.loads(json.dumps({"vllm": release})) == {"vllm": "0.27.1"}
    assert f"vllm{release}-gb10" == "vllm0.27.1-gb10"


def test_a_release_passed_on_is_not_parsed_again():
    release = Release("0.27.1")
    assert Release(release) is release and Release(release).version is release.version


@pytest.mark.parametrize("argv", [
    ["build", "--target", "gb10", "--vllm", "v0.27.01"],
    ["patches", "--vllm", "0.27.01"],
    ["drift", "--version", "5.0.0", "--vllm", "v0.27.1", "--vllm", "0.25.0"],
    ["release-matrix", "--vllm", "0.27.1"],
])
def test_every_vllm_flag_is_parsed_into_a_release(argv):
    value = build_parser().parse_args(argv).vllm
    for release in value if isinstance(value, list) else [value]:
        assert isinstance(release, Release) and isinstance(release.version, Version)
    assert value in ("0.27.1", ["0.27.1", "0.25.0"])


def _serve(vllm: str):
    return run_build("serve", "--recipe", "gemma-4-26b-a4b-it", "--target", "h200", "--vllm", vllm)


def test_every_command_gets_the_normal_form():
    """The image a serve command runs is tagged with the normal form, whatever the spelling."""
    plain = _serve("0.27.1")
    assert plain.returncode == 0, plain.stderr
    assert ":vllm0.27.1-h200 " in plain.stdout
    for spelling in ("0.27.01", "v0.27.1"):
        result = _serve(spelling)
        assert (result.returncode, result.stdout) == (0, plain.stdout), result.stderr


def test_the_command_line_refuses_a_non_version_before_any_work():
    result = _serve("latest")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == ("error: --vllm: not a vLLM version: 'latest' (a PEP 440 release such as "
                             "0.27.1)\n")


def test_no_vllm_flag_is_left_as_text():
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    flags = {name: action.type for name, sub in commands.items() for action in sub._actions
             if "--vllm" in action.option_strings}
    assert len(flags) >= 13                           # the walk saw the commands' flags
    assert {name: kind for name, kind in flags.items() if kind is not Release} == {}
