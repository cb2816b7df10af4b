"""The emit paths cannot drift apart.

An emit is written out three times, because it runs once per tuple and a Python call is a
measurable share of what a tuple costs (``benchmarks/emit_paths.py``): ``SpoutExecutor.emit``
(new trees), ``BoltExecutor.emit`` (anchored to the tuples given) and ``BoltExecutor.emit_input``
(a ``BasicBolt``'s emit, anchored to its input), which has a fourth copy in C where the kernel is
built (``rayflow/_speedups.c``). Here the same script of emits -- several streams, one of them
read by nobody, one-field and two-field tuples, keys that repeat -- is run through each path,
through ``emit`` with its anchors as a list (the general branch), and through a ``BasicBolt``'s
emit on both builds (the one this process loaded, and pure Python), and every path must deliver
the same tuples to the same tasks, show the observer the same emits, count the same emits, and
complete every tree it started; an emit a user got wrong raises the same error on both builds.
"""

from __future__ import annotations

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
from rayflow.testing import complete_topology

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
    with the script run through ``path`` (``basic_python``: a ``BasicBolt`` on pure Python, even
    where the C kernel runs)."""
    if path == "basic_python":
        with mock.patch.object(kernel, "KERNEL", None):
            return run("basic", script)
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
    for path in ("basic_python", "tuple", "list", "spout"):
        received, emitted, trees, observed = run(path, script)
        assert received == basic[0], path
        assert observed == basic[3], path
        assert emitted == basic[1] == INPUTS * len(script), path
        # Anchoring: a poisoned emit to a bolt fails its tree, every other tree completes.
        poisoned = [stream != "unread" and word == POISON for stream, word, _ in script]
        if path == "spout":
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
