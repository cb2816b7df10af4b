"""Components and topologies shared by the executor tests (``test_router.py``,
``test_emit.py``, ``test_basic_bolt.py``, ``test_spout_executor.py``, ``test_bolt_executor.py``,
``test_random_topologies.py``).

A ``Wire`` holds one executor per task of a real topology (each with its own copy of the
topology, as every Ray actor has) and carries their payloads in two queues -- control (acker
traffic) and data -- until nothing moves.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from rayflow._collectors import BasicOutputCollector, OutputCollector, SpoutOutputCollector
from rayflow._components import BasicBolt, Bolt, OutputFieldsDeclarer, Spout
from rayflow._config import Config
from rayflow._context import TopologyContext
from rayflow._errors import FailedException
from rayflow._topology import Topology, TopologyBuilder
from rayflow._tuple import Tuple
from rayflow.testing import InProcessTopology


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


class BasicTicked(BasicBolt):
    """Emits the word ``tick`` for every tick tuple."""

    outputs = ["word"]

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        if tup.is_tick():
            collector.emit(["tick"])


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
