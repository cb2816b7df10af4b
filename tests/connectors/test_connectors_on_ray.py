"""The broker spouts in running topologies (on the session's Ray): the broker hears of a message
only when its tree completes, failed trees come back, a bolt slower than the broker's heartbeat
costs no connection, and the YAML file loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import rayflow
from rayflow import Bolt, Config, OutputCollector, TopologyBuilder, TopologyContext, Tuple
from tests.conftest import eventually
from tests.connectors.brokers import RABBITMQ_URL, publish, unique
from tests.topology_helpers import Board, Holder

pytestmark = [pytest.mark.broker, pytest.mark.ray]

CONF = Config(message_timeout_secs=10, max_spout_pending=100)
TICKS = {"tick_tuple_freq_secs": 0.1}


class FailFirstTime(Bolt):
    """Fails the first delivery of every value it sees and acks the second: each tree fails once."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector
        self.seen: set[Any] = set()

    def execute(self, tup: Tuple) -> None:
        key = repr(tup[0])
        if key in self.seen:
            self.collector.ack(tup)
        else:
            self.seen.add(key)
            self.collector.fail(tup)


class SlowAcker(Bolt):
    """Holds every input, hands its first value to the board, and acks what it holds on each
    tick (``tick_tuple_freq_secs``): a bolt as slow as its ticks."""

    def __init__(self, board: Any) -> None:
        self.board = board

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector
        self.held: list[Tuple] = []

    def execute(self, tup: Tuple) -> None:
        if not tup.is_tick():
            self.board.add.remote([tup[0]])
            self.held.append(tup)
            return
        released, self.held = self.held, []
        for held in released:
            self.collector.ack(held)


def spout_metric(handle: Any, key: str) -> int:
    return int(handle.metrics()["source"][key])


def run(spout: Any, bolt: Any, config: dict[str, Any] | None = None) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("source", spout)
    builder.set_bolt("work", bolt, config=config).shuffle_grouping("source")
    return rayflow.submit_topology(unique("topology"), CONF, builder.create_topology())


# -- RabbitMQ ---------------------------------------------------------------------------------
def rabbit_ready_without_consumers(queue: str) -> int | None:
    """Messages in the queue once no consumer holds any (``None`` while one is connected)."""
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
    method = connection.channel().queue_declare(queue, passive=True).method
    connection.close()
    return None if method.consumer_count else int(method.message_count)


def test_rabbitmq_ack_waits_for_the_tree_and_a_killed_spout_gives_messages_back(ray_cluster: str, queue: str) -> None:
    """source (RabbitMQSpout) -> work (Holder). Killed while the holder holds all five: the
    broker has not been told, the five come back. Run again and released: all acked, queue empty."""
    from rayflow.connectors.rabbitmq import RabbitMQSpout

    publish(queue, *[f"m{i}" for i in range(5)])
    board = Board.remote()
    handle = run(RabbitMQSpout(queue), Holder(board), TICKS)
    assert eventually(lambda: spout_metric(handle, "emitted") == 5)
    handle.kill()
    assert eventually(lambda: rabbit_ready_without_consumers(queue) == 5)

    handle = run(RabbitMQSpout(queue), Holder(board), TICKS)
    assert eventually(lambda: spout_metric(handle, "emitted") == 5)
    assert spout_metric(handle, "acked") == 0
    board.set.remote("release")
    assert eventually(lambda: spout_metric(handle, "acked") == 5)
    handle.kill()
    assert eventually(lambda: rabbit_ready_without_consumers(queue) == 0)


def test_rabbitmq_failed_trees_are_redelivered(ray_cluster: str, queue: str) -> None:
    from rayflow.connectors.rabbitmq import RabbitMQSpout

    publish(queue, *[f"m{i}" for i in range(20)])
    handle = run(RabbitMQSpout(queue), FailFirstTime())
    assert eventually(lambda: spout_metric(handle, "acked") == 20)
    assert spout_metric(handle, "failed") == 20
    handle.kill()
    assert eventually(lambda: rabbit_ready_without_consumers(queue) == 0)


def test_rabbitmq_a_bolt_slower_than_the_heartbeat_costs_no_connection(ray_cluster: str, queue: str) -> None:
    """``?heartbeat=2``, ``max_spout_pending`` 20, a bolt that acks every 5 s: the spout's task
    calls no ``next_tuple`` while its budget is full, and its upkeep keeps the connection, so
    each of the 40 messages is processed once, none is requeued, no outage is reported. Two
    budgets' worth: the budget is full for 5 s twice, the second time after the first acks went
    out on the same connection."""
    import ray

    from rayflow.connectors.rabbitmq import RabbitMQSpout

    bodies = [f"m{i}" for i in range(40)]
    publish(queue, *bodies)
    board = Board.remote()
    builder = TopologyBuilder()
    builder.set_spout("source", RabbitMQSpout(queue, url=f"{RABBITMQ_URL}?heartbeat=2"))
    builder.set_bolt("work", SlowAcker(board), config={"tick_tuple_freq_secs": 5}).shuffle_grouping("source")
    conf = Config(message_timeout_secs=30, max_spout_pending=20)
    handle = rayflow.submit_topology(unique("topology"), conf, builder.create_topology())
    try:
        assert eventually(lambda: spout_metric(handle, "acked") == len(bodies), timeout=90)
        assert sorted(ray.get(board.all.remote())) == sorted(bodies)
        assert spout_metric(handle, "errors") == 0
    finally:
        handle.kill()
    assert eventually(lambda: rabbit_ready_without_consumers(queue) == 0)


def test_rabbitmq_topology_file_loads() -> None:
    pytest.importorskip("pika")
    from rayflow.connectors.rabbitmq import RabbitMQSpout
    from rayflow.topology_file import load_topology

    loaded = load_topology(Path(__file__).parents[2] / "configs" / "rabbitmq_wordcount.yaml")
    spout = loaded.topology.components["sentences"].component
    assert isinstance(spout, RabbitMQSpout)
    assert (spout.queue, spout.fields, spout.prefetch) == ("sentences", ("body",), None)
    assert loaded.config.max_spout_pending == 2000


# -- Redis Streams ----------------------------------------------------------------------------
def test_redis_xack_waits_for_the_tree(ray_cluster: str, client: Any, stream: str) -> None:
    """source (RedisStreamSpout) -> work (Holder): entries stay pending in the group until the
    holder acks them."""
    from rayflow.connectors.redis import RedisStreamSpout

    for i in range(5):
        client.xadd(stream, {"n": str(i)})
    board = Board.remote()
    handle = run(RedisStreamSpout(stream, "g"), Holder(board), TICKS)
    assert eventually(lambda: spout_metric(handle, "emitted") == 5)
    assert client.xpending(stream, "g")["pending"] == 5
    board.set.remote("release")
    assert eventually(lambda: client.xpending(stream, "g")["pending"] == 0)
    assert spout_metric(handle, "acked") == 5
    handle.kill()


def test_redis_failed_trees_are_emitted_again(ray_cluster: str, client: Any, stream: str) -> None:
    from rayflow.connectors.redis import RedisStreamSpout

    for i in range(20):
        client.xadd(stream, {"n": str(i)})
    handle = run(RedisStreamSpout(stream, "g"), FailFirstTime())
    assert eventually(lambda: spout_metric(handle, "acked") == 20)
    assert spout_metric(handle, "failed") == 20
    assert eventually(lambda: client.xpending(stream, "g")["pending"] == 0)
    handle.kill()


def test_redis_spout_from_a_topology_file(tmp_path: Path) -> None:
    pytest.importorskip("redis")
    from rayflow.connectors.redis import RedisStreamSpout
    from rayflow.topology_file import load_topology

    path = tmp_path / "orders.yaml"
    path.write_text(
        "name: orders\n"
        "spouts:\n"
        "  - id: orders\n"
        "    class: rayflow.connectors.redis.RedisStreamSpout\n"
        "    args: [orders, billing]\n"
        "    kwargs: {fields: [id, amount], claim_idle_ms: 60000}\n"
        "bolts:\n"
        "  - {id: sink, class: tests.topology_helpers.Sink}\n"
        "streams:\n"
        "  - {from: orders, to: sink, grouping: {type: shuffle}}\n"
    )
    spout = load_topology(path).topology.components["orders"].component
    assert isinstance(spout, RedisStreamSpout)
    assert (spout.stream, spout.group, spout.fields, spout.claim_idle_ms) == (
        "orders",
        "billing",
        ("id", "amount"),
        60_000,
    )
