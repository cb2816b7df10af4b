"""The spout's side of Storm's promise: acks, timeouts, the pending budget, the lifecycle.

Run in process on a ``Wire`` (``tests/executor_components.py``).
"""

from __future__ import annotations

import pickle
from collections import deque
from typing import Any

from rayflow._topology import TopologyBuilder

from .executor_components import (
    BasicSplit,
    Bounded,
    Count,
    Hold,
    Sentences,
    Wire,
    pipeline,
    wordcount,
)
from .topology_helpers import Endless


class TestNoAckers:
    def test_acked_at_emit(self):
        """With ackers=0 the spout is acked as soon as next_tuple returns, before any bolt runs."""
        wire = Wire(wordcount(count=Count(fail_word="cow")), {"ackers": 0})
        wire.spout().feed("the cow", msg_id=1)
        spout = wire.task("sentences")
        spout.run_burst(1)
        assert wire.spout().acked == [1]
        spout.outbox.flush()
        assert [pickle.loads(raw)[2].tolist() for _, raw in wire.data] == [[0, 0]]  # one tuple, in no tree
        wire.settle()
        assert wire.control == deque()
        assert wire.spout().failed == []


class TestSpoutTimeouts:
    """Simulated time: the spout's pending map rotates every quarter of the message timeout T."""

    def test_fails_after_the_timeout_and_not_before(self):
        """A tree not completed is not failed at T, and is failed by 1.25 T."""
        wire = Wire(pipeline(Hold()))
        timeout = wire.conf.message_timeout_secs
        wire.spout().feed("slow", msg_id=1)
        wire.run()
        wire.advance(timeout)
        assert wire.spout().failed == []
        wire.advance(timeout / 4)
        assert wire.spout().failed == [1]
        assert wire.task("sentences").metrics.failed == 1

    def test_late_ack_after_timeout_is_ignored(self):
        """A tree completed after it timed out is not acked as well."""
        wire = Wire(pipeline(Hold()))
        wire.spout().feed("slow", msg_id=1)
        wire.run()
        wire.advance(1.25 * wire.conf.message_timeout_secs)
        hold = wire.bolts("bolt")[0]
        hold.collector.ack(hold.held[0])
        wire.settle()
        assert (wire.spout().acked, wire.spout().failed) == ([], [1])

    def test_reset_timeout_restarts_the_clock(self):
        """A bolt's reset_timeout, forwarded by the acker, keeps the spout from failing the tree."""
        wire = Wire(pipeline(Hold()))
        timeout = wire.conf.message_timeout_secs
        wire.spout().feed("slow", msg_id=1)
        wire.run()
        hold = wire.bolts("bolt")[0]
        wire.advance(0.75 * timeout)
        hold.collector.reset_timeout(hold.held[0])
        wire.settle()
        wire.advance(0.75 * timeout)  # 1.5 T after the emit, 0.75 T after the reset
        assert wire.spout().failed == []
        wire.advance(timeout)
        assert wire.spout().failed == [1]

    def test_acked_tree_never_times_out(self):
        """Once acked, a tree is no longer pending and no rotation fails it."""
        wire = Wire(wordcount())
        wire.spout().feed("quick", msg_id=1)
        wire.run()
        wire.advance(3 * wire.conf.message_timeout_secs)
        assert (wire.spout().acked, wire.spout().failed) == ([1], [])


class TestMaxSpoutPending:
    def test_stops_asking_at_the_limit(self):
        """With max_spout_pending=2 the spout is asked for two tuples, then not until one completes."""
        builder = TopologyBuilder()
        builder.set_spout("numbers", Endless())
        builder.set_bolt("hold", Hold()).shuffle_grouping("numbers")
        wire = Wire(builder.create_topology(), {"max_spout_pending": 2})
        spout = wire.task("numbers")
        assert spout.run_burst(10) == 2
        assert not spout.wants_next_tuple()
        wire.settle()
        hold = wire.bolts("hold")[0]
        hold.collector.ack(hold.held[0])
        wire.settle()
        assert spout.wants_next_tuple()
        assert spout.run_burst(10) == 1

    def test_per_component_limit(self):
        """A spout's own config={"max_spout_pending": 1} overrides the topology's setting."""
        builder = TopologyBuilder()
        builder.set_spout("numbers", Endless(), config={"max_spout_pending": 1})
        builder.set_bolt("hold", Hold()).shuffle_grouping("numbers")
        wire = Wire(builder.create_topology(), {"max_spout_pending": 100})
        assert wire.task("numbers").run_burst(10) == 1

    def test_no_limit_without_ackers(self):
        """With ackers=0 nothing is pending, so the limit never holds the spout back."""
        builder = TopologyBuilder()
        builder.set_spout("numbers", Endless())
        builder.set_bolt("hold", Hold()).shuffle_grouping("numbers")
        wire = Wire(builder.create_topology(), {"max_spout_pending": 2, "ackers": 0})
        assert wire.task("numbers").run_burst(10) == 10

    def test_budget_counts_trees_of_every_age(self):
        """Trees that moved to an older cohort of the pending map still count against the limit."""
        builder = TopologyBuilder()
        builder.set_spout("numbers", Endless())
        builder.set_bolt("hold", Hold()).shuffle_grouping("numbers")
        wire = Wire(builder.create_topology(), {"max_spout_pending": 3})
        spout = wire.task("numbers")
        assert spout.run_burst(2) == 2
        wire.advance(wire.conf.message_timeout_secs / 4)  # one rotation: both trees age
        assert spout.run_burst(10) == 1
        assert not spout.wants_next_tuple()


class TestSpoutAcks:
    """What the spout does with the acker's results, in bulk."""

    def test_every_ack_reaches_the_spout_and_is_counted(self):
        """A burst of trees acked together: each msg_id acked once, and counted; a
        sample of them (chosen by root) gives the complete latency, and no emit time is left
        behind once they are done."""
        wire = Wire(wordcount())
        for i in range(200):
            wire.spout().feed(f"sentence {i}", msg_id=i)
        wire.run()
        spout = wire.task("sentences")
        assert sorted(wire.spout().acked) == list(range(200))
        assert spout.metrics.acked == 200
        complete = spout.metrics.latencies["complete_latency_ms"]
        assert 0 < complete.count < 200
        assert spout._started == {}

    def test_a_raising_ack_is_reported_and_the_others_still_acked(self):
        """An exception in the user's ack is counted and logged; the rest of the batch goes on."""

        class Picky(Sentences):
            def ack(self, msg_id: Any) -> None:
                if msg_id == 3:
                    raise ValueError("not that one")
                super().ack(msg_id)

        wire = Wire(pipeline(BasicSplit(), spout=Picky()))
        for i in range(6):
            wire.spout().feed(f"s{i}", msg_id=i)
        wire.run()
        spout = wire.task("sentences")
        assert wire.spout().acked == [0, 1, 2, 4, 5]
        assert spout.metrics.acked == 6
        assert spout.metrics.errors == 1
        assert "ack raised: ValueError: not that one" in spout.metrics.last_error

    def test_failed_and_timed_out_trees_leave_no_emit_time(self):
        """The sampled emit times of trees that fail or time out are dropped with them."""
        wire = Wire(pipeline(BasicSplit()))
        for i in range(64):
            wire.spout().feed("fail", msg_id=i)
        wire.run()
        assert sorted(wire.spout().failed) == list(range(64))
        held = Wire(pipeline(Hold()))
        for i in range(64):
            held.spout().feed("slow", msg_id=i)
        held.run()
        held.advance(1.25 * held.conf.message_timeout_secs)
        assert sorted(held.spout().failed) == list(range(64))
        assert wire.task("sentences")._started == {} == held.task("sentences")._started


class TestSpoutLifecycle:
    def test_inactive_spout_is_not_asked(self):
        """A deactivated spout is not asked for tuples until activated again."""
        wire = Wire(pipeline(Count()))
        spout = wire.task("sentences")
        spout.deactivate()
        wire.spout().feed("later", msg_id=1)
        assert not spout.wants_next_tuple()
        assert spout.run_burst(10) == 0
        spout.activate()
        assert spout.run_burst(10) == 1

    def test_exhausted_until_a_fail(self):
        """A bounded spout that said it is exhausted is asked again only after a fail, to replay."""
        wire = Wire(pipeline(Count(fail_word="cow"), spout=Bounded()))
        spout = wire.task("sentences")
        wire.spout().feed("the cow", msg_id="the cow")
        assert spout.run_burst(10) == 1
        assert not spout.wants_next_tuple()
        wire.settle()  # the first attempt fails: the spout queues a replay
        assert spout.wants_next_tuple()
        wire.run()  # the replay fails too, and is not replayed again
        assert spout.run_burst(10) == 0
        assert not spout.wants_next_tuple()
        assert wire.spout().failed == ["the cow", "the cow"]
        assert spout.snapshot()["finished"]

    def test_next_tuple_error_is_reported(self):
        """An exception in next_tuple is counted and logged; the spout is asked again later."""

        class Flaky(Sentences):
            def next_tuple(self) -> None:
                raise RuntimeError("source down")

        builder = TopologyBuilder()
        builder.set_spout("sentences", Flaky())
        builder.set_bolt("count", Count()).shuffle_grouping("sentences")
        wire = Wire(builder.create_topology())
        spout = wire.task("sentences")
        spout.run_burst(5)
        spout.run_burst(5)
        assert spout.metrics.errors == 2
        assert "RuntimeError: source down" in spout.metrics.last_error
        assert spout.wants_next_tuple()


class TestSaturatedSpout:
    def test_each_fill_of_the_pending_budget_goes_to_one_task(self):
        """sentences (4 pending at most) -> hold (2 tasks, shuffle), fed 12. The first 4 are
        spread one by one; then the spout has spent its budget, and each time the held tuples
        are acked, the 4 it emits go to one task -- the other one the next time."""
        builder = TopologyBuilder()
        builder.set_spout("sentences", Sentences())
        builder.set_bolt("hold", Hold(), parallelism=2).shuffle_grouping("sentences")
        wire = Wire(builder.create_topology(), {"max_spout_pending": 4})
        for i in range(12):
            wire.spout().feed(f"s{i}", msg_id=i)
        seen: list[list[int]] = []
        for _ in range(3):
            wire.run()
            seen.append([len(bolt.held) for bolt in wire.bolts("hold")])
            for bolt in wire.bolts("hold"):
                for tup in bolt.held:
                    bolt.collector.ack(tup)
                bolt.held.clear()
            wire.settle()
        assert seen[0] == [2, 2]
        assert sorted(seen[1]) == [0, 4] and sorted(seen[2]) == [0, 4] and seen[1] != seen[2]
        assert sorted(wire.spout().acked) == list(range(12))


class TestRoots:
    def test_every_tree_has_a_root_of_its_own(self):
        """Each tracked sentence starts a tree with a non-zero root of its own (where the C
        kernel runs and ``root_bits`` is the default, the kernel draws it), and every tree
        completes once its words are counted."""
        wire = Wire(wordcount())
        sentences = 300
        for i in range(sentences):
            wire.spout().feed("the cow jumped", msg_id=i)
        spout = wire.task("sentences")
        spout.run_burst(sentences)
        roots = list(spout.pending)
        assert len(roots) == len(set(roots)) == sentences and all(0 < r < 2**64 for r in roots)
        wire.settle()
        assert sorted(wire.spout().acked) == list(range(sentences))
