"""``QueueConsumer``'s wire format, without a broker: frames as RabbitMQ writes them (built here
byte by byte, and with pika's own encoders where pika has one) go in through a stand-in socket,
deliveries and errors come out."""

from __future__ import annotations

import datetime
import decimal
import socket
import struct
from typing import Any

import pytest

pika = pytest.importorskip("pika")

from rayflow.connectors._amqp.codec import NO_PROPERTIES, Delivery  # noqa: E402
from rayflow.connectors._amqp.consumer import QueueConsumer  # noqa: E402
from rayflow.connectors._amqp.errors import BrokerClosed, ConnectionLost, ConsumerCancelled  # noqa: E402

CONSUMER_TAG = b"rayflow.test"


_ALWAYS_READABLE = socket.socketpair()
_ALWAYS_READABLE[1].send(b"!")


class StandInSocket:
    """Gives what a test queued, a chunk per ``recv``, then 'would block'; keeps what is sent.
    Always readable for ``select`` (a socket pair holding a byte)."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.sent = b""
        self.closed = False

    def fileno(self) -> int:
        return _ALWAYS_READABLE[0].fileno()

    def recv(self, size: int) -> bytes:
        if not self.chunks:
            raise BlockingIOError
        chunk = self.chunks.pop(0)
        if len(chunk) > size:
            self.chunks.insert(0, chunk[size:])
            chunk = chunk[:size]
        return chunk

    def send(self, data: bytes) -> int:
        self.sent += data
        return len(data)

    def close(self) -> None:
        self.closed = True


def frame(kind: int, payload: bytes, channel: int = 1) -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + b"\xce"


def short(raw: bytes) -> bytes:
    return bytes([len(raw)]) + raw


def deliver(tag: int, *, redelivered: bool = False, consumer_tag: bytes = CONSUMER_TAG) -> bytes:
    args = short(consumer_tag) + struct.pack(">QB", tag, redelivered) + short(b"amq.topic") + short(b"orders.eu")
    return frame(1, struct.pack(">HH", 60, 60) + args)


def message(tag: int, body: bytes, properties: Any = None, *, frame_max: int = 0, **deliver_kw: Any) -> bytes:
    """The frames of one delivery; the body cut into frames of ``frame_max`` bytes if given."""
    encoded = b"".join(properties.encode()) if properties is not None else struct.pack(">H", 0)
    header = frame(2, struct.pack(">HHQ", 60, 0, len(body)) + encoded)
    size = frame_max or max(len(body), 1)
    bodies = b"".join(frame(3, body[i : i + size]) for i in range(0, len(body), size))
    return deliver(tag, **deliver_kw) + header + bodies


def consumer(*chunks: bytes) -> tuple[QueueConsumer, StandInSocket]:
    sock = StandInSocket()
    sock.chunks = list(chunks)
    made = QueueConsumer(sock, heartbeat=0, close_timeout=1.0)  # type: ignore[arg-type]
    made._consumer_tag = CONSUMER_TAG
    return made, sock


def methods_sent(sent: bytes) -> list[tuple[int, int, bytes]]:
    """(class id, method id, arguments) of each method frame in ``sent``."""
    found, pos = [], 0
    while pos < len(sent):
        kind, _, size = struct.unpack_from(">BHI", sent, pos)
        payload = sent[pos + 7 : pos + 7 + size]
        assert sent[pos + 7 + size] == 0xCE
        if kind == 1:
            class_id, method_id = struct.unpack_from(">HH", payload)
            found.append((class_id, method_id, payload[4:]))
        pos += size + 8
    return found


class TestDeliveries:
    def test_a_burst_of_messages_becomes_deliveries_in_order(self) -> None:
        """Three messages in one read: three deliveries with tag, flags, exchange, routing key
        and body as the broker sent them."""
        data = message(1, b"a") + message(2, b'{"n": 2}', redelivered=True) + message(3, b"")
        got, _ = consumer(data)
        assert got.poll() == [
            Delivery(1, False, "amq.topic", "orders.eu", NO_PROPERTIES, b"a"),
            Delivery(2, True, "amq.topic", "orders.eu", NO_PROPERTIES, b'{"n": 2}'),
            Delivery(3, False, "amq.topic", "orders.eu", NO_PROPERTIES, b""),
        ]

    def test_a_message_cut_anywhere_across_reads_comes_out_once_and_whole(self) -> None:
        """The socket may split the frames at any byte: every split gives the same delivery,
        on the read that completes it and not before."""
        data = message(7, b"hello world") + message(8, b"second")
        for cut in range(1, len(data)):
            got, sock = consumer(data[:cut])
            first = got.poll()
            sock.chunks.append(data[cut:])
            assert [d.tag for d in first + got.poll()] == [7, 8], cut

    def test_a_body_larger_than_a_frame_is_joined(self) -> None:
        body = bytes(range(256)) * 40
        got, _ = consumer(message(1, body, frame_max=1000))
        assert got.poll()[0].body == body

    def test_properties_decode_as_pika_encodes_them(self) -> None:
        """Every property pika can send, headers of every field type included, whole in one
        read or cut anywhere."""
        properties = pika.BasicProperties(
            content_type="application/json",
            content_encoding="utf-8",
            headers={
                "x-delivery-count": 3,
                "text": "é",
                "flag": True,
                "nested": {"list": [1, "two", None]},
                "big": 2**40,
                "ratio": decimal.Decimal("1.25"),
                "when": datetime.datetime(2026, 11, 25, tzinfo=datetime.timezone.utc),
            },
            delivery_mode=2,
            priority=5,
            correlation_id="c-1",
            reply_to="replies",
            expiration="60000",
            message_id="m-1",
            timestamp=1_764_000_000,
            type="order",
            user_id="guest",
            app_id="shop",
            cluster_id="eu",
        )
        data = message(1, b"x", properties)
        got, _ = consumer(data)
        decoded = got.poll()[0].properties
        expected = pika.BasicProperties()
        expected.decode(b"".join(properties.encode()))
        assert vars(decoded) == vars(expected)
        assert decoded.headers is not None and decoded.headers["x-delivery-count"] == 3
        for cut in range(1, len(data), 7):
            got, sock = consumer(data[:cut])
            first = got.poll()
            sock.chunks.append(data[cut:])
            assert [vars(d.properties) for d in first + got.poll()] == [vars(expected)], cut

    def test_heartbeats_and_replies_between_messages_pass(self) -> None:
        heartbeat = frame(8, b"", channel=0)
        consume_ok = frame(1, struct.pack(">HH", 60, 21) + short(CONSUMER_TAG))
        got, _ = consumer(consume_ok + message(1, b"a") + heartbeat + message(2, b"b"))
        assert [d.body for d in got.poll()] == [b"a", b"b"]

    def test_deliveries_for_a_cancelled_consumer_go_back_to_the_queue(self) -> None:
        """After ``cancel``, what was already on its way is nacked with requeue, never returned."""
        cancel_ok = frame(1, struct.pack(">HH", 60, 31) + short(CONSUMER_TAG))
        got, sock = consumer(message(4, b"late") + message(5, b"later") + cancel_ok)
        got.cancel()
        assert got.poll() == []
        sent = methods_sent(sock.sent)
        assert sent[0][:2] == (60, 30)  # basic.cancel
        nacks = [struct.unpack(">QB", args) for class_id, method_id, args in sent if (class_id, method_id) == (60, 120)]
        assert nacks == [(4, 0b10), (5, 0b10)]  # requeue, not multiple

    def test_cancel_does_not_wait_for_the_broker(self) -> None:
        """``cancel`` writes ``basic.cancel`` and returns: nothing is read until the next poll,
        however long the broker takes to answer (it runs on the task's event loop)."""
        got, sock = consumer(message(4, b"late"))
        got.cancel()
        assert sock.chunks and not got.consuming  # the socket was not read
        assert methods_sent(sock.sent)[0][:2] == (60, 30)


class TestSettling:
    def test_acks_nacks_and_rejects_are_the_methods_amqp_defines(self) -> None:
        got, sock = consumer()
        got.ack(10, multiple=True)
        got.ack(11)
        got.nack(12, requeue=True)
        got.reject(13, requeue=False)
        assert [(c, m, struct.unpack(">QB", a)) for c, m, a in methods_sent(sock.sent)] == [
            (60, 80, (10, 1)),
            (60, 80, (11, 0)),
            (60, 120, (12, 0b10)),
            (60, 90, (13, 0)),
        ]


class TestBrokerEnds:
    def test_a_closed_channel_raises_with_the_brokers_reason(self) -> None:
        """A consume on a missing queue: the broker closes the channel with 404."""
        text = b"NOT_FOUND - no queue 'orders' in vhost '/'"
        close = frame(1, struct.pack(">HH", 20, 40) + struct.pack(">H", 404) + short(text) + struct.pack(">HH", 60, 20))
        got, sock = consumer(close)
        with pytest.raises(BrokerClosed, match="404 NOT_FOUND - no queue 'orders'") as raised:
            got.poll()
        assert raised.value.code == 404
        assert methods_sent(sock.sent) == [(20, 41, b"")]  # close-ok
        assert sock.closed

    def test_a_cancelled_consumer_raises(self) -> None:
        cancel = frame(1, struct.pack(">HH", 60, 30) + short(CONSUMER_TAG) + b"\x00")
        got, _ = consumer(message(1, b"a") + cancel)
        with pytest.raises(ConsumerCancelled):
            got.poll()

    def test_end_of_stream_and_garbage_are_a_lost_connection(self) -> None:
        got, sock = consumer(b"")
        with pytest.raises(ConnectionLost, match="closed the connection"):
            got.poll()
        bad = bytearray(message(1, b"a"))
        bad[-1] = 0
        got, sock = consumer(bytes(bad))
        with pytest.raises(ConnectionLost, match="malformed"):
            got.poll()
        assert sock.closed


class TestClosing:
    def test_close_without_waiting_writes_connection_close_and_reads_nothing(self) -> None:
        """A lost connection is closed with ``wait_secs=0``: the broker, silent here, is not
        waited for even though the URL's socket timeout is an hour."""
        ours, broker = socket.socketpair()
        with broker:
            got = QueueConsumer(ours, heartbeat=0, close_timeout=3600.0)
            got.ack(7)
            assert got.close(wait_secs=0) is False
            assert ours.fileno() == -1
            broker.settimeout(5.0)
            sent = broker.recv(1 << 16)
        assert [(c, m) for c, m, _ in methods_sent(sent)] == [(60, 80), (10, 50)]  # basic.ack, connection.close

    def test_close_counts_on_the_brokers_close_ok(self) -> None:
        ours, broker = socket.socketpair()
        with broker:
            broker.sendall(frame(1, struct.pack(">HH", 10, 51), channel=0))  # close-ok, already there
            got = QueueConsumer(ours, heartbeat=0, close_timeout=3600.0)
            assert got.close(wait_secs=5.0) is True
