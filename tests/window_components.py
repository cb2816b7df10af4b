"""Components of the window tests: a spout the test feeds, a windowed bolt that records its
windows, and a bolt that fails what it gets."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from rayflow import (
    BasicBolt,
    BasicOutputCollector,
    FailedException,
    OutputCollector,
    Spout,
    SpoutOutputCollector,
    TopologyContext,
    TupleWindow,
    WindowedBolt,
)
from rayflow import Tuple as RayflowTuple


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
