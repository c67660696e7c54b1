"""Downloads and archives within bounds (issue 48, item 3), against a real HTTP index on loopback
that speaks PEP 691 JSON (declaring each file's size) and serves hostile sdists: endless, a
gzip bomb, not gzip, cut short, a member nested past any real depth; and hostile project pages.
Each is refused in one line, quickly, leaving no partial file and no tree behind."""
from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from forge import http_session
from forge.errors import ForgeError
from forge.upstream import pypi, releases
from tests.loopback import serve_in_background

REPO = Path(__file__).resolve().parents[1]
JSON_TYPE = "application/vnd.pypi.simple.v1+json"


def sdist(version: str, extra: dict[str, bytes] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in {f"vllm-{version}/vllm/__init__.py": b"",
                           f"vllm-{version}/vllm/_version.py": f"__version__ = '{version}'\n".encode(),
                           **(extra or {})}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class Zeros(io.RawIOBase):
    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        buffer[:] = bytes(len(buffer))
        return len(buffer)


def bomb(version: str, size: int) -> bytes:
    """An sdist whose one more member is `size` zero bytes: a few hundred KB that decompress to
    `size`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as archive:
        for name, data in {f"vllm-{version}/vllm/__init__.py": b""}.items():
            info = tarfile.TarInfo(name)
            archive.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo(f"vllm-{version}/vllm/zeros.bin")
        info.size = size
        archive.addfile(info, io.BufferedReader(Zeros()))
    return buffer.getvalue()


GOOD = sdist("9.0.0")
BODIES: dict[str, bytes] = {
    "9.0.0": GOOD,
    "9.3.0": bomb("9.3.0", 200 << 20),
    "9.4.0": b"this is no gzip file at all\n" * 100,
    "9.5.0": sdist("9.5.0", {"vllm-9.5.0/vllm/big.py": os.urandom(200_000)})[:150_000],
    "9.6.0": sdist("9.6.0", {"vllm-9.6.0/vllm/" + "d/" * 200 + "deep.py": b"x = 1\n"}),
}
ENDLESS = "9.2.0"                   # its index entry declares 4096 bytes; its body never ends
STALLS = "9.7.0"                    # sends 64 KiB of the 1 MiB it declares, then waits


def index_page(port: int) -> bytes:
    entries = [{"filename": f"vllm-{v}.tar.gz", "url": f"/files/vllm-{v}.tar.gz",
                "hashes": {"sha256": hashlib.sha256(body).hexdigest()}, "size": len(body)}
               for v, body in BODIES.items()]
    entries += [{"filename": f"vllm-{ENDLESS}.tar.gz", "url": f"/files/vllm-{ENDLESS}.tar.gz",
                 "hashes": {"sha256": "0" * 64}, "size": 4096},
                {"filename": f"vllm-{STALLS}.tar.gz", "url": f"/files/vllm-{STALLS}.tar.gz",
                 "hashes": {"sha256": "0" * 64}, "size": 1 << 20}]
    return json.dumps({"meta": {"api-version": "1.1"}, "name": "vllm", "files": entries}).encode()


PAGES = {"wrong-shape": b"[1, 2, 3]", "files-not-objects": b'{"files": [1, 2]}',
         "good": json.dumps({"files": [{"filename": "good-1.0.tar.gz"}]}).encode()}


@pytest.fixture
def index(tmp_path, monkeypatch):
    served = {"bytes": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            name = self.path.rstrip("/").rsplit("/", 1)[-1]
            if self.path.startswith("/simple/vllm/"):
                return self._send(index_page(self.server.server_port), JSON_TYPE)
            if self.path.startswith("/pypi/"):
                if name == "endless":
                    return self._endless(b'{"files": [' + b'{"filename": "x-1.0.tar.gz"},' * 1000)
                return self._send(PAGES[name], JSON_TYPE)
            version = name.removeprefix("vllm-").removesuffix(".tar.gz")
            if version == ENDLESS:
                return self._endless(b"\0" * 65536)
            if version == STALLS:
                self.send_response(200)
                self.send_header("Content-Length", str(1 << 20))
                self.end_headers()
                self.wfile.write(b"\0" * 65536)
                self.wfile.flush()
                time.sleep(30)
                return None
            return self._send(BODIES[version], "application/octet-stream")

        def _send(self, body: bytes, content_type: str):
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _endless(self, chunk: bytes):
            self.send_response(200)
            self.send_header("Content-Type", JSON_TYPE)
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                while served["bytes"] < 4 << 30:
                    self.wfile.write(chunk)
                    served["bytes"] += len(chunk)
            except OSError:
                pass                    # the reader stopped: as it should
            self.close_connection = True

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    serve_in_background(server)
    root = f"http://127.0.0.1:{server.server_port}"
    monkeypatch.setattr(http_session, "BACKOFF_S", 0)
    monkeypatch.setenv("VLLM_FORGE_INDEX", f"{root}/simple/vllm/")
    monkeypatch.setenv("VLLM_FORGE_PYPI", f"{root}/pypi/")
    monkeypatch.setenv("VLLM_FORGE_CACHE", str(tmp_path / "cache"))
    yield {"cache": tmp_path / "cache", "served": served, "root": root}
    server.shutdown()


def leftovers(cache: Path) -> list[str]:
    """What a refused download or extraction left: partial files, staging folders, trees."""
    found = [p for p in cache.rglob("*") if p.name.endswith(".part") or p.name.startswith(".")]
    found += list((cache / "trees").glob("*")) if (cache / "trees").is_dir() else []
    return sorted(str(p.relative_to(cache)) for p in found)


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message and message
    return message


def test_the_json_index_declares_each_size_and_a_good_sdist_extracts(index):
    assert releases.sdist_info("9.0.0").size == len(GOOD)
    tree = releases.release_tree("9.0.0")
    assert (tree / "vllm" / "_version.py").read_text() == "__version__ = '9.0.0'\n"
    assert json.loads((index["cache"] / "index.json").read_text())["releases"]["9.0.0"]["size"] == len(GOOD)
    assert leftovers(index["cache"]) == ["trees/9.0.0"]


def test_a_body_past_the_declared_size_is_cut_off_and_nothing_kept(index):
    started = time.monotonic()
    with pytest.raises(ForgeError) as caught:
        releases.fetch_sdist(ENDLESS)
    assert "more than the size the index declares (4096 bytes)" in one_line(caught)
    assert time.monotonic() - started < 20
    assert index["served"]["bytes"] < 64 << 20          # read a little past 4 KiB, not on and on
    assert leftovers(index["cache"]) == []


def test_a_gzip_bomb_is_refused_at_its_header(index):
    with pytest.raises(ForgeError) as caught:
        releases.release_tree("9.3.0")
    message = one_line(caught)
    assert "decompress to more than 64 MiB" in message and "zeros.bin" in message
    assert leftovers(index["cache"]) == []
    assert sum(p.stat().st_size for p in index["cache"].rglob("*") if p.is_file()) < 8 << 20


@pytest.mark.parametrize("version, says", [
    ("9.4.0", "not a whole gzip-compressed tar archive (ReadError"),
    ("9.5.0", "not a whole gzip-compressed tar archive ("),
    ("9.6.0", "folders deep (at most 1024 and 48)"),
])
def test_a_broken_or_hostile_archive_is_one_line(index, version, says):
    with pytest.raises(ForgeError) as caught:
        releases.release_tree(version)
    message = one_line(caught)
    assert says in message and f"vLLM {version}'s sdist" in message
    assert leftovers(index["cache"]) == []


@pytest.mark.parametrize("make", [os.mkfifo, lambda path: os.symlink("/dev/zero", path)],
                         ids=["fifo", "dev-zero-link"])
def test_a_fifo_or_device_link_in_place_of_a_cached_sdist_never_blocks(index, make):
    releases.load_index()
    target = index["cache"] / "sdists" / "vllm-9.0.0.tar.gz"
    target.parent.mkdir(parents=True)
    make(target)
    outcome: dict = {}

    def fetch():
        try:
            releases.fetch_sdist("9.0.0", offline=True)
        except ForgeError as exc:
            outcome["error"] = str(exc)

    worker = threading.Thread(target=fetch, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "blocked on what is in place of the sdist"
    assert outcome["error"] == (f"offline and vLLM 9.0.0's sdist is not cached at {target} (what is "
                                "there is not the sdist the index names: remove it)")
    # Online it is replaced by the verified download (renamed over it, never written through).
    assert releases.fetch_sdist("9.0.0") == target
    assert not target.is_symlink() and target.read_bytes() == GOOD


def test_ctrl_c_during_a_download_leaves_no_partial_file(index):
    """A real SIGINT to a real process downloading from a server that stalls mid-body."""
    releases.load_index()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", "from forge.upstream import releases; "
                              f"releases.fetch_sdist({STALLS!r})"], cwd=REPO, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    folder = index["cache"] / "sdists"
    deadline = time.monotonic() + 20
    while not (folder.is_dir() and any(p.stat().st_size for p in folder.glob("*.part"))):
        assert time.monotonic() < deadline and child.poll() is None, "no partial file appeared"
        time.sleep(0.05)
    child.send_signal(signal.SIGINT)
    child.communicate(timeout=20)
    assert child.returncode != 0
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("page, says", [
    ("wrong-shape", "no list of files in its JSON"),
    ("files-not-objects", "files[0] has no filename"),
    ("endless", "more than 32.0 MiB"),
])
def test_a_project_page_of_another_shape_or_endless_is_one_line(index, page, says):
    with pytest.raises(ForgeError) as caught:
        pypi.published_versions(page)
    message = one_line(caught)
    assert says in message and f"{index['root']}/pypi/{page}/" in message
    assert not (index["cache"] / "pypi" / f"{page}.json").exists()


def test_a_good_project_page_is_read_and_cached(index):
    assert [str(v) for v in pypi.published_versions("good")] == ["1.0"]
    assert json.loads((index["cache"] / "pypi" / "good.json").read_text())["versions"] == ["1.0"]
