"""Storm's promise under fire: 20,000 numbered messages from a real broker through
source -> split -> count -> record while the processes of bolt tasks, of the acker and of the
spout are SIGKILLed, three times each. At the end the broker has every message acknowledged and
every id reached the sink: 0 lost. The spouts replay without bound (``max_replays=None``): with
5 s timeouts and kills on a loaded box a good message may time out more often than the default
bound allows, and dead-lettering is tested in ``tests/connectors``. Duplicates, recovery times
and throughput are printed (``pytest -s -m chaos tests/chaos``); each test takes 1-3 minutes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import rayflow
from rayflow import Config, TopologyBuilder
from tests.chaos.chaos_kit import Count, Ledger, Monkey, Record, Split, StreamGroup, message, report
from tests.connectors.brokers import RABBITMQ_URL, REDIS_URL, require_rabbitmq, require_redis, unique

pytestmark = [pytest.mark.chaos, pytest.mark.broker, pytest.mark.ray]

TOTAL = 20_000
PLAN = ["bolt", "acker", "spout"] * 3
DEADLINE_SECS = 170.0
CONF = Config(message_timeout_secs=5, max_spout_pending=1000)


@pytest.fixture
def redis_client() -> Iterator[Any]:
    require_redis()  # the sink records in Redis for both brokers
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    yield client
    client.close()


def build(spout: Any, key: str) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("source", spout)
    builder.set_bolt("split", Split(), parallelism=2).shuffle_grouping("source")
    builder.set_bolt("count", Count(), parallelism=2).fields_grouping("split", ["word"])
    builder.set_bolt("record", Record(key), parallelism=2).shuffle_grouping("count")
    return builder.create_topology()


def spout_pending(handle: Any) -> int:
    return sum(int(info.get("pending", 0)) for info in handle.task_metrics().values() if info["kind"] == "spout")


def run_chaos(
    title: str, handle: Any, redis_client: Any, key: str, drained: Callable[[], bool], delivered: Callable[[], int]
) -> None:
    """Kill by the plan while the topology works; return once every id reached the sink, the
    source is drained and the spout holds nothing (or fail at the deadline)."""
    info = next(iter(handle.task_metrics().values()))
    assert {"kind", "pid", "alive", "restarts"} <= set(info), f"task_metrics() lacks restart fields: {sorted(info)}"
    started = time.monotonic()
    ledger = Ledger(redis_client, key)
    monkey = Monkey(handle, ledger, delivered, TOTAL, list(PLAN))
    deadline = started + DEADLINE_SECS
    done = False
    while time.monotonic() < deadline:
        if monkey.step() and ledger.seen() == TOTAL and drained() and spout_pending(handle) == 0:
            done = True
            break
        time.sleep(0.1)
    finished = time.monotonic()
    monkey.step()  # the last recoveries
    counts = ledger.counts()
    print("\n" + report(title, TOTAL, counts, monkey, started, finished))
    assert len(monkey.kills) == len(PLAN), f"only {len(monkey.kills)} kills happened before the deadline"
    assert all(k.alive_after is not None for k in monkey.kills), "a killed task never came back"
    assert done, f"not finished within {DEADLINE_SECS} s: {len(counts):,} of {TOTAL:,} ids reached the sink"
    assert len(counts) == TOTAL and set(counts) == set(range(TOTAL))


def test_rabbitmq_nothing_lost_when_tasks_die(ray_cluster: str, redis_client: Any) -> None:
    require_rabbitmq()
    import pika

    from rayflow.connectors.rabbitmq import RabbitMQSpout

    queue, key = unique("chaos-queue"), unique("chaos-seen")
    connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
    channel = connection.channel()
    channel.queue_declare(queue)
    try:
        for n in range(TOTAL):
            channel.basic_publish("", queue, message(n))

        def queue_state() -> tuple[int, int]:
            method = channel.queue_declare(queue, passive=True).method
            return int(method.message_count), int(method.consumer_count)

        handle = rayflow.submit_topology(
            unique("chaos-rabbitmq"), CONF, build(RabbitMQSpout(queue, max_replays=None), key)
        )
        try:
            run_chaos(
                "RabbitMQ",
                handle,
                redis_client,
                key,
                drained=lambda: queue_state()[0] == 0,
                delivered=lambda: TOTAL - queue_state()[0],
            )
        finally:
            handle.kill()
        # no consumer left: whatever was not acked by the broker would be back in the queue
        deadline = time.monotonic() + 10
        while queue_state()[1] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert queue_state() == (0, 0), "messages left unacknowledged in the broker"
    finally:
        channel.queue_delete(queue)
        connection.close()
        redis_client.delete(key)


def test_redis_streams_nothing_lost_when_tasks_die(ray_cluster: str, redis_client: Any) -> None:
    from rayflow.connectors.redis import RedisStreamSpout

    stream, key, group = unique("chaos-stream"), unique("chaos-seen"), "chaos"
    try:
        entries = StreamGroup(redis_client, stream, group, TOTAL)
        entries.fill()

        spout = RedisStreamSpout(stream, group, claim_idle_ms=15_000, max_replays=None)
        handle = rayflow.submit_topology(unique("chaos-redis"), CONF, build(spout, key))
        try:
            run_chaos(
                "Redis Streams",
                handle,
                redis_client,
                key,
                drained=lambda: entries.state() == (0, 0),
                delivered=entries.delivered,
            )
        finally:
            handle.kill()
        assert entries.state() == (0, 0), "entries left pending or unread in the consumer group"
    finally:
        redis_client.delete(stream, key)
