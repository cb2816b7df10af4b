"""A broker spout's ``broker_acked`` counter says what its broker was told, against the real
brokers on 127.0.0.1: a tree's ack counts once the broker confirmed it handled the message's
ack (RabbitMQ: its reply to a sync written after the acks, or its close-ok; NATS: the PONG to
a PING written after them), or once the broker answered that it took the entry off its pending list
(Redis). The executor's ``acked`` counts trees: when an ack is lost with a connection, or the
broker had the message settled already, the two differ, and ``broker_acked`` is the one the
queue agrees with."""

from __future__ import annotations

from typing import Any

import pytest

from tests.connectors.brokers import NATS_URL, RABBITMQ_URL, Proxy, drive, nats_pending, nats_publish, publish
from tests.connectors.test_nats_spout import DURABLE
from tests.connectors.test_nats_spout import opened as nats_opened
from tests.connectors.test_rabbitmq_spout import eventually_ready
from tests.connectors.test_rabbitmq_spout import opened as rabbitmq_opened
from tests.connectors.test_redis_stream_spout import GROUP, pending
from tests.connectors.test_redis_stream_spout import opened as redis_opened

pytestmark = pytest.mark.broker


def broker_acked(collector: Any) -> int:
    return int(collector.counts["broker_acked"])


class TestRabbitMQ:
    def test_acks_lost_with_the_channel_are_not_counted(self, queue: str) -> None:
        """Three messages emitted, the connection cut, their trees acked: whether the acks were
        written into the dead socket before the spout noticed, or dropped for a channel already
        gone, the broker never confirmed them (it requeued the messages), so none counts.
        Delivered again and acked: three in all, for six tree acks."""
        publish(queue, "a", "b", "c")
        proxy = Proxy(5672)
        try:
            spout, collector = rabbitmq_opened(queue, url=proxy.url(RABBITMQ_URL))
            assert drive(spout, collector, lambda: len(collector.emitted) == 3)
            proxy.cut()
            for _, msg_id in collector.emitted:
                spout.ack(msg_id)
            # written into the cut socket or dropped for a channel already gone: never confirmed
            assert drive(spout, collector, lambda: bool(collector.errors))
            assert broker_acked(collector) == 0
            proxy.restore()
            assert drive(spout, collector, lambda: len(collector.emitted) == 6, timeout=20)
            for _, msg_id in collector.emitted[3:]:
                spout.ack(msg_id)
            assert drive(spout, collector, lambda: broker_acked(collector) == 3)
            spout.close()
            assert eventually_ready(queue, 0)
            assert broker_acked(collector) == 3
        finally:
            proxy.close()


class TestNats:
    def test_acks_count_once_written_and_not_again_on_a_new_connection(self, jetstream: str) -> None:
        """Acks made while the connection is down wait for the next one: counted once the
        server confirms it read them there, and the consumer then holds none of the messages."""
        nats_publish(f"{jetstream}.a", "a", "b", "c")
        proxy = Proxy(4222)
        try:
            spout, collector = nats_opened(jetstream, url=proxy.url(NATS_URL), fields=("data",))
            assert drive(spout, collector, lambda: len(collector.emitted) == 3)
            spout.ack(collector.emitted[0][1])
            assert drive(spout, collector, lambda: broker_acked(collector) == 1)
            proxy.cut()
            assert drive(spout, collector, lambda: bool(collector.errors))
            for _, msg_id in collector.emitted[1:]:
                spout.ack(msg_id)  # no connection: the acks wait for the next one
            assert broker_acked(collector) == 1 and len(spout._out) == 2
            proxy.restore()
            assert drive(spout, collector, lambda: broker_acked(collector) == 3, timeout=20)
            assert drive(spout, collector, lambda: nats_pending(jetstream, DURABLE) == (0, 0))
            spout.close()
            assert broker_acked(collector) == 3
        finally:
            proxy.close()


class TestRedis:
    def test_only_what_redis_took_off_the_pending_list_counts(self, client: Any, stream: str) -> None:
        """Three entries emitted; one is acked by someone else first. The spout's three XACKs
        take two entries off the pending list (Redis answers so), and two count."""
        entries = [client.xadd(stream, {"n": str(i)}).decode() for i in range(3)]
        spout, collector = redis_opened(stream)
        assert drive(spout, collector, lambda: len(collector.emitted) == 3)
        client.xack(stream, GROUP, entries[0])
        for _, msg_id in collector.emitted:
            spout.ack(msg_id)
        assert drive(spout, collector, lambda: pending(client, stream) == 0)
        assert drive(spout, collector, lambda: broker_acked(collector) == 2)
        spout.close()
        assert broker_acked(collector) == 2
