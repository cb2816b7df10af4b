"""The NATS protocol as the JetStream spout speaks it (``rayflow.connectors._nats.wire`` and
``_nats.connection``): every frame a server sends, frames cut anywhere, status messages, the ack
subject's metadata, and the handshake against a scripted server. No NATS needed."""

from __future__ import annotations

import json
import select
import socket
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rayflow.connectors._nats.connection import API_SID, PULL_SID, Connection, api_answer, connect
from rayflow.connectors._nats.wire import (
    OK,
    PING,
    PONG,
    Err,
    Frame,
    Info,
    Message,
    NatsError,
    ack_metadata,
    header_fields,
    parse,
    pub,
    status,
)

ACK = "$JS.ACK.ORDERS.rayflow.3.1042.77.1732540000000000000.5"
DELIVERY = f"MSG orders.eu 1 {ACK} 12\r\nhello\r\nworld\r\n".encode()
STATUS_408 = b"HMSG _INBOX.x.pull 1 32 32\r\nNATS/1.0 408 Request Timeout\r\n\r\n\r\n"
WITH_HEADERS = f"HMSG orders.eu 1 {ACK} 32 35\r\nNATS/1.0\r\nTrace: a1\r\nKind: b\r\n\r\nabc\r\n".encode()
STREAM = (
    b'INFO {"server_id":"N1","headers":true}\r\n'
    + DELIVERY
    + b"PING\r\n"
    + WITH_HEADERS
    + b"PONG\r\n+OK\r\n"
    + b"MSG _INBOX.x.api 2 2\r\n{}\r\n"
    + STATUS_408
    + b"-ERR 'Permissions Violation'\r\n"
)


def parsed(data: bytes) -> tuple[list[Frame], int]:
    frames: list[Frame] = []
    return frames, parse(data, 0, frames)


class TestParse:
    def test_a_delivery_keeps_its_reply_and_a_payload_holding_crlf(self) -> None:
        frames, end = parsed(DELIVERY)
        assert frames == [Message(1, "orders.eu", ACK, None, b"hello\r\nworld")] and end == len(DELIVERY)

    def test_a_message_without_reply(self) -> None:
        assert parsed(b"MSG a.b 7 3\r\nabc\r\n")[0] == [Message(7, "a.b", None, None, b"abc")]

    def test_headers_are_kept_raw_and_apart_from_the_payload(self) -> None:
        [msg], _ = parsed(WITH_HEADERS)
        assert isinstance(msg, Message)
        assert (msg.headers, msg.payload) == (b"NATS/1.0\r\nTrace: a1\r\nKind: b\r\n\r\n", b"abc")

    def test_every_frame_a_server_sends(self) -> None:
        frames, end = parsed(STREAM)
        assert end == len(STREAM)
        assert [type(f).__name__ if not isinstance(f, str) else f for f in frames] == [
            "Info",
            "Message",
            PING,
            "Message",
            PONG,
            OK,
            "Message",
            "Message",
            "Err",
        ]
        assert frames[0] == Info({"server_id": "N1", "headers": True})
        assert frames[-1] == Err("Permissions Violation")

    def test_an_unfinished_frame_is_left_for_the_next_read(self) -> None:
        frames, end = parsed(DELIVERY + DELIVERY[:-3])
        assert len(frames) == 1 and end == len(DELIVERY)

    @given(st.lists(st.integers(0, len(STREAM)), max_size=6))
    def test_cut_anywhere_the_frames_are_the_same(self, cuts: list[int]) -> None:
        """Bytes arriving in any pieces parse to the frames of the whole."""
        frames: list[Frame] = []
        buf, start = b"", 0
        for stop in [*sorted(cuts), len(STREAM)]:
            buf += STREAM[start:stop]
            start = stop
            buf = buf[parse(buf, 0, frames) :]
        assert buf == b"" and frames == parsed(STREAM)[0]

    def test_bytes_outside_the_protocol_raise(self) -> None:
        with pytest.raises(NatsError, match="outside the NATS protocol"):
            parsed(b"HELLO\r\n")
        with pytest.raises(NatsError, match="outside the NATS protocol"):
            parsed(b"MSG a\r\n")
        with pytest.raises(NatsError, match="does not end where its size says"):
            parsed(b"MSG a 1 2\r\nabc\r\n")


class TestStatus:
    def test_the_end_of_a_pull_request(self) -> None:
        [msg], _ = parsed(STATUS_408)
        assert isinstance(msg, Message) and msg.payload == b""
        assert status(msg.headers) == (408, "Request Timeout")

    def test_a_status_without_description_and_a_heartbeat_with_headers(self) -> None:
        assert status(b"NATS/1.0 404\r\n\r\n") == (404, "")
        assert status(b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 9\r\n\r\n") == (100, "Idle Heartbeat")

    def test_an_ordinary_message_has_none(self) -> None:
        assert status(None) == (0, "")
        assert status(b"NATS/1.0\r\nTrace: a1\r\n\r\n") == (0, "")


class TestHeaderFields:
    def test_fields_as_nats_py_gives_them(self) -> None:
        block = b"NATS/1.0\r\nTrace: a1 \r\nKind:b\r\nKind: c\r\nbad name: x\r\nno colon\r\n\xff: y\r\n\r\n"
        assert header_fields(block) == {"Trace": "a1", "Kind": "c"}

    def test_no_fields_is_none(self) -> None:
        assert header_fields(None) is None
        assert header_fields(b"NATS/1.0\r\n\r\n") is None


class TestAckMetadata:
    def test_both_forms_of_the_ack_subject(self) -> None:
        assert ack_metadata(ACK) == (3, 1042)
        v2 = "$JS.ACK.hub.ACCHASH.ORDERS.rayflow.2.99.12.1732540000000000000.0.tok"
        assert ack_metadata(v2) == (2, 99)

    def test_another_subject_raises(self) -> None:
        with pytest.raises(NatsError, match="not a JetStream ack subject"):
            ack_metadata("_INBOX.abc")


def test_pub_with_and_without_a_reply() -> None:
    assert pub("a.b", b"xyz") == b"PUB a.b 3\r\nxyz\r\n"
    assert pub("$JS.API.X", b"", "_INBOX.i") == b"PUB $JS.API.X _INBOX.i 0\r\n\r\n"


def test_an_api_error_carries_its_code() -> None:
    error = json.dumps({"error": {"code": 404, "err_code": 10014, "description": "consumer not found"}}).encode()
    with pytest.raises(NatsError, match="consumer not found") as raised:
        api_answer("$JS.API.CONSUMER.INFO.S.d", Message(API_SID, "_INBOX.i", None, None, error))
    assert raised.value.code == 10014
    with pytest.raises(NatsError, match="is JetStream enabled") as raised:
        api_answer("$JS.API.CONSUMER.INFO.S.d", Message(API_SID, "_INBOX.i", None, b"NATS/1.0 503\r\n\r\n", b""))
    assert raised.value.code == 503
    assert api_answer("x", Message(API_SID, "_INBOX.i", None, None, b'{"num_pending": 3}')) == {"num_pending": 3}


# -- the connection, against a scripted server --------------------------------------------------
class ScriptedServer:
    """Accepts one connection, sends ``INFO``, records what the client sends, and answers the
    first ``PING`` with ``answer``."""

    def __init__(self, info: dict[str, object], answer: bytes = b"PONG\r\n") -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(5)
        self.port = self.listener.getsockname()[1]
        self.received = b""
        self._info, self._answer = info, answer
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        client, _ = self.listener.accept()
        client.settimeout(5)
        with client:
            client.sendall(f"INFO {json.dumps(self._info)}\r\n".encode())
            while b"PING\r\n" not in self.received:
                chunk = client.recv(4096)
                if not chunk:
                    return
                self.received += chunk
            client.sendall(self._answer)
            while b"SUB" not in self.received and self._answer.startswith(b"PONG"):
                chunk = client.recv(4096)
                if not chunk:
                    return
                self.received += chunk

    def connect_line(self) -> dict[str, object]:
        line = self.received.split(b"\r\n")[0]
        assert line.startswith(b"CONNECT ")
        options: dict[str, object] = json.loads(line[8:])
        return options

    def close(self) -> None:
        self._thread.join(timeout=5)
        self.listener.close()


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[ScriptedServer]:
    info, answer = getattr(request, "param", ({"headers": True}, b"PONG\r\n"))
    scripted = ScriptedServer(info, answer)
    yield scripted
    scripted.close()


class TestConnect:
    def test_credentials_of_the_url_and_the_two_inboxes(self, server: ScriptedServer) -> None:
        conn = connect(f"nats://al%40ice:s3cret@127.0.0.1:{server.port}", timeout=5)
        server.close()
        options = server.connect_line()
        assert (options["user"], options["pass"], options["headers"]) == ("al@ice", "s3cret", True)
        assert f"SUB {conn.pull_inbox} {PULL_SID}\r\nSUB {conn.api_inbox} {API_SID}\r\n".encode() in server.received
        conn.close()

    def test_a_token(self, server: ScriptedServer) -> None:
        connect(f"nats://t0ken@127.0.0.1:{server.port}", timeout=5).close()
        server.close()
        options = server.connect_line()
        assert options["auth_token"] == "t0ken" and "user" not in options

    @pytest.mark.parametrize("server", [({"headers": True}, b"-ERR 'Authorization Violation'\r\n")], indirect=True)
    def test_a_refusal_raises_with_the_servers_words(self, server: ScriptedServer) -> None:
        """Refused (the ``-ERR`` read first) or closed after it: either way the words are kept."""
        with pytest.raises((NatsError, ConnectionError), match="Authorization Violation"):
            connect(f"nats://127.0.0.1:{server.port}", timeout=5)

    @pytest.mark.parametrize("server", [({"headers": True}, b"")], indirect=True)
    def test_tls_asked_of_a_server_without_it_raises(self, server: ScriptedServer) -> None:
        with pytest.raises(NatsError, match="does not offer it"):
            connect(f"tls://127.0.0.1:{server.port}", timeout=5)


def test_receive_answers_pings_and_takes_what_arrived() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        conn = Connection(ours, timeout=5)
        assert conn.receive() == []
        theirs.sendall(b"PING\r\n" + DELIVERY[:20])
        assert eventually_frames(conn) == []
        theirs.settimeout(5)
        assert theirs.recv(100) == b"PONG\r\n"
        theirs.sendall(DELIVERY[20:])
        assert eventually_frames(conn) == [Message(1, "orders.eu", ACK, None, b"hello\r\nworld")]
        theirs.close()
        with pytest.raises(ConnectionError):
            eventually_frames(conn)


def test_a_server_that_closes_says_why() -> None:
    """The ``-ERR`` before the close is returned, or, read with the close, is in its error."""
    ours, theirs = socket.socketpair()
    with ours:
        conn = Connection(ours, timeout=5)
        theirs.sendall(b"-ERR 'Authorization Violation'\r\n")
        theirs.close()
        said: list[Frame] = []
        with pytest.raises(ConnectionError) as closed:
            for _ in range(3):
                said += eventually_frames(conn)
        assert said == [Err("Authorization Violation")] or "it said: Authorization" in str(closed.value)


def eventually_frames(conn: Connection) -> list[Frame]:
    """What ``receive`` returns once the socket has something to read (5 s at most)."""
    readable, _, _ = select.select([conn.sock], [], [], 5)
    assert readable
    return conn.receive()


def test_an_err_while_waiting_for_an_answer_raises_with_the_servers_words() -> None:
    """A permissions violation is the server's answer, not a timeout: the error says which
    rights the spout needs."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        conn = Connection(ours, timeout=5)
        conn.api_inbox = "_INBOX.api"
        theirs.sendall(b"-ERR 'Permissions Violation for Publish to \"$JS.API.CONSUMER.INFO.S.d\"'\r\n")
        with pytest.raises(NatsError, match="Permissions Violation for Publish") as refused:
            conn.request("$JS.API.CONSUMER.INFO.S.d")
        assert "publish to $JS.API.>" in str(refused.value)


def test_pings_of_the_client_are_counted_until_answered() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        conn = Connection(ours, timeout=5)
        conn.ping()
        conn.ping()
        assert conn.pings_out == 2
        theirs.settimeout(5)
        assert theirs.recv(100) == b"PING\r\nPING\r\n"
        theirs.sendall(b"PONG\r\n")
        assert eventually_frames(conn) == ["PONG"]
        assert conn.pings_out == 0
