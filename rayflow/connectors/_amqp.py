"""``QueueConsumer``: one AMQP 0-9-1 connection, one channel, one queue consumed, read straight
off the socket.

Why not pika for this: a consumer's work per message is three frames (``basic.deliver``, the
content header, the body) turned into one delivery, and one ack every few hundred messages.
pika builds a frame object per frame, routes each through its channel's callbacks and, with a
``BlockingConnection``, through an event queue as well; that costs a consumer more CPU than the
broker spends on the message. This module cuts the three frames out of the receive buffer in one
loop. pika still reads the URL (``pika.URLParameters``: credentials, virtual host, TLS options,
``heartbeat``, timeouts), so a URL means to the spout what it means to pika.

The contract:

- ``QueueConsumer.connect`` waits (run it off the task's thread): the TCP and TLS connect, the
  handshake, channel 1, ``basic.qos``, and the queue's declaration (passive, unless asked to
  declare it), so that a missing queue fails the connect. Each read waits at most the URL's
  ``socket_timeout``; the whole at most its ``stack_timeout``.
- ``poll``, ``consume``, ``ack``, ``nack`` and ``reject`` never wait for the broker. ``poll``
  takes what the socket holds and returns the complete deliveries; the others queue their frame
  and write what the socket takes at once, the rest on the next call. A heartbeat goes out from
  ``poll`` when nothing was written for half the negotiated interval (RabbitMQ counts any bytes
  as a heartbeat).
- ``cancel`` and ``close`` wait, at most ``socket_timeout``: for the broker's ``cancel-ok`` (the
  deliveries on their way arrive before it, and go back to the queue), and for its
  ``close-ok``, so that the acks written before it reach the broker before the socket goes (a
  socket closed with unread data is reset, and what it had not sent is lost).
- A broken connection raises ``ConnectionLost``; the broker closing the channel or the
  connection raises ``BrokerClosed`` with its reply code and text; the broker cancelling the
  consumer (its queue deleted) raises ``ConsumerCancelled``. All three are ``AmqpError``s
  (a ``RayflowError`` and a ``ConnectionError``): after any of them the consumer is dead, and
  the broker requeues every message it had not heard an ack for.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import select
import socket
import ssl
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

import pika
import pika.credentials
import pika.tcp_socket_opts

from .._errors import RayflowError

__all__ = [
    "AmqpError",
    "BrokerClosed",
    "ConnectionLost",
    "ConsumerCancelled",
    "Delivery",
    "MessageProperties",
    "QueueConsumer",
    "decode_table",
    "encode_table",
]

CHANNEL = 1
"""The one channel a consumer opens."""

_FRAME_METHOD, _FRAME_HEADER, _FRAME_BODY, _FRAME_HEARTBEAT = 1, 2, 3, 8
_FRAME_END = 0xCE
_PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
_READ_SIZE = 256 * 1024
_READS_PER_POLL = 16
"""A poll stops after this many reads, so that a broker faster than the task cannot keep one
``next_tuple`` reading forever."""


def _id(class_id: int, method_id: int) -> int:
    return class_id << 16 | method_id


_CONNECTION_START = _id(10, 10)
_CONNECTION_TUNE = _id(10, 30)
_CONNECTION_OPEN_OK = _id(10, 41)
_CONNECTION_CLOSE = _id(10, 50)
_CONNECTION_CLOSE_OK = _id(10, 51)
_CHANNEL_OPEN_OK = _id(20, 11)
_CHANNEL_CLOSE = _id(20, 40)
_QUEUE_DECLARE_OK = _id(50, 11)
_BASIC_QOS_OK = _id(60, 11)
_BASIC_CANCEL = _id(60, 30)
_BASIC_CANCEL_OK = _id(60, 31)
_BASIC_DELIVER = _id(60, 60)

_FRAME_HEAD = struct.Struct(">BHI")
_METHOD_ID = struct.Struct(">I")
_DELIVER_TAG = struct.Struct(">QB")
_CONTENT_HEAD = struct.Struct(">QH")
_DELIVER_HEAD = struct.Struct(">BHII")
"""A method frame's head and its class and method ids."""
_BARE_HEADER_BODY_HEAD = struct.Struct(">BHIHHQHBBHI")
"""A content header frame without properties (22 bytes), and the head of the frame after it."""
_SETTLE = struct.Struct(">BHIHHQBB")
"""A whole ``basic.ack``, ``basic.nack`` or ``basic.reject`` frame: 13 bytes of payload."""
_HEARTBEAT = bytes([_FRAME_HEARTBEAT, 0, 0, 0, 0, 0, 0, _FRAME_END])


class AmqpError(RayflowError, ConnectionError):
    """The connection to the broker is over. A ``ConnectionError`` too, so that whatever
    handles a lost socket handles these."""


class ConnectionLost(AmqpError):
    """The socket closed, failed, timed out, or carried something that is not AMQP 0-9-1."""


class BrokerClosed(AmqpError):
    """The broker closed the channel or the connection, and said why."""

    def __init__(self, what: str, code: int, text: str) -> None:
        super().__init__(f"the broker closed the {what}: {code} {text}")
        self.code = code
        self.text = text


class ConsumerCancelled(AmqpError):
    """The broker cancelled the consumer: its queue was deleted, or the node holding it left."""


class MessageProperties(NamedTuple):
    """A message's AMQP properties, as pika's ``BasicProperties`` names and decodes them."""

    content_type: str | bytes | None = None
    content_encoding: str | bytes | None = None
    headers: dict[str, Any] | None = None
    delivery_mode: int | None = None
    priority: int | None = None
    correlation_id: str | bytes | None = None
    reply_to: str | bytes | None = None
    expiration: str | bytes | None = None
    message_id: str | bytes | None = None
    timestamp: int | None = None
    type: str | bytes | None = None
    user_id: str | bytes | None = None
    app_id: str | bytes | None = None
    cluster_id: str | bytes | None = None


NO_PROPERTIES = MessageProperties()


class Delivery(NamedTuple):
    """One message as the broker delivered it: what ``basic.deliver`` says, then its content."""

    tag: int
    redelivered: bool
    exchange: str | bytes
    routing_key: str | bytes
    properties: MessageProperties
    body: bytes


class QueueConsumer:
    """One connection and its channel 1, consuming one queue; see the module docstring."""

    def __init__(self, sock: socket.socket, heartbeat: int, close_timeout: float) -> None:
        self._sock = sock
        self._heartbeat = heartbeat
        self._close_timeout = close_timeout
        self._in = b""
        self._out = b""
        self._written_at = self._read_at = time.monotonic()
        self._consumer_tag: bytes | None = None
        self._cancel_ok = False
        self._delivering: list[Any] | None = None
        """The delivery being assembled: its ``basic.deliver`` fields, then its properties and
        body size once the header came, then the body's parts."""
        self._closed = False

    # -- connecting (waits) -------------------------------------------------------------------
    @classmethod
    def connect(cls, params: pika.URLParameters, queue: str, prefetch: int, *, declare: bool = False) -> QueueConsumer:
        """Connect and open channel 1 with ``prefetch`` (``basic.qos``), and declare ``queue``:
        durable if asked, else passively (a missing queue fails the connect, with the broker's
        404). Waits; raises a ``ConnectionError`` (or another ``OSError``). A refused or lost
        connection is tried again ``connection_attempts`` times in all, ``retry_delay`` apart,
        as pika does; the broker's own refusal (``BrokerClosed``) is not."""
        attempts = max(1, int(params.connection_attempts or 1))
        for attempt in range(1, attempts + 1):
            try:
                return cls._connect_once(params, queue, prefetch, declare)
            except BrokerClosed:
                raise
            except OSError:
                if attempt == attempts:
                    raise
                time.sleep(float(params.retry_delay or 0))
        raise AssertionError("unreachable")  # pragma: no cover

    @classmethod
    def _connect_once(cls, params: pika.URLParameters, queue: str, prefetch: int, declare: bool) -> QueueConsumer:
        timeout = float(params.socket_timeout or 10.0)
        deadline = time.monotonic() + float(params.stack_timeout or 2 * timeout)
        sock = socket.create_connection((params.host, params.port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pika.tcp_socket_opts.set_sock_opts(params.tcp_options, sock)
            if params.ssl_options is not None:
                options = params.ssl_options
                sock = options.context.wrap_socket(sock, server_hostname=options.server_hostname or params.host)
            handshake = _Handshake(sock, deadline)
            heartbeat = handshake.open_connection(params)
            handshake.call(_method(CHANNEL, 20, 10, _short(b"")), _CHANNEL_OPEN_OK)
            handshake.call(_method(CHANNEL, 60, 10, struct.pack(">IHB", 0, prefetch, 0)), _BASIC_QOS_OK)
            passive_or_durable = 0b10 if declare else 0b01
            args = struct.pack(">H", 0) + _short(queue.encode()) + bytes([passive_or_durable]) + encode_table({})
            handshake.call(_method(CHANNEL, 50, 10, args), _QUEUE_DECLARE_OK)
            sock.setblocking(False)
            consumer = cls(sock, heartbeat, timeout)
            consumer._in = handshake.rest
            return consumer
        except BaseException:
            with contextlib.suppress(OSError):
                sock.close()
            raise

    # -- consuming (never waits) --------------------------------------------------------------
    @property
    def consuming(self) -> bool:
        return self._consumer_tag is not None

    def consume(self, queue: str) -> None:
        """Start the deliveries (``basic.consume``, manual acks). A missing queue shows as
        ``BrokerClosed`` (404) from a later ``poll``."""
        tag = f"rayflow.{uuid.uuid4().hex[:16]}".encode()
        self._consumer_tag = tag
        args = struct.pack(">H", 0) + _short(queue.encode()) + _short(tag) + bytes([0]) + encode_table({})
        self._send(_method(CHANNEL, 60, 20, args))

    def cancel(self) -> None:
        """Stop the deliveries (``basic.cancel``) and wait for the broker's ``cancel-ok`` (at
        most ``socket_timeout``): the deliveries that were on their way arrive before it, and
        are handed back to the queue (``basic.nack``, requeue), so that none stays held by a
        consumer that no longer reads."""
        if self._consumer_tag is None:
            return
        self._send(_method(CHANNEL, 60, 30, _short(self._consumer_tag) + b"\x00"))
        self._consumer_tag, self._cancel_ok = None, False
        deadline = time.monotonic() + self._close_timeout
        while not self._cancel_ok:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._lost("the broker did not confirm the consumer's cancel in time")
            select.select([self._sock], [], [], min(left, 0.05))
            self.poll()

    def ack(self, tag: int, multiple: bool = False) -> None:
        self._send(_SETTLE.pack(_FRAME_METHOD, CHANNEL, 13, 60, 80, tag, multiple, _FRAME_END))

    def nack(self, tag: int, requeue: bool = True) -> None:
        self._send(_SETTLE.pack(_FRAME_METHOD, CHANNEL, 13, 60, 120, tag, requeue << 1, _FRAME_END))

    def reject(self, tag: int, requeue: bool = False) -> None:
        self._send(_SETTLE.pack(_FRAME_METHOD, CHANNEL, 13, 60, 90, tag, requeue, _FRAME_END))

    def poll(self) -> list[Delivery]:
        """The deliveries complete in what the socket holds now (and what it held before, left
        incomplete). Sends waiting frames and, when due, a heartbeat."""
        if self._closed:
            raise ConnectionLost("the connection is closed")
        now = time.monotonic()
        if self._out:
            self._flush()
        if self._heartbeat and now - self._written_at >= self._heartbeat / 2:
            self._send(_HEARTBEAT)
        chunks = []
        for _ in range(_READS_PER_POLL):
            try:
                data = self._sock.recv(_READ_SIZE)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except OSError as exc:
                raise self._lost(f"reading from the broker failed: {exc}") from exc
            if not data:
                raise self._lost("the broker closed the connection")
            chunks.append(data)
            if len(data) < _READ_SIZE:
                break
        if not chunks:
            if self._heartbeat and now - self._read_at > 2 * self._heartbeat:
                raise self._lost(f"no heartbeat from the broker for {2 * self._heartbeat} s")
            return []
        self._read_at = now
        self._in = self._in + b"".join(chunks) if self._in else b"".join(chunks)
        try:
            return self._parse()
        except (struct.error, IndexError, ValueError) as exc:
            raise self._lost(f"a malformed frame from the broker: {exc!r}") from exc

    def close(self) -> None:
        """Write what waits, then ``connection.close``; wait for the broker's ``close-ok`` (at
        most ``socket_timeout``) and close the socket. Never raises."""
        if self._closed:
            return
        self._closed = True
        sock = self._sock
        try:
            sock.settimeout(self._close_timeout)
            close = _method(0, 10, 50, struct.pack(">H", 200) + _short(b"Normal shutdown") + struct.pack(">HH", 0, 0))
            sock.sendall(self._out + close)
            self._out = b""
            deadline = time.monotonic() + self._close_timeout
            reader = _FrameReader(sock, deadline, self._in)
            while reader.method(CHANNEL_ANY) != _CONNECTION_CLOSE_OK:
                pass
        except (OSError, struct.error, IndexError, ValueError):
            pass  # closing anyway: the broker requeues what it holds unacked
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    # -- the wire -----------------------------------------------------------------------------
    def _send(self, frame: bytes) -> None:
        self._out += frame
        self._flush()

    def _flush(self) -> None:
        out = self._out
        try:
            while out:
                sent = self._sock.send(out)
                out = out[sent:]
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except OSError as exc:
            self._out = out
            raise self._lost(f"writing to the broker failed: {exc}") from exc
        self._out = out
        self._written_at = time.monotonic()

    def _lost(self, why: str) -> ConnectionLost:
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.close()
        return ConnectionLost(why)

    def _parse(self) -> list[Delivery]:
        """Cut the complete frames off the receive buffer; the deliveries they finish."""
        data, end_of_data = self._in, len(self._in)
        delivered: list[Delivery] = []
        pos = 0
        head = _FRAME_HEAD.unpack_from
        whole = self._whole_delivery
        while end_of_data - pos >= 8:
            if data[pos] == _FRAME_METHOD and self._delivering is None:
                done = whole(data, pos, end_of_data, delivered)
                if done:
                    pos = done
                    continue
            kind, channel, size = head(data, pos)
            start, end = pos + 7, pos + 7 + size
            if end >= end_of_data:
                break
            if data[end] != _FRAME_END:
                raise ValueError(f"frame of type {kind} does not end in 0xCE")
            pos = end + 1
            if kind == _FRAME_BODY:
                self._body(data[start:end], delivered)
            elif kind == _FRAME_METHOD:
                method_id = _METHOD_ID.unpack_from(data, start)[0]
                if method_id == _BASIC_DELIVER and channel == CHANNEL:
                    self._delivering = _deliver(data, start + 4)
                else:
                    self._control(channel, method_id, data[start + 4 : end])
            elif kind == _FRAME_HEADER:
                delivering = self._delivering
                if delivering is None:
                    raise ValueError("a content header without a basic.deliver")
                body_size, flags = _CONTENT_HEAD.unpack_from(data, start + 4)
                delivering.append(_properties(data, start + 14, flags) if flags else NO_PROPERTIES)
                delivering.append(body_size)
                if body_size == 0:
                    self._body(b"", delivered)
            elif kind != _FRAME_HEARTBEAT:
                raise ValueError(f"unknown frame type {kind}")
        self._in = data[pos:] if pos < end_of_data else b""
        return delivered

    def _whole_delivery(self, data: bytes, pos: int, end_of_data: int, delivered: list[Delivery]) -> int:
        """The common case in one step: at ``pos`` a ``basic.deliver`` of channel 1, followed by
        its content header without properties and the whole body in one frame, all in the
        buffer. Where that delivery's frames end; 0 if this is not that case (the general
        path then takes the frames one by one)."""
        try:
            kind, channel, size, method_id = _DELIVER_HEAD.unpack_from(data, pos)
            if method_id != _BASIC_DELIVER or channel != CHANNEL:
                return 0
            p = pos + 11
            n = data[p]
            ours = self._consumer_tag is not None and n == len(self._consumer_tag)
            ours = ours and data.startswith(self._consumer_tag, p + 1)  # type: ignore[arg-type]
            p += 1 + n
            tag, redelivered = _DELIVER_TAG.unpack_from(data, p)
            p += 9
            n = data[p]
            exchange = data[p + 1 : p + 1 + n]
            p += 1 + n
            n = data[p]
            routing_key = data[p + 1 : p + 1 + n]
            header = pos + 8 + size
            if data[header - 1] != _FRAME_END:
                return 0
            h_kind, _, _, _, _, body_size, flags, h_end, b_kind, _, b_size = _BARE_HEADER_BODY_HEAD.unpack_from(
                data, header
            )
        except (struct.error, IndexError):
            return 0  # incomplete here: the general path waits for the rest
        body_start = header + 29
        body_end = body_start + b_size
        if (
            h_kind != _FRAME_HEADER
            or flags
            or h_end != _FRAME_END
            or b_kind != _FRAME_BODY
            or b_size != body_size
            or body_end >= end_of_data
            or data[body_end] != _FRAME_END
        ):
            return 0
        if not ours:  # for a consumer cancelled meanwhile
            self.nack(tag, requeue=True)
        else:
            body = data[body_start:body_end]
            delivered.append(Delivery(tag, redelivered == 1, _text(exchange), _text(routing_key), NO_PROPERTIES, body))
        return int(body_end) + 1

    def _body(self, part: bytes, delivered: list[Delivery]) -> None:
        delivering = self._delivering
        if delivering is None or len(delivering) < 7:
            raise ValueError("a content body without a header")
        if len(delivering) == 7 and len(part) == delivering[6]:  # the whole body in one frame
            body = part
        else:
            delivering.append(part)
            parts = delivering[7:]
            if sum(map(len, parts)) < delivering[6]:
                return
            body = b"".join(parts)
        self._delivering = None
        consumer_tag, tag, redelivered, exchange, routing_key, properties = delivering[:6]
        if consumer_tag != self._consumer_tag:  # for a consumer cancelled meanwhile
            self.nack(tag, requeue=True)
            return
        delivered.append(Delivery(tag, redelivered, exchange, routing_key, properties, body))

    def _control(self, channel: int, method_id: int, args: bytes) -> None:
        """A method frame other than a delivery: the broker closing something, or cancelling
        the consumer, raises; the rest (replies to calls that did not wait) pass."""
        if method_id in (_CONNECTION_CLOSE, _CHANNEL_CLOSE):
            code, text = _close_reason(args)
            what = "connection" if method_id == _CONNECTION_CLOSE else "channel"
            with contextlib.suppress(ConnectionError):
                self._send(_method(channel, method_id >> 16, (method_id & 0xFFFF) + 1, b""))
            self._closed = True
            with contextlib.suppress(OSError):
                self._sock.close()
            raise BrokerClosed(what, code, text)
        if method_id == _BASIC_CANCEL_OK:
            self._cancel_ok = True
        elif method_id == _BASIC_CANCEL and channel == CHANNEL:
            tag, _ = _read_short(args, 0)
            if self._consumer_tag is not None and tag == self._consumer_tag:
                raise ConsumerCancelled("the broker cancelled the consumer")


CHANNEL_ANY = -1


class _FrameReader:
    """Frames read from a blocking socket, for the calls that wait (connecting, closing)."""

    def __init__(self, sock: socket.socket, deadline: float, data: bytes = b"") -> None:
        self._sock = sock
        self._deadline = deadline
        self.rest = data

    def method(self, channel: int) -> int:
        """The next method frame's id (on ``channel``, or any); its arguments in ``args``.
        Other frames are skipped; the broker closing anything raises ``BrokerClosed``."""
        while True:
            kind, on, payload = self._frame()
            if kind != _FRAME_METHOD or (channel != CHANNEL_ANY and on != channel):
                continue
            method_id = _METHOD_ID.unpack_from(payload, 0)[0]
            self.args = payload[4:]
            if method_id in (_CONNECTION_CLOSE, _CHANNEL_CLOSE):
                code, text = _close_reason(self.args)
                raise BrokerClosed("connection" if method_id == _CONNECTION_CLOSE else "channel", code, text)
            return int(method_id)

    def _frame(self) -> tuple[int, int, bytes]:
        while True:
            data = self.rest
            if len(data) >= 8:
                kind, channel, size = _FRAME_HEAD.unpack_from(data, 0)
                if len(data) >= size + 8:
                    if data[size + 7] != _FRAME_END:
                        raise ConnectionLost("the broker's reply is not AMQP 0-9-1")
                    self.rest = data[size + 8 :]
                    return kind, channel, data[7 : size + 7]
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise ConnectionLost("the broker did not answer in time")
            try:
                self._sock.settimeout(min(left, self._sock.gettimeout() or left))
                chunk = self._sock.recv(_READ_SIZE)
            except TimeoutError as exc:
                raise ConnectionLost("the broker did not answer in time") from exc
            if not chunk:
                raise ConnectionLost("the broker closed the connection")
            self.rest += chunk


class _Handshake(_FrameReader):
    def call(self, frame: bytes, reply: int) -> bytes:
        """Send ``frame`` and wait for ``reply`` (its arguments)."""
        self._sock.sendall(frame)
        got = self.method(CHANNEL_ANY)
        if got != reply:
            raise ConnectionLost(f"the broker answered method {_name(got)}, not {_name(reply)}")
        return self.args

    def open_connection(self, params: pika.URLParameters) -> int:
        """The protocol header, start, tune and open; the heartbeat interval agreed on."""
        self._sock.sendall(_PROTOCOL_HEADER)
        if self.method(0) != _CONNECTION_START:
            raise ConnectionLost("the broker did not start AMQP 0-9-1")
        mechanisms = _start_mechanisms(self.args)
        mechanism, response = _sasl(params.credentials)
        if mechanism not in mechanisms:
            raise ConnectionLost(f"the broker does not offer {mechanism.decode()} login (it offers {mechanisms!r})")
        start_ok = (
            encode_table(_client_properties(params))
            + _short(mechanism)
            + _long(response)
            + _short(str(params.locale or "en_US").encode())
        )
        self._sock.sendall(_method(0, 10, 11, start_ok))
        if self.method(0) != _CONNECTION_TUNE:
            raise ConnectionLost("the broker did not tune the connection")
        server_channels, server_frame, server_heartbeat = struct.unpack_from(">HIH", self.args, 0)
        channels = _lowest(int(params.channel_max), server_channels)
        frame_max = _lowest(int(params.frame_max), server_frame)
        asked = params.heartbeat
        heartbeat = server_heartbeat if asked is None or callable(asked) else int(asked)
        self._sock.sendall(_method(0, 10, 31, struct.pack(">HIH", channels, frame_max, heartbeat)))
        vhost = _short(str(params.virtual_host).encode())
        self.call(_method(0, 10, 40, vhost + _short(b"") + b"\x00"), _CONNECTION_OPEN_OK)
        return heartbeat


def _name(method_id: int) -> str:
    return f"{method_id >> 16}.{method_id & 0xFFFF}"


def _lowest(ours: int, theirs: int) -> int:
    """AMQP's tune rule: the lower of two limits, where 0 means none."""
    return min(ours, theirs) if ours and theirs else ours or theirs


def _sasl(credentials: Any) -> tuple[bytes, bytes]:
    if isinstance(credentials, pika.credentials.ExternalCredentials):
        return b"EXTERNAL", b""
    username, password = str(credentials.username), str(credentials.password)
    return b"PLAIN", b"\x00" + username.encode() + b"\x00" + password.encode()


def _start_mechanisms(args: bytes) -> list[bytes]:
    offset = 2  # version major, minor
    _, offset = _decode_table_at(args, offset)
    length = struct.unpack_from(">I", args, offset)[0]
    return args[offset + 4 : offset + 4 + length].split()


def _client_properties(params: pika.URLParameters) -> dict[str, Any]:
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


def _close_reason(args: bytes) -> tuple[int, str]:
    code = struct.unpack_from(">H", args, 0)[0]
    text, _ = _read_short(args, 2)
    return int(code), text.decode("utf-8", "replace")


def _deliver(data: bytes, p: int) -> list[Any]:
    """``basic.deliver``'s fields from offset ``p``: consumer tag, delivery tag, redelivered,
    exchange, routing key."""
    n = data[p]
    consumer_tag = data[p + 1 : p + 1 + n]
    p += 1 + n
    tag, redelivered = _DELIVER_TAG.unpack_from(data, p)
    p += 9
    n = data[p]
    exchange = _text(data[p + 1 : p + 1 + n])
    p += 1 + n
    n = data[p]
    routing_key = _text(data[p + 1 : p + 1 + n])
    return [consumer_tag, tag, bool(redelivered), exchange, routing_key]


def _text(raw: bytes) -> str | bytes:
    """A short string as pika gives it: ``str`` when UTF-8, else the bytes."""
    if not raw:
        return ""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw


def _properties(data: bytes, offset: int, flags: int) -> MessageProperties:
    """The content header's properties present in ``flags``, from ``offset``."""
    while flags & 1:  # a continuation: more flag words (none defined for basic)
        flags &= ~1
        offset += 2
    values: list[Any] = []
    value: Any
    for bit in range(15, 1, -1):
        if not flags & (1 << bit):
            values.append(None)
            continue
        if bit == 13:  # headers
            value, offset = _decode_table_at(data, offset)
        elif bit in (12, 11):  # delivery mode, priority
            value, offset = data[offset], offset + 1
        elif bit == 6:  # timestamp
            value, offset = struct.unpack_from(">Q", data, offset)[0], offset + 8
        else:
            raw, offset = _read_short(data, offset)
            value = _text(raw)
        values.append(value)
    return MessageProperties(*values)


def _read_short(data: bytes, offset: int) -> tuple[bytes, int]:
    n = data[offset]
    return data[offset + 1 : offset + 1 + n], offset + 1 + n


# -- field tables -------------------------------------------------------------------------------
def decode_table(data: bytes) -> dict[str, Any]:
    """An encoded field table (its 4-byte length first) as a dict, with pika's types."""
    table, _ = _decode_table_at(data, 0)
    return table


def _decode_table_at(data: bytes, offset: int) -> tuple[dict[str, Any], int]:
    length = struct.unpack_from(">I", data, offset)[0]
    offset += 4
    end = offset + length
    table: dict[str, Any] = {}
    while offset < end:
        key, offset = _read_short(data, offset)
        table[key.decode("utf-8", "replace")], offset = _decode_value(data, offset)
    return table, end


_SCALARS: dict[int, struct.Struct] = {
    ord("b"): struct.Struct(">b"),
    ord("B"): struct.Struct(">B"),
    ord("U"): struct.Struct(">h"),
    ord("s"): struct.Struct(">h"),
    ord("u"): struct.Struct(">H"),
    ord("I"): struct.Struct(">i"),
    ord("i"): struct.Struct(">I"),
    ord("L"): struct.Struct(">q"),
    ord("l"): struct.Struct(">q"),
    ord("f"): struct.Struct(">f"),
    ord("d"): struct.Struct(">d"),
}


def _decode_value(data: bytes, offset: int) -> tuple[Any, int]:
    kind = data[offset]
    offset += 1
    scalar = _SCALARS.get(kind)
    if scalar is not None:
        return scalar.unpack_from(data, offset)[0], offset + scalar.size
    if kind == ord("t"):
        return bool(data[offset]), offset + 1
    if kind in (ord("S"), ord("x")):
        length = struct.unpack_from(">I", data, offset)[0]
        raw = data[offset + 4 : offset + 4 + length]
        return (_text(raw) if kind == ord("S") else raw), offset + 4 + length
    if kind == ord("F"):
        return _decode_table_at(data, offset)
    if kind == ord("A"):
        length = struct.unpack_from(">I", data, offset)[0]
        offset += 4
        end, items = offset + length, []
        while offset < end:
            item, offset = _decode_value(data, offset)
            items.append(item)
        return items, end
    if kind == ord("T"):
        seconds = struct.unpack_from(">Q", data, offset)[0]
        return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc), offset + 8
    if kind == ord("D"):
        places, raw = struct.unpack_from(">Bi", data, offset)
        return decimal.Decimal(raw) * decimal.Decimal(10) ** -places, offset + 5
    if kind == ord("V"):
        return None, offset
    raise ValueError(f"unknown field type {chr(kind)!r} in a field table")


def encode_table(table: dict[str, Any]) -> bytes:
    """A field table: its 4-byte length, then each key and typed value."""
    body = b"".join(_short(str(key).encode()) + _encode_value(value) for key, value in table.items())
    return _long(body)


_ENCODERS: list[tuple[type, Callable[[Any], bytes]]] = [
    (bool, lambda v: b"t" + bytes([v])),
    (int, lambda v: b"l" + struct.pack(">q", v)),
    (float, lambda v: b"d" + struct.pack(">d", v)),
    (str, lambda v: b"S" + _long(v.encode())),
    (bytes, lambda v: b"S" + _long(v)),
    (dict, lambda v: b"F" + encode_table(v)),
    (list, lambda v: b"A" + _long(b"".join(_encode_value(item) for item in v))),
    (type(None), lambda v: b"V"),
]


def _encode_value(value: Any) -> bytes:
    for kind, encode in _ENCODERS:
        if isinstance(value, kind):
            return encode(value)
    raise TypeError(f"an AMQP field table cannot hold {type(value).__name__} ({value!r})")


def _short(raw: bytes) -> bytes:
    if len(raw) > 255:
        raise ValueError(f"an AMQP short string holds at most 255 bytes, not {len(raw)}: {raw[:40]!r}...")
    return bytes([len(raw)]) + raw


def _long(raw: bytes) -> bytes:
    return struct.pack(">I", len(raw)) + raw


def _method(channel: int, class_id: int, method_id: int, args: bytes) -> bytes:
    payload = struct.pack(">HH", class_id, method_id) + args
    return _FRAME_HEAD.pack(_FRAME_METHOD, channel, len(payload)) + payload + bytes([_FRAME_END])
