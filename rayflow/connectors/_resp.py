"""Replies of Redis read straight from a socket: what keeps a ``RedisStreamSpout`` at the client's pace.

redis-py parses a reply one element at a time through its socket buffer (several method calls
per element), which is most of what reading a stream costs in Python; a task that also emits
and tracks every entry cannot afford it. ``Replies`` reads the bytes the socket has, without
waiting, and ``parse`` walks them with one ``find`` and one slice per element. RESP2 and RESP3
both parse (redis-py may have said ``HELLO 3`` when it connected); bulk strings stay ``bytes``,
maps become ``dict``, a null is ``None``, an error reply is returned as redis-py's
``ResponseError`` (as redis-py's own parser would raise it).

A reply that has not all arrived is parsed again only once enough bytes are there for the
part that stopped it: a bulk string of megabytes arriving over many reads is joined once, not
re-parsed from its start after every read. Bytes that are not RESP (a reply length that is
not a number, a kind Redis does not send) raise ``RedisStreamError``: the spout takes the
connection for broken and makes a new one.

Only plain sockets (TCP, Unix) are read this way: a TLS socket keeps redis-py's own parser.
"""

from __future__ import annotations

import socket
from typing import Any

from redis.exceptions import ResponseError

from ._errors import BrokerError

__all__ = ["RedisStreamError", "Replies", "parse"]

_CRLF = b"\r\n"
RECV_BYTES = 1 << 18


class RedisStreamError(BrokerError):
    """Redis refused what the spout asked (the message says what to check), or sent bytes that
    are not RESP."""


class _Incomplete(Exception):
    """The buffer ends inside a reply: read until it holds ``need`` bytes, then parse again."""

    def __init__(self, need: int) -> None:
        self.need = need


def parse(buf: bytes, pos: int) -> tuple[Any, int]:
    """The reply that starts at ``buf[pos]`` and where the next one starts; ``_Incomplete`` if
    ``buf`` does not hold all of it. An error reply is returned as a ``ResponseError`` (not
    raised: the caller decides, after it consumed the reply). Bytes that are not RESP raise
    ``RedisStreamError``."""
    try:
        return _parse(buf, pos)
    except (ValueError, IndexError) as exc:
        raise RedisStreamError(f"a reply from Redis that is not RESP ({exc}): {bytes(buf[pos : pos + 80])!r}") from exc


def _parse(buf: bytes, pos: int) -> tuple[Any, int]:
    end = buf.find(_CRLF, pos)
    if end < 0:
        raise _Incomplete(len(buf) + 1)
    kind = buf[pos]
    if kind == 36:  # $ bulk string
        size = int(buf[pos + 1 : end])
        if size < 0:
            return None, end + 2
        start = end + 2
        if start + size + 2 > len(buf):
            raise _Incomplete(start + size + 2)
        return buf[start : start + size], start + size + 2
    if kind in (42, 126, 62):  # * array, ~ set, > push
        count = int(buf[pos + 1 : end])
        if count < 0:
            return None, end + 2
        items: list[Any] = []
        append, find, size_of = items.append, buf.find, len(buf)
        pos = end + 2
        for _ in range(count):
            if pos < size_of and buf[pos] == 36:  # a bulk string, inline: most elements are
                end = find(_CRLF, pos)
                if end < 0:
                    raise _Incomplete(size_of + 1)
                size = int(buf[pos + 1 : end])
                if size < 0:
                    append(None)
                    pos = end + 2
                    continue
                pos = end + 2 + size
                if pos + 2 > size_of:
                    raise _Incomplete(pos + 2)
                append(buf[end + 2 : pos])
                pos += 2
            else:
                item, pos = _parse(buf, pos)
                append(item)
        return items, pos
    if kind == 37:  # % map
        count = int(buf[pos + 1 : end])
        mapping = {}
        pos = end + 2
        for _ in range(count):
            key, pos = _parse(buf, pos)
            value, pos = _parse(buf, pos)
            mapping[key] = value
        return mapping, pos
    if kind == 58:  # : integer
        return int(buf[pos + 1 : end]), end + 2
    if kind == 43:  # + simple string
        return buf[pos + 1 : end], end + 2
    if kind == 45:  # - error
        return ResponseError(buf[pos + 1 : end].decode(errors="replace")), end + 2
    if kind == 95:  # _ null
        return None, end + 2
    if kind == 35:  # # boolean
        return buf[pos + 1 : end] == b"t", end + 2
    if kind == 44:  # , double
        return float(buf[pos + 1 : end]), end + 2
    raise ValueError(f"a reply of a kind RESP does not have: {chr(kind)!r}")


class Replies:
    """The replies arriving on one socket, taken without waiting (``take``) or, at the end,
    waiting up to the socket's timeout (``take(wait=True)``)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""
        self._pos = 0
        self._more: list[bytes] = []
        """Bytes read after ``_buf`` and not joined to it yet."""
        self._more_size = 0
        self._need = 0
        """How many bytes from ``_pos`` the reply that stopped the last parse needs at least."""

    def take(self, wait: bool = False) -> tuple[bool, Any]:
        """``(True, reply)`` for the next whole reply, ``(False, None)`` when it has not all
        arrived (and ``wait`` is false). A closed connection raises ``ConnectionError``; bytes
        that are not RESP raise ``RedisStreamError``."""
        while True:
            if self._more and len(self._buf) - self._pos + self._more_size >= self._need:
                self._buf = b"".join([self._buf[self._pos :], *self._more])
                self._pos, self._more, self._more_size = 0, [], 0
            if self._pos < len(self._buf) and len(self._buf) - self._pos >= self._need:
                try:
                    reply, self._pos = parse(self._buf, self._pos)
                except _Incomplete as incomplete:
                    self._need = incomplete.need - self._pos  # parse again only once that many arrived
                else:
                    self._need = 0
                    if self._pos == len(self._buf):
                        self._buf, self._pos = b"", 0
                    return True, reply
            chunk = self.sock.recv(RECV_BYTES) if wait else self._recv_now()
            if chunk == b"":
                raise ConnectionError("Redis closed the connection")
            if chunk is None:
                return False, None
            # Take all that is there before parsing again: a large reply arrives in pieces.
            while chunk is not None:
                self._more.append(chunk)
                self._more_size += len(chunk)
                chunk = self._recv_now()

    def _recv_now(self) -> bytes | None:
        """What the socket holds now (``None``: nothing yet), without waiting."""
        sock = self.sock
        timeout = sock.gettimeout()
        sock.settimeout(0)
        try:
            chunk = sock.recv(RECV_BYTES)
        except BlockingIOError:
            return None
        finally:
            sock.settimeout(timeout)
        if not chunk:
            raise ConnectionError("Redis closed the connection")
        return chunk
