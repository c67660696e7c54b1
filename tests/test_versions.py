"""vLLM release numbers are parsed once, at the command line (forge.versions): every spelling of a
release gives the same answer in every command, and a non-version is one clear refusal."""
import pytest

from forge.errors import ForgeError
from forge.versions import normal_release
from tests.build_cli import run_build


@pytest.mark.parametrize("text, normal", [
    ("0.27.1", "0.27.1"), ("0.27.01", "0.27.1"), ("v0.27.1", "0.27.1"), ("V0.27.1", "0.27.1"),
    ("0.28.0rc1", "0.28.0rc1"), ("0.28.0-rc1", "0.28.0rc1"), ("0.27.1+cu130", "0.27.1+cu130"),
])
def test_spellings_of_one_release_share_one_normal_form(text, normal):
    assert normal_release(text) == normal


@pytest.mark.parametrize("text", ["latest", "", "0.27.x", "nightly-2026"])
def test_a_non_version_is_refused_in_one_line(text):
    with pytest.raises(ForgeError) as caught:
        normal_release(text, where="--vllm")
    assert str(caught.value) == (f"--vllm: not a vLLM version: {text!r} (a PEP 440 release such "
                                 f"as 0.27.1)")


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
