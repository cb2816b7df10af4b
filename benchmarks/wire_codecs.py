"""The broker spouts' wire code against the libraries that could do it, side by side in one run:
CPU-us of this process per reply or per message (``time.process_time``), which a busy machine
disturbs far less than the wall clock. No broker needed.

    python benchmarks/wire_codecs.py [--rounds 5] [--old-ref 928ea6f]

- Redis: the spout's ``Replies`` (``hiredis.Reader`` fed from the socket) against the
  hand-written RESP reader it replaced, as it is at git revision ``--old-ref`` (``git show``).
  Both read from one end of a socket pair what the other end was sent: an ``XREADGROUP``
  reply of 500 entries in RESP2 and in RESP3 (per reply and per entry), 200 ``XACK`` replies
  sent together (per reply), and a 1 MiB bulk string sent in 64 KiB pieces, taken after each
  piece (per reply).
- RabbitMQ: ``QueueConsumer``'s cut of 500 deliveries out of its receive buffer (without and
  with properties: a content type and a two-entry header table) against pika's own codec
  decoding the same frames (``pika.frame.decode_frame`` on each frame's bytes, the delivery
  assembled from the method, the header's properties and the body, as pika's channel does),
  per message; and
  one ``basic.ack`` frame built by hand against pika's ``frame.Method(...).marshal()``. The
  handshake and the field tables are pika's already (``_amqp/handshake.py``, ``codec.py``):
  nothing to compare there.

- ``--redis-spout N`` (needs Redis on 127.0.0.1:6379) also drains N messages through a
  ``RedisStreamSpout`` driven in this process (``benchmarks/brokers.py``'s ``--cpu`` driver),
  once with each reader, per message: the whole spout's CPU, not the parser's alone.

Each figure is the median of ``--rounds`` rounds; the two sides of a row run one after the
other in each round, in turned order.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pika.frame  # noqa: E402
import pika.spec  # noqa: E402

from rayflow.connectors._amqp.codec import CHANNEL, FRAME_HEAD, ack_frame, method_frame  # noqa: E402
from rayflow.connectors._amqp.consumer import QueueConsumer  # noqa: E402
from rayflow.connectors._resp import Replies  # noqa: E402


def old_resp(ref: str) -> Any:
    """``rayflow/connectors/_resp.py`` as it is at git revision ``ref``."""
    path = "rayflow/connectors/_resp.py"
    source = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True)
    module = types.ModuleType("rayflow.connectors._resp_old")
    module.__package__ = "rayflow.connectors"
    exec(compile(source.stdout, f"{ref}:{path}", "exec"), module.__dict__)
    return module


def cpu_us(work: Callable[[], None], units: int, repeat: int) -> float:
    started = time.process_time()
    for _ in range(repeat):
        work()
    return (time.process_time() - started) * 1e6 / (units * repeat)


# -- Redis ------------------------------------------------------------------------------------
def bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def xreadgroup_reply(entries: int, resp3: bool) -> bytes:
    rows = b"".join(
        b"*2\r\n"
        + bulk(b"1764%09d-0" % i)
        + b"*2\r\n"
        + bulk(b"body")
        + bulk(b'{"id": %d, "text": "a message of some size"}' % i)
        for i in range(entries)
    )
    head = b"%1\r\n" if resp3 else b"*1\r\n*2\r\n"
    return head + bulk(b"orders") + b"*%d\r\n" % entries + rows


def reading(reader_class: Any, pieces: list[bytes], replies: int) -> Callable[[], None]:
    """Send ``pieces`` one at a time into a socket pair, taking after each what arrived, until
    ``replies`` replies were taken."""
    ours, redis_side = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    redis_side.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    ours.settimeout(5.0)
    reader = reader_class(ours)

    def work() -> None:
        taken = 0
        for piece in pieces:
            redis_side.sendall(piece)
            while True:
                arrived, _ = reader.take()
                if not arrived:
                    break
                taken += 1
        while taken < replies:
            arrived, _ = reader.take(wait=True)
            taken += arrived
        assert taken == replies

    return work


def redis_rows(old: Any, rounds: int) -> list[tuple[str, str, float, float]]:
    entries = 500
    megabyte = bulk(bytes(range(256)) * 4096)
    cases: list[tuple[str, str, list[bytes], int, int, int]] = [
        ("XREADGROUP 500 entries, RESP2", "entry", [xreadgroup_reply(entries, False)], 1, entries, 200),
        ("XREADGROUP 500 entries, RESP3", "entry", [xreadgroup_reply(entries, True)], 1, entries, 200),
        ("200 XACK replies in one read", "reply", [b":1\r\n" * 200], 200, 200, 2000),
        (
            "1 MiB bulk string in 64 KiB reads",
            "reply",
            [megabyte[i : i + (1 << 16)] for i in range(0, len(megabyte), 1 << 16)],
            1,
            1,
            100,
        ),
    ]
    rows = []
    for name, unit, pieces, replies, units, repeat in cases:
        theirs: list[float] = []
        ours: list[float] = []
        for r in range(rounds):
            pair = [(ours, Replies), (theirs, old.Replies)]
            for into, reader_class in pair if r % 2 else pair[::-1]:
                into.append(cpu_us(reading(reader_class, pieces, replies), units, repeat))
        rows.append((name, unit, statistics.median(ours), statistics.median(theirs)))
    return rows


# -- RabbitMQ ---------------------------------------------------------------------------------
def deliveries(count: int, with_properties: bool) -> bytes:
    properties = (
        pika.spec.BasicProperties(content_type="application/json", headers={"source": "orders", "attempt": 1})
        if with_properties
        else pika.spec.BasicProperties()
    )
    frames = []
    for tag in range(1, count + 1):
        body = b'{"id": %d, "text": "a message of some size"}' % tag
        deliver = pika.spec.Basic.Deliver(
            consumer_tag="rayflow.0123456789abcdef", delivery_tag=tag, exchange="", routing_key="orders"
        )
        frames.append(pika.frame.Method(CHANNEL, deliver).marshal())
        frames.append(pika.frame.Header(CHANNEL, len(body), properties).marshal())
        frames.append(pika.frame.Body(CHANNEL, body).marshal())
    return b"".join(frames)


def ours_cut(data: bytes, count: int) -> Callable[[], None]:
    a, b = socket.socketpair()
    consumer = QueueConsumer(a, 0, 1.0)
    consumer._consumer_tag = b"rayflow.0123456789abcdef"

    def work() -> None:
        consumer._in = data
        assert len(consumer._parse()) == count

    return work


def pika_cut(data: bytes, count: int) -> Callable[[], None]:
    decode = pika.frame.decode_frame
    head = FRAME_HEAD.unpack_from

    def work() -> None:
        got = []
        pos = 0
        deliver: Any = None
        properties: Any = None
        body_size = 0
        parts: list[bytes] = []
        while pos < len(data):
            # One frame's bytes each (pika's connection slices its whole buffer instead: more copying).
            used, frame = decode(data[pos : pos + 8 + head(data, pos)[2]])
            pos += used
            if isinstance(frame, pika.frame.Method):
                deliver = frame.method
            elif isinstance(frame, pika.frame.Header):
                properties, body_size, parts = frame.properties, frame.body_size, []
            elif isinstance(frame, pika.frame.Body):
                parts.append(frame.fragment)
                if sum(map(len, parts)) >= body_size:
                    got.append(
                        (
                            deliver.delivery_tag,
                            deliver.redelivered,
                            deliver.exchange,
                            deliver.routing_key,
                            properties,
                            b"".join(parts),
                        )
                    )
        assert len(got) == count

    return work


def amqp_rows(rounds: int) -> list[tuple[str, str, float, float]]:
    count = 500
    cases: list[tuple[str, Callable[[], None], Callable[[], None], int, int]] = []
    for with_properties in (False, True):
        data = deliveries(count, with_properties)
        name = f"500 deliveries cut from the buffer, {'with' if with_properties else 'no'} properties"
        cases.append((name, ours_cut(data, count), pika_cut(data, count), count, 50))

    def ours_ack() -> None:
        ack_frame(123456, True)

    def pika_ack() -> None:
        method_frame(CHANNEL, pika.spec.Basic.Ack(delivery_tag=123456, multiple=True))

    assert ack_frame(123456, True) == method_frame(CHANNEL, pika.spec.Basic.Ack(delivery_tag=123456, multiple=True))
    cases.append(("basic.ack frame built", ours_ack, pika_ack, 1, 200_000))
    rows = []
    for name, ours_work, pika_work, units, repeat in cases:
        ours: list[float] = []
        theirs: list[float] = []
        for r in range(rounds):
            pair = [(ours, ours_work), (theirs, pika_work)]
            for into, work in pair if r % 2 else pair[::-1]:
                into.append(cpu_us(work, units, repeat))
        rows.append((name, "message" if units > 1 else "frame", statistics.median(ours), statistics.median(theirs)))
    return rows


def redis_spout_rows(old: Any, rounds: int, n: int) -> list[tuple[str, str, float, float]]:
    import redis

    import rayflow.connectors.redis as spout_module
    from benchmarks.brokers import drive_in_process, fill_stream, stream_pending

    def drained(reader_class: Any) -> float:
        stream = fill_stream(n)
        vars(spout_module)["Replies"] = reader_class  # the name the spout module reads at each connect
        try:
            spout = spout_module.RedisStreamSpout(stream, "bench", fields=("body",))
            run = drive_in_process(spout, n, "RedisStreamSpout", lambda: stream_pending(stream, "bench") == 0)
        finally:
            vars(spout_module)["Replies"] = Replies
            redis.Redis.from_url("redis://127.0.0.1:6379/0").delete(stream)
        return float(run["cpu_us_per_msg"])

    ours: list[float] = []
    theirs: list[float] = []
    for r in range(rounds):
        pair = [(ours, Replies), (theirs, old.Replies)]
        for into, reader_class in pair if r % 2 else pair[::-1]:
            into.append(drained(reader_class))
    return [
        (f"RedisStreamSpout draining {n:,} messages", "message", statistics.median(ours), statistics.median(theirs))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--old-ref", default="928ea6f", help="the revision with the hand-written RESP reader")
    parser.add_argument(
        "--redis-spout", type=int, default=0, metavar="N", help="also drain N messages through the spout"
    )
    args = parser.parse_args()
    print(f"{'':58} {'CPU-us per':>10} {'spout':>9} {'other':>9} {'ratio':>6}")
    print("Redis: spout = hiredis.Reader, other = hand-written reader at", args.old_ref)
    old = old_resp(args.old_ref)
    rows = redis_rows(old, args.rounds)
    if args.redis_spout:
        rows += redis_spout_rows(old, args.rounds, args.redis_spout)
    for name, unit, ours, theirs in rows:
        print(f"  {name:56} {unit:>10} {ours:9.3f} {theirs:9.3f} {ours / theirs:6.2f}")
    print("RabbitMQ: spout = hand-written hot path, other = pika's codec")
    for name, unit, ours, theirs in amqp_rows(args.rounds):
        print(f"  {name:56} {unit:>10} {ours:9.3f} {theirs:9.3f} {ours / theirs:6.2f}")


if __name__ == "__main__":
    main()
