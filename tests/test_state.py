"""Stateful bolts in process: Storm's checkpoint protocol on the simulated clock.

The topology throughout: sentences -> split (2 tasks) -> count (a ``StatefulBolt``, 2 tasks,
fields-grouped on the word). What is fed, what must be acked, failed or replayed, and what the
committed state must hold."""

from __future__ import annotations

import pickle
from collections import Counter, deque
from pathlib import Path
from typing import Any

import pytest

from rayflow import Config, ConfigError, KeyValueState, TopologyBuilder
from rayflow._state.checkpoint import CHECKPOINT_COMPONENT, CHECKPOINT_STREAM
from rayflow.testing import InProcessTopology, complete_topology

from .state_components import Sentences, Split, Unanchored, wordcount

SENTENCES = ["the cow jumped over the moon", "an apple a day", "the man went to the store", "four score and seven"]
TRUTH = Counter(w for s in SENTENCES for w in s.split())


def committed_counts(run: InProcessTopology) -> Counter[str]:
    """The committed state of every count task, summed (what a restart would find)."""
    total: Counter[str] = Counter()
    for task in run.tasks("count"):
        adapter: Any = task.bolt  # type: ignore[attr-defined]
        for data, _ in adapter.provider.load_many(adapter.namespaces).values():
            total.update(data)
    return total


class TestWiring:
    def test_a_stateful_bolt_adds_the_checkpoint_spout_and_stream_to_every_bolt(self) -> None:
        topology = wordcount(SENTENCES)
        assert CHECKPOINT_COMPONENT in topology.components
        split_inputs = [(s.component, s.stream) for s in topology.components["split"].inputs]
        count_inputs = [(s.component, s.stream) for s in topology.components["count"].inputs]
        assert split_inputs == [("sentences", "default"), (CHECKPOINT_COMPONENT, CHECKPOINT_STREAM)]
        assert count_inputs == [("split", "default"), ("split", CHECKPOINT_STREAM)]

    def test_a_topology_without_state_is_left_alone(self) -> None:
        builder = TopologyBuilder()
        builder.set_spout("sentences", Sentences(SENTENCES))
        builder.set_bolt("split", Split()).shuffle_grouping("sentences")
        assert CHECKPOINT_COMPONENT not in builder.create_topology().components


class TestCheckpoints:
    def test_counts_are_exact_and_every_sentence_is_acked_after_the_commit(self) -> None:
        result = complete_topology(wordcount(SENTENCES))
        assert sorted(result.acked("sentences")) == [0, 1, 2, 3] and result.failed("sentences") == []
        counted: Counter[str] = Counter()
        for component in result.components("count"):
            counted.update(dict(component.counts.items()))
        assert counted == TRUTH
        metrics = result.metrics()["count"]
        assert metrics["checkpoints"] >= 1 and metrics["rollbacks"] == 0
        assert metrics["executed"] == sum(TRUTH.values())  # checkpoint tuples are not counted
        assert result.emitted("split", CHECKPOINT_STREAM)  # they did travel every edge

    def test_acks_wait_for_the_commit(self) -> None:
        """Everything processed, the clock still: no sentence is acked. One interval later the
        checkpoint commits, and then all are, and the committed state is the truth."""
        run = InProcessTopology(wordcount(SENTENCES))
        run.run()
        assert run.acked("sentences") == []
        assert sum(run.metrics()["count"]["executed"] for _ in [0]) == sum(TRUTH.values())
        run.advance(run.conf.checkpoint_interval_ms / 1000.0)
        assert sorted(run.acked("sentences")) == [0, 1, 2, 3]
        assert committed_counts(run) == TRUTH

    def test_hooks_run_around_each_step_in_order(self) -> None:
        run = InProcessTopology(wordcount(SENTENCES, count_tasks=1))
        run.run()
        run.advance(run.conf.checkpoint_interval_ms / 1000.0)
        hooks = run.components("count")[0].hooks
        assert hooks[0] == ("init_state", {})
        prepared = [txid for name, txid in hooks if name == "pre_prepare"]
        committed = [txid for name, txid in hooks if name == "pre_commit"]
        assert prepared and prepared == committed and prepared == sorted(prepared)

    def test_a_failed_prepare_rolls_back_and_the_replays_count_once(self) -> None:
        """The store refuses the first stage of each count task: the checkpoint fails, every
        stateful task rolls back, the sentences acked since are failed and replayed, and the
        counts end exact (the rolled-back updates are not counted twice)."""
        conf = {"state_provider": "tests.state_components.FlakyProvider"}
        result = complete_topology(wordcount(SENTENCES), conf)
        assert sorted(set(result.acked("sentences"))) == [0, 1, 2, 3]
        assert sorted(result.failed("sentences")) == [0, 1, 2, 3]  # each replayed once
        counted: Counter[str] = Counter()
        for component in result.components("count"):
            counted.update(dict(component.counts.items()))
            assert ("pre_rollback", None) in component.hooks
        assert counted == TRUTH
        assert result.metrics()["count"]["rollbacks"] >= 1
        assert result.metrics()["count"]["errors"] >= 1  # the store's refusal is reported

    def test_a_small_pending_budget_asks_for_checkpoints_instead_of_stalling(self) -> None:
        """max_spout_pending=2 with 40 sentences: the spout asks for a checkpoint whenever half
        its budget is held, so the run completes without the clock moving at all."""
        sentences = [f"word{i} other{i % 3}" for i in range(40)]
        run = InProcessTopology(wordcount(sentences), {"max_spout_pending": 2})
        run.run()
        assert sorted(run.acked("sentences")) == list(range(40))
        assert run.now == 0.0

    def test_a_commit_lost_on_one_edge_is_sent_again_and_the_checkpoints_go_on(self) -> None:
        """Every sentence counted and acked at the first commit. Then the second COMMIT from one
        split task to one count task is lost (its sender died with it, say): that count task
        holds the other split task's COMMIT alone, and the checkpoint times out. The checkpoint
        spout sends the same COMMIT (same txid, same action) again: the count task must wait
        for the new attempt from both split tasks, not complete it with the one left over from
        the lost attempt (it would then wait for ever for the new one's other half, and every
        attempt after it would time out). Every later checkpoint commits."""
        run = InProcessTopology(wordcount(SENTENCES))
        split, count = run.tasks("split")[0].task_id, run.tasks("count")[0].task_id
        run.data = _DropOnce(run.data, split, count, (2, "commit"))
        run.run()
        interval = run.conf.checkpoint_interval_ms / 1000.0
        checkpoint: Any = run.components(CHECKPOINT_COMPONENT)[0]
        run.advance(2 * interval)  # the first checkpoint commits; the second COMMIT is lost
        assert checkpoint.commits == 1 and run.data.dropped == 1
        assert sorted(run.acked("sentences")) == [0, 1, 2, 3]
        run.advance(2 * run.conf.message_timeout_secs + 4 * interval)  # timed out, sent again, and on
        assert checkpoint.commits >= 4, f"{checkpoint.commits} commits: the checkpoints stalled"
        assert run.failed("sentences") == [] and committed_counts(run) == TRUTH

    def test_state_carries_over_to_the_next_run_with_the_sqlite_provider(self, tmp_path: Path) -> None:
        """Run the word count twice under one name with state in SQLite: the second run's
        init_state gets the first run's counts, and the counts go on from there."""
        conf = {"state_provider": "sqlite", "state_provider_config": {"dir": str(tmp_path)}, "topology.name": "wc"}
        complete_topology(wordcount(SENTENCES), conf)
        second = complete_topology(wordcount(SENTENCES), conf)
        counted: Counter[str] = Counter()
        for component in second.components("count"):
            counted.update(dict(component.counts.items()))
        assert counted == Counter({w: 2 * n for w, n in TRUTH.items()})
        assert (tmp_path / "wc.sqlite3").exists()


class TestRules:
    def test_an_unanchored_emit_raises_at_the_call_and_fails_the_input(self) -> None:
        """Fed one sentence that is not replayed: both words' emits raise, both inputs fail."""
        topology = wordcount(["a b"], Unanchored(), count_tasks=1)
        result = complete_topology(topology, mocked_sources={"sentences": [["a b"]]})
        metrics = result.metrics()["count"]
        assert metrics["errors"] == 2 and metrics["failed"] == 2
        assert "stateful bolt 'count': emit on stream 'default' without anchors" in metrics["last_error"]

    def test_the_checkpoint_interval_must_be_below_the_message_timeout(self) -> None:
        with pytest.raises(
            ConfigError, match=r"checkpoint_interval_ms \(5000\) must be below the message timeout \(3000 ms"
        ):
            InProcessTopology(wordcount(SENTENCES), {"checkpoint_interval_ms": 5000, "message_timeout_secs": 3})

    def test_a_stateful_topology_needs_an_acker(self) -> None:
        with pytest.raises(ConfigError, match=r"ackers=0 with a stateful bolt: .* needs ackers >= 1"):
            InProcessTopology(wordcount(SENTENCES), {"ackers": 0})

    def test_an_unknown_provider_is_named_with_a_suggestion(self) -> None:
        with pytest.raises(ConfigError, match=r"state_provider: 'sqlit' is not one of .* \(did you mean 'sqlite'\?\)"):
            InProcessTopology(wordcount(SENTENCES), {"state_provider": "sqlit"})

    def test_a_stateful_topology_gets_a_larger_pending_budget_unless_one_is_set(self) -> None:
        """Its trees stay pending until the commit after them, so the default budget is scaled."""
        from rayflow._pending import DEFAULT_MAX_SPOUT_PENDING, STATEFUL_MAX_SPOUT_PENDING

        assert STATEFUL_MAX_SPOUT_PENDING > DEFAULT_MAX_SPOUT_PENDING
        assert InProcessTopology(wordcount(SENTENCES)).conf.max_spout_pending == STATEFUL_MAX_SPOUT_PENDING
        assert InProcessTopology(wordcount(SENTENCES), {"max_spout_pending": 10}).conf.max_spout_pending == 10
        plain = TopologyBuilder()
        plain.set_spout("sentences", Sentences(SENTENCES))
        assert InProcessTopology(plain.create_topology()).conf.max_spout_pending == DEFAULT_MAX_SPOUT_PENDING

    def test_storm_keys_set_the_state_fields(self) -> None:
        conf = Config.of({"topology.state.provider": "redis", "topology.state.checkpoint.interval.ms": 250})
        assert conf.state_provider == "redis" and conf.checkpoint_interval_ms == 250


class TestKeyValueState:
    def test_the_mapping_interface(self) -> None:
        state = KeyValueState({"a": 1})
        state.put("b", 2)
        state.delete("a")
        state.delete("missing")
        assert state.get("a") is None and state.get("a", 0) == 0 and state.get("b") == 2
        assert "b" in state and "a" not in state and len(state) == 1
        assert list(state.keys()) == ["b"] and list(state.items()) == [("b", 2)]
        assert set(state.take_changes()) == {"a", "b"} and state.take_changes() == {}


class RecordingCollector:
    """Stands in for the checkpoint spout's collector: keeps what it emitted."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []

    def emit(self, values: list[Any], msg_id: Any = None, stream: str = "default") -> list[int]:
        assert stream == CHECKPOINT_STREAM and tuple(values) == msg_id
        self.sent.append(msg_id)
        return []

    def exhausted(self) -> None:
        pass


def open_checkpoint_spout(tmp_path: Path, stored: tuple[int, str] | None) -> tuple[Any, RecordingCollector]:
    """A checkpoint spout over a SQLite store holding ``stored`` as its transaction state (what
    an earlier incarnation of it persisted before it died)."""
    from types import SimpleNamespace

    from rayflow._state.checkpoint import CheckpointSpout, namespace
    from rayflow.state import SqliteStateProvider

    conf = {"state_provider": "sqlite", "state_provider_config": {"dir": str(tmp_path)}, "topology.name": "wc"}
    context = SimpleNamespace(this_component_id=CHECKPOINT_COMPONENT, this_task_id=1)
    if stored is not None:
        provider = SqliteStateProvider(conf["state_provider_config"], "wc")  # type: ignore[arg-type]
        provider.stage(namespace(conf, CHECKPOINT_COMPONENT, 0), stored[0], {"transaction": stored})
        provider.commit(namespace(conf, CHECKPOINT_COMPONENT, 0), stored[0])
        provider.close()
    spout, collector = CheckpointSpout(), RecordingCollector()
    spout.open(conf, context, collector)  # type: ignore[arg-type]
    return spout, collector


class TestCheckpointSpoutRecovery:
    """The checkpoint spout persists (txid, phase) before each step; a new incarnation finishes
    what the stored phase left open, then sends INITSTATE."""

    @pytest.mark.parametrize(
        ("stored", "first"),
        [
            (None, (0, "initstate")),
            ((4, "committed"), (4, "initstate")),
            ((5, "preparing"), (5, "rollback")),
            ((5, "committing"), (5, "commit")),
        ],
    )
    def test_recovers_from_every_phase(self, tmp_path: Path, stored: Any, first: tuple[int, str]) -> None:
        spout, collector = open_checkpoint_spout(tmp_path, stored)
        spout.next_tuple()
        assert collector.sent == [first]
        spout.ack(first)
        if first[1] != "initstate":  # the open phase closed: then the state is handed out
            txid = first[0] - 1 if first[1] == "rollback" else first[0]
            assert collector.sent[-1] == (txid, "initstate")
            spout.ack(collector.sent[-1])
        spout.tick()  # recovered: the interval's checkpoint starts
        assert collector.sent[-1][1] == "prepare"

    def test_a_restarted_task_abandons_the_checkpoint_in_flight(self, tmp_path: Path) -> None:
        """PREPARE in flight when a task restarts: ROLLBACK goes out at the next tick, and the abandoned
        PREPARE's late ack or fail changes nothing."""
        spout, collector = open_checkpoint_spout(tmp_path, (3, "committed"))
        spout.next_tuple()
        spout.ack((3, "initstate"))
        spout.tick()
        assert collector.sent[-1] == (4, "prepare")
        spout.restart_seen()
        assert collector.sent[-1] == (4, "prepare")  # the rollback waits for the next tick
        spout.tick()
        assert collector.sent[-1] == (4, "rollback")
        spout.fail((4, "prepare"))
        spout.ack((4, "prepare"))
        assert collector.sent[-1] == (4, "rollback")  # nothing more was sent for the stale tuple
        spout.ack((4, "rollback"))
        assert collector.sent[-1] == (3, "initstate") and spout.rollbacks == 1


class _DropOnce(deque[tuple[int, bytes]]):
    """The in-process runner's data queue, losing the first batch from task ``source`` to task
    ``dest`` that carries the checkpoint ``(txid, action)``, as a task that dies with it would."""

    def __init__(self, queued: deque[tuple[int, bytes]], source: int, dest: int, checkpoint: tuple[int, str]) -> None:
        super().__init__(queued)
        self.source, self.dest, self.checkpoint = source, dest, checkpoint
        self.dropped = 0

    def append(self, item: tuple[int, bytes]) -> None:
        dest, payload = item
        if not self.dropped and dest == self.dest:
            source_task, values, _, streams, ends, _ = pickle.loads(payload)
            begin = 0
            for stream, end in zip(streams, ends, strict=True):
                if source_task == self.source and stream == CHECKPOINT_STREAM:
                    if any(tuple(v) == self.checkpoint for v in values[begin:end]):
                        self.dropped += 1
                        return
                begin = end
        super().append(item)
