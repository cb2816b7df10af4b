"""``QueueConsumer``: one AMQP 0-9-1 connection, one channel, one queue consumed, read straight
off a non-blocking socket.

Why not pika for this: a consumer's work per message is three frames (``basic.deliver``, the
content header, the body) turned into one delivery, and one ack every few hundred messages.
pika builds a frame object per frame and routes each through its channel's callbacks (with a
``BlockingConnection``, through an event queue as well). ``poll`` cuts a delivery's three
frames out of the receive buffer in one step instead, and leaves to pika (``codec``) only what
is rarer: message properties, and every method that is not a delivery. That this pays, and by
how much, is measured against pika's own codec by ``benchmarks/wire_codecs.py`` (figures in
``docs/brokers.md``, "The wire code").

The contract:

- ``QueueConsumer.connect`` waits (run it off the task's thread): see ``handshake``.
- ``poll``, ``consume``, ``ack``, ``nack``, ``reject`` and ``sync`` never wait for the broker.
  ``poll`` takes what the socket holds and returns the complete deliveries; the others queue
  their frame and write what the socket takes at once, the rest on the next call.
- ``sync`` asks the broker for a reply that comes only once it has handled every frame written
  before (a ``basic.qos`` with the channel's prefetch, which changes nothing: a consumer keeps
  the prefetch it started with); ``synced`` counts the replies. An ack written before sync
  ``n`` has reached the broker once ``synced >= n``: exactly-once needs to know that.
- Liveness is ``poll``'s too: it writes a heartbeat when nothing was written for half the
  negotiated interval (RabbitMQ counts any bytes as one), and takes the connection for lost
  when nothing was read for two intervals. So ``poll`` must be called every fraction of the
  interval whether or not more deliveries are wanted (the broker's prefetch bounds what it
  brings), or the broker drops the connection.
- ``cancel`` does not wait for the broker's ``cancel-ok``: the deliveries on their way for the
  cancelled consumer arrive before it, and each later ``poll`` hands them back to the queue
  (``basic.nack``, requeue) as it parses them; a ``consume`` meanwhile starts a consumer of
  another tag, whose deliveries are told apart.
- ``close(wait_secs)`` waits, at most ``wait_secs`` (the URL's ``socket_timeout`` unless
  given; 0: not at all), for the broker's ``close-ok``, so that the acks written before it
  reach the broker before the socket goes (a socket closed with unread data is reset, and what
  it had not sent is lost). A caller on a task's thread passes a short bound: a broker that
  went silent must not hold the task for the whole ``socket_timeout``.
- A broken connection raises ``ConnectionLost``; the broker closing the channel or the
  connection raises ``BrokerClosed`` with its reply code and text; the broker cancelling the
  consumer (its queue deleted) raises ``ConsumerCancelled``. All three are ``AmqpError``s:
  after any of them the consumer is dead, and the broker requeues every message it had not
  heard an ack for.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import time
import uuid
from typing import Any

import pika
import pika.spec

from .codec import (
    CHANNEL,
    FRAME_BODY,
    FRAME_END,
    FRAME_HEAD,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    HEARTBEAT,
    NO_PROPERTIES,
    Delivery,
    ack_frame,
    decode_method,
    decode_properties,
    method_frame,
    nack_frame,
    reject_frame,
)
from .errors import AmqpError, BrokerClosed, ConnectionLost, ConsumerCancelled
from .handshake import CHANNEL_ANY, BlockingReader, open_channel

__all__ = ["QueueConsumer"]

READ_SIZE = 256 * 1024
READS_PER_POLL = 16
"""A poll stops after this many reads, so that a broker faster than the task cannot keep one
``next_tuple`` reading forever."""

_BASIC_DELIVER = pika.spec.Basic.Deliver.INDEX
_DELIVER_HEAD = struct.Struct(">BHII")
"""A method frame's head and its method id (class and method)."""
_DELIVER_TAG = struct.Struct(">QB")
_HEADER_HEAD = struct.Struct(">BHIHHQH")
"""A content header frame's head, class id, weight, body size and property flags."""
_BARE_HEADER_BODY_HEAD = struct.Struct(">BHIHHQHBBHI")
"""The same, of a header without properties (22 bytes in all), and the head of the body frame
after it: the commonest delivery in one unpack."""
_METHOD_ID = struct.Struct(">I")
_CONTENT_HEAD = struct.Struct(">QH")


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
        self._delivering: list[Any] | None = None
        """The delivery being assembled frame by frame: its ``basic.deliver`` fields, then its
        properties and body size once the header came, then the body's parts."""
        self._closed = False
        self._prefetch = 0
        self._syncs = 0
        self.synced = 0
        """``sync`` calls the broker has answered (``basic.qos-ok``)."""

    @classmethod
    def connect(cls, params: pika.URLParameters, queue: str, prefetch: int, *, declare: bool = False) -> QueueConsumer:
        """Connect and open channel 1 with ``prefetch``, and declare ``queue`` (``handshake``).
        Waits; raises an ``AmqpError`` or an ``OSError``."""
        opened = open_channel(params, queue, prefetch, declare)
        consumer = cls(opened.sock, opened.heartbeat, opened.timeout)
        consumer._in = opened.rest
        consumer._prefetch = prefetch
        return consumer

    # -- consuming (never waits) --------------------------------------------------------------
    @property
    def consuming(self) -> bool:
        return self._consumer_tag is not None

    def consume(self, queue: str) -> None:
        """Start the deliveries (``basic.consume``, manual acks). A missing queue shows as
        ``BrokerClosed`` (404) from a later ``poll``."""
        tag = f"rayflow.{uuid.uuid4().hex[:16]}"
        self._consumer_tag = tag.encode()
        self._send(method_frame(CHANNEL, pika.spec.Basic.Consume(queue=queue, consumer_tag=tag)))

    def cancel(self) -> None:
        """Stop the deliveries (``basic.cancel``). Never waits: the deliveries that were on
        their way arrive before the broker's ``cancel-ok`` and each ``poll`` hands them back to
        the queue (``basic.nack``, requeue), so that none stays held by a consumer that no
        longer reads; until a ``poll`` has read them, the broker counts them as this channel's
        unacked (and requeues them if it closes)."""
        if self._consumer_tag is None:
            return
        self._send(method_frame(CHANNEL, pika.spec.Basic.Cancel(consumer_tag=self._consumer_tag.decode())))
        self._consumer_tag = None

    def ack(self, tag: int, multiple: bool = False) -> None:
        self._send(ack_frame(tag, multiple))

    def nack(self, tag: int, requeue: bool = True) -> None:
        self._send(nack_frame(tag, requeue))

    def reject(self, tag: int, requeue: bool = False) -> None:
        self._send(reject_frame(tag, requeue))

    def sync(self) -> int:
        """Ask for the broker's word that it has handled what was written so far; returns the
        number ``synced`` reaches when it has."""
        self._send(method_frame(CHANNEL, pika.spec.Basic.Qos(prefetch_count=self._prefetch)))
        self._syncs += 1
        return self._syncs

    def poll(self) -> list[Delivery]:
        """The deliveries complete in what the socket holds now (and what it held before, left
        incomplete). Writes what waits and, when due, a heartbeat; takes the connection for
        lost after two heartbeat intervals without a byte from the broker."""
        if self._closed:
            raise ConnectionLost("the connection is closed")
        now = time.monotonic()
        if self._out:
            self._flush()
        if self._heartbeat and now - self._written_at >= self._heartbeat / 2:
            self._send(HEARTBEAT)
        chunks = []
        for _ in range(READS_PER_POLL):
            try:
                data = self._sock.recv(READ_SIZE)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except OSError as exc:
                raise self._lost(f"reading from RabbitMQ failed: {exc}") from exc
            if not data:
                raise self._lost("RabbitMQ closed the connection")
            chunks.append(data)
            if len(data) < READ_SIZE:
                break
        if not chunks:
            if self._heartbeat and now - self._read_at > 2 * self._heartbeat:
                raise self._lost(
                    f"no heartbeat from RabbitMQ for {2 * self._heartbeat} s (the broker or the network is gone)"
                )
            return []
        self._read_at = now
        self._in = self._in + b"".join(chunks) if self._in else b"".join(chunks)
        try:
            return self._parse()
        except AmqpError:
            raise
        except (struct.error, IndexError, ValueError) as exc:
            raise self._lost(f"a malformed frame from RabbitMQ: {exc!r}") from exc

    def close(self, wait_secs: float | None = None) -> bool:
        """Write what waits, then ``connection.close``; wait for the broker's ``close-ok`` (at
        most ``wait_secs``, ``socket_timeout`` when ``None``; writing what waits is bounded by
        the same) and close the socket. Never raises; says whether the ``close-ok`` came (the
        broker then handled every frame written before)."""
        if self._closed:
            return False
        self._closed = True
        sock = self._sock
        wait = self._close_timeout if wait_secs is None else wait_secs
        try:
            sock.settimeout(wait)
            close = pika.spec.Connection.Close(reply_code=200, reply_text="Normal shutdown", class_id=0, method_id=0)
            sock.sendall(self._out + method_frame(0, close))
            self._out = b""
            if wait <= 0:
                return False
            reader = BlockingReader(sock, time.monotonic() + wait, self._in)
            while not isinstance(reader.method(CHANNEL_ANY), pika.spec.Connection.CloseOk):
                pass
        except (OSError, AmqpError, struct.error, IndexError, ValueError):
            return False  # closing anyway: the broker requeues what it holds unacked
        finally:
            with contextlib.suppress(OSError):
                sock.close()
        return True

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
            raise self._lost(f"writing to RabbitMQ failed: {exc}") from exc
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
        head = FRAME_HEAD.unpack_from
        whole = self._whole_delivery
        while end_of_data - pos >= 8:
            if data[pos] == FRAME_METHOD and self._delivering is None:
                done = whole(data, pos, end_of_data, delivered)
                if done:
                    pos = done
                    continue
            kind, channel, size = head(data, pos)
            start, end = pos + 7, pos + 7 + size
            if end >= end_of_data:
                break
            if data[end] != FRAME_END:
                raise ValueError(f"frame of type {kind} does not end in 0xCE")
            pos = end + 1
            if kind == FRAME_BODY:
                self._body(data[start:end], delivered)
            elif kind == FRAME_METHOD:
                if _METHOD_ID.unpack_from(data, start)[0] == _BASIC_DELIVER and channel == CHANNEL:
                    self._delivering = _deliver_fields(data, start + 4)
                else:
                    self._control(channel, decode_method(data[start:end]))
            elif kind == FRAME_HEADER:
                delivering = self._delivering
                if delivering is None:
                    raise ValueError("a content header without a basic.deliver")
                body_size, flags = _CONTENT_HEAD.unpack_from(data, start + 4)
                delivering.append(decode_properties(data[start:end], 12) if flags else NO_PROPERTIES)
                delivering.append(body_size)
                if body_size == 0:
                    self._body(b"", delivered)
            elif kind != FRAME_HEARTBEAT:
                raise ValueError(f"unknown frame type {kind}")
        self._in = data[pos:] if pos < end_of_data else b""
        return delivered

    def _whole_delivery(self, data: bytes, pos: int, end_of_data: int, delivered: list[Delivery]) -> int:
        """The common case in one step: at ``pos`` a ``basic.deliver`` of channel 1, followed by
        its content header and the whole body in one frame, all in the buffer. Where that
        delivery's frames end; 0 if this is not that case (the general path then takes the
        frames one by one)."""
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
            if data[header - 1] != FRAME_END:
                return 0
            h_kind, _, h_size, _, _, body_size, flags, h_end, b_kind, _, b_size = _BARE_HEADER_BODY_HEAD.unpack_from(
                data, header
            )
            body = header + 8 + h_size
            if flags:  # properties: the header is longer, the body frame further on
                b_kind, _, b_size = FRAME_HEAD.unpack_from(data, body)
                h_end = data[body - 1]
            if h_kind != FRAME_HEADER or h_end != FRAME_END:
                return 0
        except (struct.error, IndexError):
            return 0  # incomplete here: the general path waits for the rest
        body_start = body + 7
        body_end = body_start + b_size
        if b_kind != FRAME_BODY or b_size != body_size or body_end >= end_of_data or data[body_end] != FRAME_END:
            return 0
        if not ours:  # for a consumer cancelled meanwhile
            self.nack(tag, requeue=True)
        else:
            properties = decode_properties(data[header + 7 : body - 1], 12) if flags else NO_PROPERTIES
            body_bytes = data[body_start:body_end]
            delivered.append(
                Delivery(tag, redelivered == 1, _text(exchange), _text(routing_key), properties, body_bytes)
            )
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

    def _control(self, channel: int, method: Any) -> None:
        """A method other than a delivery: the broker closing something, or cancelling the
        consumer, raises; the rest (replies to calls that did not wait) pass."""
        if isinstance(method, (pika.spec.Connection.Close, pika.spec.Channel.Close)):
            closing_connection = isinstance(method, pika.spec.Connection.Close)
            close_ok = pika.spec.Connection.CloseOk() if closing_connection else pika.spec.Channel.CloseOk()
            with contextlib.suppress(OSError, AmqpError):
                self._send(method_frame(channel, close_ok))
            self._closed = True
            with contextlib.suppress(OSError):
                self._sock.close()
            what = "connection" if closing_connection else "channel"
            raise BrokerClosed(what, int(method.reply_code), str(method.reply_text))
        if isinstance(method, pika.spec.Basic.QosOk):
            self.synced += 1
        elif isinstance(method, pika.spec.Basic.Cancel) and channel == CHANNEL:
            if self._consumer_tag is not None and method.consumer_tag.encode() == self._consumer_tag:
                raise ConsumerCancelled(
                    "RabbitMQ cancelled the consumer (the queue was deleted, or its node left the cluster)"
                )


def _deliver_fields(data: bytes, p: int) -> list[Any]:
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
