"""Components of the window tests: a spout the test feeds, a windowed bolt that records its
windows, and a bolt that fails what it gets; for the exactly-once ones, a spout that can go
back, a relay that fails a tuple once, a windowed bolt that names each window in a row, and a
stateful sink that counts the rows of each window."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from rayflow import (
    BasicBolt,
    BasicOutputCollector,
    Bolt,
    FailedException,
    OutputCollector,
    Spout,
    SpoutOutputCollector,
    StatefulBolt,
    TopologyContext,
    TupleWindow,
    WindowedBolt,
)
from rayflow import Tuple as RayflowTuple
from rayflow.state import KeyValueState


class Fed(Spout):
    """Emits what the test feeds it (``feed``), one tuple per ``next_tuple``, tracked by the
    given msg id; never replays. Fields ``word`` and ``ts`` unless told otherwise."""

    def __init__(self, fields: tuple[str, ...] = ("word", "ts")) -> None:
        self.fields = fields
        self.todo: deque[tuple[list[Any], Any]] = deque()

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(list(self.fields))

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector = collector

    def feed(self, values: list[Any], msg_id: Any) -> None:
        self.todo.append((values, msg_id))

    def next_tuple(self) -> None:
        if self.todo:
            values, msg_id = self.todo.popleft()
            self.collector.emit(values, msg_id=msg_id)


@dataclass
class Seen:
    """One window as the bolt saw it: the words, as values lists are not kept past execute."""

    words: list[str]
    new: list[str]
    expired: list[str]
    start_ts: float | None
    end_ts: float | None


class Record(WindowedBolt):
    """Records every window and emits ``[words, end_ts]`` once per window, anchored to it (the
    default). Raises from ``execute`` while ``raising`` is set."""

    outputs = ["words", "end_ts"]

    def __init__(self) -> None:
        self.windows: list[Seen] = []
        self.raising = False

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, window: TupleWindow) -> None:
        def words(tuples: list[RayflowTuple]) -> list[str]:
            return [t["word"] for t in tuples]

        self.windows.append(
            Seen(
                words(window.get()),
                words(window.get_new()),
                words(window.get_expired()),
                window.start_ts,
                window.end_ts,
            )
        )
        if self.raising:
            raise RuntimeError("the user's execute broke")
        self.collector.emit([words(window.get()), window.end_ts])


class TopWords(WindowedBolt):
    """The contract's example: the most frequent word of each window and its count."""

    outputs = ["word", "count", "window_end"]

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, window: TupleWindow) -> None:
        counts: dict[str, int] = {}
        for tup in window.get():
            counts[tup["word"]] = counts.get(tup["word"], 0) + 1
        word = max(sorted(counts), key=lambda w: counts[w])
        self.collector.emit([word, counts[word], window.end_ts])


class FailEverything(BasicBolt):
    """Fails every input: a window's emit that lands here fails the window's spout tuples."""

    def execute(self, tup: RayflowTuple, collector: BasicOutputCollector) -> None:
        raise FailedException("no")


class Numbers(Spout):
    """Exactly-once input: ``n`` = 0..total-1 (msg id ``n``), with a ``key`` (``n % keys``) and an
    event time ``ts`` (``n * 100`` ms); it stands at the next ``n`` to emit. One task."""

    outputs = ["n", "key", "ts"]

    def __init__(self, total: int, keys: int = 2) -> None:
        self.total = total
        self.keys = keys

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector = collector
        self.i = 0

    def next_tuple(self) -> None:
        if self.i < self.total:
            self.collector.emit([self.i, self.i % self.keys, self.i * 100], msg_id=self.i)
            self.i += 1
        else:
            self.collector.exhausted()

    def position(self) -> int:
        return self.i

    def seek(self, position: int) -> None:
        self.i = position


class Relay(Bolt):
    """Passes each tuple on, anchored; fails each ``n`` of ``fail_once`` the first time it comes."""

    outputs = ["n", "key", "ts"]

    def __init__(self, fail_once: frozenset[int] = frozenset()) -> None:
        self.fail_once = fail_once

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector
        self.failed: set[int] = set()

    def execute(self, tup: RayflowTuple) -> None:
        n = tup["n"]
        if n in self.fail_once and n not in self.failed:
            self.failed.add(n)
            self.collector.fail(tup)
            return
        self.collector.emit(tup.values, anchors=tup)
        self.collector.ack(tup)


class WindowRows(WindowedBolt):
    """One row per window: ``window`` names it (task, end, the ``n`` in it, oldest first) and
    ``ns`` holds them. Raises, once, on the first window holding an ``n`` of ``raise_once``."""

    outputs = ["window", "ns"]

    def __init__(self, raise_once: frozenset[int] = frozenset()) -> None:
        self.raise_once = raise_once

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector
        self.task = context.this_task_id
        self.raised: set[int] = set()

    def execute(self, window: TupleWindow) -> None:
        ns = [t["n"] for t in window.get()]
        for n in self.raise_once.intersection(ns) - self.raised:
            self.raised.add(n)
            raise RuntimeError(f"the user's execute broke on a window holding {n}")
        self.collector.emit([f"{self.task}@{window.end_ts}:{','.join(map(str, ns))}", ns])


class WindowCount(StatefulBolt):
    """A stateful sink: how many times each window's row reached it, in its state."""

    def declare_output_fields(self, declarer: Any) -> None:
        pass

    def init_state(self, state: KeyValueState) -> None:
        self.seen = state

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tup: RayflowTuple) -> None:
        self.seen.put(tup["window"], self.seen.get(tup["window"], 0) + 1)
        self.collector.ack(tup)
