"""forge.http_session's bounds on a real loopback server: a Deadline ends a request whose server
drips its headers or body a byte at a time (requests' own timeout is per read and never fires),
and read_capped stops an endless body at its cap."""
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from forge.http_session import AnswerError, Deadline, read_capped, retrying_session
from tests.loopback import serve_in_background


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\n"
        try:
            if self.path == "/drip-headers":
                for byte in head:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.1)
            elif self.path == "/drip-body":
                self.wfile.write(head)
                for _ in range(100):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.1)
            elif self.path == "/endless":
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
                for _ in range(10000):
                    self.wfile.write(b"y" * 65536)
            else:
                self.wfile.write(head + b"z" * 100)
        except OSError:
            pass
        self.close_connection = True


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    serve_in_background(httpd)
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("path", ["/drip-headers", "/drip-body"])
def test_a_deadline_ends_a_dripped_answer_at_its_time(server, path):
    started = time.monotonic()
    with pytest.raises((requests.RequestException, AnswerError)):
        with Deadline(1) as deadline, retrying_session() as session, \
                session.get(server + path, timeout=5, stream=True) as response:
            read_capped(response, 1 << 20, deadline)
    assert 0.9 < time.monotonic() - started < 3      # per read, 5 s each: 10 s and more


def test_an_endless_answer_stops_at_its_cap(server):
    with pytest.raises(AnswerError, match="over 1024 KiB"):
        with Deadline(10) as deadline, retrying_session() as session, \
                session.get(server + "/endless", timeout=5, stream=True) as response:
            read_capped(response, 1 << 20, deadline)


def test_a_prompt_answer_is_read_whole_and_its_deadline_then_shuts_nothing(server):
    with Deadline(0.5) as deadline, retrying_session() as session, \
            session.get(server + "/ok", timeout=5, stream=True) as response:
        assert read_capped(response, 1 << 20, deadline) == b"z" * 100
    time.sleep(0.8)               # past the deadline: the watchdog finds it done
    assert threading.active_count() >= 1
