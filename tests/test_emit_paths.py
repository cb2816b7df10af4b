"""The emit paths cannot drift apart.

An emit is written out three times, because it runs once per tuple and a Python call is a
measurable share of what a tuple costs (``benchmarks/emit_paths.py``): ``SpoutExecutor.emit``
(new trees), ``BoltExecutor.emit`` (anchored to the tuples given) and ``BoltExecutor.emit_input``
(a ``BasicBolt``'s emit, anchored to its input); the first and the last have a copy in C where
the kernel is built (``rayflow/_speedups.c``). Here the same script of emits -- several streams,
one of them read by nobody, one-field and two-field tuples, keys that repeat -- is run through
each path, through ``emit`` with its anchors as a list (the general branch), and through a
``BasicBolt``'s and a spout's emit on both builds (the one this process loaded, and pure
Python), and every path must deliver the same tuples to the same tasks, show the observer the
same emits, count the same emits, and complete every tree it started; an emit a user got wrong
raises the same error on both builds. The spout's two copies are also held together state for
state: the batches, roots, inits, pending trees and latency samples one ``next_tuple`` leaves.
"""

from __future__ import annotations

import pickle
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayflow import (
    BasicBolt,
    BasicOutputCollector,
    Bolt,
    FailedException,
    OutputCollector,
    OutputFieldsDeclarer,
    Spout,
    TopologyBuilder,
)
from rayflow._collectors import SpoutOutputCollector
from rayflow._context import TopologyContext
from rayflow._executors import kernel
from rayflow._tuple import Tuple
from rayflow.testing import InProcessTopology, complete_topology

Emit = tuple[str, str, int]
"""(stream, word, n): ``[word, n]`` on ``pairs``, ``[word]`` on ``words`` and ``unread``."""

STREAMS = {"default": ["word", "n"], "words": ["word"], "unread": ["word"]}
INPUTS = 3


def values(stream: str, word: str, n: int) -> list[Any]:
    return [word, n] if stream == "default" else [word]


def declare(declarer: OutputFieldsDeclarer) -> None:
    for stream, fields in STREAMS.items():
        declarer.declare_stream(stream, fields)


class ScriptedBasicBolt(BasicBolt):
    """Runs the script for every input through ``BasicOutputCollector.emit`` (``emit_input``)."""

    def __init__(self, script: list[Emit]) -> None:
        self.script = script

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declare(declarer)

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        for stream, word, n in self.script:
            collector.emit(values(stream, word, n), stream=stream)


class ScriptedBolt(Bolt):
    """Runs the script through ``OutputCollector.emit`` anchored to the input (``emit``), the
    anchor given as the tuple (the fast branch) or as a one-element list (the general one)."""

    def __init__(self, script: list[Emit], as_list: bool) -> None:
        self.script = script
        self.as_list = as_list

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declare(declarer)

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        anchors: Tuple | list[Tuple] = [tup] if self.as_list else tup
        for stream, word, n in self.script:
            self.collector.emit(values(stream, word, n), anchors=anchors, stream=stream)
        self.collector.ack(tup)


class ScriptedSpout(Spout):
    """Runs the script ``INPUTS`` times through ``SpoutOutputCollector.emit``, each emit a tree."""

    def __init__(self, script: list[Emit]) -> None:
        self.script = script

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declare(declarer)

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector = collector
        self.round = 0

    def next_tuple(self) -> None:
        if self.round == INPUTS or not self.script:  # an empty script emits nothing: done at once
            self.collector.exhausted()
            return
        for k, (stream, word, n) in enumerate(self.script):
            self.collector.emit(values(stream, word, n), msg_id=(self.round, k), stream=stream)
        self.round += 1


class Inputs(Spout):
    outputs = ["i"]

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector = collector
        self.sent = 0

    def next_tuple(self) -> None:
        if self.sent == INPUTS:
            self.collector.exhausted()
        else:
            self.collector.emit([self.sent], msg_id=self.sent)
            self.sent += 1


POISON = "dd"
"""The sinks fail this word: the trees of the emits that carry it must fail, and no other."""


class Sink(BasicBolt):
    """Records what each of its tasks received, and fails ``POISON``."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.received: list[tuple[str, list[Any]]] = []

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        self.received.append((tup.source_stream, list(tup.values)))
        if tup["word"] == POISON:
            raise FailedException(POISON)


Run = tuple[list[list[tuple[str, list[Any]]]], int, dict[str, int], dict[str, list[list[Any]]]]


def run(path: str, script: list[Emit]) -> Run:
    """What each sink task received, how many emits the component under test counted, how many
    trees its spout was told were acked and failed, and what the observer saw it emit per stream,
    with the script run through ``path`` (``basic_python``, ``spout_python``: a ``BasicBolt``, a
    spout, on pure Python, even where the C kernel runs)."""
    if path in ("basic_python", "spout_python"):
        with mock.patch.object(kernel, "KERNEL", None):
            return run(path.removesuffix("_python"), script)
    builder = TopologyBuilder()
    if path == "spout":
        builder.set_spout("under_test", ScriptedSpout(script))
    else:
        builder.set_spout("inputs", Inputs())
        bolt: Bolt | BasicBolt = ScriptedBasicBolt(script) if path == "basic" else ScriptedBolt(script, path == "list")
        builder.set_bolt("under_test", bolt).global_grouping("inputs")
    builder.set_bolt("by_word", Sink(), parallelism=2).fields_grouping("under_test", ["word"])
    builder.set_bolt("every", Sink(), parallelism=2).all_grouping("under_test", stream="words")
    result = complete_topology(builder.create_topology())
    received = [task.received for cid in ("by_word", "every") for task in result.components(cid)]
    spout = "under_test" if path == "spout" else "inputs"
    trees = {"acked": len(result.acked(spout)), "failed": len(result.failed(spout))}
    observed = {stream: result.emitted("under_test", stream) for stream in STREAMS}
    return received, result.metrics()["under_test"]["emitted"], trees, observed


SCRIPTS = st.lists(
    st.tuples(st.sampled_from(sorted(STREAMS)), st.sampled_from(["a", "b", "c", "dd"]), st.integers(0, 3)),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(script=SCRIPTS)
def test_every_emit_path_delivers_the_same_tuples_to_the_same_tasks(script: list[Emit]) -> None:
    basic = run("basic", script)
    for path in ("basic_python", "tuple", "list", "spout", "spout_python"):
        received, emitted, trees, observed = run(path, script)
        assert received == basic[0], path
        assert observed == basic[3], path
        assert emitted == basic[1] == INPUTS * len(script), path
        # Anchoring: a poisoned emit to a bolt fails its tree, every other tree completes.
        poisoned = [stream != "unread" and word == POISON for stream, word, _ in script]
        if path.startswith("spout"):
            expected = {"acked": INPUTS * poisoned.count(False), "failed": INPUTS * poisoned.count(True)}
        else:
            expected = {"acked": 0, "failed": INPUTS} if any(poisoned) else {"acked": INPUTS, "failed": 0}
        assert trees == expected, path
    assert basic[2] == run("tuple", script)[2]


def test_a_script_on_every_stream_reaches_the_tasks_its_groupings_choose() -> None:
    """A fixed case, readable without Hypothesis: two words on ``default`` go to the tasks their
    keys choose, ``words`` reaches both tasks of ``every``, ``unread`` reaches no one."""
    script: list[Emit] = [("default", "a", 1), ("words", "b", 0), ("unread", "c", 0)]
    received, emitted, trees, _ = run("basic", script)
    by_word, every = received[:2], received[2:]
    assert sorted(v for task in by_word for v in task) == [("default", ["a", 1])] * INPUTS
    assert every == [[("words", ["b"])] * INPUTS, [("words", ["b"])] * INPUTS]
    assert emitted == 3 * INPUTS and trees == {"acked": INPUTS, "failed": 0}


class WrongEmits(BasicBolt):
    """Makes one emit a user could get wrong per input and records what it raised."""

    WRONG = {
        "too few values": lambda c: c.emit(["a"]),
        "too many values": lambda c: c.emit(["a", 1, 2]),
        "an undeclared stream": lambda c: c.emit(["a"], stream="nowhere"),
        "a direct stream": lambda c: c.emit(["a"], stream="direct"),
        "a direct stream, by position": lambda c: c.emit(["a"], "direct"),
        "a keyword emit does not take": lambda c: c.emit(["a", 1], anchors=[]),
        "no values": lambda c: c.emit(),
    }

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word", "n"])
        declarer.declare_stream("direct", ["word"], direct=True)

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.raised: dict[str, tuple[str, str]] = {}

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        for what, emit in self.WRONG.items():
            try:
                emit(collector)
            except Exception as exc:
                self.raised[what] = (type(exc).__name__, str(exc))


def wrong_emits_raise() -> dict[str, tuple[str, str]]:
    builder = TopologyBuilder()
    builder.set_spout("inputs", Inputs())
    builder.set_bolt("wrong", WrongEmits()).global_grouping("inputs")
    builder.set_bolt("sink", Sink()).shuffle_grouping("wrong")
    result = complete_topology(builder.create_topology())
    (bolt,) = result.components("wrong")
    assert sorted(result.acked("inputs")) == list(range(INPUTS))  # caught: every input acked
    raised: dict[str, tuple[str, str]] = bolt.raised
    return raised


@pytest.mark.skipif(kernel.KERNEL is None, reason=f"one build runs here: {kernel.BUILD}")
def test_an_emit_a_user_got_wrong_raises_the_same_error_on_both_builds() -> None:
    """The C emit hands each of these to the Python emits before doing anything: the same
    ``EmitError`` naming the stream, or the same ``TypeError`` for a call emit does not take
    (whose message names the function it reached, which differs)."""
    on_c = wrong_emits_raise()
    with mock.patch.object(kernel, "KERNEL", None):
        on_python = wrong_emits_raise()
    assert set(on_c) == set(on_python) == set(WrongEmits.WRONG)
    for what, (kind, message) in on_python.items():
        assert on_c[what][0] == kind, what
        if kind != "TypeError":
            assert on_c[what][1] == message, what


# -- the spout's emit, C against Python, state for state ------------------------------------------

SpoutCall = Any
"""A call of ``SpoutOutputCollector.emit`` (or ``emit_direct``), as a spout may make it."""

SPOUT_CALLS: dict[str, SpoutCall] = {
    "untracked": lambda c: c.emit(["a", 1]),
    "tracked": lambda c: c.emit(["a", 1], msg_id=1),
    "tracked again, a key seen": lambda c: c.emit(["a", 2], msg_id=2),
    "positional msg id and stream": lambda c: c.emit(["b"], 3, "words"),
    "keywords in another order": lambda c: c.emit(stream="words", values=["c"], msg_id=4),
    "stream by keyword, untracked": lambda c: c.emit(["dd"], stream="words"),
    "msg id None by keyword": lambda c: c.emit(["e", 5], msg_id=None, stream="default"),
    "an unread stream, tracked": lambda c: c.emit(["f"], msg_id=6, stream="unread"),
    "a tuple of values": lambda c: c.emit(("g", 7), msg_id=7),
    "a non-str key": lambda c: c.emit([8, 8], msg_id=8),
    "a msg id of any kind": lambda c: c.emit(["h", 9], msg_id=("h", [9])),
    "too few values": lambda c: c.emit(["a"], msg_id=10),
    "too many values": lambda c: c.emit(["a", 1, 2]),
    "an undeclared stream": lambda c: c.emit(["a"], stream="nowhere"),
    "a direct stream": lambda c: c.emit(["a"], msg_id=11, stream="direct"),
    "a msg id twice": lambda c: c.emit(["a", 1], 12, msg_id=12),
    "an argument emit does not take": lambda c: c.emit(["a", 1], anchors=[]),
    "no values": lambda c: c.emit(),
    "a direct emit": lambda c: c.emit_direct(999, ["a"], msg_id=13, stream="direct"),
}


BATCH_SIZE = 3
"""Small enough that some batches are sent during the calls, and some not."""


class CallingSpout(Spout):
    """Makes every call of ``SPOUT_CALLS`` in one ``next_tuple`` and records what each returned,
    or the error it raised."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declare(declarer)
        declarer.declare_stream("direct", ["word"], direct=True)

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector = collector
        self.returned: dict[str, Any] = {}

    def next_tuple(self) -> None:
        self.collector.exhausted()  # an emit says it is not, on both builds
        for what, call in SPOUT_CALLS.items():
            try:
                self.returned[what] = call(self.collector)
            except Exception as exc:
                self.returned[what] = type(exc).__name__ if isinstance(exc, TypeError) else (type(exc), str(exc))


def spout_state(watched: bool, conf: dict[str, Any]) -> dict[str, Any]:
    """What one ``next_tuple`` of ``CallingSpout`` leaves in its task: each batch sent and each
    batch still filling (its values and streams, its trees with each edge id as "edge"), the
    acker mails' inits (each checked to be the XOR of its tree's edge ids), the pending trees,
    the trees sampled for latency, the msg ids acked at emit, the counters, what the observer
    saw and what each call returned."""
    builder = TopologyBuilder()
    builder.set_spout("under_test", CallingSpout())
    builder.set_bolt("by_word", Sink(), parallelism=2).fields_grouping("under_test", ["word"])
    builder.set_bolt("every", Sink(), parallelism=2).all_grouping("under_test", stream="words")
    builder.set_bolt("direct", Sink()).direct_grouping("under_test", stream="direct")
    wire = InProcessTopology(builder.create_topology(), conf)
    task = wire.task("under_test")
    if not watched:
        task.observer = None
    task.run_burst(1)
    edges: dict[int, int] = {}

    def tree_shape(ids: Any) -> list[tuple[int, Any]]:
        trees = []
        for root, edge in zip(ids[::2], ids[1::2], strict=True):
            assert (root == 0) == (edge == 0)
            edges[root] = edges.get(root, 0) ^ edge
            trees.append((root, "edge" if edge else 0))
        return trees

    sent = []  # the batches that reached BATCH_SIZE, sent on the emit that filled them
    for target, raw in wire.data:
        _, values, trees, streams, ends, _ = pickle.loads(raw)
        sent.append((target, list(values), streams, ends, tree_shape(list(trees))))
    batches = {
        target: (list(batch.values), list(batch.streams), list(batch.ends), tree_shape(list(batch.trees)))
        for target, batch in task._batches.items()
    }
    inits = {root: val for mail in task.outbox.acker_mails for root, val in mail.inits.items()}
    for root, val in inits.items():
        assert val == edges.get(root, 0), "an init is the XOR of its tree's edge ids"
    (spout,) = wire.components("under_test")
    return {
        "sent": sent,
        "batches": batches,
        "roots": sorted(inits),
        "pending": dict(task.pending.newest),
        "sampled": sorted(task._started),
        "acked at emit": list(task._acked_at_emit),
        "emitted": task.metrics.emitted,
        "exhausted": task.exhausted,
        "observed": {stream: wire.emitted("under_test", stream) for stream in (*STREAMS, "direct")},
        "returned": spout.returned,
    }


@pytest.mark.skipif(kernel.KERNEL is None, reason=f"one build runs here: {kernel.BUILD}")
@pytest.mark.parametrize("watched", [True, False], ids=["watched", "unwatched"])
@pytest.mark.parametrize("ackers", [1, 3, 0])
def test_the_c_spout_emit_leaves_what_the_python_one_leaves(watched: bool, ackers: int) -> None:
    """The same calls through the kernel's ``SpoutEmit`` and through ``SpoutExecutor.emit``: the
    same tuples in the same batches with the same roots (the run's seeded generator draws them
    on both builds), the same inits, pending trees, latency samples, msg ids acked at emit,
    counters, observed emits, targets returned and errors raised."""
    assert kernel.KERNEL is not None
    conf = {"ackers": ackers, "batch_size": BATCH_SIZE}
    before = kernel.KERNEL.counters()
    on_c = spout_state(watched, conf)
    after = kernel.KERNEL.counters()
    with mock.patch.object(kernel, "KERNEL", None):
        on_python = spout_state(watched, conf)
    assert on_c == on_python
    assert on_c["roots"] if ackers else not on_c["roots"]
    assert on_c["sent"] and any(batch[0] for batch in on_c["batches"].values())
    fast = after["spout_emit_fast"] - before["spout_emit_fast"]
    assert fast == 9  # the untracked, tracked, keyed, unread and msg-id calls; the rest fell back
    assert after["spout_emit_fallback"] - before["spout_emit_fallback"] == len(SPOUT_CALLS) - 1 - fast


class KeepsWhatEmitReturns(BasicBolt):
    """Keeps some of the lists ``emit`` returns, and mutates and drops others: a list it keeps
    must stay as it was, and one it dropped must not come back changed (the C kernel hands a
    list nobody holds out again)."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declare(declarer)

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.kept: list[tuple[list[int], list[int]]] = []

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        for stream in ("words", "unread"):
            first = collector.emit(["kept"], stream=stream)
            self.kept.append((first, list(first)))
            dropped: list[Any] = collector.emit(["dropped"], stream=stream)
            dropped.append(-1)
            dropped.insert(0, "not a task")
            del dropped
            again = collector.emit(["again"], stream=stream)
            assert again is not first
            self.kept.append((again, list(again)))


def test_the_lists_emit_returns_are_the_callers_own() -> None:
    builder = TopologyBuilder()
    builder.set_spout("inputs", Inputs())
    builder.set_bolt("under_test", KeepsWhatEmitReturns()).global_grouping("inputs")
    builder.set_bolt("every", Sink(), parallelism=2).all_grouping("under_test", stream="words")
    result = complete_topology(builder.create_topology())
    (bolt,) = result.components("under_test")
    assert len(bolt.kept) == 4 * INPUTS
    assert all(returned == as_returned for returned, as_returned in bolt.kept)  # none changed since
    to_every = [sorted(r) for r, _ in bolt.kept if r]  # on ``words``: both tasks of ``every``
    assert len(to_every) == 2 * INPUTS and len(set(map(tuple, to_every))) == 1 and len(set(to_every[0])) == 2
    assert all(type(task) is int for task in to_every[0])
