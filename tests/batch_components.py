"""Components of the batch bolt tests: a spout the test feeds (and that replays what fails), a
batch bolt that records its batches and can fail or raise on cue, and a sink that fails on cue.
A module of their own so that Ray workers and topology files can import them."""

from __future__ import annotations

from collections import deque
from typing import Any

from rayflow import (
    BasicBolt,
    BasicOutputCollector,
    BatchBolt,
    BatchOutputCollector,
    FailedException,
    Spout,
    SpoutOutputCollector,
    StatefulBolt,
    TopologyContext,
    Tuple,
)


class Numbers(Spout):
    """Emits ``range(total)`` (shared out among its tasks) and then says it is exhausted, or,
    with ``total=0``, what the test feeds it (``feed``); each tracked by ``n``, replayed when it
    fails if ``replay``."""

    outputs = ["n"]

    def __init__(self, total: int = 0, replay: bool = False) -> None:
        self.total = total
        self.replay = replay

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        tasks = context.get_component_tasks(context.this_component_id)
        self.todo: deque[int] = deque(range(tasks.index(context.this_task_id), self.total, len(tasks)))
        self.collector = collector

    def feed(self, *numbers: int) -> None:
        self.todo.extend(numbers)

    def next_tuple(self) -> None:
        if self.todo:
            n = self.todo.popleft()
            self.collector.emit([n], msg_id=n)
        elif self.total:
            self.collector.exhausted()

    def fail(self, msg_id: Any) -> None:
        if self.replay:
            self.todo.append(msg_id)


class Doubler(BatchBolt):
    """Emits ``[n, 2n]`` per input, anchored to it, and records each batch (its ``n``s).

    ``fail_once``: numbers it fails (``collector.fail``) the first time it sees them;
    ``raise_on``: a batch holding this number raises; ``whole_batch``: also emit one
    ``[sum, count]`` on stream ``sums`` anchored to every tuple of the batch."""

    outputs = ["n", "doubled"]

    def __init__(self, fail_once: tuple[int, ...] = (), raise_on: int | None = None, whole_batch: bool = False) -> None:
        self.fail_once = set(fail_once)
        self.raise_on = raise_on
        self.whole_batch = whole_batch

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(["n", "doubled"])
        if self.whole_batch:
            declarer.declare_stream("sums", ["sum", "count"])

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.batches: list[list[int]] = []
        self.ticks = 0

    def execute_batch(self, tuples: list[Tuple], collector: BatchOutputCollector) -> None:
        numbers = [tup["n"] for tup in tuples]
        self.batches.append(numbers)
        for tup, n in zip(tuples, numbers, strict=True):
            if n in self.fail_once:
                self.fail_once.discard(n)
                collector.fail(tup)
                continue
            collector.emit([n, 2 * n], anchors=tup)
        if self.whole_batch:
            collector.emit([sum(numbers), len(numbers)], anchors=tuples, stream="sums")
        if self.raise_on is not None and self.raise_on in numbers:
            self.raise_on = None  # once: the replay goes through
            raise ValueError(f"a batch with {numbers[0]}..{numbers[-1]} raised")

    def execute_tick(self, tup: Tuple, collector: BatchOutputCollector) -> None:
        self.ticks += 1
        collector.emit([-1, self.ticks])  # a tick is in no tree: no anchors needed


class Settle(BatchBolt):
    """Acks every batch, or fails every tuple of it when ``failing``."""

    def __init__(self, failing: bool = False) -> None:
        self.failing = failing

    def execute_batch(self, tuples: list[Tuple], collector: BatchOutputCollector) -> None:
        if self.failing:
            for tup in tuples:
                collector.fail(tup)


class Unanchored(BatchBolt):
    """Emits without anchors: refused."""

    outputs = ["n"]

    def execute_batch(self, tuples: list[Tuple], collector: BatchOutputCollector) -> None:
        for tup in tuples:
            collector.emit([tup["n"]])


class FailSome(BasicBolt):
    """Fails the inputs whose field ``field`` is in ``numbers``, the first time only."""

    def __init__(self, numbers: tuple[int, ...] = (), field: str = "n") -> None:
        self.numbers = set(numbers)
        self.field = field

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        value = tup[self.field]
        if value in self.numbers:
            self.numbers.discard(value)
            raise FailedException(f"{value} fails once")


class Log(StatefulBolt):
    """Logs what it executes and the checkpoints it prepares, in order, and acks each input."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: Any) -> None:
        self.collector = collector
        self.log: list[tuple[str, int]] = []

    def execute(self, tup: Tuple) -> None:
        self.log.append(("tuple", tup["n"]))
        self.collector.ack(tup)

    def pre_prepare(self, txid: int) -> None:
        self.log.append(("prepare", txid))
