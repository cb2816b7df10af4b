"""Components of the state tests: a replaying spout, a stateful word count, and providers that
fail on purpose."""

from __future__ import annotations

from collections import deque
from typing import Any

from rayflow import (
    BasicBolt,
    BasicOutputCollector,
    KeyValueState,
    OutputCollector,
    Spout,
    SpoutOutputCollector,
    StatefulBolt,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)
from rayflow.state import MemoryStateProvider


class Sentences(Spout):
    """Emits each of ``sentences`` once (task i of n takes i, i + n, ...), tracked by index, and
    replays whatever fails; exhausted when it has nothing to emit."""

    outputs = ["sentence"]

    def __init__(self, sentences: list[str]) -> None:
        self.sentences = sentences

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        tasks = context.get_component_tasks(context.this_component_id)
        self.todo: deque[int] = deque(range(tasks.index(context.this_task_id), len(self.sentences), len(tasks)))
        self.collector = collector

    def next_tuple(self) -> None:
        if not self.todo:
            self.collector.exhausted()
            return
        i = self.todo.popleft()
        self.collector.emit([self.sentences[i]], msg_id=i)

    def fail(self, msg_id: Any) -> None:
        self.todo.append(msg_id)


class Split(BasicBolt):
    outputs = ["word"]

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        for word in tup["sentence"].split():
            collector.emit([word])


class StatefulCount(StatefulBolt):
    """The contract's word count: counts in a ``KeyValueState``, each count emitted anchored.
    Records the hooks it was called with."""

    outputs = ["word", "count"]

    def __init__(self) -> None:
        self.hooks: list[tuple[str, Any]] = []

    def init_state(self, state: KeyValueState) -> None:
        self.counts = state
        self.hooks.append(("init_state", dict(state.items())))

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        n = self.counts.get(tup["word"], 0) + 1
        self.counts.put(tup["word"], n)
        self.collector.emit([tup["word"], n], anchors=tup)
        self.collector.ack(tup)

    def pre_prepare(self, txid: int) -> None:
        self.hooks.append(("pre_prepare", txid))

    def pre_commit(self, txid: int) -> None:
        self.hooks.append(("pre_commit", txid))

    def pre_rollback(self) -> None:
        self.hooks.append(("pre_rollback", None))


class Unanchored(StatefulCount):
    """Emits without anchors: every emit must raise."""

    def execute(self, tup: Tuple) -> None:
        self.collector.emit([tup["word"], 0])
        self.collector.ack(tup)


class FlakyProvider(MemoryStateProvider):
    """A memory provider whose first ``stage`` (of every instance) fails, as a store that is
    down for a moment would."""

    def __init__(self, config: dict[str, Any], topology_name: str) -> None:
        super().__init__(config, topology_name)
        self.stage_failures = int(config.get("stage_failures", 1))

    def stage(self, namespace: str, txid: int, changes: dict[Any, Any]) -> None:
        if self.stage_failures:
            self.stage_failures -= 1
            from rayflow import StateError

            raise StateError("the store is down for a moment (on purpose)")
        super().stage(namespace, txid, changes)


def wordcount(
    sentences: list[str], count: StatefulBolt | None = None, *, split_tasks: int = 2, count_tasks: int = 2
) -> Any:
    """sentences -> split (shuffle) -> count (stateful, fields(word))"""
    builder = TopologyBuilder()
    builder.set_spout("sentences", Sentences(sentences))
    builder.set_bolt("split", Split(), split_tasks).shuffle_grouping("sentences")
    builder.set_bolt("count", count or StatefulCount(), count_tasks).fields_grouping("split", ["word"])
    return builder.create_topology()
