"""A word count that runs until it is stopped, at a pace a shared 2-core machine can spare, and
small HTTP helpers: what the web page, ``/metrics`` and browser tests watch.

``PacedSentences`` emits ``rate`` sentences a second, tracked, forever; ``RaisingSplit`` splits
them and raises on every ``raise_every``-th, so that the page has errors to show (the input
fails and is replayed, the task keeps running). Named by dotted path in ``WORDCOUNT_YAML`` for
``rayflow run --ui`` (the repository root is on ``sys.path``).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import Counter
from typing import Any

from rayflow import (
    BasicBolt,
    BasicOutputCollector,
    Spout,
    SpoutOutputCollector,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)
from rayflow._metrics import TaskMetrics
from rayflow._topology import Topology

SENTENCES = ["the cow jumped over the moon", "an apple a day keeps the doctor away", "four score and seven years ago"]


class PacedSentences(Spout):
    outputs = ["sentence"]

    def __init__(self, rate: float = 500.0) -> None:
        self.rate = rate

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector = collector
        self.sent = 0
        self.started = time.monotonic()

    def next_tuple(self) -> None:
        if self.sent < (time.monotonic() - self.started) * self.rate:
            self.collector.emit([SENTENCES[self.sent % len(SENTENCES)]], msg_id=self.sent)
            self.sent += 1

    def fail(self, msg_id: Any) -> None:
        """A failed sentence is not replayed: the pace stays what it is."""


class RaisingSplit(BasicBolt):
    outputs = ["word"]

    def __init__(self, raise_every: int = 0) -> None:
        self.raise_every = raise_every

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.seen = 0

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        self.seen += 1
        if self.raise_every and self.seen % self.raise_every == 0:
            raise ValueError(f"sentence {self.seen} is one too many")
        for word in tup[0].split():
            collector.emit([word])


class Count(BasicBolt):
    outputs = ["word", "count"]

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.counts: Counter[str] = Counter()

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        self.counts[tup[0]] += 1
        collector.emit([tup[0], self.counts[tup[0]]])


def wordcount(
    rate: float = 500.0,
    raise_every: int = 0,
    split: int = 2,
    count: int = 1,
    split_resources: dict[str, Any] | None = None,
) -> Topology:
    """``split_resources``: Ray's options for each split task (``{"num_gpus": 1}``: the page
    shows its GPU)."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", PacedSentences(rate))
    split_bolt = builder.set_bolt("split", RaisingSplit(raise_every), parallelism=split, resources=split_resources)
    split_bolt.shuffle_grouping("sentences")
    builder.set_bolt("count", Count(), parallelism=count).fields_grouping("split", ["word"])
    return builder.create_topology()


WORDCOUNT_YAML = """\
name: paced-wordcount
config: {topology.message.timeout.secs: 10, topology.max.spout.pending: 500}
spouts:
  - {id: sentences, class: tests.ui_helpers.PacedSentences, kwargs: {rate: 300}}
bolts:
  - {id: split, class: tests.ui_helpers.RaisingSplit, parallelism: 1}
  - {id: count, class: tests.ui_helpers.Count}
streams:
  - {from: sentences, to: split, grouping: {type: shuffle}}
  - {from: split, to: count, grouping: {type: fields, fields: [word]}}
"""


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """Status and body of a GET (an HTTP error's too)."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def get_json(url: str) -> Any:
    status, body = get(url)
    assert status == 200, (url, status, body)
    return json.loads(body)


def post(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """Status and decoded JSON answer of a POST with an empty body."""
    request = urllib.request.Request(url, data=b"", method="POST", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class FakeHandle:
    """Answers ``task_metrics`` with what the test put in ``tasks``: the recorder's view of a
    handle, without Ray."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.killed = False
        self.active = True
        self.tasks: dict[int, dict[str, Any]] = {}

    def task_metrics(self) -> dict[int, dict[str, Any]]:
        return {task: dict(m) for task, m in self.tasks.items()}

    def activate(self) -> None:
        self.active = True

    def deactivate(self) -> None:
        self.active = False


def task(metrics: TaskMetrics, task_id: int, **extra: Any) -> dict[str, Any]:
    """What ``handle.task_metrics()`` says of one task."""
    snap = metrics.snapshot(pid=100 + task_id, node_id="node-a", **extra)
    return {**snap, "component": metrics.component_id, "alive": True, "restarts": 0}
