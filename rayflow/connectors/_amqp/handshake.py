"""Opening a consumer's connection, which waits for the broker (run it off the task's thread).

``open_channel`` makes the TCP connection (and TLS, for ``amqps://``), speaks the handshake
(protocol header, ``connection.start``/``start-ok`` with the URL's credentials, ``tune``/
``tune-ok``, ``open``), opens channel 1, sets its prefetch (``basic.qos``) and declares the
queue: passively unless asked to declare it, so that a missing queue fails the connect with the
broker's 404. Each read waits at most the URL's ``socket_timeout``; the whole at most its
``stack_timeout``. What it returns is the socket, non-blocking from then on, and the heartbeat
interval agreed on.

``BlockingReader`` reads whole frames from a socket that may wait; the consumer's ``close``
uses it too, to wait for the broker's ``close-ok``.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from typing import Any, NamedTuple

import pika
import pika.credentials
import pika.exceptions
import pika.spec
import pika.tcp_socket_opts

from .codec import CHANNEL, FRAME_END, FRAME_HEAD, FRAME_METHOD, PROTOCOL_HEADER, decode_method, method_frame
from .errors import AmqpError, BrokerClosed, ConnectionLost

__all__ = ["CHANNEL_ANY", "BlockingReader", "Opened", "client_properties", "open_channel"]

CHANNEL_ANY = -1
READ_SIZE = 256 * 1024


class Opened(NamedTuple):
    """A connection with channel 1 open and the queue declared."""

    sock: socket.socket
    heartbeat: int
    """Seconds, as agreed on with the broker (0: none)."""
    timeout: float
    """The URL's ``socket_timeout``: what the calls that wait later (cancel, close) may wait."""
    rest: bytes
    """What the broker sent after the queue's ``declare-ok`` (deliveries may follow at once)."""


def open_channel(params: pika.URLParameters, queue: str, prefetch: int, declare: bool) -> Opened:
    """Connect, open channel 1 with ``prefetch`` and declare ``queue`` (see the module
    docstring). Waits; raises ``AmqpError`` (``BrokerClosed`` when the broker refused) or an
    ``OSError``. A refused or lost connection is tried ``connection_attempts`` times in all,
    ``retry_delay`` apart, as pika does; the broker's own refusal is not tried again."""
    attempts = max(1, int(params.connection_attempts or 1))
    for attempt in range(1, attempts + 1):
        try:
            return _open_once(params, queue, prefetch, declare)
        except BrokerClosed:
            raise
        except (OSError, AmqpError):
            if attempt == attempts:
                raise
            time.sleep(float(params.retry_delay or 0))
    raise AssertionError("unreachable")  # pragma: no cover


def _open_once(params: pika.URLParameters, queue: str, prefetch: int, declare: bool) -> Opened:
    timeout = float(params.socket_timeout or 10.0)
    deadline = time.monotonic() + float(params.stack_timeout or 2 * timeout)
    sock = socket.create_connection((params.host, params.port), timeout=timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pika.tcp_socket_opts.set_sock_opts(params.tcp_options, sock)
        if params.ssl_options is not None:
            options = params.ssl_options
            sock = options.context.wrap_socket(sock, server_hostname=options.server_hostname or params.host)
        reader = BlockingReader(sock, deadline)
        heartbeat = _open_connection(reader, params)
        reader.call(pika.spec.Channel.Open(), pika.spec.Channel.OpenOk)
        reader.call(pika.spec.Basic.Qos(prefetch_count=prefetch), pika.spec.Basic.QosOk)
        declared = pika.spec.Queue.Declare(queue=queue, passive=not declare, durable=declare)
        reader.call(declared, pika.spec.Queue.DeclareOk)
        sock.setblocking(False)
        return Opened(sock, heartbeat, timeout, reader.rest)
    except BaseException:
        with contextlib.suppress(OSError):
            sock.close()
        raise


def _open_connection(reader: BlockingReader, params: pika.URLParameters) -> int:
    """The protocol header, start, tune and open; the heartbeat interval agreed on."""
    reader.send(PROTOCOL_HEADER)
    start = reader.method(0)
    if not isinstance(start, pika.spec.Connection.Start):
        raise ConnectionLost(f"the broker did not start AMQP 0-9-1 (it sent {start.NAME})")
    mechanism, response = params.credentials.response_for(start)
    if mechanism is None:
        kind = type(params.credentials).__name__
        raise AmqpError(
            f"RabbitMQ does not offer the login the URL asks for ({kind}; it offers {start.mechanisms!r}): "
            "check the URL's credentials and the broker's auth_mechanisms"
        )
    try:
        start_ok = pika.spec.Connection.StartOk(
            client_properties=client_properties(params),
            mechanism=mechanism,
            response=response,
            locale=str(params.locale or "en_US"),
        )
        reader.send(method_frame(0, start_ok))
    except (pika.exceptions.AMQPError, struct.error, ValueError, TypeError) as exc:
        raise AmqpError(f"the URL's client_properties cannot be sent to RabbitMQ: {exc!r}") from exc
    tune = reader.method(0)
    if not isinstance(tune, pika.spec.Connection.Tune):
        raise ConnectionLost(f"the broker did not tune the connection (it sent {tune.NAME})")
    asked = params.heartbeat
    heartbeat = int(tune.heartbeat) if asked is None or callable(asked) else int(asked)
    tune_ok = pika.spec.Connection.TuneOk(
        channel_max=_lowest(int(params.channel_max), int(tune.channel_max)),
        frame_max=_lowest(int(params.frame_max), int(tune.frame_max)),
        heartbeat=heartbeat,
    )
    reader.send(method_frame(0, tune_ok))
    reader.call(pika.spec.Connection.Open(virtual_host=str(params.virtual_host)), pika.spec.Connection.OpenOk, 0)
    return heartbeat


def client_properties(params: pika.URLParameters) -> dict[str, Any]:
    """What the spout tells the broker about itself, with the URL's ``client_properties``."""
    properties: dict[str, Any] = {
        "product": "rayflow",
        "capabilities": {
            "authentication_failure_close": True,
            "basic.nack": True,
            "connection.blocked": True,
            "consumer_cancel_notify": True,
        },
    }
    properties.update(params.client_properties or {})
    return properties


def _lowest(ours: int, theirs: int) -> int:
    """AMQP's tune rule: the lower of two limits, where 0 means none."""
    return min(ours, theirs) if ours and theirs else ours or theirs


class BlockingReader:
    """Whole frames read from a socket that may wait, until ``deadline`` (``time.monotonic``)."""

    def __init__(self, sock: socket.socket, deadline: float, data: bytes = b"") -> None:
        self._sock = sock
        self._deadline = deadline
        self.rest = data
        """Bytes read and not made into frames yet."""

    def send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def call(self, method: Any, reply: Any, channel: int = CHANNEL) -> Any:
        """Send ``method`` on ``channel`` and wait for its ``reply`` (a pika method class)."""
        self.send(method_frame(channel, method))
        got = self.method(CHANNEL_ANY)
        if not isinstance(got, reply):
            raise ConnectionLost(f"RabbitMQ answered {method.NAME} with {got.NAME}, not {reply.NAME}")
        return got

    def method(self, channel: int) -> Any:
        """The next method (a pika method object) on ``channel``, or on any with
        ``CHANNEL_ANY``; other frames are skipped. The broker closing the channel or the
        connection raises ``BrokerClosed``."""
        while True:
            kind, on, payload = self._frame()
            if kind != FRAME_METHOD or (channel != CHANNEL_ANY and on != channel):
                continue
            method = decode_method(payload)
            if isinstance(method, (pika.spec.Connection.Close, pika.spec.Channel.Close)):
                what = "connection" if isinstance(method, pika.spec.Connection.Close) else "channel"
                raise BrokerClosed(what, int(method.reply_code), str(method.reply_text))
            return method

    def _frame(self) -> tuple[int, int, bytes]:
        while True:
            data = self.rest
            if len(data) >= 8:
                kind, channel, size = FRAME_HEAD.unpack_from(data, 0)
                if len(data) >= size + 8:
                    if data[size + 7] != FRAME_END:
                        raise ConnectionLost("RabbitMQ's reply is not AMQP 0-9-1 (is that port an AMQP port?)")
                    self.rest = data[size + 8 :]
                    return kind, channel, data[7 : size + 7]
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise ConnectionLost("RabbitMQ did not answer in time")
            try:
                self._sock.settimeout(min(left, self._sock.gettimeout() or left))
                chunk = self._sock.recv(READ_SIZE)
            except TimeoutError as exc:
                raise ConnectionLost("RabbitMQ did not answer in time") from exc
            if not chunk:
                raise ConnectionLost("RabbitMQ closed the connection (a refused login closes it too)")
            self.rest += chunk
