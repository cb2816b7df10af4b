"""The RESP reader the Redis spout reads its replies with (``rayflow.connectors._resp``, over
``hiredis.Reader``): every reply kind Redis sends it, replies cut anywhere, several replies in one
read, bytes that are not RESP. No Redis needed: the replies come from the other end of a socket
pair."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("redis")
pytest.importorskip("hiredis")

from redis.exceptions import ResponseError  # noqa: E402

from rayflow.connectors._resp import RedisStreamError, Replies  # noqa: E402

XREADGROUP_RESP2 = (
    b"*1\r\n*2\r\n$6\r\norders\r\n*2\r\n"
    b"*2\r\n$3\r\n1-0\r\n*2\r\n$4\r\nbody\r\n$6\r\na\r\nb\xffc\r\n"
    b"*2\r\n$3\r\n2-0\r\n*-1\r\n"
)
XREADGROUP_RESP3 = b"%1\r\n$6\r\norders\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nk\r\n$0\r\n\r\n"


@pytest.fixture
def pair() -> Iterator[tuple[Replies, socket.socket]]:
    """A ``Replies`` on one end of a socket pair, and the end Redis would write to."""
    ours, redis_side = socket.socketpair()
    ours.settimeout(5.0)
    with ours, redis_side:
        yield Replies(ours), redis_side


def replied(pair: tuple[Replies, socket.socket], data: bytes) -> Any:
    replies, redis_side = pair
    redis_side.sendall(data)
    arrived, reply = replies.take(wait=True)
    assert arrived
    return reply


def test_stream_replies_in_both_protocols(pair: tuple[Replies, socket.socket]) -> None:
    assert replied(pair, XREADGROUP_RESP2) == [[b"orders", [[b"1-0", [b"body", b"a\r\nb\xffc"]], [b"2-0", None]]]]
    assert replied(pair, XREADGROUP_RESP3) == {b"orders": [[b"1-0", [b"k", b""]]]}


@pytest.mark.parametrize(
    ("data", "value"),
    [
        (b":42\r\n", 42),
        (b"+OK\r\n", b"OK"),
        (b"_\r\n", None),
        (b"*-1\r\n", None),
        (b"$-1\r\n", None),
        (b"#t\r\n", True),
        (b"#f\r\n", False),
        (b",1.5\r\n", 1.5),
        (b"~2\r\n:1\r\n:2\r\n", [1, 2]),
        (b">2\r\n$7\r\nmessage\r\n:1\r\n", [b"message", 1]),
    ],
)
def test_scalars_nulls_sets_and_pushes(pair: tuple[Replies, socket.socket], data: bytes, value: object) -> None:
    """RESP3's ``#f`` is a reply, not "not arrived yet"."""
    assert replied(pair, data) == value


def test_an_error_reply_is_returned_as_redis_pys_error(pair: tuple[Replies, socket.socket]) -> None:
    error = replied(pair, b"-NOGROUP No such key\r\n")
    assert isinstance(error, ResponseError) and "NOGROUP" in str(error)


def test_a_reply_cut_anywhere_is_taken_once_it_is_all_there(pair: tuple[Replies, socket.socket]) -> None:
    replies, redis_side = pair
    for cut in range(1, len(XREADGROUP_RESP2)):
        redis_side.sendall(XREADGROUP_RESP2[:cut])
        assert replies.take() == (False, None)
        redis_side.sendall(XREADGROUP_RESP2[cut:])
        assert replies.take(wait=True)[1][0][0] == b"orders"


def test_replies_arrive_in_pieces_and_together(pair: tuple[Replies, socket.socket]) -> None:
    replies, redis_side = pair
    assert replies.take() == (False, None)
    redis_side.sendall(XREADGROUP_RESP2[:20])
    assert replies.take() == (False, None)
    redis_side.sendall(XREADGROUP_RESP2[20:] + b":3\r\n")
    arrived, reply = replies.take(wait=True)
    assert arrived and reply[0][0] == b"orders"
    assert replies.take() == (True, 3)
    assert replies.take() == (False, None)
    redis_side.close()
    with pytest.raises(ConnectionError):
        replies.take()


@pytest.mark.parametrize("garbage", [b"$abc\r\n", b"*2\r\n:x\r\n:1\r\n", b"!what\r\n", b"%1\r\n$1\r\nk\r\n,nan?\r\n"])
def test_bytes_that_are_not_resp_raise_a_broker_error(pair: tuple[Replies, socket.socket], garbage: bytes) -> None:
    """The spout takes the connection for broken and makes a new one (a ValueError would
    have escaped every call, for ever)."""
    replies, redis_side = pair
    redis_side.sendall(garbage)
    with pytest.raises(RedisStreamError, match="not RESP"):
        replies.take(wait=True)


def test_a_megabyte_in_many_pieces_is_one_reply(pair: tuple[Replies, socket.socket]) -> None:
    """A bulk string of a megabyte in 64 KiB pieces, taken after each piece."""
    replies, redis_side = pair
    body = bytes(range(256)) * 4096
    reply = b"$%d\r\n%s\r\n" % (len(body), body)
    got: tuple[bool, Any] = (False, None)
    for start in range(0, len(reply), 1 << 16):
        redis_side.sendall(reply[start : start + (1 << 16)])
        got = replies.take()
        if start + (1 << 16) < len(reply):
            assert got == (False, None)
    assert got == (True, body)
