"""The router and the executors, driven in this process without Ray.

A ``Wire`` holds one executor per task of a real topology (each with its own copy of the
topology, as every Ray actor has) and carries their payloads in two queues -- control (acker
traffic) and data -- until nothing moves. Tests read like Storm's scenarios: the topology, what
the spout emits, and what must be acked or failed.
"""

from __future__ import annotations

import pickle
from array import array
from collections import deque
from functools import reduce
from operator import xor
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayflow._anchoring import ID_TYPECODE
from rayflow._collectors import BasicOutputCollector, OutputCollector, SpoutOutputCollector
from rayflow._components import BasicBolt, Bolt, OutputFieldsDeclarer, Spout
from rayflow._config import Config
from rayflow._context import TopologyContext
from rayflow._errors import EmitError, FailedException
from rayflow._executors import BoltExecutor, SpoutExecutor
from rayflow._router import Router
from rayflow._topology import ACKER_COMPONENT, Topology, TopologyBuilder
from rayflow._tuple import Tuple
from rayflow.testing import InProcessTopology

from .topology_helpers import Endless


class Wire(InProcessTopology):
    """The public in-process runner, with the shorthands these tests use."""

    def __init__(self, topology: Topology, conf: Config | dict[str, Any] | None = None, newest_first: bool = False):
        super().__init__(topology, conf, delivery="newest_first" if newest_first else "fifo")

    def spout(self, component_id: str = "sentences") -> Any:
        """The user spout object of the component's first task."""
        return self.components(component_id)[0]

    def bolts(self, component_id: str) -> list[Any]:
        """The user bolt objects of every task of the component."""
        return self.components(component_id)


# -- components ---------------------------------------------------------------------------------


class Sentences(Spout):
    """Emits what the test feeds it, one tuple per next_tuple; records acks and fails."""

    outputs = ["sentence"]

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector = collector
        self.queue: deque[tuple[list[Any], Any, str]] = deque()
        self.acked: list[Any] = []
        self.failed: list[Any] = []

    def feed(self, sentence: str, msg_id: Any = None, stream: str = "default") -> None:
        self.queue.append(([sentence], msg_id, stream))

    def next_tuple(self) -> None:
        if self.queue:
            values, msg_id, stream = self.queue.popleft()
            self.collector.emit(values, msg_id=msg_id, stream=stream)

    def ack(self, msg_id: Any) -> None:
        self.acked.append(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.failed.append(msg_id)


class Bounded(Sentences):
    """Says it is exhausted when nothing is queued; replays a failed sentence once."""

    def next_tuple(self) -> None:
        if not self.queue:
            self.collector.exhausted()
        super().next_tuple()

    def fail(self, msg_id: Any) -> None:
        super().fail(msg_id)
        if self.failed.count(msg_id) == 1:
            self.feed(msg_id, msg_id)


class Split(Bolt):
    """Emits each word anchored to the sentence, then acks it."""

    outputs = ["word"]

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        for word in tup["sentence"].split():
            self.collector.emit([word], anchors=tup)
        self.collector.ack(tup)


class Count(Bolt):
    """Counts words and acks them, except a word it is told to fail."""

    outputs = ["word", "count"]

    def __init__(self, fail_word: str | None = None) -> None:
        self.fail_word = fail_word

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector
        self.counts: dict[str, int] = {}

    def execute(self, tup: Tuple) -> None:
        word = tup["word"]
        if word == self.fail_word:
            self.collector.fail(tup)
            return
        self.counts[word] = self.counts.get(word, 0) + 1
        self.collector.ack(tup)


class Hold(Bolt):
    """Keeps every tuple without acking it; the test decides."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector
        self.held: list[Tuple] = []

    def execute(self, tup: Tuple) -> None:
        self.held.append(tup)


class BasicSplit(BasicBolt):
    """Splits sentences; "fail" fails the input, "boom" raises a bug."""

    outputs = ["word"]

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        sentence = tup["sentence"]
        if sentence == "fail":
            raise FailedException("not today")
        if sentence == "boom":
            raise ValueError("a bug in user code")
        for word in sentence.split():
            collector.emit([word])


class Unanchored(Bolt):
    """Emits each word unanchored, then acks the sentence."""

    outputs = ["word"]

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        for word in tup["sentence"].split():
            self.collector.emit([word])
        self.collector.ack(tup)


class Join(Bolt):
    """Pairs a sentence with the next one: emits their join anchored to both, acks both."""

    outputs = ["pair"]

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector
        self.waiting: Tuple | None = None

    def execute(self, tup: Tuple) -> None:
        if self.waiting is None:
            self.waiting = tup
            return
        first, self.waiting = self.waiting, None
        self.collector.emit([f"{first['sentence']}+{tup['sentence']}"], anchors=[first, tup])
        self.collector.ack(first)
        self.collector.ack(tup)


class Ticked(Bolt):
    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector
        self.ticks: list[Tuple] = []

    def execute(self, tup: Tuple) -> None:
        self.ticks.append(tup)
        self.collector.ack(tup)


class Streams(Spout):
    """A default stream, a direct stream "picked" and a stream "audit" that nobody reads."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word"])
        declarer.declare_stream("picked", ["word"], direct=True)
        declarer.declare_stream("audit", ["word"])


class Relay(Bolt):
    """Declares the same streams as Streams, to emit on them from a bolt."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        Streams().declare_output_fields(declarer)

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector


class BasicRelay(BasicBolt):
    """Relay as a BasicBolt: its collector is the executor's ``BasicOutputCollector``."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        Streams().declare_output_fields(declarer)

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        pass


class Echo(BasicBolt):
    """Emits each input's first value again, on "default" and on "audit" (which nobody reads)."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"])
        declarer.declare_stream("audit", ["value"])

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        assert collector.emit([tup[0]], stream="audit") == []
        collector.emit([tup[0]])


# -- topologies ---------------------------------------------------------------------------------


def wordcount(count: Bolt | None = None) -> Topology:
    builder = TopologyBuilder()
    builder.set_spout("sentences", Sentences())
    builder.set_bolt("split", Split(), parallelism=2).shuffle_grouping("sentences")
    builder.set_bolt("count", count or Count(), parallelism=2).fields_grouping("split", ["word"])
    return builder.create_topology()


def pipeline(bolt: Bolt | BasicBolt, downstream: Bolt | None = None, spout: Spout | None = None) -> Topology:
    """sentences -> bolt [-> downstream]."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", spout or Sentences())
    builder.set_bolt("bolt", bolt).shuffle_grouping("sentences")
    if downstream is not None:
        builder.set_bolt("downstream", downstream).shuffle_grouping("bolt")
    return builder.create_topology()


def streams_topology(relay: Bolt | BasicBolt | None = None) -> Topology:
    builder = TopologyBuilder()
    builder.set_spout("streams", Streams())
    builder.set_bolt("relay", relay or Relay()).shuffle_grouping("streams")
    builder.set_bolt("sink", Hold(), parallelism=2).shuffle_grouping("streams").direct_grouping(
        "streams", stream="picked"
    ).shuffle_grouping("relay").direct_grouping("relay", stream="picked")
    return builder.create_topology()


# -- tests --------------------------------------------------------------------------------------


class TestRouter:
    def test_fans_out_to_every_subscriber(self):
        """One emit goes to one task of each shuffle subscriber and every task of an all subscriber."""
        builder = TopologyBuilder()
        builder.set_spout("sentences", Sentences())
        builder.set_bolt("split", Split(), parallelism=2).shuffle_grouping("sentences")
        builder.set_bolt("audit", Hold(), parallelism=3).all_grouping("sentences")
        topology = builder.create_topology()
        layout = topology.task_layout(ackers=1)
        router = Router(topology, TopologyContext(4, layout, topology.stream_fields()))
        targets = router.targets("default", ["a b"])
        assert sorted(t for t in targets if t in (1, 2, 3)) == [1, 2, 3]  # audit: tasks 1-3
        assert len([t for t in targets if t in (5, 6)]) == 1  # split: tasks 5-6
        assert len(targets) == 4

    def test_stream_without_subscribers(self):
        """A declared stream nobody reads routes to no task."""
        topology = streams_topology()
        router = Router(topology, TopologyContext(4, topology.task_layout(1), topology.stream_fields()))
        assert router.targets("audit", ["w"]) == []


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


class TestTicks:
    def test_tick_tuple(self):
        """A tick is a tuple from __system on __tick carrying the frequency; it is not tracked."""
        wire = Wire(pipeline(Ticked()))
        wire.task("bolt").tick(2.0)
        wire.settle()
        (tick,) = wire.bolts("bolt")[0].ticks
        assert tick.is_tick()
        assert tick[0] == 2.0
        assert wire.control == deque()


class Unpicklable:
    """A value that cannot cross a process boundary."""

    def __reduce__(self) -> Any:
        raise TypeError("cannot pickle Unpicklable")


class Poison(BasicBolt):
    """Emits the sentence's words; the word "poison" as a value that cannot be pickled."""

    outputs = ["word"]

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        for word in tup["sentence"].split():
            collector.emit([Unpicklable() if word == "poison" else word])


class Reasons(Sentences):
    """Records why each tree failed: ``fail(msg_id, reason)``."""

    def fail(self, msg_id: Any, reason: str) -> None:  # type: ignore[override]
        self.failed.append((msg_id, reason))


class BrokenOpen(Sentences):
    """``open`` raises the first time only."""

    opened = 0

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        type(self).opened += 1
        if type(self).opened == 1:
            raise RuntimeError("source down")
        super().open(conf, context, collector)


class TestFaults:
    def test_unpicklable_value_fails_only_its_tree(self):
        """A value that cannot be pickled fails its own tuple's tree, is reported on the emitting
        component, and the rest of the batch goes on."""
        wire = Wire(pipeline(Poison(), downstream=Count()))
        wire.spout().feed("good words", msg_id=1)
        wire.spout().feed("one poison word", msg_id=2)
        wire.spout().feed("more good words", msg_id=3)
        wire.run()
        assert sorted(wire.spout().acked) == [1, 3]
        assert wire.spout().failed == [2]
        assert sum(wire.bolts("downstream")[0].counts.values()) == 7
        bolt = wire.task("bolt")
        assert bolt.metrics.errors == 1 and "cannot be pickled" in bolt.metrics.last_error

    def test_fail_reason_failed_or_timeout(self):
        """A spout whose fail takes a reason hears "failed" for an explicit fail, "timeout" for a
        tree that timed out; one taking only the msg id keeps working (Sentences)."""
        wire = Wire(pipeline(BasicSplit(), downstream=Count(fail_word="cow"), spout=Reasons()))
        wire.spout().feed("the cow", msg_id=1)
        wire.run()
        assert wire.spout().failed == [(1, "failed")]
        wire = Wire(pipeline(Hold(), spout=Reasons()))
        wire.spout().feed("held", msg_id=2)
        wire.run()
        wire.advance(2 * wire.conf.message_timeout_secs + 1)
        assert wire.spout().failed == [(2, "timeout")]

    def test_spout_whose_open_raised_is_not_driven_until_opened_again(self):
        """open raised: reported once, next_tuple never called; a later activate opens it."""
        BrokenOpen.opened = 0
        wire = Wire(pipeline(BasicSplit(), spout=BrokenOpen()))
        spout = wire.task("sentences")
        assert spout.metrics.errors == 1 and "open raised" in spout.metrics.last_error
        assert not spout.wants_next_tuple() and wire.run() == 0
        wire.activate()
        assert spout.wants_next_tuple() and spout.metrics.errors == 1
        wire.spout().feed("back", msg_id=1)
        wire.run()
        assert wire.spout().acked == [1]


class TestLoadAwareShuffle:
    def grouping(self) -> Any:
        from rayflow._groupings import ShuffleGrouping, StreamId

        layout = {1: "s", 2: "b", 3: "b", 4: "b"}
        grouping = ShuffleGrouping()
        grouping.prepare(TopologyContext(1, layout, {"s": {"default": ("x",)}}), StreamId("s", "default"), [2, 3, 4])
        return grouping

    def test_even_backlogs_keep_round_robin(self):
        """With equal backlogs every target gets one tuple per round."""
        grouping = self.grouping()
        grouping.update_load(lambda task: 5)
        picks = [grouping.choose_tasks(1, ["x"])[0] for _ in range(30)]
        assert sorted(picks.count(t) for t in (2, 3, 4)) == [10, 10, 10]

    def test_backlogged_target_gets_fewer_tuples(self):
        """A target far behind the others gets a small share, but still some."""
        grouping = self.grouping()
        grouping.update_load(lambda task: 1000 if task == 3 else 0)
        picks = [grouping.choose_tasks(1, ["x"])[0] for _ in range(170)]
        assert 0 < picks.count(3) <= 10 and picks.count(2) == picks.count(4)

    def test_runs_send_every_tuple_to_one_target_until_the_next_run(self):
        """In runs each target in turn takes every tuple; stopped, one turn per tuple again."""
        grouping = self.grouping()
        grouping.next_run()
        first = {grouping.choose_tasks(1, ["x"])[0] for _ in range(5)}
        grouping.next_run()
        second = {grouping.choose_tasks(1, ["x"])[0] for _ in range(5)}
        assert len(first) == len(second) == 1 and first != second
        grouping.stop_runs()
        assert len({grouping.choose_tasks(1, ["x"])[0] for _ in range(3)}) == 3


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


class FieldsCount(Bolt):
    """Acks each word, fails the one it is told to fail; counts what it acked."""

    outputs = ["word", "count"]

    def __init__(self, fail_word: str) -> None:
        self.fail_word = fail_word

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector
        self.counts: dict[str, int] = {}

    def execute(self, tup: Tuple) -> None:
        if tup["word"] == self.fail_word:
            self.collector.fail(tup)
            return
        self.counts[tup["word"]] = self.counts.get(tup["word"], 0) + 1
        self.collector.emit([tup["word"], self.counts[tup["word"]]], anchors=tup)
        self.collector.ack(tup)


class BasicFieldsCount(BasicBolt):
    """FieldsCount as a BasicBolt: acked on return, failed by raising."""

    outputs = ["word", "count"]

    def __init__(self, fail_word: str) -> None:
        self.fail_word = fail_word

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.counts: dict[str, int] = {}

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        if tup["word"] == self.fail_word:
            raise FailedException(self.fail_word)
        self.counts[tup["word"]] = self.counts.get(tup["word"], 0) + 1
        collector.emit([tup["word"], self.counts[tup["word"]]])


class TestRandomTopologies:
    """Word counts of random sizes and shapes, run through the executors' real paths (columnar
    batches cut at random sizes, fields keys remembered, BasicBolt inline acking, several
    ackers, a spout whose small pending budget saturates it, so that its shuffle sends in runs),
    with payloads delivered in random order: every sentence is acked exactly once, or failed
    when it holds the word that is failed."""

    @settings(max_examples=40, deadline=None)
    @given(
        sentences=st.lists(st.lists(st.sampled_from("a b c d e".split()), min_size=0, max_size=5), max_size=12),
        split=st.integers(1, 3),
        count=st.integers(1, 3),
        ackers=st.integers(1, 2),
        batch_size=st.integers(1, 4),
        seed=st.integers(0, 2**16),
        basic_count=st.booleans(),
        max_pending=st.one_of(st.none(), st.integers(1, 4)),
    )
    def test_every_tree_settles_once(self, sentences, split, count, ackers, batch_size, seed, basic_count, max_pending):
        builder = TopologyBuilder()
        builder.set_spout("sentences", Sentences())
        builder.set_bolt("split", BasicSplit(), parallelism=split).shuffle_grouping("sentences")
        counter = BasicFieldsCount("e") if basic_count else FieldsCount("e")
        builder.set_bolt("count", counter, parallelism=count).fields_grouping("split", ["word"])
        wire = InProcessTopology(
            builder.create_topology(),
            {"ackers": ackers, "batch_size": batch_size, "max_spout_pending": max_pending},
            delivery="random",
            seed=seed,
        )
        spout = wire.components("sentences")[0]
        for i, words in enumerate(sentences):
            spout.feed(" ".join(words), msg_id=i)
        wire.run()
        failing = {i for i, words in enumerate(sentences) if "e" in words}
        assert sorted(spout.acked) == [i for i in range(len(sentences)) if i not in failing]
        assert sorted(spout.failed) == sorted(failing)
        # Acks that reach the acker after their tree failed linger until they expire.
        wire.advance(4 * wire.conf.message_timeout_secs)
        assert wire.pending_trees() == 0
        assert len(spout.acked) + len(spout.failed) == len(sentences)
