"""Emitting: what declarations forbid, and how an emit joins its anchors' tuple trees.

Run in process on a ``Wire`` (``tests/executor_components.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from rayflow._collectors import BasicOutputCollector, OutputCollector, SpoutOutputCollector
from rayflow._errors import EmitError
from rayflow._executors import BoltExecutor, SpoutExecutor
from rayflow._topology import ACKER_COMPONENT, TopologyBuilder

from .executor_components import (
    BasicRelay,
    Count,
    Hold,
    Join,
    Sentences,
    Unanchored,
    Wire,
    pipeline,
    streams_topology,
    wordcount,
)


def spout_collector() -> tuple[Wire, SpoutExecutor, SpoutOutputCollector]:
    wire = Wire(streams_topology())
    executor = wire.task("streams")
    return wire, executor, executor.collector


def bolt_collector() -> tuple[Wire, BoltExecutor, OutputCollector]:
    wire = Wire(streams_topology())
    executor = wire.task("relay")
    return wire, executor, executor.collector


def basic_bolt_collector() -> tuple[Wire, BoltExecutor, BasicOutputCollector]:
    wire = Wire(streams_topology(BasicRelay()))
    executor = wire.task("relay")
    return wire, executor, executor.bolt.basic_collector


@pytest.mark.parametrize(
    "make", [spout_collector, bolt_collector, basic_bolt_collector], ids=["spout", "bolt", "basic bolt"]
)
class TestEmitErrors:
    """Emits that the declarations forbid raise EmitError at the call, and send nothing."""

    def test_undeclared_stream(self, make: Any):
        """Emitting on a stream the component did not declare names the declared ones."""
        _, executor, collector = make()
        with pytest.raises(EmitError, match=r"undeclared stream 'tweets' \(declared: audit, default, picked\)"):
            collector.emit(["w"], stream="tweets")
        assert executor.outbox.is_empty() and executor.metrics.emitted == 0

    def test_wrong_number_of_values(self, make: Any):
        """Emitting two values on a one-field stream says so."""
        _, executor, collector = make()
        with pytest.raises(EmitError, match=r"emitted 2 value\(s\) on stream 'default', which declares 1 field"):
            collector.emit(["w", 1])
        assert executor.outbox.is_empty() and executor.metrics.emitted == 0

    def test_regular_emit_on_direct_stream(self, make: Any):
        """A regular emit on a direct stream points to emit_direct."""
        _, executor, collector = make()
        with pytest.raises(EmitError, match="stream 'picked' is direct: use emit_direct"):
            collector.emit(["w"], stream="picked")
        assert executor.outbox.is_empty()

    def test_emit_direct_on_regular_stream(self, make: Any):
        """emit_direct on a stream not declared direct is refused."""
        _, executor, collector = make()
        with pytest.raises(EmitError, match="emit_direct on stream 'default', which is not declared direct"):
            collector.emit_direct(executor.context.get_component_tasks("sink")[0], ["w"])
        assert executor.outbox.is_empty()

    def test_emit_direct_to_a_task_not_subscribed(self, make: Any):
        """emit_direct to a task that does not subscribe directly names the ones that do."""
        _, _, collector = make()
        with pytest.raises(EmitError, match=r"emit_direct to task 99, .* \(subscribers: \[2, 3\]\)"):
            collector.emit_direct(99, ["w"], stream="picked")

    def test_emit_direct_reaches_the_task(self, make: Any):
        """A valid emit_direct sends to exactly that task."""
        wire, executor, collector = make()
        collector.emit_direct(3, ["w"], stream="picked")
        executor.outbox.flush()
        assert [dest for dest, _ in wire.data] == [3]


class TestTupleTree:
    def test_acked_end_to_end(self):
        """sentences -> split -> count: the sentence is acked once every word is counted."""
        wire = Wire(wordcount())
        wire.spout().feed("the cow jumped over the moon", msg_id=1)
        wire.run()
        assert wire.spout().acked == [1]
        assert wire.spout().failed == []
        counts: dict[str, int] = {}
        for bolt in wire.bolts("count"):
            counts.update(bolt.counts)
        assert counts == {"the": 2, "cow": 1, "jumped": 1, "over": 1, "moon": 1}
        assert sum(e.metrics.acked for e in wire.tasks("count")) == 6
        assert len(wire.task("sentences").pending) == 0
        assert wire.pending_trees() == 0

    def test_acks_overtaking_the_init(self):
        """Acks reaching the acker before the init that opened their tree still ack it, once."""
        wire = Wire(wordcount(), newest_first=True)
        for i in range(5):
            wire.spout().feed(f"sentence number {i}", msg_id=i)
        wire.run()
        assert sorted(wire.spout().acked) == [0, 1, 2, 3, 4]
        assert wire.pending_trees() == 0

    def test_sharded_over_ackers(self):
        """With three ackers each tree is tracked by one of them and all complete."""
        wire = Wire(wordcount(), {"ackers": 3})
        for i in range(30):
            wire.spout().feed(f"a b c {i}", msg_id=i)
        wire.run()
        assert sorted(wire.spout().acked) == list(range(30))
        assert sum(e.metrics.acked for e in wire.tasks(ACKER_COMPONENT)) == 30

    def test_fail_downstream_fails_the_root(self):
        """A word failed by count fails its sentence; other sentences are acked."""
        wire = Wire(wordcount(count=Count(fail_word="cow")))
        wire.spout().feed("the cow", msg_id="with cow")
        wire.spout().feed("the moon", msg_id="without")
        wire.run()
        assert wire.spout().failed == ["with cow"]
        assert wire.spout().acked == ["without"]
        assert wire.pending_trees() == 0

    def test_untracked_spout_tuple(self):
        """A spout emit without msg_id is never acked or failed and costs the acker nothing."""
        wire = Wire(wordcount(count=Count(fail_word="cow")))
        wire.spout().feed("the cow")
        wire.run()
        assert (wire.spout().acked, wire.spout().failed) == ([], [])
        assert sum(e.metrics.executed for e in wire.tasks(ACKER_COMPONENT)) == 0

    def test_tree_of_no_tuples(self):
        """A tracked emit on a stream nobody reads is acked straight away by the acker."""
        builder = TopologyBuilder()
        builder.set_spout("sentences", Sentences())
        wire = Wire(builder.create_topology())
        wire.spout().feed("to nobody", msg_id=1)
        wire.run()
        assert wire.spout().acked == [1]

    def test_unanchored_emit_does_not_hold_the_root(self):
        """Words emitted unanchored are outside the tree: the sentence is acked though nobody acks them."""
        wire = Wire(pipeline(Unanchored(), downstream=Hold()))
        wire.spout().feed("two words", msg_id=1)
        wire.run()
        assert wire.spout().acked == [1]
        held = wire.bolts("downstream")[0].held
        assert [t["word"] for t in held] == ["two", "words"]
        assert all(t._tree == 0 for t in held)


class TestMultiAnchoring:
    def test_joined_tuple_completes_both_trees(self):
        """A tuple anchored to tuples of two spout trees keeps both open until it is acked."""
        wire = Wire(pipeline(Join(), downstream=Hold()), {"ackers": 2})
        wire.spout().feed("left", msg_id="L")
        wire.spout().feed("right", msg_id="R")
        wire.run()
        (joined,) = wire.bolts("downstream")[0].held
        assert joined["pair"] == "left+right"
        assert len(joined._tree) == 2
        assert wire.spout().acked == []
        wire.bolts("downstream")[0].collector.ack(joined)
        wire.settle()
        assert sorted(wire.spout().acked) == ["L", "R"]

    def test_failing_joined_tuple_fails_both_roots(self):
        """Failing a tuple anchored to two trees fails both spout tuples."""
        wire = Wire(pipeline(Join(), downstream=Hold()))
        wire.spout().feed("left", msg_id="L")
        wire.spout().feed("right", msg_id="R")
        wire.run()
        downstream = wire.bolts("downstream")[0]
        downstream.collector.fail(downstream.held[0])
        wire.settle()
        assert sorted(wire.spout().failed) == ["L", "R"]
        assert wire.spout().acked == []
