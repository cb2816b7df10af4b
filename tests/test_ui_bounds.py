"""What a hostile client can make the web page's server hold: no Ray, a page watching a
``FakeHandle`` on 127.0.0.1, spoken to over raw sockets.

A request's body is never read: a POST announcing 100 MB is answered from its headers (403
without the token or from a foreign host, 413 with the token) and its connection closed.
Headers are bounded in number and length. A connection that trickles its headers, or idles
after an answer, is closed after ``idle_secs``; connections over ``max_connections`` close the
oldest; idle connections cost no thread. The ``Host`` rule holds on every address, and the
token shows in no URL and no log line.
(``benchmarks/ui_bounds.py`` measures the memory and threads these bounds save.)
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from typing import cast

import pytest

from rayflow import TopologyHandle
from rayflow._ui import UiServer
from rayflow._ui._server import host_allowed

from .conftest import eventually
from .ui_helpers import FakeHandle, get, get_json, post

DEADLINE = 30.0
"""How long a condition may take on a shared, busy machine."""
HUNDRED_MB = 100 * 1024 * 1024


def fake(name: str) -> TopologyHandle:
    """A handle without Ray: what the page reads of one (``FakeHandle``)."""
    return cast(TopologyHandle, FakeHandle(name))


@pytest.fixture
def page() -> Iterator[UiServer]:
    """A page for a ``FakeHandle``, quick to close idle connections, at most 8 of them."""
    server = UiServer(ray_metrics=False, poll_secs=0.05, idle_secs=0.5, max_connections=8)
    try:
        yield server.serve(fake("bounded"))
    finally:
        server.close()


def connect(page: UiServer) -> socket.socket:
    return socket.create_connection((page.host, page.port), timeout=DEADLINE)


def answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and body of the answer to what ``sock`` sent."""
    reader = sock.makefile("rb")
    status = int(reader.readline().split()[1])
    headers = {}
    while (line := reader.readline().decode().strip()) != "":
        name, _, value = line.partition(":")
        headers[name.lower()] = value.strip()
    return status, headers, reader.read(int(headers.get("content-length", 0)))


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (at most a moment's wait)."""
    sock.settimeout(0.05)
    try:
        return sock.recv(65536) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def request(page: UiServer, method: str, path: str, *headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{page.port}", *headers, "", ""]
    return "\r\n".join(lines).encode()


class TestBodies:
    """A request is decided on its line and headers: its body is never read."""

    @pytest.mark.parametrize(
        ("headers", "status"),
        [
            ((), 403),
            (("X-Rayflow-Token: local", "Host: attacker.example"), 403),
            (("X-Rayflow-Token: local",), 413),
        ],
        ids=["without the token", "from a foreign host", "with the token"],
    )
    def test_a_100_mb_post_is_answered_before_its_body_and_closed(
        self, page: UiServer, headers: tuple[str, ...], status: int
    ) -> None:
        """Only the headers are sent: a server that read the body first would never answer."""
        with connect(page) as sock:
            head = request(page, "POST", "/api/deactivate", f"Content-Length: {HUNDRED_MB}", *headers)
            if any(h.startswith("Host:") for h in headers):  # the second Host line replaces the first
                head = head.replace(f"Host: 127.0.0.1:{page.port}\r\n".encode(), b"", 1)
            sock.sendall(head)
            got, answered, _ = answer(sock)
            assert got == status and answered["connection"] == "close"
            assert eventually(lambda: closed_by_server(sock), timeout=DEADLINE)
        assert page.handle.active  # nothing acted

    def test_a_chunked_body_is_refused_too(self, page: UiServer) -> None:
        with connect(page) as sock:
            sock.sendall(request(page, "POST", "/api/kill", "Transfer-Encoding: chunked", "X-Rayflow-Token: local"))
            assert answer(sock)[0] == 413
        assert not page.handle.killed

    def test_an_empty_post_still_acts(self, page: UiServer) -> None:
        assert post(page.url + "api/deactivate", {"X-Rayflow-Token": "local"}) == (
            200,
            {"action": "deactivate", "state": "inactive"},
        )


class TestHeaders:
    """Headers are bounded in number and length (what a request can make the parser hold)."""

    @pytest.mark.parametrize(
        "headers",
        [[f"X-Many-{i}: 1" for i in range(40)], ["X-Long: " + "a" * 10_000]],
        ids=["40 headers", "a 10 KB header"],
    )
    def test_too_many_or_too_long_headers_are_refused(self, page: UiServer, headers: list[str]) -> None:
        with connect(page) as sock:
            sock.sendall(request(page, "GET", "/api/topology", *headers))
            status, _, _ = answer(sock)
            assert status in (400, 431)
            assert eventually(lambda: closed_by_server(sock), timeout=DEADLINE)


class TestTimeouts:
    def test_a_connection_that_trickles_its_headers_is_closed(self, page: UiServer) -> None:
        """Slowloris: a header line every 50 ms, never the blank line that ends them."""
        with connect(page) as sock:
            sock.sendall(f"GET /api/topology HTTP/1.1\r\nHost: 127.0.0.1:{page.port}\r\n".encode())

            def trickled_out() -> bool:
                try:
                    sock.sendall(b"X-Trickle: 1\r\n")
                except ConnectionError:
                    return True
                return closed_by_server(sock)

            assert eventually(trickled_out, timeout=DEADLINE)

    def test_a_connection_that_never_sends_is_closed(self, page: UiServer) -> None:
        with connect(page) as sock:
            assert eventually(lambda: closed_by_server(sock), timeout=DEADLINE)

    def test_a_kept_alive_connection_is_closed_once_idle(self, page: UiServer) -> None:
        with connect(page) as sock:
            sock.sendall(request(page, "GET", "/api/topology"))
            status, headers, body = answer(sock)
            assert status == 200 and headers.get("connection") != "close" and json.loads(body)["name"] == "bounded"
            assert eventually(lambda: closed_by_server(sock), timeout=DEADLINE)


class TestConnections:
    def test_a_connection_over_the_cap_closes_the_oldest(self) -> None:
        server = UiServer(ray_metrics=False, poll_secs=0.05, max_connections=4).serve(fake("capped"))
        socks = []
        try:
            for _ in range(4):
                socks.append(connect(server))
                socks[-1].sendall(request(server, "GET", "/api/topology"))
                assert answer(socks[-1])[0] == 200  # accepted and kept alive
            assert not closed_by_server(socks[0])
            socks.append(connect(server))
            assert eventually(lambda: closed_by_server(socks[0]), timeout=DEADLINE)
            socks[-1].sendall(request(server, "GET", "/api/topology"))
            assert answer(socks[-1])[0] == 200
            assert not any(closed_by_server(s) for s in socks[1:])
        finally:
            for sock in socks:
                sock.close()
            server.close()

    def test_idle_connections_cost_no_thread(self, page: UiServer) -> None:
        """Connections waiting for their headers are the loop's: threads stay the workers'."""
        assert get_json(page.url + "api/topology")["name"] == "bounded"
        before = threading.active_count()
        server = UiServer(ray_metrics=False, poll_secs=0.05, max_connections=100).serve(fake("many"))
        socks = []
        try:
            for _ in range(50):
                socks.append(connect(server))
                socks[-1].sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n".encode())
            assert get(server.url + "api/topology")[0] == 200  # served after every one was accepted
            assert threading.active_count() - before <= 8  # the serving loop, the recorder, 4 workers
        finally:
            for sock in socks:
                sock.close()
            server.close()


class TestHosts:
    """DNS rebinding: a site that points its own name at the page's address sends that name."""

    NAMES = frozenset({"driver", "driver.example.org"})

    @pytest.mark.parametrize(
        ("host", "bound", "allowed"),
        [
            ("127.0.0.1:8080", "127.0.0.1", True),
            ("localhost:8080", "127.0.0.1", True),
            ("[::1]:8080", "::1", True),
            ("attacker.example", "127.0.0.1", False),
            ("10.1.2.3:8080", "127.0.0.1", False),
            ("driver:8080", "0.0.0.0", True),
            ("DRIVER.example.org", "0.0.0.0", True),
            ("10.1.2.3:8080", "0.0.0.0", True),
            ("[fe80::1]:8080", "::", True),
            ("localhost", "0.0.0.0", True),
            ("attacker.example:8080", "0.0.0.0", False),
            ("attacker.example", "10.1.2.3", False),
            ("", "0.0.0.0", False),
            ("[nonsense", "0.0.0.0", False),
        ],
    )
    def test_a_host_is_answered_only_under_a_name_of_this_machine(self, host: str, bound: str, allowed: bool) -> None:
        assert host_allowed(host, bound, self.NAMES) is allowed

    def test_a_foreign_host_is_refused(self, page: UiServer) -> None:
        status, body = get(page.url + "api/topology", headers={"Host": "attacker.example"})
        assert status == 403 and b"attacker.example" in body


class TestToken:
    def test_the_token_is_in_no_url_and_no_log_line(self, caplog: pytest.LogCaptureFixture) -> None:
        secret = "s3cret-7f2a"
        caplog.set_level(logging.DEBUG)
        server = UiServer(token=secret, ray_metrics=False, poll_secs=0.05).serve(fake("secret"))
        try:
            assert secret not in server.url and "token" not in server.url
            assert get_json(server.url + "api/topology")["token_required"] is True
            assert post(server.url + "api/deactivate", {"X-Rayflow-Token": "guess"})[0] == 403
            assert post(server.url + "api/deactivate", {"X-Rayflow-Token": secret})[0] == 200
            assert get(server.url + f"?token={secret}")[0] == 200  # an old bookmark still opens the page
        finally:
            server.close()
        assert "/api/deactivate" in caplog.text  # requests are logged, by path
        assert secret not in caplog.text

    def test_without_a_token_the_page_is_told_so(self, page: UiServer) -> None:
        assert get_json(page.url + "api/topology")["token_required"] is False


def test_close_frees_the_port_with_connections_open() -> None:
    server = UiServer(ray_metrics=False, poll_secs=0.05).serve(fake("closing"))
    sock = connect(server)
    try:
        sock.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n".encode())
        server.close()
        assert eventually(lambda: closed_by_server(sock), timeout=DEADLINE)
        UiServer(ray_metrics=False, port=server.port).close()  # the port is free again
    finally:
        sock.close()
