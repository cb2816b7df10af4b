"""Components for the exactly-once scenarios, in process and on Ray (importable by task actors).

The word count of Storm's docs, with a spout that can go back (``position``/``seek``) and a
split that can be told to fail a sentence after emitting part of it: the case where
at-least-once state counts twice."""

from __future__ import annotations

from typing import Any

from rayflow import Bolt, Spout, StatefulBolt, TopologyBuilder
from rayflow.state import KeyValueState

WORDS_PER_SENTENCE = 4


def sentence(i: int) -> str:
    return f"w{i % 7} x{i % 5} y{i % 3} z{i % 2}"


def true_counts(n: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for i in range(n):
        for word in sentence(i).split():
            counts[word] = counts.get(word, 0) + 1
    return counts


class Numbered(Spout):
    """Sentences 0..total-1, msg id = index; task k of n takes k, k + n, ...; it stands at the
    next index to emit."""

    outputs = ["sentence"]

    def __init__(self, total: int) -> None:
        self.total = total

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        tasks = context.get_component_tasks(context.this_component_id)
        self.collector, self.i, self.stride = collector, tasks.index(context.this_task_id), len(tasks)
        self.acks: list[int] = []
        self.fails: list[int] = []

    def next_tuple(self) -> None:
        if self.i < self.total:
            self.collector.emit([sentence(self.i)], msg_id=self.i)
            self.i += self.stride
        else:
            self.collector.exhausted()

    def ack(self, msg_id: int) -> None:
        self.acks.append(msg_id)

    def fail(self, msg_id: int) -> None:
        self.fails.append(msg_id)

    def position(self) -> int:
        return self.i

    def seek(self, position: int) -> None:
        self.i = position


class Unseekable(Spout):
    outputs = ["sentence"]

    def next_tuple(self) -> None:
        pass


class Split(Bolt):
    """Splits; fails each sentence in ``fail_once`` the first time, after emitting half of it."""

    outputs = ["word"]

    def __init__(self, fail_once: frozenset[str] = frozenset()) -> None:
        self.fail_once = fail_once

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.failed: set[str] = set()

    def execute(self, tup: Any) -> None:
        words = tup["sentence"].split()
        if tup["sentence"] in self.fail_once and tup["sentence"] not in self.failed:
            self.failed.add(tup["sentence"])
            for word in words[: len(words) // 2]:
                self.collector.emit([word], anchors=tup)
            self.collector.fail(tup)
            return
        for word in words:
            self.collector.emit([word], anchors=tup)
        self.collector.ack(tup)


class Count(StatefulBolt):
    outputs = ["word", "count"]

    def init_state(self, state: KeyValueState) -> None:
        self.counts = state

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector

    def execute(self, tup: Any) -> None:
        n = self.counts.get(tup["word"], 0) + 1
        self.counts.put(tup["word"], n)
        self.collector.emit([tup["word"], n], anchors=tup)
        self.collector.ack(tup)


def wordcount(
    total: int, *, fail_once: frozenset[str] = frozenset(), spouts: int = 1, split: int = 2, count: int = 2
) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("sentences", Numbered(total), parallelism=spouts)
    builder.set_bolt("split", Split(fail_once), parallelism=split).shuffle_grouping("sentences")
    builder.set_bolt("count", Count(), parallelism=count).fields_grouping("split", ["word"])
    return builder.create_topology()
