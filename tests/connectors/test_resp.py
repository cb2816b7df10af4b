"""The RESP reader the Redis spout reads its replies with (``rayflow.connectors._resp``): every
reply kind Redis sends it, replies cut anywhere, several replies in one read. No Redis needed."""

from __future__ import annotations

import socket

import pytest

pytest.importorskip("redis")

from redis.exceptions import ResponseError  # noqa: E402

import rayflow.connectors._resp as resp  # noqa: E402
from rayflow.connectors._resp import RedisStreamError, Replies, _Incomplete, parse  # noqa: E402

XREADGROUP_RESP2 = (
    b"*1\r\n*2\r\n$6\r\norders\r\n*2\r\n"
    b"*2\r\n$3\r\n1-0\r\n*2\r\n$4\r\nbody\r\n$6\r\na\r\nb\xffc\r\n"
    b"*2\r\n$3\r\n2-0\r\n*-1\r\n"
)
XREADGROUP_RESP3 = b"%1\r\n$6\r\norders\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nk\r\n$0\r\n\r\n"


def test_stream_replies_in_both_protocols() -> None:
    reply, end = parse(XREADGROUP_RESP2, 0)
    assert end == len(XREADGROUP_RESP2)
    assert reply == [[b"orders", [[b"1-0", [b"body", b"a\r\nb\xffc"]], [b"2-0", None]]]]
    assert parse(XREADGROUP_RESP3, 0)[0] == {b"orders": [[b"1-0", [b"k", b""]]]}


def test_scalars_nulls_and_errors() -> None:
    assert parse(b":42\r\n", 0) == (42, 5)
    assert parse(b"+OK\r\n", 0) == (b"OK", 5)
    assert parse(b"_\r\n", 0) == (None, 3)
    assert parse(b"*-1\r\n", 0) == (None, 5)
    assert parse(b"$-1\r\n", 0) == (None, 5)
    assert parse(b"#t\r\n", 0) == (True, 4)
    error, _ = parse(b"-NOGROUP No such key\r\n", 0)
    assert isinstance(error, ResponseError) and "NOGROUP" in str(error)


def test_a_reply_cut_anywhere_is_incomplete() -> None:
    for cut in range(len(XREADGROUP_RESP2)):
        with pytest.raises(_Incomplete):
            parse(XREADGROUP_RESP2[:cut], 0)


def test_replies_arrive_in_pieces_and_together() -> None:
    ours, redis_side = socket.socketpair()
    try:
        replies = Replies(ours)
        assert replies.take() == (False, None)
        redis_side.sendall(XREADGROUP_RESP2[:20])
        assert replies.take() == (False, None)
        redis_side.sendall(XREADGROUP_RESP2[20:] + b":3\r\n")
        arrived, reply = replies.take()
        assert arrived and reply[0][0] == b"orders"
        assert replies.take() == (True, 3)
        assert replies.take() == (False, None)
        redis_side.close()
        with pytest.raises(ConnectionError):
            replies.take()
    finally:
        ours.close()


@pytest.mark.parametrize("garbage", [b"$abc\r\n", b"*2\r\n:x\r\n:1\r\n", b"!what\r\n", b"%1\r\n$1\r\nk\r\n,nan?\r\n"])
def test_bytes_that_are_not_resp_raise_a_broker_error(garbage: bytes) -> None:
    """The spout takes the connection for broken and makes a new one (a ValueError would
    have escaped every call, for ever)."""
    with pytest.raises(RedisStreamError, match="not RESP"):
        parse(garbage, 0)


def test_a_bulk_string_over_many_reads_is_parsed_once_it_is_all_there(monkeypatch: pytest.MonkeyPatch) -> None:
    """A megabyte in 64 KiB pieces, taken after each: parsed when its length is known, then
    once more when all of it arrived, not after every read."""
    calls = []

    def counted(buf: bytes, pos: int) -> object:
        calls.append(len(buf))
        return parse(buf, pos)

    monkeypatch.setattr(resp, "parse", counted)
    body = bytes(range(256)) * 4096
    reply = b"$%d\r\n%s\r\n" % (len(body), body)
    ours, redis_side = socket.socketpair()
    with ours, redis_side:
        redis_side.setblocking(False)
        replies = Replies(ours)
        got = (False, None)
        for start in range(0, len(reply), 1 << 16):
            redis_side.send(reply[start : start + (1 << 16)])
            got = replies.take()
        assert got == (True, body)
    assert len(calls) == 2
