"""AMQP 0-9-1 frames in and out: pika's ``spec``, ``frame`` and ``data`` modules, and the few
frames of the hot path by hand.

A frame is ``type (1) | channel (2) | size (4) | payload (size) | 0xCE``. Methods, content
properties and field tables are encoded and decoded by pika (``pika.spec.Connection.StartOk``,
``pika.spec.BasicProperties.decode``, ``pika.data.encode_table``), so a value means to the
spout what it means to pika. Built by hand, because they come once per message: the
``basic.ack``, ``basic.nack`` and ``basic.reject`` frames (one ``struct.pack`` each, where
pika builds a method object and a list of pieces), and, in ``consumer``, the cut of a
delivery's ``basic.deliver`` out of the receive buffer.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

import pika.exceptions
import pika.frame
import pika.spec

from .errors import ConnectionLost

__all__ = [
    "CHANNEL",
    "FRAME_BODY",
    "FRAME_END",
    "FRAME_HEAD",
    "FRAME_HEADER",
    "FRAME_HEARTBEAT",
    "FRAME_METHOD",
    "HEARTBEAT",
    "NO_PROPERTIES",
    "PROTOCOL_HEADER",
    "Delivery",
    "ack_frame",
    "decode_method",
    "decode_properties",
    "method_frame",
    "nack_frame",
    "reject_frame",
]

CHANNEL = 1
"""The one channel a consumer opens."""

FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = (
    pika.spec.FRAME_METHOD,
    pika.spec.FRAME_HEADER,
    pika.spec.FRAME_BODY,
    pika.spec.FRAME_HEARTBEAT,
)
FRAME_END = pika.spec.FRAME_END
FRAME_HEAD = struct.Struct(">BHI")
"""A frame's type, channel and payload size."""
PROTOCOL_HEADER: bytes = pika.frame.ProtocolHeader().marshal()
HEARTBEAT: bytes = pika.frame.Heartbeat().marshal()

NO_PROPERTIES = pika.spec.BasicProperties()
"""The properties of a message published without any (shared: never changed)."""

_SETTLE = struct.Struct(">BHIHHQBB")
"""A whole ``basic.ack``, ``basic.nack`` or ``basic.reject`` frame: 13 bytes of payload."""
_BASIC = pika.spec.Basic.Ack.INDEX >> 16
_ACK, _NACK, _REJECT = (m.INDEX & 0xFFFF for m in (pika.spec.Basic.Ack, pika.spec.Basic.Nack, pika.spec.Basic.Reject))


class Delivery(NamedTuple):
    """One message as the broker delivered it: what ``basic.deliver`` says, then its content.
    ``exchange`` and ``routing_key`` are ``str`` when UTF-8 (else ``bytes``), as pika gives
    them; ``properties`` is pika's ``BasicProperties``."""

    tag: int
    redelivered: bool
    exchange: str | bytes
    routing_key: str | bytes
    properties: Any
    body: bytes


def method_frame(channel: int, method: Any) -> bytes:
    """The frame of a pika method object (``pika.spec.Basic.Qos(prefetch_count=10)``)."""
    marshalled: bytes = pika.frame.Method(channel, method).marshal()
    return marshalled


def ack_frame(tag: int, multiple: bool) -> bytes:
    return _SETTLE.pack(FRAME_METHOD, CHANNEL, 13, _BASIC, _ACK, tag, multiple, FRAME_END)


def nack_frame(tag: int, requeue: bool) -> bytes:
    return _SETTLE.pack(FRAME_METHOD, CHANNEL, 13, _BASIC, _NACK, tag, requeue << 1, FRAME_END)


def reject_frame(tag: int, requeue: bool) -> bytes:
    return _SETTLE.pack(FRAME_METHOD, CHANNEL, 13, _BASIC, _REJECT, tag, requeue, FRAME_END)


def decode_method(payload: bytes) -> Any:
    """The pika method object of a method frame's ``payload``. Raises ``ConnectionLost`` for
    one that is not AMQP 0-9-1."""
    try:
        method = pika.spec.methods[struct.unpack_from(">I", payload, 0)[0]]()
        method.decode(payload, 4)
    except (KeyError, struct.error, IndexError, ValueError, pika.exceptions.AMQPError) as exc:
        raise ConnectionLost(f"a method frame that is not AMQP 0-9-1 ({exc!r})") from exc
    return method


def decode_properties(payload: bytes, offset: int) -> Any:
    """The ``BasicProperties`` encoded in ``payload`` from ``offset`` (a content header's flags
    and values). Raises ``ConnectionLost`` for ones that do not decode."""
    try:
        return pika.spec.BasicProperties().decode(payload, offset)
    except (struct.error, IndexError, ValueError, pika.exceptions.AMQPError) as exc:
        raise ConnectionLost(f"message properties that are not AMQP 0-9-1 ({exc!r})") from exc
