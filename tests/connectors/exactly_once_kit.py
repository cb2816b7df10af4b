"""The broker exactly-once scenarios' topology, and how a test kills a broker spout task.

    source (a broker spout) --shuffle--> split --fields(word)--> count (StatefulBolt)

Message ``n`` is the text ``"n w1 w2 w3 w4"`` (``tests.chaos.chaos_kit.message``). ``split``
emits its words; for the messages it is told to fail, it emits half of them the first time it
sees the message and then fails it: at-least-once state counts those words twice. ``count``
counts words in its ``KeyValueState``. Every component is importable by a task actor.

A task killed in this process (``InProcessTopology.kill``) leaves its spout object behind with
its connection open; ``crash`` closes that connection the way a dying process does (no goodbye,
no acks flushed). ``LosesAcks`` wraps a spout so that, once told to, it forgets every broker ack
a commit asks for: killed right after such a commit, the task never told the broker, as when a
process dies between a checkpoint's commit and its acks' write.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from rayflow import Bolt, KeyValueState, OutputCollector, StatefulBolt, TopologyBuilder, TopologyContext, Tuple
from rayflow.testing import InProcessTopology
from tests.chaos.chaos_kit import message

__all__ = ["Count", "LosesAcks", "Split", "counts", "crash", "drive", "lossy", "message", "topology", "truth"]


def truth(total: int) -> Counter[str]:
    """Each word's true count over messages ``0 .. total - 1``."""
    return Counter(word for n in range(total) for word in message(n).split()[1:])


class Split(Bolt):
    """``"n w1 w2 w3 w4"`` -> its words; a message in ``fail_once`` is failed the first time this
    task sees it, after half of its words went out."""

    outputs = ["word"]

    def __init__(self, fail_once: frozenset[int] = frozenset()) -> None:
        self.fail_once = fail_once

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector
        self.failed: set[int] = set()

    def execute(self, tup: Tuple) -> None:
        text = tup[0].decode() if isinstance(tup[0], bytes) else tup[0]
        n, *words = text.split()
        if int(n) in self.fail_once and int(n) not in self.failed:
            self.failed.add(int(n))
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

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        n = self.counts.get(tup["word"], 0) + 1
        self.counts.put(tup["word"], n)
        self.collector.emit([tup["word"], n], anchors=tup)
        self.collector.ack(tup)


def topology(spout: Any, fail_once: frozenset[int] = frozenset(), *, spouts: int = 1) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("source", spout, parallelism=spouts)
    builder.set_bolt("split", Split(fail_once), parallelism=2).shuffle_grouping("source")
    builder.set_bolt("count", Count(), parallelism=2).fields_grouping("split", ["word"])
    return builder.create_topology()


def counts(run: InProcessTopology) -> Counter[str]:
    """The count tasks' counts, summed (each word lives in one task)."""
    total: Counter[str] = Counter()
    for bolt in run.components("count"):
        if hasattr(bolt, "counts"):  # a task's state comes with the topology's first checkpoint
            total.update(dict(bolt.counts.items()))
    return total


def drive(run: InProcessTopology, until: Callable[[], bool], timeout: float = 30.0, step: float = 0.25) -> bool:
    """Let the spouts emit, deliver everything and move the simulated clock ``step`` seconds
    (a checkpoint every fourth round at the default interval), until ``until()`` holds or
    ``timeout`` real seconds passed. The broker's own timers (ack lingers) run on real time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if until():
            return True
        run.run_spouts()
        run.settle()
        run.advance(step)
        time.sleep(0.001)
    return until()


class LosesAcks:
    """Mixed into a broker spout's class (``lossy(RedisStreamSpout)``): while ``losing`` is set,
    ``ack`` is forgotten, so the broker never hears that those messages' checkpoint committed."""

    losing = False
    lost = 0

    def ack(self, msg_id: Any) -> None:
        if self.losing:
            self.lost += 1
            return
        super().ack(msg_id)  # type: ignore[misc]


def lossy(spout_class: type) -> type:
    """``spout_class`` with ``LosesAcks``: a class made here, for a run in this process (a task
    actor could not unpickle it by name)."""
    return type(f"Lossy{spout_class.__name__}", (LosesAcks, spout_class), {"__module__": __name__})


def crash(spout: Any) -> None:
    """Close a broker spout's connections as the death of its process would: no acks flushed,
    no goodbye to the broker, its upkeep stopped."""
    spout._upkeep.stop()
    if hasattr(spout, "_client"):  # RedisStreamSpout
        if spout._conn is not None:
            spout._conn.disconnect()
        spout._client.close()
        return
    spout._connecting.close()
    if hasattr(spout, "_connection"):  # RabbitMQSpout
        if spout._connection is not None:
            spout._connection._sock.close()
        return
    if spout._conn is not None:  # NatsJetStreamSpout
        spout._conn.sock.close()
