"""Poison messages are dead-lettered, each broker its own way, after exactly ``max_replays``
replays; the good ones around them are acked, nothing is lost and nothing loops.

Storm's scenario: a bolt that can never process one message (``FailPoison``) fails its tree
every time. The spout replays it ``max_replays`` times, then hands it to the broker's
dead-letter place and counts it (``metrics()["source"]["dead_lettered"]``). Run in-process
(``InProcessTopology``) against the real brokers on 127.0.0.1; NATS's is in
``test_nats_spout.py``, on Ray."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rayflow._errors import ConfigError
from tests.connectors.brokers import (
    POISON,
    RABBITMQ_URL,
    FakeCollector,
    context,
    drive,
    poison_topology,
    publish,
    require_rabbitmq,
    run_until,
    take_all,
    unique,
)

pytestmark = pytest.mark.broker

MAX_REPLAYS = 3
GOOD = [f"m{i}" for i in range(10)]


def poison_emits(run: Any) -> int:
    return sum(1 for values in run.emitted("source") if values[0] in (POISON, POISON.encode()))


# -- Redis ------------------------------------------------------------------------------------
class TestRedis:
    def test_the_poison_entry_goes_to_the_dead_stream_after_max_replays(self, client: Any, stream: str) -> None:
        from rayflow.connectors.redis import RedisStreamSpout

        dead = f"{stream}:dead"
        try:
            ids = [client.xadd(stream, {"body": body}).decode() for body in GOOD[:5] + [POISON] + GOOD[5:]]
            run = poison_topology(RedisStreamSpout(stream, "g", fields=("body", "id"), max_replays=MAX_REPLAYS))
            assert run_until(run, lambda: run.metrics()["source"]["dead_lettered"] == 1)
            run.close()
            source = run.metrics()["source"]
            assert source["acked"] == len(GOOD) and source["failed"] == 1 + MAX_REPLAYS
            assert poison_emits(run) == 1 + MAX_REPLAYS
            assert client.xpending(stream, "g")["pending"] == 0
            [(_, fields)] = client.xrange(dead)
            assert fields == {
                b"body": POISON.encode(),
                b"rayflow.stream": stream.encode(),
                b"rayflow.group": b"g",
                b"rayflow.id": ids[5].encode(),
                b"rayflow.reason": b"failed",
                b"rayflow.deliveries": str(1 + MAX_REPLAYS).encode(),
            }
        finally:
            client.delete(dead)

    def test_replays_are_counted_by_redis_across_a_restart(self, client: Any, stream: str) -> None:
        """Two replays, the task dies, its replacement reads its pending list (a delivery: the
        tree was lost) and dead-letters at the next fail. The reason is the last fail's."""
        from rayflow.connectors.redis import RedisStreamSpout

        dead = "poison-parking"
        entry = client.xadd(stream, {"body": POISON}).decode()
        try:
            dying = RedisStreamSpout(stream, "g", max_replays=MAX_REPLAYS, dead_letter_stream=dead)
            collector = FakeCollector()
            dying.open({}, context(4), collector)
            for emits in (1, 2, 3):
                assert drive(dying, collector, lambda n=emits: len(collector.emitted) == n)  # type: ignore[misc]
                if emits < 3:
                    dying.fail(entry, "failed")
            # dies here, its third tree in flight
            again = RedisStreamSpout(stream, "g", max_replays=MAX_REPLAYS, dead_letter_stream=dead)
            collector = FakeCollector()
            again.open({}, context(4), collector)
            assert drive(again, collector, lambda: len(collector.emitted) == 1)
            again.fail(entry, "timeout")  # claimed back with the next batch of failures: it never waits
            assert drive(again, collector, lambda: collector.counts["dead_lettered"] == 1)
            assert not drive(again, collector, lambda: len(collector.emitted) > 1, timeout=0.3)
            [(_, fields)] = client.xrange(dead)
            assert (fields[b"rayflow.reason"], fields[b"rayflow.deliveries"]) == (b"timeout", b"4")
            assert client.xpending(stream, "g")["pending"] == 0
            again.close()
        finally:
            client.delete(dead)

    def test_the_claim_scan_counts_no_delivery_for_the_tasks_own_entries(self, client: Any, stream: str) -> None:
        """An entry held longer than ``claim_idle_ms`` (a long tree) is met by the task's own
        ``XAUTOCLAIM`` scan, pass after pass: its delivery count stays 1, so a slow tree does
        not use up its replays."""
        from rayflow.connectors.redis import RedisStreamSpout

        entry = client.xadd(stream, {"body": "slow"}).decode()
        spout = RedisStreamSpout(stream, "g", claim_idle_ms=20)
        collector = FakeCollector()
        spout.open({}, context(), collector)
        assert drive(spout, collector, lambda: len(collector.emitted) == 1)
        drive(spout, collector, lambda: False, timeout=0.5)  # a dozen scan passes
        [pending] = client.xpending_range(stream, "g", min=entry, max=entry, count=1)
        assert pending["times_delivered"] == 1 and len(collector.emitted) == 1
        spout.ack(entry)
        spout.close()

    def test_no_bound_replays_forever(self, client: Any, stream: str) -> None:
        from rayflow.connectors.redis import RedisStreamSpout

        entry = client.xadd(stream, {"body": POISON}).decode()
        spout = RedisStreamSpout(stream, "g", max_replays=None)
        collector = FakeCollector()
        spout.open({}, context(), collector)
        for emits in range(1, 20):
            assert drive(spout, collector, lambda n=emits: len(collector.emitted) == n)  # type: ignore[misc]
            spout.fail(entry)
        assert collector.counts["dead_lettered"] == 0 and client.xlen(f"{stream}:dead") == 0
        spout.close()


# -- RabbitMQ ---------------------------------------------------------------------------------
@pytest.fixture
def dead_letter_queues(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """``(queue, dlq)``: a queue whose dead letters go through a fanout exchange to ``dlq``;
    a quorum queue when the test is parametrized with ``"quorum"``, else a classic one."""
    require_rabbitmq()
    import pika

    kind = getattr(request, "param", "classic")
    queue, dlq, exchange = unique("queue"), unique("dlq"), unique("dlx")
    connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
    channel = connection.channel()
    channel.exchange_declare(exchange, "fanout", auto_delete=False)
    channel.queue_declare(dlq)
    channel.queue_bind(dlq, exchange)
    channel.queue_declare(
        queue, durable=kind == "quorum", arguments={"x-dead-letter-exchange": exchange, "x-queue-type": kind}
    )
    try:
        yield queue, dlq
    finally:
        for name in (queue, dlq):
            channel.queue_delete(name)
        channel.exchange_delete(exchange)
        connection.close()


class TestRabbitMQ:
    @pytest.mark.parametrize("dead_letter_queues", ["classic", "quorum"], indirect=True)
    def test_the_poison_message_goes_to_the_dead_letter_exchange_after_max_replays(
        self, dead_letter_queues: tuple[str, str]
    ) -> None:
        """Classic queue: the spout replays it itself; quorum queue: the broker requeues and
        counts (``x-delivery-count``). Either way 1 + ``max_replays`` deliveries, then the DLX."""
        from rayflow.connectors.rabbitmq import RabbitMQSpout
        from tests.conftest import eventually

        queue, dlq = dead_letter_queues
        publish(queue, *GOOD[:5], POISON, *GOOD[5:])
        run = poison_topology(RabbitMQSpout(queue, max_replays=MAX_REPLAYS))
        assert run_until(run, lambda: run.metrics()["source"]["dead_lettered"] == 1)
        assert run_until(run, lambda: run.metrics()["source"]["acked"] == len(GOOD))
        run.close()
        source = run.metrics()["source"]
        assert source["failed"] == 1 + MAX_REPLAYS and poison_emits(run) == 1 + MAX_REPLAYS
        assert eventually(lambda: take_all(dlq) == [POISON.encode()], timeout=5)
        assert take_all(queue) == []

    @pytest.mark.parametrize("dead_letter_queues", ["quorum"], indirect=True)
    def test_a_quorum_queue_counts_the_replays_across_a_restart(self, dead_letter_queues: tuple[str, str]) -> None:
        """Two fails, then the spout dies holding its third delivery (the broker counts that
        return too): its replacement dead-letters the message at the next fail."""
        from rayflow.connectors.rabbitmq import RabbitMQSpout

        queue, dlq = dead_letter_queues
        publish(queue, POISON)
        dying = RabbitMQSpout(queue, max_replays=MAX_REPLAYS)
        collector = FakeCollector()
        dying.open({"max_spout_pending": 10}, context(), collector)
        for emits in (1, 2, 3):
            assert drive(dying, collector, lambda n=emits: len(collector.emitted) == n)  # type: ignore[misc]
            if emits < 3:
                dying.fail(collector.emitted[-1][1], "failed")
        dying.close()  # the connection goes: the broker requeues the third delivery
        again = RabbitMQSpout(queue, max_replays=MAX_REPLAYS)
        collector = FakeCollector()
        again.open({"max_spout_pending": 10}, context(), collector)
        assert drive(again, collector, lambda: len(collector.emitted) == 1)
        again.fail(collector.emitted[0][1], "timeout")
        assert collector.counts["dead_lettered"] == 1
        again.close()
        assert take_all(dlq) == [POISON.encode()] and take_all(queue) == []

    def test_a_classic_queue_replays_from_the_spout_holding_the_delivery(
        self, dead_letter_queues: tuple[str, str]
    ) -> None:
        """The first fail hands the message back, and its redelivery shows the queue keeps no
        count (no ``x-delivery-count``): from then on the spout keeps the delivery (nothing
        waits on the queue) and emits it again itself, counting the redelivery as one replay."""
        from rayflow.connectors.rabbitmq import RabbitMQSpout
        from tests.connectors.test_rabbitmq_spout import ready

        queue, dlq = dead_letter_queues
        publish(queue, POISON)
        spout = RabbitMQSpout(queue, fields=("body", "redelivered"), max_replays=MAX_REPLAYS)
        collector = FakeCollector()
        spout.open({"max_spout_pending": 10}, context(), collector)
        for emits in range(1, 2 + MAX_REPLAYS):
            assert drive(spout, collector, lambda n=emits: len(collector.emitted) == n)  # type: ignore[misc]
            spout.fail(collector.emitted[-1][1], "failed")
            assert ready(queue) == 0
        first, *replays = collector.emitted
        assert first[0] == [POISON, False]
        assert replays == [([POISON, True], replays[0][1])] * MAX_REPLAYS  # one delivery, replayed by the spout
        assert collector.counts["dead_lettered"] == 1
        spout.close()
        assert take_all(dlq) == [POISON.encode()]


# -- arguments --------------------------------------------------------------------------------
def test_max_replays_must_be_a_count_or_none() -> None:
    pytest.importorskip("redis")
    pytest.importorskip("pika")
    from rayflow.connectors.rabbitmq import RabbitMQSpout
    from rayflow.connectors.redis import RedisStreamSpout

    assert RabbitMQSpout("q", max_replays=-1).max_replays is None
    assert RedisStreamSpout("s", "g", max_replays=0).max_replays == 0
    with pytest.raises(ConfigError, match=r"RabbitMQSpout 'q': max_replays must be an int >= 0 .* got -2"):
        RabbitMQSpout("q", max_replays=-2)
    with pytest.raises(ConfigError, match="max_replays must be an int >= 0"):
        RedisStreamSpout("s", "g", max_replays="3")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="dead_letter_stream must be another stream than 's'"):
        RedisStreamSpout("s", "g", dead_letter_stream="s")
