"""forge.files: a file is replaced whole, or left exactly as it was."""
import pytest

from forge.errors import ForgeError
from forge.files import write_text_atomically


def test_writes_new_and_replaces_existing(tmp_path):
    path = tmp_path / "sub" / "f.yaml"
    write_text_atomically(path, "a: 1\n")
    write_text_atomically(path, "a: 2\n")
    assert path.read_text() == "a: 2\n"
    assert [p.name for p in path.parent.iterdir()] == ["f.yaml"]


def test_refused_content_leaves_the_file_and_no_temp(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text("good\n")
    checked = []

    def refuse(candidate):
        checked.append(candidate.read_text())
        raise ForgeError("bad content")

    with pytest.raises(ForgeError, match="bad content"):
        write_text_atomically(path, "bad\n", check=refuse)
    assert checked == ["bad\n"]
    assert path.read_text() == "good\n"
    assert [p.name for p in tmp_path.iterdir()] == ["f.yaml"]
