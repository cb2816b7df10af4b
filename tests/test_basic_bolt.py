"""BasicBolt: every emit anchored to the input, the input acked on return and failed on raise.

Run in process on a ``Wire`` (``tests/executor_components.py``).
"""

from __future__ import annotations

from array import array
from functools import reduce
from operator import xor

from rayflow._acking.anchoring import ID_TYPECODE
from rayflow._topology import TopologyBuilder

from .executor_components import (
    BasicSplit,
    Count,
    Echo,
    Hold,
    Join,
    Sentences,
    Wire,
    pipeline,
)


class TestBasicBolt:
    def test_acks_on_return(self):
        """A BasicBolt's emits are anchored to the input, which is acked when execute returns."""
        wire = Wire(pipeline(BasicSplit(), downstream=Count()))
        wire.spout().feed("a basic bolt", msg_id=1)
        wire.run()
        assert wire.spout().acked == [1]
        assert wire.bolts("downstream")[0].counts == {"a": 1, "basic": 1, "bolt": 1}

    def test_emits_are_anchored(self):
        """The input is not done until what it emitted is acked downstream."""
        wire = Wire(pipeline(BasicSplit(), downstream=Hold()))
        wire.spout().feed("a b", msg_id=1)
        wire.run()
        assert wire.spout().acked == []
        downstream = wire.bolts("downstream")[0]
        for tup in downstream.held:
            downstream.collector.ack(tup)
        wire.settle()
        assert wire.spout().acked == [1]

    def test_failed_exception_fails_the_input(self):
        """Raising FailedException fails the input; it is a signal, not an error."""
        wire = Wire(pipeline(BasicSplit()))
        wire.spout().feed("fail", msg_id=1)
        wire.run()
        assert wire.spout().failed == [1]
        bolt = wire.task("bolt")
        assert (bolt.metrics.failed, bolt.metrics.errors) == (1, 0)

    def test_any_exception_fails_the_input_and_is_counted(self):
        """Any other exception fails the input, is counted as an error, and the task carries on."""
        wire = Wire(pipeline(BasicSplit()))
        wire.spout().feed("boom", msg_id=1)
        wire.spout().feed("fine", msg_id=2)
        wire.run()
        assert wire.spout().failed == [1]
        assert wire.spout().acked == [2]
        bolt = wire.task("bolt")
        assert bolt.metrics.errors == 1
        assert "ValueError: a bug in user code" in bolt.metrics.last_error
        assert (bolt.metrics.executed, bolt.metrics.acked, bolt.metrics.failed) == (2, 1, 1)

    def test_emits_of_a_joined_input_join_its_trees(self):
        """An input in two trees (the general emit path): its emits keep both trees open."""
        builder = TopologyBuilder()
        builder.set_spout("sentences", Sentences())
        builder.set_bolt("join", Join()).shuffle_grouping("sentences")
        builder.set_bolt("echo", Echo()).shuffle_grouping("join")
        builder.set_bolt("hold", Hold()).shuffle_grouping("echo")
        wire = Wire(builder.create_topology())
        wire.spout().feed("left", msg_id="L")
        wire.spout().feed("right", msg_id="R")
        wire.run()
        hold = wire.bolts("hold")[0]
        (echoed,) = hold.held
        assert echoed["value"] == "left+right" and len(echoed._tree) == 2
        assert wire.spout().acked == []
        hold.collector.ack(echoed)
        wire.settle()
        assert sorted(wire.spout().acked) == ["L", "R"]
        assert wire.task("echo").metrics.emitted == 2

    def test_emit_outside_execute_is_unanchored(self):
        """With no input being executed (in prepare, say), an emit joins no tree; within
        execute, on every stream, it joins the input's."""
        wire = Wire(pipeline(Echo(), downstream=Hold()))
        echo = wire.task("bolt")
        assert echo.bolt.basic_collector.emit(["loose"]) == [wire.tasks("downstream")[0].task_id]
        wire.spout().feed("anchored", msg_id=1)
        wire.run()
        hold = wire.bolts("downstream")[0]
        loose, anchored = hold.held
        assert (loose["value"], loose._tree) == ("loose", 0)
        assert anchored["value"] == "anchored" and anchored._tree
        assert echo.metrics.emitted == 3
        hold.collector.ack(anchored)
        wire.settle()
        assert wire.spout().acked == [1]

    def test_acks_of_interleaved_trees(self):
        """Acks of inputs whose trees alternate, with a failure between them, still reach the
        acker as one XOR per tree, and the failure as a fail."""
        wire = Wire(pipeline(BasicSplit()))
        bolt = wire.task("bolt")
        spout_task = wire.tasks("sentences")[0].task_id
        a, b = 0xA1 << 40, 0xB2 << 40
        inputs = [("x", a), ("y", a), ("z", b), ("fail", a), ("v", a), ("w", b), ("u", b), ("t", a)]
        edges = [1 << (5 * i) for i in range(len(inputs))]
        trees = array(ID_TYPECODE, [x for (_, root), edge in zip(inputs, edges, strict=True) for x in (root, edge)])
        bolt.receive((spout_task, [value for value, _ in inputs], trees, ["default"], [len(inputs)], []))
        (mail,) = bolt.outbox.acker_mails
        acked = [(root, edge) for (value, root), edge in zip(inputs, edges, strict=True) if value != "fail"]
        assert mail.acks == {r: reduce(xor, (e for root, e in acked if root == r)) for r in (a, b)}
        assert mail.fails == [a]
        assert (bolt.metrics.executed, bolt.metrics.acked, bolt.metrics.failed) == (8, 7, 1)

    def test_plain_bolt_exception_fails_the_input(self):
        """An exception from a plain Bolt's execute fails the input too."""
        wire = Wire(pipeline(Count()))  # Count reads tup["word"]: sentences have no such field
        wire.spout().feed("oops", msg_id=1)
        wire.run()
        assert wire.spout().failed == [1]
        assert "has no field 'word'" in wire.task("bolt").metrics.last_error
