"""One connection to a NATS server spoken by hand (``_nats_wire``): made and checked on a
thread that may wait, then driven by one thread that never does.

``connect`` does everything that waits for the server, each step bounded by ``timeout``: the
TCP connect, the server's ``INFO``, TLS when the URL is ``tls://`` or the server requires it
(``ssl.create_default_context()``, the host name checked; ``SSL_CERT_FILE`` names a private CA),
``CONNECT`` with the URL's credentials (``user:password@`` or a token as ``token@``) answered by
a ``PONG`` (or a ``-ERR``: refused), and the two subscriptions every spout connection has: its
pull inbox (sid ``PULL_SID``) and its API inbox (sid ``API_SID``). ``request`` then makes a
JetStream API call and waits for its JSON answer, still on the connecting thread.

From then on the socket is read and written without waiting: ``receive`` takes the frames that
arrived (the server's ``PING``s answered, its ``PONG``s counted), ``send`` writes what the socket
takes and keeps the rest for the next ``send``. (A blocking write stalled the task whenever the
server read acks slower than they came.) Only ``MAX_UNSENT`` bytes waiting make ``send`` wait,
``timeout`` at most: a server that reads nothing is then taken for gone. ``ping`` sends the
client's own ``PING``: ``pings_out`` says how many the server has not answered yet, which is how
a half-open connection (the server or the network gone without a word) is noticed. ``probe``
sends one that is not counted there: its ``PONG`` (``pongs`` reaching the number it returned)
says the server has read everything written before it, the acks of a committed checkpoint say.

A ``-ERR`` while waiting for an answer raises ``NatsError`` with the server's words, not a
timeout: a permissions violation says so at once.
"""

from __future__ import annotations

import json
import secrets
import socket
import ssl
import time
from typing import Any
from urllib.parse import unquote, urlsplit

from .wire import PING, PONG, Err, Frame, Info, Message, NatsError, parse, pub, refusal

__all__ = ["API_SID", "PULL_SID", "Connection", "connect"]

PULL_SID = 1
API_SID = 2
DEFAULT_PORT = 4222
RECV_BYTES = 1 << 18
MAX_UNSENT = 1 << 22
CLIENT_NAME = "rayflow"


def connect(url: str, timeout: float) -> Connection:
    """A connection to the server at ``url``, greeted, authenticated and subscribed to its two
    inboxes. Raises ``OSError`` (``ssl.SSLError``, ``TimeoutError``, ``ConnectionError``) when
    the server cannot be reached and ``NatsError`` when it refuses."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    sock = socket.create_connection((host, parts.port or DEFAULT_PORT), timeout=timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(sock, timeout)
        info = conn.wait_for(lambda frame: isinstance(frame, Info), timeout)
        assert isinstance(info, Info)
        options = info.options
        if parts.scheme == "tls" or options.get("tls_required"):
            if parts.scheme == "tls" and not (options.get("tls_required") or options.get("tls_available")):
                raise NatsError(f"the URL asks for TLS and the server at {host} does not offer it")
            conn.sock = sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        conn.send(_connect_command(parts.username, parts.password, options) + b"PING\r\n")
        refused = conn.wait_for(lambda frame: frame == "PONG" or isinstance(frame, Err), timeout)
        if isinstance(refused, Err):
            raise NatsError(f"the NATS server refused the connection: {refusal(refused.text)}")
        conn.pongs = 0  # the greeting's: ``probe`` counts from here
        inbox = f"_INBOX.{secrets.token_hex(11)}"
        conn.pull_inbox, conn.api_inbox = f"{inbox}.pull", f"{inbox}.api"
        conn.send(f"SUB {conn.pull_inbox} {PULL_SID}\r\nSUB {conn.api_inbox} {API_SID}\r\n".encode())
    except BaseException:
        sock.close()
        raise
    return conn


def _connect_command(user: str | None, password: str | None, info: dict[str, Any]) -> bytes:
    options: dict[str, Any] = {
        "verbose": False,
        "pedantic": False,
        "lang": "python3",
        "name": CLIENT_NAME,
        "protocol": 1,
        "headers": True,
        "no_responders": True,
    }
    if user is not None and password is not None:
        options.update(user=unquote(user), **{"pass": unquote(password)})
    elif user is not None:
        options["auth_token"] = unquote(user)
    if not info.get("headers", False):
        raise NatsError("the server does not support message headers (NATS 2.2 or later is needed)")
    return f"CONNECT {json.dumps(options)}\r\n".encode()


class Connection:
    """A NATS connection's socket, its unparsed bytes, and the inboxes ``connect`` subscribed."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self.sock = sock
        self.timeout = timeout
        self.pull_inbox = ""
        self.api_inbox = ""
        self.consumer: dict[str, Any] = {}
        """The JetStream consumer's config as the server gave it (``connect``'s caller sets it)."""
        self.pings_out = 0
        """``PING``s sent by ``ping`` and not answered yet."""
        self.pings = 0
        """``PING``s sent by ``ping`` and ``probe``."""
        self.pongs = 0
        """``PONG``s received for them (the server answers in order)."""
        self._buf = b""
        self._pos = 0
        self._frames: list[Frame] = []
        self.unsent = b""
        """Bytes ``send`` could not write yet: they go first."""
        self._room = bytearray(RECV_BYTES)
        self._view = memoryview(self._room)
        """Where ``receive`` reads into: ``recv(RECV_BYTES)`` would allocate that much anew on
        every call, and the page faults of a fresh buffer cost more than the read."""
        sock.settimeout(timeout)

    def receive(self) -> list[Frame]:
        """The frames that arrived, without waiting (``[]``: none yet). The server's ``PING``s
        are answered here and not returned. A closed connection raises ``ConnectionError``."""
        chunks = [self._buf[self._pos :]] if self._pos < len(self._buf) else []
        sock = self.sock
        closed = False
        sock.settimeout(0)
        try:
            while True:
                try:
                    size = sock.recv_into(self._room)
                except (BlockingIOError, ssl.SSLWantReadError):
                    break
                if not size:
                    closed = True
                    break
                chunks.append(self._view[:size].tobytes())
                if size < RECV_BYTES and not isinstance(sock, ssl.SSLSocket):
                    break  # the kernel had no more (a TLS socket may hold decrypted bytes)
        finally:
            sock.settimeout(self.timeout)
        if not chunks and not closed:
            return []
        buf = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        frames = self._frames
        self._pos = parse(buf, 0, frames)
        self._buf = buf
        if closed:
            said = [f"; it said: {frame.text}" for frame in frames if isinstance(frame, Err)]
            raise ConnectionError(f"the NATS server closed the connection{''.join(said[-1:])}")
        if not frames:
            return frames
        self._frames = []
        controls = [frame for frame in frames if frame.__class__ is str]
        if controls:
            if PONG in controls:
                self.pings_out = 0
                self.pongs += controls.count(PONG)
            if PING in controls:
                self.send(b"PONG\r\n")
                frames = [frame for frame in frames if frame != PING]
        return frames

    def ping(self) -> None:
        """Send a ``PING`` (its ``PONG`` resets ``pings_out``), without waiting."""
        self.pings_out += 1
        self.pings += 1
        self.send(b"PING\r\n")

    def probe(self) -> int:
        """Send a ``PING`` without waiting, not counted in ``pings_out``; returns the number
        ``pongs`` reaches once the server has read what was written before it."""
        self.pings += 1
        self.send(b"PING\r\n")
        return self.pings

    def send(self, data: bytes) -> None:
        """Write ``data`` after what waits unsent, as much as the socket takes now; the rest
        waits (``unsent``) for the next ``send``. Only when more than ``MAX_UNSENT`` bytes wait
        (the server reads far slower than the spout writes) does it wait for them to go,
        ``timeout`` at most."""
        if self.unsent:
            data = self.unsent + data
        sock = self.sock
        sock.settimeout(0)
        try:
            sent = sock.send(data)
        except (BlockingIOError, ssl.SSLWantWriteError):  # TLS: retried with the same bytes first
            sent = 0
        finally:
            sock.settimeout(self.timeout)
        self.unsent = data[sent:] if sent < len(data) else b""
        if len(self.unsent) > MAX_UNSENT:
            self.flush()

    def flush(self) -> None:
        """Write what waits unsent, waiting for the server to read it (``timeout`` at most)."""
        unsent, self.unsent = self.unsent, b""
        self.sock.sendall(unsent)

    def wait_for(self, wanted: Any, timeout: float) -> Frame:
        """Write what waits, then read until a frame for which ``wanted(frame)`` holds arrives
        (``timeout`` at most); the frames of the same read after it are dropped. A ``-ERR``
        that is not wanted raises ``NatsError``. It waits: for the connecting thread, and for
        the spout's ``close``."""
        deadline = time.monotonic() + timeout
        self.flush()
        while True:
            for frame in self.receive():
                if wanted(frame):
                    return frame
                if isinstance(frame, Err):
                    raise NatsError(f"the NATS server refused what was asked: {refusal(frame.text)}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer from the NATS server in {timeout:g} s")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(RECV_BYTES)
            finally:
                self.sock.settimeout(self.timeout)
            if not chunk:
                self.receive()  # raises, with what the server said last (a -ERR)
                raise ConnectionError("the NATS server closed the connection")
            self._buf = self._buf[self._pos :] + chunk
            self._pos = 0

    def request(self, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """A JetStream API call answered to the API inbox, waited for (``timeout``). An error
        answer raises ``NatsError`` with the API's error code (``err_code``)."""
        self.send(pub(subject, json.dumps(body).encode() if body is not None else b"", self.api_inbox))
        answer = self.wait_for(lambda frame: isinstance(frame, Message) and frame.sid == API_SID, self.timeout)
        assert isinstance(answer, Message)
        return api_answer(subject, answer)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def api_answer(subject: str, answer: Message) -> dict[str, Any]:
    """The JSON of a JetStream API answer; an error answer (or none: no responders, JetStream
    not enabled) raises ``NatsError``."""
    if not answer.payload:
        raise NatsError(f"no answer to {subject} (is JetStream enabled?)", 503)
    reply: dict[str, Any] = json.loads(answer.payload)
    error = reply.get("error")
    if error:
        raise NatsError(f"{subject}: {error.get('description', error)}", int(error.get("err_code") or 0))
    return reply
