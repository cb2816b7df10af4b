"""RabbitMQSpout against the real RabbitMQ on 127.0.0.1, driven in-process (no Ray): the spout
object is opened with a recording collector and its ``next_tuple``/``ack``/``fail`` are called
as the spout executor calls them. Each test uses its own queue and deletes it."""

from __future__ import annotations

from typing import Any

import pytest

from rayflow._errors import ConfigError
from tests.connectors.brokers import (
    RABBITMQ_URL,
    FakeCollector,
    Proxy,
    context,
    drive,
    publish,
    require_rabbitmq,
    unique,
)

pytestmark = pytest.mark.broker


def ready(queue: str) -> int:
    """Messages waiting in the queue (not delivered, or delivered and given back)."""
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
    count = int(connection.channel().queue_declare(queue, passive=True).method.message_count)
    connection.close()
    return count


def opened(queue: str, conf: dict[str, Any] | None = None, **kwargs: Any) -> tuple[Any, FakeCollector]:
    from rayflow.connectors.rabbitmq import RabbitMQSpout

    spout = RabbitMQSpout(queue, **kwargs)
    collector = FakeCollector()
    spout.open({"max_spout_pending": 1000, **(conf or {})}, context(), collector)
    spout.activate()
    # the spout connects on a thread of its own: wait for it (or for the connect's failure)
    assert drive(spout, collector, lambda: spout._connection is not None or bool(collector.errors), upkeep_only=True)
    return spout, collector


def eventually_ready(queue: str, n: int, timeout: float = 10.0) -> bool:
    from tests.conftest import eventually

    return eventually(lambda: ready(queue) == n, timeout=timeout, interval=0.1)


class TestDelivery:
    def test_one_tuple_per_message_body_as_text_or_bytes(self, queue: str) -> None:
        publish(queue, "the cow jumped", b"\xff\xfe raw")
        spout, collector = opened(queue, fields=("body", "routing_key", "redelivered"))
        assert drive(spout, collector, lambda: len(collector.emitted) == 2)
        assert [values for values, _ in collector.emitted] == [
            ["the cow jumped", queue, False],
            [b"\xff\xfe raw", queue, False],
        ]
        spout.close()

    def test_broker_ack_only_when_the_tree_is_acked(self, queue: str) -> None:
        """Closing the spout hands unacked messages back: only the acked one is gone for good."""
        publish(queue, "a", "b", "c")
        spout, collector = opened(queue)
        assert drive(spout, collector, lambda: len(collector.emitted) == 3)
        assert ready(queue) == 0  # all three delivered, none acked yet
        spout.ack(collector.emitted[1][1])
        spout.close()
        assert eventually_ready(queue, 2)

    def test_every_message_acked_leaves_the_queue_empty(self, queue: str) -> None:
        publish(queue, *[f"m{i}" for i in range(50)])
        spout, collector = opened(queue)
        assert drive(spout, collector, lambda: len(collector.emitted) == 50)
        for _, msg_id in collector.emitted:
            spout.ack(msg_id)
        spout.close()
        assert ready(queue) == 0

    def test_fail_puts_the_message_back_and_it_comes_again(self, queue: str) -> None:
        publish(queue, "retry me")
        spout, collector = opened(queue, fields=("body", "redelivered"))
        assert drive(spout, collector, lambda: len(collector.emitted) == 1)
        spout.fail(collector.emitted[0][1], "timeout")
        assert drive(spout, collector, lambda: len(collector.emitted) == 2)
        assert collector.emitted[1][0] == ["retry me", True]
        spout.ack(collector.emitted[1][1])
        spout.close()
        assert ready(queue) == 0

    def test_one_argument_fail_works_too(self, queue: str) -> None:
        publish(queue, "x")
        spout, collector = opened(queue)
        assert drive(spout, collector, lambda: len(collector.emitted) == 1)
        spout.fail(collector.emitted[0][1])
        assert drive(spout, collector, lambda: len(collector.emitted) == 2)
        spout.close()

    def test_prefetch_defaults_to_max_spout_pending_and_a_quarter(self, queue: str) -> None:
        """The broker pushes no more unacked messages than the prefetch: the spout stalls there."""
        publish(queue, *[str(i) for i in range(300)])
        spout, collector = opened(queue, conf={"max_spout_pending": 100})
        drive(spout, collector, lambda: len(collector.emitted) >= 125, timeout=5)
        assert not drive(spout, collector, lambda: len(collector.emitted) > 125, timeout=0.5)
        assert ready(queue) == 300 - 125
        spout.close()

    def test_deactivate_hands_back_what_was_not_emitted(self, queue: str) -> None:
        publish(queue, *[str(i) for i in range(20)])
        spout, collector = opened(queue, prefetch=20)
        assert drive(spout, collector, lambda: len(collector.emitted) == 5)
        spout.deactivate()
        assert eventually_ready(queue, 15)
        spout.ack(collector.emitted[0][1])  # pending trees still complete while inactive
        spout.close()
        assert eventually_ready(queue, 19)


class TestFaults:
    def test_a_dead_spouts_messages_are_redelivered_to_another(self, queue: str) -> None:
        """Spout one's connection dies (a proxy cuts it, as a killed process would) with its
        messages unacked; spout two gets every one of them, flagged redelivered."""
        publish(queue, "p", "q", "r")
        proxy = Proxy(5672)
        try:
            first, first_collector = opened(queue, url=proxy.url(RABBITMQ_URL))
            assert drive(first, first_collector, lambda: len(first_collector.emitted) == 3)
            proxy.cut()
            second, collector = opened(queue, fields=("body", "redelivered"))
            assert drive(second, collector, lambda: len(collector.emitted) == 3)
            assert sorted(values[0] for values, _ in collector.emitted) == ["p", "q", "r"]
            assert all(values[1] for values, _ in collector.emitted)
            second.close()
        finally:
            proxy.close()

    def test_lost_connection_is_retried_with_backoff_and_reported_once(self, queue: str) -> None:
        publish(queue, "before")
        proxy = Proxy(5672)
        try:
            spout, collector = opened(queue, url=proxy.url(RABBITMQ_URL))
            assert drive(spout, collector, lambda: len(collector.emitted) == 1)
            stale = collector.emitted[0][1]
            proxy.cut()
            # the outage lasts a while; next_tuple keeps being called and never raises
            drive(spout, collector, lambda: False, timeout=1.0)
            assert len(collector.errors) == 1
            assert queue in str(collector.errors[0]) and "guest:***@" in str(collector.errors[0])
            spout.ack(stale)  # its channel is gone: dropped, the broker redelivers the message
            assert spout.stale_acks == 1
            proxy.restore()
            publish(queue, "after")
            assert drive(spout, collector, lambda: len(collector.emitted) == 3)
            assert len(collector.errors) == 1
            assert sorted(values[0] for values, _ in collector.emitted[1:]) == ["after", "before"]
            for _, msg_id in collector.emitted[1:]:
                spout.ack(msg_id)
            spout.close()
            assert ready(queue) == 0
        finally:
            proxy.close()

    def test_reconnecting_to_a_broker_that_does_not_answer_never_holds_next_tuple(self, queue: str) -> None:
        """After an outage the spout connects on a thread of its own: while the broker (a proxy
        that takes the connection and says nothing) does not answer, ``next_tuple`` returns with
        the connect still under way; once the broker answers, the spout is back."""
        publish(queue, "before")
        proxy = Proxy(5672)
        try:
            spout, collector = opened(queue, url=proxy.url(RABBITMQ_URL))
            assert drive(spout, collector, lambda: len(collector.emitted) == 1)
            proxy.hang()
            assert drive(spout, collector, lambda: spout._connecting.under_way, timeout=15)
            for _ in range(100):
                spout.next_tuple()
            assert spout._connecting.under_way  # the connect is still waiting for the broker
            assert spout._connection is None
            proxy.restore()
            assert drive(spout, collector, lambda: len(collector.emitted) == 2, timeout=60)
            assert collector.emitted[1][0] == ["before"]  # redelivered: it was never acked
            spout.ack(collector.emitted[1][1])
            spout.close()
            assert eventually_ready(queue, 0)
        finally:
            proxy.close()

    def test_open_against_a_broker_that_does_not_answer_returns_at_once(self, queue: str) -> None:
        """The first connect runs off the task's event loop too: against a server that takes
        the connection and says nothing, ``open`` returns with the connect under way and
        nothing reported (waiting, it would return only once the connect timed out, with the
        outage reported); ``next_tuple`` and ``upkeep`` return likewise."""
        from rayflow.connectors.rabbitmq import RabbitMQSpout

        proxy = Proxy(5672)
        proxy.hang()
        try:
            spout, collector = RabbitMQSpout(queue, url=proxy.url(RABBITMQ_URL)), FakeCollector()
            spout.open({"max_spout_pending": 10}, context(), collector)
            spout.activate()
            spout.next_tuple()
            spout.upkeep()
            assert spout._connecting.under_way and spout._connection is None
            assert collector.errors == []
            spout.close()
        finally:
            proxy.close()

    def test_deactivate_does_not_wait_for_a_broker_that_stopped_answering(self, queue: str) -> None:
        """``deactivate`` cancels the consumer without waiting for ``cancel-ok``: with the
        broker silent (the proxy holds what either side sends), it returns with the connection still the
        spout's and no outage (waiting, it would have given up on the connection after the
        socket timeout and reported it). Once the broker answers again, the message delivered
        but not emitted is back in the queue."""
        publish(queue, "held")
        proxy = Proxy(5672)
        try:
            spout, collector = opened(queue, url=proxy.url(RABBITMQ_URL))
            assert drive(spout, collector, lambda: len(spout._buffer) == 1, upkeep_only=True)
            proxy.stall()
            spout.deactivate()
            assert spout._connection is not None and collector.errors == []
            assert not spout._connection.consuming
            proxy.restore()
            assert eventually_ready(queue, 1)  # the cancel and the nack, held, reached the broker
            assert collector.emitted == []
            spout.close()
        finally:
            proxy.close()

    def test_close_waits_for_a_silent_broker_only_briefly(self, queue: str) -> None:
        """``close`` waits for the broker's ``close-ok`` at most ``CLOSE_WAIT_SECS``, not the
        URL's socket timeout (a minute here): with the broker silent (the proxy holds what
        either side sends) it returns well within the minute, and the acks written but not
        confirmed are not counted as ``broker_acked``."""
        import threading

        from tests.conftest import eventually

        publish(queue, "held")
        proxy = Proxy(5672)
        try:
            spout, collector = opened(queue, url=proxy.url(RABBITMQ_URL) + "?socket_timeout=60")
            assert drive(spout, collector, lambda: len(collector.emitted) == 1)
            proxy.stall()
            spout.ack(collector.emitted[0][1])
            closing = threading.Thread(target=spout.close, daemon=True)
            closing.start()
            assert eventually(lambda: not closing.is_alive(), timeout=30.0, interval=0.05)
            assert collector.counts["broker_acked"] == 0
        finally:
            proxy.close()

    def test_missing_queue_is_reported_once_and_picked_up_once_declared(self) -> None:
        require_rabbitmq()
        import pika

        name = unique("late-queue")
        spout, collector = opened(name)
        drive(spout, collector, lambda: False, timeout=0.5)
        assert len(collector.errors) == 1 and name in str(collector.errors[0])
        connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
        try:
            connection.channel().queue_declare(name)
            publish(name, "finally")
            assert drive(spout, collector, lambda: len(collector.emitted) == 1)
            spout.close()
        finally:
            connection.channel().queue_delete(name)
            connection.close()

    def test_declare_makes_the_queue_when_there_is_none(self) -> None:
        """declare=True: the spout declares a durable queue on connect, and consumes from it."""
        require_rabbitmq()
        import pika

        name = unique("declared-queue")
        spout, collector = opened(name, declare=True)
        try:
            assert drive(spout, collector, lambda: spout._connection is not None, timeout=5)
            assert collector.errors == []
            publish(name, "hello")
            assert drive(spout, collector, lambda: len(collector.emitted) == 1)
            spout.close()
        finally:
            connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
            connection.channel().queue_delete(name)
            connection.close()

    def test_queue_deleted_under_the_spout_is_reported_and_picked_up_again(self, queue: str) -> None:
        import pika

        spout, collector = opened(queue)
        drive(spout, collector, lambda: False, timeout=0.2)
        connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
        try:
            connection.channel().queue_delete(queue)
            drive(spout, collector, lambda: bool(collector.errors), timeout=5)
            assert len(collector.errors) == 1 and "cancelled the consumer" in str(collector.errors[0])
            connection.channel().queue_declare(queue)
            publish(queue, "back")
            assert drive(spout, collector, lambda: len(collector.emitted) == 1)
            assert len(collector.errors) == 1
            spout.close()
        finally:
            connection.close()


class TestConstruction:
    def test_unknown_field_names_the_allowed_ones(self) -> None:
        pytest.importorskip("pika")
        from rayflow.connectors.rabbitmq import RabbitMQSpout

        with pytest.raises(ConfigError, match=r"unknown field\(s\) \['bdy'\].*'body'"):
            RabbitMQSpout("q", fields=("bdy",))

    @pytest.mark.parametrize("prefetch", [0, 70_000, 1.5, True])
    def test_prefetch_out_of_range(self, prefetch: Any) -> None:
        pytest.importorskip("pika")
        from rayflow.connectors.rabbitmq import RabbitMQSpout

        with pytest.raises(ConfigError, match="prefetch must be an int from 1 to 65535"):
            RabbitMQSpout("q", prefetch=prefetch)

    def test_the_spout_pickles_before_open(self) -> None:
        """Components travel to their tasks pickled: nothing unpicklable before ``open``."""
        pytest.importorskip("pika")
        import pickle

        from rayflow.connectors.rabbitmq import RabbitMQSpout

        spout = pickle.loads(pickle.dumps(RabbitMQSpout("q", prefetch=10)))
        assert (spout.queue, spout.prefetch, spout.fields) == ("q", 10, ("body",))
