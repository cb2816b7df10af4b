"""BasicBolt: every emit anchored to the input, the input acked on return and failed on raise.

Run in process on a ``Wire`` (``tests/executor_components.py``).
"""

from __future__ import annotations

from array import array
from functools import reduce
from operator import xor

from rayflow._acking.anchoring import ID_TYPECODE
from rayflow._collectors import BasicOutputCollector
from rayflow._components import BasicBolt, OutputFieldsDeclarer
from rayflow._topology import TopologyBuilder
from rayflow._tuple import Tuple

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
from .test_outbox import pairs


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
        _, _, acks, fails, _ = mail.take(bolt.task_id)
        assert list(acks[::2]) == [a, b]  # one ack per tree
        assert pairs(acks) == {r: reduce(xor, (e for root, e in acked if root == r)) for r in (a, b)}
        assert fails == [a]
        assert (bolt.metrics.executed, bolt.metrics.acked, bolt.metrics.failed) == (8, 7, 1)

    def test_emits_with_nobody_watching(self):
        """The in-process runner watches every emit; a task on Ray does not, and its emits are
        built without the observer's call (``input_emit.py``). With the observer gone, the
        split's words still reach the counter, each sentence waits for its words, and the emits
        are counted."""
        wire = Wire(pipeline(BasicSplit(), downstream=Hold()))
        split = wire.task("bolt")
        split.observer = None
        wire.spout().feed("nobody watches", msg_id=1)
        wire.spout().feed("fail", msg_id=2)
        wire.run()
        hold = wire.bolts("downstream")[0]
        assert [tup["word"] for tup in hold.held] == ["nobody", "watches"]
        assert wire.spout().acked == [] and wire.spout().failed == [2]
        hold.collector.ack(hold.held[0])
        wire.settle()
        assert wire.spout().acked == []
        hold.collector.ack(hold.held[1])
        wire.settle()
        assert wire.spout().acked == [1]
        assert (split.metrics.emitted, split.metrics.acked, split.metrics.failed) == (2, 1, 1)

    def test_an_observer_that_comes_later_sees_every_emit(self):
        """Emits are built knowing whether anyone watches, and built again when that changes."""
        wire = Wire(pipeline(Echo(), downstream=Hold()))
        echo = wire.task("bolt")
        seen: list[tuple[str, str, list[object]]] = []
        echo.observer = None
        wire.spout().feed("unseen", msg_id=1)
        wire.run()

        class Watcher:
            def emitted(self, component: str, stream: str, values: list[object]) -> None:
                seen.append((component, stream, values))

        echo.observer = Watcher()
        wire.spout().feed("seen", msg_id=2)
        wire.run()
        assert seen == [("bolt", "audit", ["seen"]), ("bolt", "default", ["seen"])]

    def test_a_bolt_whose_only_stream_is_named(self):
        """``collector.emit`` is bound to the component's only stream when it has no default
        one: ``emit(values, stream="words")`` is that stream's emit, and ``emit(values)``, on the
        undeclared default stream, still fails the input with an error that names the stream."""

        class Named(BasicBolt):
            def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
                declarer.declare_stream("words", ["word"])

            def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
                if tup["sentence"] == "forgot the stream":
                    collector.emit(["oops"])
                collector.emit([tup["sentence"]], stream="words")

        builder = TopologyBuilder()
        builder.set_spout("sentences", Sentences())
        builder.set_bolt("named", Named()).shuffle_grouping("sentences")
        builder.set_bolt("hold", Hold()).shuffle_grouping("named", stream="words")
        wire = Wire(builder.create_topology())
        named = wire.task("named")
        for watched in (True, False):
            if not watched:
                named.observer = None
            wire.spout().feed("forgot the stream", msg_id=(watched, 1))
            wire.spout().feed("fine", msg_id=(watched, 2))
            wire.run()
            assert (watched, 1) in wire.spout().failed
            assert "undeclared stream 'default'" in named.metrics.last_error
        hold = wire.bolts("hold")[0]
        assert [tup["word"] for tup in hold.held] == ["fine", "fine"]

    def test_the_wrong_number_of_values_fails_the_input(self):
        """On the stream its emit is bound to, too: the error names the stream and the fields."""

        class Sloppy(BasicBolt):
            outputs = ["word"]

            def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
                collector.emit([tup["sentence"], "extra"])

        wire = Wire(pipeline(Sloppy(), downstream=Hold()))
        sloppy = wire.task("bolt")
        for msg_id, watched in ((1, True), (2, False)):
            if not watched:
                sloppy.observer = None
            wire.spout().feed("two values", msg_id=msg_id)
            wire.run()
            assert wire.spout().failed[-1] == msg_id
            assert "emitted 2 value(s) on stream 'default', which declares 1 field(s)" in sloppy.metrics.last_error
        assert wire.bolts("downstream")[0].held == []

    def test_plain_bolt_exception_fails_the_input(self):
        """An exception from a plain Bolt's execute fails the input too."""
        wire = Wire(pipeline(Count()))  # Count reads tup["word"]: sentences have no such field
        wire.spout().feed("oops", msg_id=1)
        wire.run()
        assert wire.spout().failed == [1]
        assert "has no field 'word'" in wire.task("bolt").metrics.last_error


class KeepsInputs(BasicBolt):
    """Keeps every second input's values list and every third input whole."""

    outputs = ["word"]

    def prepare(self, conf: dict[str, object], context: object) -> None:
        self.values: list[list[object]] = []
        self.tuples: list[Tuple] = []
        self.seen = 0

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        if self.seen % 2 == 0:
            self.values.append(tup.values)
        if self.seen % 3 == 0:
            self.tuples.append(tup)
        self.seen += 1


def test_what_a_bolt_keeps_of_its_inputs_stays_as_it_was() -> None:
    """The run loop reuses an input's Tuple and values list for the next input only where the
    bolt kept neither: the ones it kept still hold their own values after the batch."""
    wire = Wire(pipeline(KeepsInputs()))
    bolt = wire.task("bolt")
    spout_task = wire.tasks("sentences")[0].task_id
    sentences = [f"sentence {i}" for i in range(12)]
    trees = array(ID_TYPECODE, [x for i in range(len(sentences)) for x in (0xC0 << 40 | i, 1 << i)])
    bolt.receive((spout_task, sentences, trees, ["default"], [len(sentences)], []))
    (kept,) = wire.bolts("bolt")
    assert kept.values == [[s] for s in sentences[::2]]
    assert [t.values for t in kept.tuples] == [[s] for s in sentences[::3]]
    assert bolt.metrics.acked == len(sentences)
