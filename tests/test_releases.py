"""The release cache against PyPI's real index and sdists, and a real local index for bad cases."""
import hashlib
import http.server
import io
import re
import tarfile
import time
from pathlib import Path

import pytest

from forge import http_session
from forge.errors import ForgeError
from forge.progress import CLEAR_LINE
from forge.upstream import releases
from tests.loopback import serve_in_background
from tests.terminal import run_python


def test_pypi_lists_the_releases_we_track_with_hashes():
    versions = [str(v) for v in releases.list_releases("0.21.0")]
    for expected in ("0.21.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.33.0"):
        assert expected in versions
    assert versions == sorted(versions, key=releases.Version)


def test_cached_sdist_matches_the_index_hash():
    sdist = releases.fetch_sdist("0.25.0")
    assert releases.sha256_of(sdist) == releases.sdist_info("0.25.0").sha256


def test_release_tree_holds_the_real_package_of_that_release():
    tree = releases.release_tree("0.25.0")
    assert "__version__ = version = '0.25.0'" in (tree / "vllm" / "_version.py").read_text()
    assert (tree / "vllm" / "v1" / "spec_decode" / "llm_base_proposer.py").exists()
    assert not (tree / "csrc").exists(), "only the vllm/ package is extracted"


def test_parse_simple_index_skips_prereleases_yanked_and_unhashed_files():
    page = """
      <a href="../../p/vllm-1.0.0.tar.gz#sha256={A}">vllm-1.0.0.tar.gz</a>
      <a href="../../p/vllm-1.0.1.tar.gz#sha256=aa">a hash that is no sha256</a>
      <a href="../../p/vllm-1.1.0rc1.tar.gz#sha256=bb">vllm-1.1.0rc1.tar.gz</a>
      <a href="../../p/vllm-1.2.0.tar.gz#sha256=cc" data-yanked="">vllm-1.2.0.tar.gz</a>
      <a href="../../p/vllm-1.3.0.tar.gz">vllm-1.3.0.tar.gz</a>
      <a href="../../p/vllm-1.4.0-cp38-abi3-manylinux1_x86_64.whl#sha256=dd">wheel</a>""".replace(
        "{A}", "A" * 64)
    found = releases.parse_simple_index(page, "https://example.invalid/simple/vllm/")
    assert found == {"1.0.0": {"url": "https://example.invalid/p/vllm-1.0.0.tar.gz", "sha256": "a" * 64}}


def _sdist_bytes(version: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in {f"vllm-{version}/vllm/__init__.py": "",
                           f"vllm-{version}/vllm/_version.py": f"__version__ = '{version}'\n",
                           f"vllm-{version}/csrc/kernel.cu": "// not extracted\n"}.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    """A real HTTP server on 127.0.0.1 serving a PEP 503 page: one good sdist, one with a wrong hash."""
    yield from _serve_index(tmp_path, monkeypatch, delay_s=0)


@pytest.fixture
def slow_index(tmp_path, monkeypatch):
    """The same, but each sdist's answer waits SLOW_S before its first byte, as a proxy that
    fetches the whole file before it answers does."""
    yield from _serve_index(tmp_path, monkeypatch, delay_s=SLOW_S)


SLOW_S = 1.5


def _serve_index(tmp_path, monkeypatch, delay_s: float):
    files = {"vllm-9.0.0.tar.gz": _sdist_bytes("9.0.0"), "vllm-9.1.0.tar.gz": _sdist_bytes("9.1.0")}
    good = hashlib.sha256(files["vllm-9.0.0.tar.gz"]).hexdigest()
    page = (f'<a href="/files/vllm-9.0.0.tar.gz#sha256={good}">vllm-9.0.0.tar.gz</a>'
            f'<a href="/files/vllm-9.1.0.tar.gz#sha256={"0" * 64}">vllm-9.1.0.tar.gz</a>').encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = page if self.path.startswith("/simple/") else files.get(self.path.split("/")[-1])
            if not self.path.startswith("/simple/"):
                time.sleep(delay_s)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    serve_in_background(server)
    monkeypatch.setenv("VLLM_FORGE_INDEX", f"http://127.0.0.1:{server.server_port}/simple/vllm/")
    monkeypatch.setenv("VLLM_FORGE_CACHE", str(tmp_path / "cache"))
    yield tmp_path / "cache"
    server.shutdown()


def test_sdist_with_wrong_hash_is_refused_and_not_kept(local_index):
    with pytest.raises(ForgeError) as failure:
        releases.fetch_sdist("9.1.0")
    message = str(failure.value)
    assert "9.1.0" in message and "sha256" in message and "\n" not in message
    assert not list((local_index / "sdists").iterdir()), "nothing of the bad download is kept"


def test_good_sdist_is_verified_cached_and_extracted(local_index):
    tree = releases.release_tree("9.0.0")
    assert (tree / "vllm" / "_version.py").read_text() == "__version__ = '9.0.0'\n"
    assert not (tree / "csrc").exists()
    # Offline from now on: the cached index and sdist answer on their own.
    assert releases.fetch_sdist("9.0.0", offline=True) == local_index / "sdists" / "vllm-9.0.0.tar.gz"


def test_unknown_release_and_bad_version_are_one_line_errors(local_index):
    with pytest.raises(ForgeError, match=r"vLLM 8\.0\.0 has no sdist on the index"):
        releases.sdist_info("8.0.0")
    with pytest.raises(ForgeError, match="not a vLLM version"):
        releases.sdist_info("latest")


def test_offline_without_cache_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_FORGE_CACHE", str(tmp_path / "empty"))
    with pytest.raises(ForgeError, match="offline and no cached vLLM release index"):
        releases.list_releases(offline=True)


def test_index_cached_for_one_url_is_not_used_for_another(local_index, monkeypatch):
    monkeypatch.setattr(http_session, "BACKOFF_S", 0)  # the refused connection is retried: no waits
    assert [str(v) for v in releases.list_releases()] == ["9.0.0", "9.1.0"]
    monkeypatch.setenv("VLLM_FORGE_INDEX", "http://127.0.0.1:9/simple/vllm/")  # nothing listens
    with pytest.raises(ForgeError, match="cannot read the vLLM release index"):
        releases.list_releases()
    assert Path(local_index / "index.json").exists()


# _sdist_bytes holds two files under vllm/ (csrc/ is left out).
COLD_TREE = "from forge.upstream import releases; print(releases.release_tree('9.0.0'))"


def test_cold_release_tree_on_a_terminal_shows_download_and_extraction(local_index):
    code, stdout, stderr = run_python(COLD_TREE, terminal=True)
    assert code == 0 and stdout.strip() == str(local_index / "trees" / "9.0.0")
    size = (local_index / "sdists" / "vllm-9.0.0.tar.gz").stat().st_size
    assert f"{CLEAR_LINE}downloading vLLM 9.0.0 sdist: {size} B of {size} B (100%)" in stderr, stderr
    # in the sdist's bytes (read once, as a stream: the file count is known at the end)
    assert re.search(rf"{re.escape(CLEAR_LINE)}extracting vLLM 9\.0\.0's vllm/ package: \d+ B of {size} B "
                     r"\(\d+%\), 0 files", stderr), stderr
    assert re.search(rf"extracting vLLM 9\.0\.0's vllm/ package: done, {size} B, 2 files in \d+\.\d s\r\n$",
                     stderr)
    assert stderr.count("\n") == 2, "one line each once done"


def test_cold_release_tree_piped_says_nothing(local_index):
    code, stdout, stderr = run_python(COLD_TREE, terminal=False, env={"VLLM_FORGE_PROGRESS": ""})
    assert code == 0 and stdout.strip() == str(local_index / "trees" / "9.0.0")
    assert stderr == ""


def test_cold_release_tree_logged_says_only_start_and_end(local_index):
    code, stdout, stderr = run_python(COLD_TREE, terminal=False, env={"VLLM_FORGE_PROGRESS": "lines"})
    assert code == 0 and "\r" not in stderr
    lines = stderr.splitlines()
    assert lines[0::2] == ["downloading vLLM 9.0.0 sdist ...", "extracting vLLM 9.0.0's vllm/ package ..."]
    assert re.fullmatch(r"downloading vLLM 9\.0\.0 sdist: done, \d+ B in \d+\.\d s", lines[1])
    assert re.fullmatch(r"extracting vLLM 9\.0\.0's vllm/ package: done, \d+ B, 2 files in \d+\.\d s", lines[3])
    # Warm: nothing to do, nothing said.
    assert run_python(COLD_TREE, terminal=False, env={"VLLM_FORGE_PROGRESS": "lines"})[2] == ""


def test_download_time_counts_the_wait_for_the_answer(slow_index):
    """Before: the clock started once the answer's headers were in, so a proxy that holds the
    whole file first printed "19.7 MB in 0.0 s"."""
    code, _, stderr = run_python(COLD_TREE, terminal=False, env={"VLLM_FORGE_PROGRESS": "lines"})
    assert code == 0, stderr
    took = re.search(r"downloading vLLM 9\.0\.0 sdist: done, \d+ B in (\d+\.\d) s", stderr)
    assert took and float(took.group(1)) >= SLOW_S - 0.1, stderr
