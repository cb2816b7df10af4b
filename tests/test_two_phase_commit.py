"""``TwoPhaseCommitSink`` in process: under exactly-once every row lands once, whatever fails
(a sentence failed halfway, a pre-commit, a sink task killed between its pre-commit and its
commit); under at-least-once every row lands at least once, committed on the sink's own clock.

The topology: sentences -> a split that fails sentence 13 once after emitting two of its words
-> a sink of two tasks writing ``(id, index, word)`` rows into a ``Store``
(``tests/sink_components.py``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from rayflow import Config, RayflowError
from rayflow._executors.two_phase_commit import TwoPhaseCommitAdapter
from rayflow.testing import InProcessTopology, complete_topology
from tests.sink_components import FAILURES, SENTENCES, STORES, Store, StoreSink, build, expected_rows

EXACTLY_ONCE = Config(processing_guarantee="exactly_once", max_spout_pending=10)


@pytest.fixture
def store(request: pytest.FixtureRequest) -> Iterator[tuple[str, Store]]:
    key = request.node.name
    STORES[key] = Store()
    FAILURES[key] = {13}
    try:
        yield key, STORES[key]
    finally:
        del STORES[key]
        FAILURES.pop(key, None)


def duplicates(rows: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], int]:
    return {row: n for row, n in Counter(rows).items() if n > 1}


def adapters(run: InProcessTopology) -> list[TwoPhaseCommitAdapter]:
    return [executor.bolt for executor in run.tasks("sink")]  # type: ignore[attr-defined]


def run_to_the_end(run: InProcessTopology, checkpoints: int = 10) -> None:
    """Let ``checkpoints`` checkpoint intervals pass on the simulated clock: the spouts may
    be done before a COMMIT sent again has reached every sink task."""
    for _ in range(checkpoints):
        run.advance(1.0)
        run.run()
    assert run.finished


class TestExactlyOnce:
    def test_a_sentence_failed_halfway_lands_once(self, store: tuple[str, Store]) -> None:
        """The split fails sentence 13 after two of its words reached the sink: the rollback
        aborts the transaction holding them, and the replay writes each word once."""
        key, db = store
        result = complete_topology(build(key, StoreSink(key)), EXACTLY_ONCE)
        assert sorted(db.rows) == expected_rows()
        assert db.staged == {}
        assert sorted(result.acked("sentences")) == list(range(len(SENTENCES)))
        assert result.failed("sentences") == []
        assert result.metrics()["sink"]["rollbacks"] >= 1

    def test_a_failed_pre_commit_rolls_back_and_lands_once(self, store: tuple[str, Store]) -> None:
        key, db = store
        FAILURES[key] = set()
        db.failing["pre_commit"] = 1
        result = complete_topology(build(key, StoreSink(key)), EXACTLY_ONCE)
        assert sorted(db.rows) == expected_rows()
        assert result.metrics()["sink"]["errors"] >= 1

    def test_each_input_is_acked_when_written(self, store: tuple[str, Store]) -> None:
        """Under exactly-once the checkpoint makes a row durable, so the sink acks at once:
        its acks are not held until the commit."""
        key, _ = store
        FAILURES[key] = set()
        run = InProcessTopology(build(key, StoreSink(key)), EXACTLY_ONCE)
        run.advance(1.0)
        run.run()
        sink = run.metrics()["sink"]
        assert sink["acked"] == sink["executed"] > 0
        run.close()

    def test_a_sink_killed_between_pre_commit_and_commit_commits_by_name(self, store: tuple[str, Store]) -> None:
        """A commit fails, so the task holds a pre-committed transaction until the COMMIT is
        sent again; it dies meanwhile, and its next incarnation gets that COMMIT and commits
        the transaction by its name."""
        key, db = store
        FAILURES[key] = set()
        db.failing["commit"] = 1
        run = InProcessTopology(build(key, StoreSink(key)), EXACTLY_ONCE)
        run.run()
        while "failed commit" not in " ".join(db.calls):
            run.advance(1.0)
            run.run()
        victim = next(a._task.task_id for a in adapters(run) if a.prepared)
        run.kill(victim)
        run_to_the_end(run)
        run.close()
        assert sorted(db.rows) == expected_rows()
        assert db.staged == {}
        index = [t for t, c in sorted(run.layout.items()) if c == "sink"].index(victim)
        assert f"recover_and_commit topology/sink/task-{index}/" in " ".join(db.calls)

    def test_a_sink_killed_after_a_pre_commit_that_is_rolled_back_aborts_by_name(
        self, store: tuple[str, Store]
    ) -> None:
        """The second pre-commit of a checkpoint fails, so it rolls back; each task's abort
        fails too, so the pre-committed transaction is left in the store. The tasks die; their
        next incarnations get the ROLLBACK sent again and abort by name."""
        key, db = store
        FAILURES[key] = set()
        run = InProcessTopology(build(key, StoreSink(key)), EXACTLY_ONCE)
        run.run()
        run.advance(1.0)  # INITSTATE: the transactions begin
        run.run()
        db.failing.update({"pre_commit": 1, "abort": 2})
        while db.failing["abort"]:
            run.advance(1.0)
            run.run()
        assert db.staged, "the pre-committed transaction is left in the store"
        for adapter in adapters(run):
            run.kill(adapter._task.task_id)
        run_to_the_end(run)
        run.close()
        assert sorted(db.rows) == expected_rows()
        assert db.staged == {}
        assert "recover_and_abort" in " ".join(db.calls)

    def test_transaction_names_are_the_topology_component_task_and_txid(self, store: tuple[str, Store]) -> None:
        key, db = store
        FAILURES[key] = set()
        complete_topology(build(key, StoreSink(key), sink_tasks=1), EXACTLY_ONCE.merged({"topology.name": "words"}))
        begun = [call.split()[1] for call in db.calls if call.startswith("begin ")]
        assert begun and all(name.startswith("words/sink/") for name in begun)
        assert [int(name.rsplit("/", 1)[1]) for name in begun] == list(range(1, len(begun) + 1))


class TestAtLeastOnce:
    def test_rows_land_at_least_once_and_are_acked_at_the_commit(self, store: tuple[str, Store]) -> None:
        """The two words of sentence 13 written before it failed are written again with the
        replay: at-least-once. Every sentence is acked once its rows committed."""
        key, db = store
        result = complete_topology(build(key, StoreSink(key)))
        assert sorted(set(db.rows)) == expected_rows()
        assert duplicates(db.rows) == {(13, 0, "w6"): 2, (13, 1, "w3"): 2}
        assert sorted(result.acked("sentences")) == list(range(len(SENTENCES)))
        assert result.metrics()["sink"]["checkpoints"] >= 1

    def test_inputs_wait_for_the_commit_interval(self, store: tuple[str, Store]) -> None:
        key, db = store
        FAILURES[key] = set()
        run = InProcessTopology(build(key, StoreSink(key)))
        run.run()
        assert db.rows == [] and run.acked("sentences") == []
        run.advance(StoreSink.commit_interval_secs)
        assert sorted(db.rows) == expected_rows()
        assert sorted(run.acked("sentences")) == list(range(len(SENTENCES)))
        run.close()

    def test_a_failed_commit_aborts_and_fails_the_inputs(self, store: tuple[str, Store]) -> None:
        key, db = store
        FAILURES[key] = set()
        db.failing["pre_commit"] = 1
        result = complete_topology(build(key, StoreSink(key), sink_tasks=1))
        assert sorted(set(db.rows)) == expected_rows()
        assert result.failed("sentences")
        assert result.metrics()["sink"]["rollbacks"] == 1


def test_transaction_name_is_known_in_a_task_only() -> None:
    with pytest.raises(RayflowError, match="from prepare or later"):
        StoreSink("nowhere").transaction_name(1)
