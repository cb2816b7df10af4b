"""A bolt slower than the broker's patience, against the real brokers on 127.0.0.1: the spout's
pending budget stays full for seconds at a time, so ``next_tuple`` is not called, and still the
broker hears what keeps the connection and the held messages alive (``upkeep``).

Each spout runs as its task runs it, on an asyncio event loop (``run_starved``): 40 messages,
``max_spout_pending`` 20, the pending trees acked every 5 s. Every message must come exactly
once, without a reconnect."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import eventually
from tests.connectors.brokers import (
    RABBITMQ_URL,
    FakeCollector,
    nats_call,
    nats_pending,
    nats_publish,
    publish,
    run_starved,
)
from tests.connectors.test_rabbitmq_spout import ready

pytestmark = pytest.mark.broker

MESSAGES = 40
"""Two budgets' worth: the budget is full for 5 s twice, the second time after the first acks
went out on the same connection (each stretch past the broker's patience costs 5 s of wall time)."""
MAX_PENDING = 20
ACK_EVERY = 5.0


def exactly_once(seen: Any, expected: set[Any]) -> None:
    assert set(seen) == expected, (
        f"missing {sorted(expected - set(seen))[:5]}, unexpected {sorted(set(seen) - expected)[:5]}"
    )
    twice = {value: n for value, n in seen.items() if n > 1}
    assert not twice, f"delivered more than once: {twice}"


def no_outage(collector: FakeCollector) -> None:
    assert collector.errors == [], f"the connection was lost: {collector.errors[0]}"


class TestRabbitMQ:
    def test_heartbeats_go_out_while_the_budget_is_full(self, queue: str) -> None:
        """With ``?heartbeat=2`` the broker drops a connection silent for about 4 s; the bolt
        acks every 5 s. Without heartbeats between, the 20 messages in flight would be
        requeued and come again, and their acks be lost with the channel."""
        from rayflow.connectors.rabbitmq import RabbitMQSpout

        bodies = {f"m{i}" for i in range(MESSAGES)}
        publish(queue, *sorted(bodies))
        spout = RabbitMQSpout(queue, url=f"{RABBITMQ_URL}?heartbeat=2")
        seen, collector = run_starved(spout, messages=MESSAGES, max_pending=MAX_PENDING, ack_every=ACK_EVERY)
        exactly_once(seen, bodies)
        no_outage(collector)
        assert spout._generation == 1  # one channel all along
        assert collector.counts["broker_acked"] == MESSAGES  # the broker heard of each ack
        assert eventually(lambda: ready(queue) == 0, timeout=10)


class TestNats:
    def test_held_messages_are_kept_in_progress_while_the_budget_is_full(self, jetstream: str) -> None:
        """The consumer exists with ``ack_wait`` 4 s (the spout uses it as it is): without
        in-progress acks while the budget is full, JetStream would redeliver every message the
        bolt holds for 5 s."""
        from nats.js.api import AckPolicy, ConsumerConfig

        from rayflow.connectors.nats import NatsJetStreamSpout

        async def add_consumer(js: Any) -> None:
            await js.add_consumer(
                jetstream, ConsumerConfig(durable_name="slow", ack_policy=AckPolicy.EXPLICIT, ack_wait=4)
            )

        nats_call(add_consumer)
        payloads = {f"m{i}" for i in range(MESSAGES)}
        nats_publish(f"{jetstream}.orders", *sorted(payloads))
        spout = NatsJetStreamSpout(jetstream, "slow", fields=("data", "num_delivered"))
        conf = {"message_timeout_secs": 30}
        seen, collector = run_starved(spout, messages=MESSAGES, max_pending=MAX_PENDING, ack_every=ACK_EVERY, conf=conf)
        exactly_once(seen, payloads)
        assert {values[1] for values, _ in collector.emitted} == {1}  # num_delivered: the first delivery each
        no_outage(collector)
        assert collector.counts["broker_acked"] == MESSAGES  # the server was told of each ack
        assert eventually(lambda: nats_pending(jetstream, "slow") == (0, 0), timeout=10)
