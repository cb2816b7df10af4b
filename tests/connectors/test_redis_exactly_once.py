"""RedisStreamSpout under exactly-once, against the real Redis on 127.0.0.1, in process.

A stream of numbered messages -> split (fails some messages once, after emitting half of their
words) -> stateful count. Whatever fails or dies, once the group holds nothing pending every
word's count is the truth: each entry counted once, its ``XACK`` sent once its checkpoint
committed (``tests/connectors/exactly_once_kit.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rayflow import Config
from rayflow.testing import InProcessTopology
from tests.connectors.brokers import FakeCollector, context
from tests.connectors.exactly_once_kit import counts, crash, drive, lossy, message, topology, truth

pytestmark = pytest.mark.broker

GROUP = "rayflow"
TOTAL = 200


def exactly_once(tmp_path: Path, **more: Any) -> Config:
    return Config.of(
        {
            "processing_guarantee": "exactly_once",
            "max_spout_pending": 40,
            "state_provider": "sqlite",
            "state_provider_config": {"dir": str(tmp_path)},
            **more,
        }
    )


def fill(client: Any, stream: str, total: int = TOTAL) -> list[str]:
    pipe = client.pipeline()
    for n in range(total):
        pipe.xadd(stream, {"body": message(n)})
    return [entry_id.decode() for entry_id in pipe.execute()]


def drained(client: Any, stream: str) -> bool:
    """Every entry read by the group, none pending: every checkpoint covering one committed."""
    if not client.exists(stream):
        return False
    groups = client.xinfo_groups(stream)
    last = client.xinfo_stream(stream)["last-generated-id"]
    return bool(groups) and groups[0]["pending"] == 0 and groups[0]["last-delivered-id"] == last


def spout(stream: str, lossy_acks: bool = False) -> Any:
    from rayflow.connectors.redis import RedisStreamSpout

    kind = lossy(RedisStreamSpout) if lossy_acks else RedisStreamSpout
    return kind(stream, GROUP, fields=("body",))


class TestCountedOnce:
    def test_a_message_failed_after_half_its_words_is_counted_once(
        self, client: Any, stream: str, tmp_path: Path
    ) -> None:
        ids = fill(client, stream)
        run = InProcessTopology(topology(spout(stream), frozenset({17, 101, 160})), exactly_once(tmp_path))
        assert drive(run, lambda: drained(client, stream)), run.metrics()
        assert counts(run) == truth(TOTAL)
        assert sorted(run.acked("source")) == sorted(ids), "each entry acked once, at its commit"
        assert run.failed("source") == []
        assert run.metrics()["count"]["rollbacks"] >= 1
        run.close()

    def test_a_killed_spout_task_resumes_at_its_committed_cut(self, client: Any, stream: str, tmp_path: Path) -> None:
        fill(client, stream)
        run = InProcessTopology(topology(spout(stream), frozenset({150})), exactly_once(tmp_path))
        assert drive(run, lambda: len(run.acked("source")) >= 60)
        (task,) = (t for t, c in run.layout.items() if c == "source")
        crash(run.components("source")[0])
        run.kill(task)
        assert drive(run, lambda: drained(client, stream)), run.metrics()
        assert counts(run) == truth(TOTAL)
        assert run.metrics()["source"]["restarts"] == 1
        run.close()

    def test_an_xack_lost_with_its_task_is_sent_by_the_restarted_task_and_not_counted_again(
        self, client: Any, stream: str, tmp_path: Path
    ) -> None:
        fill(client, stream)
        run = InProcessTopology(topology(spout(stream, lossy_acks=True)), exactly_once(tmp_path))
        assert drive(run, lambda: len(run.acked("source")) >= 40)
        source = run.components("source")[0]
        source.losing = True
        committed = len(run.acked("source"))
        assert drive(run, lambda: len(run.acked("source")) > committed)  # a commit whose XACKs are lost
        assert source.lost > 0
        (task,) = (t for t, c in run.layout.items() if c == "source")
        crash(source)
        run.kill(task)
        assert drive(run, lambda: drained(client, stream)), run.metrics()
        assert counts(run) == truth(TOTAL)
        run.close()


class TestPositionAndSeek:
    """The spout alone, as the executor drives it: ``position`` at a checkpoint's prepare,
    ``ack`` at its commit, ``seek`` at a rollback or a restart."""

    def opened(self, stream: str) -> tuple[Any, FakeCollector]:
        source = spout(stream)
        collector = FakeCollector()
        source.open({"max_spout_pending": 1000, "processing_guarantee": "exactly_once"}, context(), collector)
        return source, collector

    def emit(self, source: Any, collector: FakeCollector, n: int) -> None:
        from tests.connectors.brokers import drive as drive_spout

        assert drive_spout(source, collector, lambda: len(collector.emitted) >= n)

    def driven(self, source: Any, collector: FakeCollector, until: Callable[[], bool]) -> bool:
        from tests.connectors.brokers import drive as drive_spout

        return drive_spout(source, collector, until, upkeep_only=True)

    def test_a_rollback_emits_again_what_followed_the_position_and_nothing_before(
        self, client: Any, stream: str
    ) -> None:
        ids = fill(client, stream, 10)
        source, collector = self.opened(stream)
        assert source.position() == "0-0"
        self.emit(source, collector, 10)
        assert source.position() == ids[-1]
        source.seek(ids[3])  # the checkpoint after ids[3] is rolled back
        collector.emitted = []
        self.emit(source, collector, 6)
        assert [msg_id for _, msg_id in collector.emitted] == ids[4:]
        assert source.position() == ids[-1]
        source.close()

    def test_entries_pending_at_or_below_the_position_are_acked_by_a_restarted_task(
        self, client: Any, stream: str
    ) -> None:
        ids = fill(client, stream, 10)
        first, collector = self.opened(stream)
        self.emit(first, collector, 10)
        crash(first)  # committed up to ids[5], no XACK sent
        second, collector = self.opened(stream)

        def waited(*_: Any, **__: Any) -> None:
            raise AssertionError("a call that waits for Redis on the task's thread")

        second._client.xpending_range = second._client.xack = waited  # settled without waiting
        second.seek(ids[5])
        self.emit(second, collector, 4)
        assert [msg_id for _, msg_id in collector.emitted] == ids[6:]
        assert self.driven(second, collector, lambda: collector.counts.get("broker_acked", 0) == 6)
        pending = client.xpending_range(stream, GROUP, "-", "+", 100)
        assert [row["message_id"].decode() for row in pending] == ids[6:]
        for msg_id in ids[6:]:
            second.ack(msg_id)
        second.close()
        assert client.xpending(stream, GROUP)["pending"] == 0
