"""Exactly-once, in process: Storm's word count with a stateful count, where at-least-once
state counts a failed sentence's words twice, run with ``processing_guarantee="exactly_once"``
through failures, timeouts and killed tasks. What must hold every time: each word's count
equals the truth, ``Spout.ack`` is called once per msg id, ``fail`` never."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rayflow import BatchBolt, Bolt, Config, TopologyBuilder, TopologyError
from rayflow.testing import InProcessTopology, complete_topology

from .exactly_once_components import Numbered, Split, Unseekable, sentence, true_counts, wordcount

EXACTLY_ONCE = Config(processing_guarantee="exactly_once")


def counts_of(components: list[Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for bolt in components:
        for word, n in bolt.counts.items():
            assert word not in counts, f"{word!r} counted by two tasks"
            counts[word] = n
    return counts


def run_to_the_end(run: InProcessTopology, *, rounds: int = 200) -> None:
    """Drive ``run`` until every spout is exhausted with every tree committed."""
    for _ in range(rounds):
        run.run()
        if run.finished:
            return
        run.advance(1.0)
    raise AssertionError(f"not finished after {rounds} simulated seconds: {run.metrics()}")


class TestTheGuaranteeIsAsked:
    def test_at_least_once_is_the_default(self) -> None:
        assert Config().processing_guarantee == "at_least_once"
        assert Config.model_validate({"topology.processing.guarantee": "exactly_once"}).processing_guarantee == (
            "exactly_once"
        )

    def test_a_spout_that_cannot_go_back_is_refused_naming_it(self) -> None:
        builder = TopologyBuilder()
        builder.set_spout("tweets", Unseekable())
        builder.set_bolt("split", Split()).shuffle_grouping("tweets")
        with pytest.raises(TopologyError, match=r"spout 'tweets' \(Unseekable\).*no position and no seek"):
            complete_topology(builder.create_topology(), EXACTLY_ONCE)

    def test_exactly_once_needs_an_acker(self) -> None:
        builder = TopologyBuilder()
        builder.set_spout("sentences", Numbered(3))
        builder.set_bolt("split", Split()).shuffle_grouping("sentences")
        with pytest.raises(TopologyError, match="needs an acker"):
            InProcessTopology(builder.create_topology(), EXACTLY_ONCE.merged({"ackers": 0}))


class TestAFailedSentence:
    """Split emits half of a sentence's words, then fails the sentence (once)."""

    FAILING = frozenset({sentence(13), sentence(31)})

    def test_at_least_once_state_counts_its_words_twice(self) -> None:
        spout = _ReplayingNumbered(40)
        builder = TopologyBuilder()
        builder.set_spout("sentences", spout)
        builder.set_bolt("split", Split(self.FAILING), parallelism=2).shuffle_grouping("sentences")
        builder.set_bolt("count", _count(), parallelism=2).fields_grouping("split", ["word"])
        result = complete_topology(builder.create_topology(), Config(max_spout_pending=10))
        total = sum(counts_of(result.components("count")).values())
        # The failed halves are counted, then counted again on replay; and the rollback that
        # the failures cause fails every input acked since the last commit, counted again too.
        assert total > 4 * 40

    def test_exactly_once_counts_every_word_once(self) -> None:
        result = complete_topology(
            wordcount(40, fail_once=self.FAILING), EXACTLY_ONCE.merged({"max_spout_pending": 10})
        )
        assert counts_of(result.components("count")) == true_counts(40)
        assert sorted(result.acked("sentences")) == list(range(40))
        assert result.failed("sentences") == []
        assert result.metrics()["sentences"]["acked"] == 40
        assert result.metrics()["count"]["rollbacks"] >= 2

    def test_each_msg_id_is_acked_once_and_only_after_its_checkpoint_commits(self) -> None:
        run = InProcessTopology(wordcount(10), EXACTLY_ONCE)
        run.run()
        assert run.acked("sentences") == []  # every tree is complete, no checkpoint has committed
        assert run.pending_trees() == 0
        run_to_the_end(run)
        assert sorted(run.acked("sentences")) == list(range(10))


class TestATimedOutTree:
    def test_a_held_tuple_times_out_and_the_topology_rolls_back_exactly(self) -> None:
        builder = TopologyBuilder()
        builder.set_spout("sentences", Numbered(20))
        builder.set_bolt("split", _HoldsOnce(sentence(7)), parallelism=2).shuffle_grouping("sentences")
        builder.set_bolt("count", _count(), parallelism=2).fields_grouping("split", ["word"])
        result = complete_topology(builder.create_topology(), EXACTLY_ONCE.merged({"message_timeout_secs": 5}))
        assert counts_of(result.components("count")) == true_counts(20)
        assert sorted(result.acked("sentences")) == list(range(20))
        assert result.metrics()["count"]["rollbacks"] >= 1  # the checkpoint waited on the held tuple, and timed out


def durable(tmp_path: Path, **more: Any) -> Config:
    """Exactly-once with state that survives a task's death (an embedded SQLite per run)."""
    return EXACTLY_ONCE.merged({"state_provider": "sqlite", "state_provider_config": {"dir": str(tmp_path)}, **more})


class TestAKilledTask:
    @pytest.mark.parametrize("component", ["sentences", "split", "count", "__acker", "__checkpoint"])
    def test_any_task_killed_mid_run_leaves_the_counts_exact(self, tmp_path: Path, component: str) -> None:
        run = InProcessTopology(wordcount(60), durable(tmp_path, max_spout_pending=8))
        for _ in range(3):  # part of the stream, with a checkpoint or two committed
            run.run_spouts(5)
            run.settle()
            run.advance(1.0)
        task = next(t for t, c in run.layout.items() if c == component)
        run.kill(task)
        run_to_the_end(run)
        assert counts_of(run.components("count")) == true_counts(60)
        assert run.metrics()[component]["restarts"] == 1
        acked = run.acked("sentences")
        assert sorted(acked) == list(range(60)), "each msg id acked exactly once"


class TestResumeAfterAWholeRestart:
    def test_the_same_topology_started_again_resumes_from_its_last_committed_cut(self, tmp_path: Path) -> None:
        conf = durable(tmp_path, max_spout_pending=5).merged({"topology.name": "resumed"})
        first = InProcessTopology(wordcount(30), conf)
        for _ in range(3):
            first.run_spouts(5)
            first.settle()
            first.advance(1.0)
        committed_before = len(first.acked("sentences"))
        assert 0 < committed_before < 30
        # Every task dies at once; the same topology is submitted again under the same name.
        second = InProcessTopology(wordcount(30), conf)
        run_to_the_end(second)
        assert sorted(second.acked("sentences")) == list(range(committed_before, 30))
        assert counts_of(second.components("count")) == true_counts(30)

    def test_it_resumes_from_a_cut_stored_under_task_ids(self, tmp_path: Path) -> None:
        """A topology committed by rayflow before state was kept by index (under each task's
        id: the checkpoint spout's transaction, the spout's position, the count's words, here
        sentences 0-9 at transaction 4) resumes from that cut on this version."""
        from rayflow._state.provider import open_provider

        conf = durable(tmp_path, max_spout_pending=5).merged({"topology.name": "old"})
        layout = InProcessTopology(wordcount(30), conf, active=False).layout
        ids = {c: sorted(t for t, comp in layout.items() if comp == c) for c in set(layout.values())}
        provider = open_provider("sqlite", {"dir": str(tmp_path)}, "old")
        committed = {
            f"old/__checkpoint/{ids['__checkpoint'][0]}": {"transaction": (4, "committed")},
            f"old/sentences/{ids['sentences'][0]}": {"position": 10},
            f"old/count/{ids['count'][0]}": dict(true_counts(10)),  # the old layout: one task held them all
        }
        for ns, data in committed.items():
            provider.stage(ns, 4, data)
            provider.commit(ns, 4)
        provider.close()
        run = InProcessTopology(wordcount(30), conf)
        run_to_the_end(run)
        assert sorted(run.acked("sentences")) == list(range(10, 30))
        assert counts_of(run.components("count")) == true_counts(30)

    def test_it_resumes_exactly_with_the_count_on_more_tasks(self, tmp_path: Path) -> None:
        """Started again with the count on 3 tasks instead of 2: the task ids after it move
        (the spout's among them), yet the spout resumes at its own committed position and
        every key goes to the task that now owns it."""
        conf = durable(tmp_path, max_spout_pending=5).merged({"topology.name": "rescaled"})
        first = InProcessTopology(wordcount(30, count=2), conf)
        for _ in range(3):
            first.run_spouts(5)
            first.settle()
            first.advance(1.0)
        committed_before = len(first.acked("sentences"))
        assert 0 < committed_before < 30
        second = InProcessTopology(wordcount(30, count=3), conf)
        assert second.layout != first.layout
        run_to_the_end(second)
        assert sorted(second.acked("sentences")) == list(range(committed_before, 30))
        assert counts_of(second.components("count")) == true_counts(30)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    failing=st.sets(st.integers(0, 24), max_size=3),
    kill=st.one_of(
        st.none(),
        st.tuples(st.sampled_from(["sentences", "split", "count", "__acker", "__checkpoint"]), st.integers(0, 400)),
    ),
    seed=st.integers(0, 2**16),
)
def test_wherever_a_failure_strikes_the_counts_are_exact(
    tmp_path_factory: pytest.TempPathFactory, failing: set[int], kill: tuple[str, int] | None, seed: int
) -> None:
    """Which sentence fails, which task dies, and at which delivery (so in whichever phase of
    whichever checkpoint): the final counts are the truth, and every msg id acked once."""
    tmp_path = tmp_path_factory.mktemp("eo")
    topology = wordcount(25, fail_once=frozenset(sentence(i) for i in failing))
    run = InProcessTopology(topology, durable(tmp_path, max_spout_pending=6), seed=seed)
    deliveries = 0
    for _ in range(60):
        run.run_spouts(3)
        while run.step():
            deliveries += 1
            if kill is not None and deliveries == kill[1]:
                run.kill(next(t for t, c in run.layout.items() if c == kill[0]))
        run.advance(0.5)
        if run.finished:
            break
    run_to_the_end(run)
    assert counts_of(run.components("count")) == true_counts(25)
    assert sorted(run.acked("sentences")) == list(range(25))
    assert run.failed("sentences") == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    failing=st.sets(st.integers(0, 24), max_size=2),
    killed=st.sampled_from(["sentences", "split", "count", "__acker", "__checkpoint"]),
    at=st.integers(0, 300),
    unaware=st.sets(st.sampled_from(["sentences", "split", "count", "__acker", "__checkpoint"]), min_size=1),
    told_after=st.integers(1, 200),
    seed=st.integers(0, 2**16),
)
# The spout restarts and the acker hears late: its word that sentence 0 failed is lost, so only
# the split, which failed it, can keep the next cut from committing half of it.
@example(failing={0}, killed="sentences", at=1, unaware={"__acker"}, told_after=15, seed=0)
def test_a_restart_heard_late_by_some_tasks_leaves_the_counts_exact(
    tmp_path_factory: pytest.TempPathFactory,
    failing: set[int],
    killed: str,
    at: int,
    unaware: set[str],
    told_after: int,
    seed: int,
) -> None:
    """On Ray the supervisor tells the peers of a restarted task one by one: until a peer
    hears, what it sends to the task is lost. The checkpoint spout may hear last, after a
    recovery it began before the restart has gone through the new task. Whoever hears late,
    and for however long: exact counts, every msg id acked once."""
    tmp_path = tmp_path_factory.mktemp("eo")
    topology = wordcount(25, fail_once=frozenset(sentence(i) for i in failing))
    run = InProcessTopology(topology, durable(tmp_path, max_spout_pending=6), seed=seed)
    task = next(t for t, c in run.layout.items() if c == killed)
    late = {t for t, c in run.layout.items() if c in unaware and t != task}
    deliveries, told_at = 0, None
    for _ in range(80):
        run.run_spouts(3)
        while run.step():
            deliveries += 1
            if deliveries == at:
                run.kill(task, unaware=late)
                told_at = at + told_after
            if deliveries == told_at:
                run.tell_restart(task)
        run.advance(0.5)
        if run.finished and (told_at is None or deliveries >= told_at):
            break
    run.tell_restart(task)  # everyone has heard by the end
    run_to_the_end(run)
    assert counts_of(run.components("count")) == true_counts(25)
    assert sorted(run.acked("sentences")) == list(range(25))
    assert run.failed("sentences") == []


class TestARestartHeardLate:
    def test_a_restarted_count_passes_no_checkpoint_before_a_rollback(self, tmp_path: Path) -> None:
        """A sentence fails and the topology rolls back; as the recovery's INITSTATE leaves the
        checkpoint spout, the count task dies. The split and the checkpoint spout hear of its
        new task late: the words the split sends meanwhile are lost, then it passes the
        INITSTATE on to the new task. That INITSTATE must not let the new task pass the next
        PREPARE, which would commit a cut over the lost words: only a ROLLBACK does."""
        topology = wordcount(30, fail_once=frozenset({sentence(2)}))
        run = InProcessTopology(topology, durable(tmp_path, max_spout_pending=6))
        count = next(t for t, c in run.layout.items() if c == "count")
        checkpoint = run.components("__checkpoint")[0]
        late = [t for t, c in run.layout.items() if c in ("split", "__checkpoint")]
        for _ in range(400):  # until the recovery after the failed sentence sends its INITSTATE
            run.run_spouts(1)
            run.step()
            if checkpoint.rollbacks and checkpoint.in_flight and checkpoint.in_flight[1] == "initstate":
                break
            if not run.data and not run.control:
                run.advance(0.5)
        else:
            raise AssertionError("no recovery after the failed sentence")
        run.kill(count, unaware=late)
        run.run_spouts(3)
        for _ in range(6):  # the spouts' sentences reach the split; its words are lost
            run.step()
        run.tell_restart(count, [t for t, c in run.layout.items() if c == "split"])
        for _ in range(4):  # the INITSTATE reaches the new count; a checkpoint is due
            run.run_spouts(3)
            run.settle()
            run.advance(0.5)
        run.tell_restart(count)
        run_to_the_end(run)
        assert counts_of(run.components("count")) == true_counts(30)
        assert sorted(run.acked("sentences")) == list(range(30))


class _Poisoned(Split):
    """Fails ``poison`` every time it comes, after emitting half of it."""

    def __init__(self, poison: str) -> None:
        super().__init__(frozenset({poison}))

    def execute(self, tup: Any) -> None:
        self.failed.clear()
        super().execute(tup)


class TestAMessageThatAlwaysFails:
    def test_it_stops_the_topology_at_its_cut_and_rolls_back_once_an_interval(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Sentence 12 fails every time. No cut past it can commit (it would hold half of it),
        so the topology goes back to its last cut again and again, as Flink's job would; past a few
        rollbacks in a row each one waits for the checkpoint interval, instead of replaying as
        fast as the cores allow, and the log says why."""
        from .exactly_once_components import Count

        builder = TopologyBuilder()
        builder.set_spout("sentences", Numbered(30))
        builder.set_bolt("split", _Poisoned(sentence(12))).shuffle_grouping("sentences")
        builder.set_bolt("count", Count()).fields_grouping("split", ["word"])
        run = InProcessTopology(builder.create_topology(), EXACTLY_ONCE.merged({"max_spout_pending": 4}))
        seconds = 20
        for _ in range(seconds):
            run.run()
            run.advance(1.0)
        rollbacks = run.metrics()["__checkpoint"]["rollbacks"]
        assert 3 <= rollbacks <= seconds + 3, rollbacks
        assert "rollbacks in a row" in caplog.text
        committed = sorted(run.acked("sentences"))  # the cut it stops at: never past sentence 12
        assert committed == list(range(len(committed))) and len(committed) <= 12
        run.settle()
        assert counts_of(run.components("count")) == true_counts(len(committed))


class _ReplayingNumbered(Numbered):
    """At-least-once: replays what fails."""

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        super().open(conf, context, collector)
        self.replay: list[int] = []

    def next_tuple(self) -> None:
        if self.replay:
            i = self.replay.pop(0)
            self.collector.emit([sentence(i)], msg_id=i)
        else:
            super().next_tuple()

    def fail(self, msg_id: int) -> None:
        self.replay.append(msg_id)


class _HoldsOnce(Split):
    """Never acks ``held`` the first time it comes (so its tree times out)."""

    def __init__(self, held: str) -> None:
        super().__init__()
        self.held = held

    def execute(self, tup: Any) -> None:
        if tup["sentence"] == self.held and self.held not in self.failed:
            self.failed.add(self.held)
            return
        super().execute(tup)


def _count() -> Bolt:
    from .exactly_once_components import Count

    return Count()


def test_the_checkpoint_spout_reports_how_long_checkpoints_take() -> None:
    result = complete_topology(wordcount(30), EXACTLY_ONCE.merged({"max_spout_pending": 5}))
    checkpointer = result.metrics()["__checkpoint"]
    assert checkpointer["checkpoints"] >= 1
    assert checkpointer["checkpoint_latency_ms"]["p99"] > 0


class _BatchSplit(BatchBolt):
    """Splits sentences a batch at a time, with a batch timeout far longer than a checkpoint."""

    outputs = ["word"]
    batch_size = 1000
    batch_timeout_ms = 60_000

    def execute_batch(self, tuples: list[Any], collector: Any) -> None:
        for tup in tuples:
            for word in tup["sentence"].split():
                collector.emit([word], anchors=tup)


def test_a_checkpoint_flushes_a_batch_bolt_instead_of_waiting_for_its_timeout() -> None:
    builder = TopologyBuilder()
    builder.set_spout("sentences", Numbered(30))
    builder.set_bolt("split", _BatchSplit()).shuffle_grouping("sentences")
    builder.set_bolt("count", _count(), parallelism=2).fields_grouping("split", ["word"])
    run = InProcessTopology(builder.create_topology(), EXACTLY_ONCE)
    run.run()
    run.advance(1.0)  # one checkpoint interval, far below the batch timeout
    assert sorted(run.acked("sentences")) == list(range(30))
    assert counts_of(run.components("count")) == true_counts(30)
