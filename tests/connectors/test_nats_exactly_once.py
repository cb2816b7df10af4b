"""NatsJetStreamSpout under exactly-once, against the real NATS JetStream on 127.0.0.1, in process.

A stream of numbered messages -> split (fails some messages once, after emitting half of their
words) -> stateful count. What a rollback voids is ``nak``-ed and delivered again; a message
whose ack died with its task is acked by the restarted task and recognised by its stream
sequence if it comes again. Once the consumer has nothing pending or undelivered, every word's
count is the truth (``tests/connectors/exactly_once_kit.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rayflow import Config
from rayflow.testing import InProcessTopology
from tests.connectors.brokers import FakeCollector, context, nats_pending, nats_publish
from tests.connectors.brokers import drive as drive_spout
from tests.connectors.exactly_once_kit import counts, crash, drive, lossy, message, topology, truth

pytestmark = pytest.mark.broker

TOTAL = 200
DURABLE = "counting"


def exactly_once(tmp_path: Path) -> Config:
    return Config.of(
        {
            "processing_guarantee": "exactly_once",
            "max_spout_pending": 40,
            # the consumer's ack_wait (a quarter more): what a killed task held comes again after it
            "message_timeout_secs": 2,
            "state_provider": "sqlite",
            "state_provider_config": {"dir": str(tmp_path)},
        }
    )


def publish(stream: str, total: int = TOTAL) -> None:
    nats_publish(f"{stream}.words", *(message(n) for n in range(total)))


def spout(stream: str, lossy_acks: bool = False) -> Any:
    from rayflow.connectors.nats import NatsJetStreamSpout

    kind = lossy(NatsJetStreamSpout) if lossy_acks else NatsJetStreamSpout
    return kind(stream, DURABLE, fields=("data",))


def drained(stream: str) -> bool:
    """Every message delivered and acked: every checkpoint covering one committed."""
    return nats_pending(stream, DURABLE) == (0, 0)


def the_task(run: InProcessTopology) -> int:
    (task,) = (t for t, c in run.layout.items() if c == "source")
    return task


class TestCountedOnce:
    def test_a_message_failed_after_half_its_words_is_counted_once(self, jetstream: str, tmp_path: Path) -> None:
        publish(jetstream)
        run = InProcessTopology(topology(spout(jetstream), frozenset({17, 101, 160})), exactly_once(tmp_path))
        assert drive(run, lambda: drained(jetstream)), run.metrics()
        assert counts(run) == truth(TOTAL)
        assert run.metrics()["count"]["rollbacks"] >= 1
        assert run.failed("source") == []
        assert len(run.acked("source")) == TOTAL, "each message acked once, at its commit"
        run.close()

    def test_a_killed_spout_task_leaves_every_count_exact(self, jetstream: str, tmp_path: Path) -> None:
        publish(jetstream)
        run = InProcessTopology(topology(spout(jetstream), frozenset({150})), exactly_once(tmp_path))
        assert drive(run, lambda: len(run.acked("source")) >= 60)
        crash(run.components("source")[0])
        run.kill(the_task(run))
        assert drive(run, lambda: drained(jetstream)), run.metrics()
        assert counts(run) == truth(TOTAL)
        run.close()

    def test_a_message_whose_ack_was_lost_with_its_task_is_acked_by_the_restarted_task_not_counted_again(
        self, jetstream: str, tmp_path: Path
    ) -> None:
        publish(jetstream)
        run = InProcessTopology(topology(spout(jetstream, lossy_acks=True)), exactly_once(tmp_path))
        assert drive(run, lambda: len(run.acked("source")) >= 40)
        source = run.components("source")[0]
        source.losing = True
        committed = len(run.acked("source"))
        assert drive(run, lambda: len(run.acked("source")) > committed)  # a commit whose acks are lost
        assert source.lost > 0
        crash(source)
        run.kill(the_task(run))
        assert drive(run, lambda: drained(jetstream)), run.metrics()
        assert counts(run) == truth(TOTAL)
        run.close()


class TestPositionAndSeek:
    """The spout alone, as the executor drives it."""

    def opened(self, stream: str) -> tuple[Any, FakeCollector]:
        source = spout(stream)
        collector = FakeCollector()
        conf = {"max_spout_pending": 100, "message_timeout_secs": 1, "processing_guarantee": "exactly_once"}
        source.open(conf, context(), collector)
        source.activate()
        return source, collector

    def test_a_rollback_naks_what_was_emitted_and_it_comes_again_at_once(self, jetstream: str) -> None:
        publish(jetstream, 5)
        source, collector = self.opened(jetstream)
        assert drive_spout(source, collector, lambda: len(collector.emitted) == 5)
        template, ranges = source.position()
        assert ranges == [(1, 5)]
        source.ack(collector.emitted[0][1])  # the commit of sequence 1
        source.seek((template, [(1, 1)]))  # a rollback: 2 .. 5 come again, long before ack_wait
        assert drive_spout(source, collector, lambda: len(collector.emitted) == 9, timeout=2.0)
        assert sorted(values[0] for values, _ in collector.emitted[5:]) == [message(n) for n in range(1, 5)]
        for _, msg_id in collector.emitted[5:]:
            source.ack(msg_id)
        assert drive_spout(source, collector, lambda: drained(jetstream) and not source._unconfirmed)
        source.close()

    def test_a_restarted_task_acks_what_its_position_committed_and_recognises_it(self, jetstream: str) -> None:
        publish(jetstream, 6)
        first, collector = self.opened(jetstream)
        assert drive_spout(first, collector, lambda: len(collector.emitted) == 6)
        template, _ = first.position()
        crash(first)  # 1 .. 3 were committed, their acks never written
        second, collector = self.opened(jetstream)
        second.seek((template, [(1, 3)]))
        # 4 .. 6 come again once ack_wait passed; 1 .. 3 never do
        assert drive_spout(second, collector, lambda: len(collector.emitted) == 3, timeout=10.0)
        assert sorted(values[0] for values, _ in collector.emitted) == [message(n) for n in range(3, 6)]
        for _, msg_id in collector.emitted:
            second.ack(msg_id)
        assert drive_spout(second, collector, lambda: drained(jetstream))
        second.close()

    def test_a_message_delivered_again_after_its_commit_is_recognised_not_emitted(self, jetstream: str) -> None:
        publish(jetstream, 3)
        first, collector = self.opened(jetstream)
        assert drive_spout(first, collector, lambda: len(collector.emitted) == 3)
        committed = first.position()
        crash(first)  # 1 .. 3 were committed, their acks never written
        second, collector = self.opened(jetstream)
        # A task actor's upkeep pulls before the task's first seek: the three come after ack_wait
        assert drive_spout(second, collector, lambda: len(second._buffer) == 3, timeout=10.0, upkeep_only=True)
        second.seek(committed)
        assert second.recognised == 3
        assert drive_spout(second, collector, lambda: drained(jetstream))
        assert collector.emitted == []
        second.close()
