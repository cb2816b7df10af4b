"""Components for the two-phase-commit sink tests: a store that keeps pre-committed transactions
apart from committed rows, a sink writing to it, and a word split that fails one sentence once,
after emitting part of it.

Components are copied into every task (and afresh on a restart), so what must outlive a copy --
the store, the failures still to make -- lives in module-level registries, keyed by a name the
test chooses.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rayflow import (
    Bolt,
    OutputCollector,
    Spout,
    SpoutOutputCollector,
    TopologyBuilder,
    TopologyContext,
    Tuple,
    TwoPhaseCommitSink,
)
from rayflow._topology import Topology

SENTENCES = [f"w{i % 7} w{i % 5} w{i % 3} w{i % 2}" for i in range(40)]


@dataclass
class Store:
    """A transactional store: ``staged`` holds pre-committed transactions by name, ``rows`` what
    was committed, in order. ``failing[method]`` makes that many of the sink's next calls of
    ``method`` raise; ``calls`` lists what the sinks did, with transaction names."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    staged: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)
    failing: Counter[str] = field(default_factory=Counter)
    calls: list[str] = field(default_factory=list)

    def call(self, method: str, name: str) -> None:
        """Note a call; raise if it is to fail."""
        self.calls.append(f"{method} {name}")
        if self.failing[method] > 0:
            self.failing[method] -= 1
            self.calls.append(f"failed {method} {name}")
            raise OSError(f"simulated: {method} of {name} failed")

    def publish(self, name: str) -> None:
        rows = self.staged.pop(name, None)
        if rows is not None:
            self.rows.extend(rows)


STORES: dict[str, Store] = {}
FAILURES: dict[str, set[int]] = {}
"""test name -> sentence ids the split still fails (once each)."""


@dataclass
class Transaction:
    name: str
    rows: list[tuple[Any, ...]] = field(default_factory=list)


class StoreSink(TwoPhaseCommitSink[Transaction]):
    def __init__(self, store: str) -> None:
        self.store = store

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.db = STORES[self.store]

    def begin_transaction(self, txid: int) -> Transaction:
        self.db.call("begin", self.transaction_name(txid))
        return Transaction(self.transaction_name(txid))

    def invoke(self, transaction: Transaction, tup: Tuple) -> None:
        transaction.rows.append(tuple(tup.values))

    def pre_commit(self, transaction: Transaction) -> None:
        self.db.call("pre_commit", transaction.name)
        self.db.staged[transaction.name] = list(transaction.rows)

    def commit(self, transaction: Transaction) -> None:
        self.db.call("commit", transaction.name)
        self.db.publish(transaction.name)

    def abort(self, transaction: Transaction) -> None:
        self.db.call("abort", transaction.name)
        self.db.staged.pop(transaction.name, None)

    def recover_and_commit(self, txid: int) -> None:
        self.db.call("recover_and_commit", self.transaction_name(txid))
        self.db.publish(self.transaction_name(txid))

    def recover_and_abort(self, txid: int) -> None:
        self.db.call("recover_and_abort", self.transaction_name(txid))
        self.db.staged.pop(self.transaction_name(txid), None)


class Sentences(Spout):
    """Every sentence of ``SENTENCES`` once, msg id its index; a position is the next index."""

    outputs = ["id", "sentence"]

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector, self.i = collector, 0
        self.replay: list[int] = []

    def next_tuple(self) -> None:
        if self.replay:
            i = self.replay.pop()
        elif self.i < len(SENTENCES):
            i, self.i = self.i, self.i + 1
        else:
            self.collector.exhausted()
            return
        self.collector.emit([i, SENTENCES[i]], msg_id=i)

    def fail(self, msg_id: Any) -> None:
        self.replay.append(msg_id)

    def position(self) -> int:
        return self.i

    def seek(self, position: int) -> None:
        self.i = position


class SplitFailingOnce(Bolt):
    """Emits ``(id, index, word)`` for each word; fails each sentence of ``FAILURES[key]`` once,
    after emitting its first two words, so at-least-once writes those words twice."""

    outputs = ["id", "index", "word"]

    def __init__(self, key: str) -> None:
        self.key = key

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        sentence_id, words = tup["id"], tup["sentence"].split()
        failing = sentence_id in FAILURES.get(self.key, set())
        for index, word in enumerate(words[:2] if failing else words):
            self.collector.emit([sentence_id, index, word], anchors=tup)
        if failing:
            FAILURES[self.key].discard(sentence_id)
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


def build(key: str, sink: Bolt, *, sink_tasks: int = 2) -> Topology:
    builder = TopologyBuilder()
    builder.set_spout("sentences", Sentences())
    builder.set_bolt("split", SplitFailingOnce(key), parallelism=2).shuffle_grouping("sentences")
    builder.set_bolt("sink", sink, parallelism=sink_tasks).shuffle_grouping("split")
    return builder.create_topology()


def expected_rows() -> list[tuple[Any, ...]]:
    """Every (id, index, word) of ``SENTENCES``, sorted."""
    return sorted((i, n, w) for i, s in enumerate(SENTENCES) for n, w in enumerate(s.split()))
