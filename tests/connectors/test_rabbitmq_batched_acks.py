"""RabbitMQSpout's batched broker acks against the real RabbitMQ, driven in-process: trees
complete out of order and fail in between, and the broker ends up holding exactly the failed
messages, never one acked twice (a channel error) or before its tree completed."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.conftest import eventually
from tests.connectors.brokers import RABBITMQ_URL, FakeCollector, Proxy, context, drive, publish, take_all
from tests.connectors.test_rabbitmq_spout import ready

pytestmark = pytest.mark.broker


def opened(queue: str, prefetch: int | None = None, url: str = RABBITMQ_URL) -> tuple[Any, FakeCollector]:
    from rayflow.connectors.rabbitmq import RabbitMQSpout

    spout = RabbitMQSpout(queue, url=url, fields=("body", "redelivered"), prefetch=prefetch)
    collector = FakeCollector()
    spout.open({"max_spout_pending": 1000}, context(), collector)
    spout.activate()
    # the spout connects on a thread of its own: wait for it (or for the connect's failure)
    assert drive(spout, collector, lambda: spout._connection is not None or bool(collector.errors), upkeep_only=True)
    return spout, collector


def broker_acks(spout: Any) -> list[tuple[int, bool]]:
    """Record every ``basic.ack`` the spout sends from now on, as (delivery tag, multiple)."""
    sent: list[tuple[int, bool]] = []
    connection = spout._connection
    real = connection.ack

    def ack(delivery_tag: int, multiple: bool = False) -> None:
        sent.append((delivery_tag, multiple))
        real(delivery_tag, multiple)

    connection.ack = ack
    return sent


def remaining(queue: str) -> list[str]:
    """Take every message left in ``queue`` (acking it) and return the bodies."""
    return [body.decode() for body in take_all(queue)]


class TestOutOfOrderAcks:
    def test_acks_around_a_failed_message_leave_exactly_it_on_the_queue(self, queue: str) -> None:
        """Ten messages; the trees complete in the order 9, 2, 7, 0, 5 (the broker hears of 0
        alone then), message 4 fails, then 1, 8, 3, 6 complete. Once the acks are flushed (at
        deactivate) and the spout closed, the queue holds message 4 alone: every other one was
        acked once, and nothing else stayed unacked (closing would have put it back)."""
        publish(queue, *[f"m{i}" for i in range(10)])
        spout, collector = opened(queue)
        assert drive(spout, collector, lambda: len(collector.emitted) == 10)
        ids = {values[0]: msg_id for values, msg_id in collector.emitted}
        sent = broker_acks(spout)
        for name in ["m9", "m2", "m7", "m0", "m5"]:
            spout.ack(ids[name])
        # The flush on the linger may cover m0 alone: m1 is still open.
        assert drive(spout, collector, lambda: bool(sent))
        assert sent == [(ids["m0"][1], True)]
        spout.fail(ids["m4"], "failed")
        for name in ["m1", "m8", "m3", "m6"]:
            spout.ack(ids[name])
        # The requeued message comes straight back to the only consumer, as a redelivery.
        assert drive(spout, collector, lambda: len(collector.emitted) == 11)
        assert collector.emitted[10][0] == ["m4", True]
        spout.deactivate()  # flushes the acks and hands nothing back: m4 is a pending tree
        spout.close()  # m4's tree never completed: the broker requeues it
        assert not collector.errors
        assert eventually(lambda: ready(queue) == 1, timeout=10)
        assert remaining(queue) == ["m4"]

    def test_shuffled_acks_and_fails_settle_every_message_once(self, queue: str) -> None:
        """300 messages, completed in a random order with one in ten failing (and acked when it
        comes again): the queue ends empty and the broker never saw a tag settled twice."""
        publish(queue, *[f"m{i}" for i in range(300)])
        spout, collector = opened(queue, prefetch=400)
        assert drive(spout, collector, lambda: len(collector.emitted) == 300)
        shuffled = [msg_id for _, msg_id in collector.emitted]
        random.Random(7).shuffle(shuffled)
        bodies = {msg_id: values[0] for values, msg_id in collector.emitted}
        failed = []
        for n, msg_id in enumerate(shuffled):
            if n % 10 == 3:
                spout.fail(msg_id, "timeout")
                failed.append(bodies[msg_id])
            else:
                spout.ack(msg_id)
        assert drive(spout, collector, lambda: len(collector.emitted) == 330)
        again = collector.emitted[300:]
        assert sorted(values[0] for values, _ in again) == sorted(failed)
        assert all(redelivered for (_, redelivered), _ in again)
        for _, msg_id in again:
            spout.ack(msg_id)
        spout.close()
        assert not collector.errors
        assert eventually(lambda: ready(queue) == 0, timeout=10)
        assert spout.stale_acks == 0

    def test_in_order_acks_go_out_as_few_multiple_acks(self, queue: str) -> None:
        publish(queue, *[f"m{i}" for i in range(200)])
        spout, collector = opened(queue, prefetch=400)
        assert drive(spout, collector, lambda: len(collector.emitted) == 200)
        sent = broker_acks(spout)
        for _, msg_id in collector.emitted:
            spout.ack(msg_id)
        spout.close()
        assert sent and len(sent) <= 10 and all(multiple for _, multiple in sent)
        assert eventually(lambda: ready(queue) == 0, timeout=10)

    def test_a_slow_tree_does_not_hold_the_acks_after_it_for_long(self, queue: str) -> None:
        """Message 0's tree is still running while 1..19 complete: their acks cannot be one
        ``multiple=True`` ack, so after a short hold each goes out on its own; 0 stays unacked."""
        publish(queue, *[f"m{i}" for i in range(20)])
        spout, collector = opened(queue, prefetch=400)
        assert drive(spout, collector, lambda: len(collector.emitted) == 20)
        sent = broker_acks(spout)
        for _, msg_id in collector.emitted[1:]:
            spout.ack(msg_id)
        assert drive(spout, collector, lambda: len(sent) == 19, timeout=5)
        assert not any(multiple for _, multiple in sent)
        assert collector.emitted[0][1][1] not in [tag for tag, _ in sent]
        spout.ack(collector.emitted[0][1])
        spout.close()
        assert not collector.errors
        assert eventually(lambda: ready(queue) == 0, timeout=10)


class TestDeactivate:
    def test_deactivate_hands_back_the_buffer_and_acks_what_completed(self, queue: str) -> None:
        """One ``next_tuple`` emits a burst (of what was delivered); deactivate gives the rest
        back to the queue and sends the acks waiting; a tree that completes while inactive is
        acked at once."""
        publish(queue, *[f"m{i}" for i in range(200)])
        spout, collector = opened(queue, prefetch=1000)
        bursts: list[int] = []

        def two_emitted() -> bool:  # called between next_tuple calls: records what each emitted
            bursts.append(len(collector.emitted) - sum(bursts))
            return len(collector.emitted) >= 2

        assert drive(spout, collector, two_emitted)
        assert max(bursts) <= 1000 // 64  # a burst is at most a 64th of the prefetch
        emitted = len(collector.emitted)
        spout.ack(collector.emitted[0][1])
        spout.deactivate()
        # Deliveries still on their way when the consumer was cancelled are handed back by the
        # upkeep that reads them (a task's event loop runs it on a timer; here, the test).
        assert drive(spout, collector, lambda: ready(queue) == 200 - emitted, upkeep_only=True)
        sent = broker_acks(spout)
        spout.ack(collector.emitted[1][1])
        assert [tag for tag, _ in sent] == [collector.emitted[1][1][1]]
        spout.close()
        assert not collector.errors
        assert eventually(lambda: ready(queue) == 198, timeout=10)


class TestClosedOrDead:
    def test_close_sends_the_waiting_acks_and_the_broker_requeues_the_rest(self, queue: str) -> None:
        """Acks still batched at the spout reach the broker at close; the unacked messages come
        back to the next consumer, flagged redelivered."""
        publish(queue, *[f"m{i}" for i in range(12)])
        spout, collector = opened(queue)
        assert drive(spout, collector, lambda: len(collector.emitted) == 12)
        for _, msg_id in collector.emitted[::2]:  # m0, m2, ..., m10 complete
            spout.ack(msg_id)
        spout.close()
        assert not collector.errors
        second, collector_two = opened(queue)
        assert drive(second, collector_two, lambda: len(collector_two.emitted) == 6)
        assert sorted(values[0] for values, _ in collector_two.emitted) == sorted(f"m{i}" for i in range(1, 12, 2))
        assert all(values[1] for values, _ in collector_two.emitted)
        for _, msg_id in collector_two.emitted:
            second.ack(msg_id)
        second.close()
        assert eventually(lambda: ready(queue) == 0, timeout=10)

    def test_results_for_a_closed_spout_are_dropped(self, queue: str) -> None:
        publish(queue, "late")
        spout, collector = opened(queue)
        assert drive(spout, collector, lambda: len(collector.emitted) == 1)
        spout.close()
        spout.ack(collector.emitted[0][1])
        spout.fail(collector.emitted[0][1])
        assert spout.stale_acks == 2 and not collector.errors
        assert eventually(lambda: ready(queue) == 1, timeout=10)

    def test_a_dead_spouts_unacked_messages_come_again(self, queue: str) -> None:
        """The spout's connection dies (a proxy cuts it, as a killed process would) while acks
        are still batched at it: every message whose tree had not completed comes to the next
        consumer (the acked ones may too: at-least-once), and once it acks them the queue is empty."""
        publish(queue, *[f"m{i}" for i in range(12)])
        proxy = Proxy(5672)
        try:
            dead, dead_collector = opened(queue, url=proxy.url(RABBITMQ_URL))
            assert drive(dead, dead_collector, lambda: len(dead_collector.emitted) == 12)
            for _, msg_id in dead_collector.emitted[::2]:
                dead.ack(msg_id)
            proxy.cut()
            second, collector = opened(queue)
            unacked = {f"m{i}" for i in range(1, 12, 2)}
            assert drive(second, collector, lambda: unacked <= {values[0] for values, _ in collector.emitted})
            assert all(redelivered for (_, redelivered), _ in collector.emitted)
            for _, msg_id in collector.emitted:
                second.ack(msg_id)
            second.close()
            assert not collector.errors
            assert eventually(lambda: ready(queue) == 0, timeout=10)
        finally:
            proxy.close()
