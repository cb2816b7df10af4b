"""Replies of Redis read straight from a socket: what keeps a ``RedisStreamSpout`` at the client's pace.

redis-py parses a reply one element at a time through its socket buffer (several method calls
per element), which is most of what reading a stream costs in Python; a task that also emits
and tracks every entry cannot afford it. ``Replies`` reads the bytes the socket has, without
waiting, and ``parse`` walks them with one ``find`` and one slice per element. RESP2 and RESP3
both parse (redis-py may have said ``HELLO 3`` when it connected); bulk strings stay ``bytes``,
maps become ``dict``, a null is ``None``, an error reply raises ``ResponseError``.

Only plain sockets (TCP, Unix) are read this way: a TLS socket keeps redis-py's own parser.
"""

from __future__ import annotations

import socket
from typing import Any

from redis.exceptions import ResponseError

__all__ = ["Replies", "parse"]

_CRLF = b"\r\n"
RECV_BYTES = 1 << 18


class _Incomplete(Exception):
    """The buffer ends inside a reply: read more."""


def parse(buf: bytes, pos: int) -> tuple[Any, int]:
    """The reply that starts at ``buf[pos]`` and where the next one starts; ``_Incomplete`` if
    ``buf`` does not hold all of it. An error reply is returned as a ``ResponseError`` (not
    raised: the caller decides, after it consumed the reply)."""
    end = buf.find(_CRLF, pos)
    if end < 0:
        raise _Incomplete
    kind = buf[pos]
    if kind == 36:  # $ bulk string
        size = int(buf[pos + 1 : end])
        if size < 0:
            return None, end + 2
        start = end + 2
        if start + size + 2 > len(buf):
            raise _Incomplete
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
                    raise _Incomplete
                size = int(buf[pos + 1 : end])
                if size < 0:
                    append(None)
                    pos = end + 2
                    continue
                pos = end + 2 + size
                if pos + 2 > size_of:
                    raise _Incomplete
                append(buf[end + 2 : pos])
                pos += 2
            else:
                item, pos = parse(buf, pos)
                append(item)
        return items, pos
    if kind == 37:  # % map
        count = int(buf[pos + 1 : end])
        mapping = {}
        pos = end + 2
        for _ in range(count):
            key, pos = parse(buf, pos)
            value, pos = parse(buf, pos)
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
    raise ResponseError(f"a reply of a kind this reader does not know: {chr(kind)!r}")


class Replies:
    """The replies arriving on one socket, taken without waiting (``take``) or, at the end,
    waiting up to the socket's timeout (``take(wait=True)``)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""
        self._pos = 0
        self._stalled = False

    def take(self, wait: bool = False) -> tuple[bool, Any]:
        """``(True, reply)`` for the next whole reply, ``(False, None)`` when it has not all
        arrived (and ``wait`` is false). A closed connection raises ``ConnectionError``."""
        while True:
            if self._pos < len(self._buf) and not self._stalled:
                try:
                    reply, self._pos = parse(self._buf, self._pos)
                except _Incomplete:
                    self._stalled = True  # parse again only once more bytes arrived
                else:
                    if self._pos == len(self._buf):
                        self._buf, self._pos = b"", 0
                    return True, reply
            chunk = self.sock.recv(RECV_BYTES) if wait else self._recv_now()
            if chunk == b"":
                raise ConnectionError("Redis closed the connection")
            if chunk is None:
                return False, None
            # Take all that is there before parsing again: a large reply arrives in pieces, and
            # each attempt parses it from its start.
            chunks = [self._buf[self._pos :], chunk]
            while (chunk := self._recv_now()) is not None:
                chunks.append(chunk)
            self._buf, self._pos = b"".join(chunks), 0
            self._stalled = False

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
