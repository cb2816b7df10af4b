"""Small components that the topology files under tests/ name by dotted path
(``tests.topology_file_components.WordSpout``): the repository root must be on ``sys.path``."""

from __future__ import annotations

from typing import Any

from rayflow import BasicBolt, Bolt, Spout
from rayflow._groupings import StreamId


class WordSpout(Spout):
    """Emits ``words`` ``rounds`` times, each tracked by its position, then says it is exhausted."""

    outputs = ["word"]

    def __init__(self, words: list[str] | None = None, rounds: int = 1) -> None:
        if rounds < 0:
            raise ValueError("rounds must be >= 0")
        self.words = list(words or ["apple", "banana", "cherry"])
        self.rounds = rounds

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.queue = [w for _ in range(self.rounds) for w in self.words]
        self.position = 0

    def next_tuple(self) -> None:
        if self.position < len(self.queue):
            self.collector.emit([self.queue[self.position]], msg_id=self.position)
            self.position += 1
        else:
            self.collector.exhausted()


class EndlessSpout(Spout):
    """Emits tracked numbers for as long as it is active."""

    outputs = ["n"]

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.n = 0

    def next_tuple(self) -> None:
        self.n += 1
        self.collector.emit([self.n], msg_id=self.n)


class Upper(BasicBolt):
    """word -> WORD."""

    outputs = ["word"]

    def execute(self, tup: Any, collector: Any) -> None:
        collector.emit([str(tup[0]).upper()])


class Count(BasicBolt):
    """Counts words; emits (word, count)."""

    outputs = ["word", "count"]

    def __init__(self, start: int = 0) -> None:
        self.start = start

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        self.counts: dict[str, int] = {}

    def execute(self, tup: Any, collector: Any) -> None:
        word = tup["word"]
        self.counts[word] = self.counts.get(word, self.start) + 1
        collector.emit([word, self.counts[word]])


class Sink(Bolt):
    """Acks everything and emits nothing."""

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector

    def execute(self, tup: Any) -> None:
        self.collector.ack(tup)


class FirstTask:
    """A custom grouping: everything goes to the lowest task."""

    def prepare(self, context: Any, stream: StreamId, target_tasks: list[int]) -> None:
        self.target = [min(target_tasks)]

    def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]:
        return self.target


class NotAComponent:
    """A class that is neither a spout nor a bolt."""


def not_a_class() -> None:
    """A function, where a class is expected."""


class Unpicklable(Spout):
    """Holds a lock, so it cannot be copied to its tasks: submitting it fails."""

    outputs = ["n"]

    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()
