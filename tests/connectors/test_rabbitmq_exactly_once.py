"""RabbitMQSpout under exactly-once, against the real RabbitMQ on 127.0.0.1, in process.

A queue of numbered messages -> split (fails some messages once, after emitting half of their
words) -> stateful count. A queue cannot rewind: what a rollback voids goes back to the queue,
and a message the broker delivers again after its checkpoint committed (its ack lost with a
killed task) is recognised by its ``message_id``. Once everything is committed every word's
count is the truth, and the queue holds nothing (``tests/connectors/exactly_once_kit.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rayflow import Config
from rayflow.testing import InProcessTopology
from tests.connectors.brokers import RABBITMQ_URL, FakeCollector, context, take_all
from tests.connectors.brokers import drive as drive_spout
from tests.connectors.exactly_once_kit import counts, crash, drive, lossy, message, topology, truth

pytestmark = pytest.mark.broker

TOTAL = 200


def exactly_once(tmp_path: Path) -> Config:
    return Config.of(
        {
            "processing_guarantee": "exactly_once",
            "max_spout_pending": 40,
            "state_provider": "sqlite",
            "state_provider_config": {"dir": str(tmp_path)},
        }
    )


def publish(queue: str, total: int = TOTAL, *, ids: bool = True) -> None:
    """Messages ``0 .. total - 1``, with ``message_id`` ``str(n)`` unless ``ids`` is false."""
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
    channel = connection.channel()
    for n in range(total):
        properties = pika.BasicProperties(message_id=str(n)) if ids else None
        channel.basic_publish("", queue, message(n), properties=properties)
    connection.close()


def spout(queue: str, lossy_acks: bool = False) -> Any:
    from rayflow.connectors.rabbitmq import RabbitMQSpout

    kind = lossy(RabbitMQSpout) if lossy_acks else RabbitMQSpout
    return kind(queue)


def settled(run: InProcessTopology, total: int = TOTAL) -> bool:
    """Every message counted, and nothing emitted waits for a commit."""
    return counts(run).total() >= truth(total).total() and not any(s._emitted for s in run.components("source"))


def the_task(run: InProcessTopology) -> int:
    (task,) = (t for t, c in run.layout.items() if c == "source")
    return task


class TestCountedOnce:
    def test_a_message_failed_after_half_its_words_is_counted_once(self, queue: str, tmp_path: Path) -> None:
        publish(queue, ids=False)  # a rollback needs no message_id: what it voids goes back to the queue
        run = InProcessTopology(topology(spout(queue), frozenset({17, 101, 160})), exactly_once(tmp_path))
        assert drive(run, lambda: settled(run)), run.metrics()
        assert counts(run) == truth(TOTAL)
        assert run.metrics()["count"]["rollbacks"] >= 1
        assert run.failed("source") == []
        run.close()
        assert take_all(queue) == [], "every message acked to the broker"

    def test_a_killed_spout_task_leaves_every_count_exact(self, queue: str, tmp_path: Path) -> None:
        publish(queue)
        run = InProcessTopology(topology(spout(queue), frozenset({150})), exactly_once(tmp_path))
        assert drive(run, lambda: len(run.acked("source")) >= 60)
        crash(run.components("source")[0])
        run.kill(the_task(run))
        assert drive(run, lambda: settled(run)), run.metrics()
        assert counts(run) == truth(TOTAL)
        run.close()
        assert take_all(queue) == []

    def test_a_message_whose_ack_was_lost_with_its_task_is_recognised_not_counted_again(
        self, queue: str, tmp_path: Path
    ) -> None:
        publish(queue)
        run = InProcessTopology(topology(spout(queue, lossy_acks=True)), exactly_once(tmp_path))
        assert drive(run, lambda: len(run.acked("source")) >= 40)
        source = run.components("source")[0]
        source.losing = True
        committed = len(run.acked("source"))
        assert drive(run, lambda: len(run.acked("source")) > committed)  # a commit whose acks are lost
        assert source.lost > 0
        crash(source)
        run.kill(the_task(run))
        assert drive(run, lambda: settled(run)), run.metrics()
        assert counts(run) == truth(TOTAL)
        assert run.components("source")[0].recognised >= source.lost
        run.close()
        assert take_all(queue) == []

    def test_a_lost_ack_of_one_task_is_recognised_by_another_that_gets_the_message(
        self, queue: str, tmp_path: Path
    ) -> None:
        """Two spout tasks share the queue. One commits a checkpoint whose acks never reach the
        broker, then dies: the broker gives its messages to any consumer, the other task too,
        which must recognise the committed ones from its peer's committed position."""
        publish(queue)
        run = InProcessTopology(topology(spout(queue, lossy_acks=True), spouts=2), exactly_once(tmp_path))
        assert drive(run, lambda: len(run.acked("source")) >= 40)
        first = run.components("source")[0]
        first.losing = True
        committed = len(run.acked("source"))
        assert drive(run, lambda: first.lost > 0 and len(run.acked("source")) > committed)
        crash(first)
        run.kill(min(t for t, c in run.layout.items() if c == "source"))
        assert drive(run, lambda: settled(run)), run.metrics()
        assert counts(run) == truth(TOTAL)
        assert sum(s.recognised for s in run.components("source")) >= first.lost
        run.close()
        assert take_all(queue) == []


class TestPositionAndSeek:
    """The spout alone, as the executor drives it."""

    def opened(self, queue: str) -> tuple[Any, FakeCollector]:
        source = spout(queue)
        collector = FakeCollector()
        source.open({"max_spout_pending": 100, "processing_guarantee": "exactly_once"}, context(), collector)
        source.activate()
        return source, collector

    def test_a_rollback_hands_what_was_emitted_back_to_the_queue(self, queue: str) -> None:
        publish(queue, 5)
        source, collector = self.opened(queue)
        assert drive_spout(source, collector, lambda: len(collector.emitted) == 5)
        assert source.position() == ["0", "1", "2", "3", "4"]
        source.ack(collector.emitted[0][1])  # the commit of message 0
        source.seek(["0"])  # a rollback: 1 .. 4 go back and come again
        assert drive_spout(source, collector, lambda: len(collector.emitted) == 9)
        assert sorted(values[0] for values, _ in collector.emitted[5:]) == [message(n) for n in range(1, 5)]
        source.close()
        assert sorted(take_all(queue)) == sorted(message(n).encode() for n in range(1, 5))

    def test_a_restarted_task_acks_what_its_position_committed_and_emits_the_rest(self, queue: str) -> None:
        publish(queue, 6)
        first, collector = self.opened(queue)
        assert drive_spout(first, collector, lambda: len(collector.emitted) == 6)
        crash(first)  # 0 .. 2 were committed, their acks never written
        second, collector = self.opened(queue)
        second.seek(["0", "1", "2"])
        assert drive_spout(second, collector, lambda: len(collector.emitted) == 3 and second.recognised == 3)
        assert sorted(values[0] for values, _ in collector.emitted) == [message(n) for n in range(3, 6)]
        second.close()
        assert sorted(take_all(queue)) == sorted(message(n).encode() for n in range(3, 6))

    def test_a_connection_lost_with_messages_of_the_coming_checkpoint_fails_that_checkpoint(self, queue: str) -> None:
        from rayflow.connectors._errors import BrokerError

        publish(queue, 3)
        source, collector = self.opened(queue)
        assert drive_spout(source, collector, lambda: len(collector.emitted) == 3)
        source._connection._sock.close()  # the broker requeues 0 .. 2, which come again
        assert drive_spout(source, collector, lambda: len(collector.emitted) == 6)
        with pytest.raises(BrokerError, match="connection was lost"):
            source.position()
        source.seek([])
        assert source.position() == []  # nothing emitted since: a checkpoint may commit again
        source.close()
