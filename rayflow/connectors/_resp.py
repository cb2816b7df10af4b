"""Replies of Redis read straight from a socket: what keeps a ``RedisStreamSpout`` at the client's pace.

redis-py parses a reply one element at a time through its socket buffer (several method calls
per element), which is most of what reading a stream costs in Python; a task that also emits
and tracks every entry cannot afford it. ``Replies`` reads the bytes the socket has, without
waiting, and hands them to ``hiredis.Reader``, the C parser redis-py itself uses when hiredis
is installed: incremental (a reply cut anywhere is finished by the next bytes, a bulk string of
megabytes over many reads is not re-parsed from its start), RESP2 and RESP3 (redis-py may have
said ``HELLO 3`` when it connected). Bulk strings stay ``bytes``, maps become ``dict``, sets and
pushes ``list``, a null is ``None``, an error reply is returned as redis-py's ``ResponseError``
(as redis-py's own parser would raise it). Why not the hand-written reader it replaced:
``docs/brokers.md`` ("The wire code") has the figures of ``benchmarks/wire_codecs.py``.

Bytes that are not RESP (a reply length that is not a number, a kind Redis does not send)
raise ``RedisStreamError``: the spout takes the connection for broken and makes a new one.

Only plain sockets (TCP, Unix) are read this way: a TLS socket keeps redis-py's own parser.
"""

from __future__ import annotations

import socket
from typing import Any

import hiredis
from redis.exceptions import ResponseError

from ._errors import BrokerError

__all__ = ["RedisStreamError", "Replies"]

RECV_BYTES = 1 << 18


class RedisStreamError(BrokerError):
    """Redis refused what the spout asked (the message says what to check), or sent bytes that
    are not RESP."""


class _NotResp(Exception):
    """hiredis's word for bytes that are not RESP; ``Replies.take`` says it as a ``RedisStreamError``."""


_NOT_YET = object()
"""What ``hiredis.Reader.gets`` returns while a reply has not all arrived (its default,
``False``, is also RESP3's ``#f``)."""


class Replies:
    """The replies arriving on one socket, taken without waiting (``take``) or, at the end,
    waiting up to the socket's timeout (``take(wait=True)``)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._reader = hiredis.Reader(protocolError=_NotResp, replyError=ResponseError, notEnoughData=_NOT_YET)

    def take(self, wait: bool = False) -> tuple[bool, Any]:
        """``(True, reply)`` for the next whole reply, ``(False, None)`` when it has not all
        arrived (and ``wait`` is false). A closed connection raises ``ConnectionError``; bytes
        that are not RESP raise ``RedisStreamError`` (the reader is then spent: make a new
        connection, and a new ``Replies``)."""
        gets, feed = self._reader.gets, self._reader.feed
        while True:
            try:
                reply = gets()
            except _NotResp as exc:
                raise RedisStreamError(f"a reply from Redis that is not RESP ({exc})") from exc
            if reply is not _NOT_YET:
                return True, reply
            chunk = self.sock.recv(RECV_BYTES) if wait else self._recv_now()
            if chunk == b"":
                raise ConnectionError("Redis closed the connection")
            if chunk is None:
                return False, None
            # Take all that is there before parsing again: a large reply arrives in pieces.
            while chunk is not None:
                feed(chunk)
                chunk = self._recv_now()

    def _recv_now(self) -> bytes | None:
        """What the socket holds now (``None``: nothing yet), without waiting."""
        sock = self.sock
        timeout = sock.gettimeout()
        sock.settimeout(0)  # not MSG_DONTWAIT: a socket with a timeout polls for it first
        try:
            chunk = sock.recv(RECV_BYTES)
        except BlockingIOError:
            return None
        finally:
            sock.settimeout(timeout)
        if not chunk:
            raise ConnectionError("Redis closed the connection")
        return chunk
