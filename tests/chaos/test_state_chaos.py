"""Storm's promise for *results* under fire: the chaos topology with a stateful word count.

    source (Redis stream) --shuffle--> split --fields(word)--> count (StatefulBolt) --shuffle--> record

20,000 numbered messages; count keeps its counts in a ``KeyValueState`` committed to Redis.
Nine SIGKILLs, one at a time: the stateful count three times, the acker, the checkpoint spout
twice, the source spout, split and the acker again. At the end every message reached the sink,
the consumer group holds nothing, and the committed counts are at or above the truth for every
word: no committed update was lost. How far above (replays into restored state) and each
recovery are printed (``pytest -s -m chaos tests/chaos``)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

import rayflow
from rayflow import Config, KeyValueState, OutputCollector, StatefulBolt, TopologyBuilder, TopologyContext, Tuple
from rayflow._state.provider import open_provider
from rayflow.state import load_component
from tests.chaos.chaos_kit import WORDS_PER_MESSAGE, Ledger, Monkey, Record, Split, StreamGroup, message, report
from tests.chaos.test_chaos import redis_client, spout_pending  # noqa: F401 -- the fixture
from tests.connectors.brokers import REDIS_URL, unique

pytestmark = [pytest.mark.chaos, pytest.mark.broker, pytest.mark.ray]

TOTAL = 20_000
PLAN = ["count", "__acker", "__checkpoint", "count", "source", "__checkpoint", "split", "count", "__acker"]
DEADLINE_SECS = 300.0


class StatefulCount(StatefulBolt):
    outputs = ["n", "word", "count"]

    def init_state(self, state: KeyValueState) -> None:
        self.counts = state

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        n = self.counts.get(tup["word"], 0) + 1
        self.counts.put(tup["word"], n)
        self.collector.emit([tup["n"], tup["word"], n], anchors=tup)
        self.collector.ack(tup)


def truth() -> Counter[str]:
    return Counter(w for n in range(TOTAL) for w in message(n).split()[1:])


def test_redis_streams_no_committed_update_lost_when_tasks_die(ray_cluster: str, redis_client: Any) -> None:  # noqa: F811
    from rayflow.connectors.redis import RedisStreamSpout

    stream, key, group, prefix = unique("chaos-stream"), unique("chaos-seen"), "chaos", unique("chaos-state")
    name = unique("chaos-state")
    state = {"url": REDIS_URL, "key_prefix": prefix}
    conf = Config.of(
        {
            "message_timeout_secs": 5,
            "max_spout_pending": 1000,
            "state_provider": "redis",
            "state_provider_config": state,
            "checkpoint_interval_ms": 500,
        }
    )
    try:
        entries = StreamGroup(redis_client, stream, group, TOTAL)
        entries.fill()

        builder = TopologyBuilder()
        builder.set_spout("source", RedisStreamSpout(stream, group, claim_idle_ms=15_000, max_replays=None))
        builder.set_bolt("split", Split(), parallelism=2).shuffle_grouping("source")
        builder.set_bolt("count", StatefulCount(), parallelism=2).fields_grouping("split", ["word"])
        builder.set_bolt("record", Record(key), parallelism=2).shuffle_grouping("count")
        handle = rayflow.submit_topology(name, conf, builder.create_topology())
        try:
            started = time.monotonic()
            ledger = Ledger(redis_client, key)
            monkey = Monkey(handle, ledger, entries.delivered, TOTAL, list(PLAN))
            done = False
            while time.monotonic() < started + DEADLINE_SECS:
                finished = monkey.step() and ledger.seen() == TOTAL and entries.state() == (0, 0)
                if finished and spout_pending(handle) == 0:
                    done = True
                    break
                time.sleep(0.1)
            ended = time.monotonic()
            monkey.step()
            metrics = handle.metrics()
        finally:
            handle.kill()
        provider = open_provider("redis", state, name)
        counts: Counter[str] = Counter(load_component(provider, name, "count"))
        provider.close()
        expected = truth()
        lost = {w: expected[w] - counts[w] for w in expected if counts[w] < expected[w]}
        above = {w: counts[w] - expected[w] for w in expected if counts[w] > expected[w]}
        title = "stateful count, Redis Streams, state in Redis"
        print("\n" + report(title, TOTAL, ledger.counts(), monkey, started, ended))
        print(
            f"committed counts: {expected.total():,} words true, {counts.total():,} committed; lost updates "
            f"{sum(lost.values())}; above the truth {sum(above.values()):,} "
            f"({max(above.values(), default=0):,} at most for one word); checkpoints "
            f"{metrics['__checkpoint']['checkpoints']}, rollbacks {metrics['__checkpoint']['rollbacks']}"
        )
        assert len(monkey.kills) == len(PLAN), f"only {len(monkey.kills)} kills happened before the deadline"
        assert done, f"not finished within {DEADLINE_SECS} s: {ledger.seen():,} of {TOTAL:,} ids reached the sink"
        assert not lost, f"committed updates lost: {lost}"
        assert set(ledger.counts()) == set(range(TOTAL))
        assert counts.total() >= WORDS_PER_MESSAGE * TOTAL
    finally:
        redis_client.delete(stream, key)
        keys = list(redis_client.scan_iter(f"{prefix}:*"))
        if keys:
            redis_client.delete(*keys)
