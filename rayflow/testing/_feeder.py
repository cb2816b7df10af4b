"""Helpers for testing topologies: ``FeederSpout`` is fed and observed from the test."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import ray

from .._collectors import SpoutOutputCollector
from .._components import OutputFieldsDeclarer, Spout
from .._context import TopologyContext

__all__ = ["FeederSpout"]

REPORT_EVERY_SECS = 0.005
TAKE_AT_MOST = 1000
IDLE_POLL_SECS = 0.005
"""After finding the channel empty, ask again only this much later (one Ray call per poll)."""


class _FeederChannel:
    """A small actor between the test and the spout's tasks: what to emit, and what came back."""

    def __init__(self) -> None:
        self._queue: deque[tuple[list[Any], Any]] = deque()
        self._acked: list[Any] = []
        self._failed: list[Any] = []

    def feed(self, items: list[tuple[list[Any], Any]]) -> None:
        self._queue.extend(items)

    def take(self, n: int) -> list[tuple[list[Any], Any]]:
        return [self._queue.popleft() for _ in range(min(n, len(self._queue)))]

    def report(self, acked: list[Any], failed: list[Any]) -> None:
        self._acked.extend(acked)
        self._failed.extend(failed)

    def results(self) -> tuple[list[Any], list[Any]]:
        return self._acked, self._failed


_RemoteChannel = ray.remote(num_cpus=0)(_FeederChannel)


class FeederSpout(Spout):
    """A spout that emits what the test feeds it and records what was acked and failed.

    ``feed(values, msg_id)`` queues a tuple (tracked when ``msg_id`` is given);
    ``acked()``/``failed()`` return the msg ids reported so far. It never replays: a test asserts
    on failures itself. Needs a running Ray (the channel between test and tasks is an actor).
    """

    def __init__(self, fields: list[str]) -> None:
        self._fields = list(fields)
        self._channel: Any = _RemoteChannel.remote()  # an actor handle: Ray's stubs cannot type it

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(self._fields)

    # -- the test's side ----------------------------------------------------------------------
    def feed(self, values: list[Any], msg_id: Any = None) -> None:
        ray.get(self._channel.feed.remote([(list(values), msg_id)]))

    def feed_many(self, items: list[tuple[list[Any], Any]]) -> None:
        ray.get(self._channel.feed.remote([(list(v), m) for v, m in items]))

    def acked(self) -> list[Any]:
        return list(ray.get(self._channel.results.remote())[0])

    def failed(self) -> list[Any]:
        return list(ray.get(self._channel.results.remote())[1])

    # -- the task's side ----------------------------------------------------------------------
    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self._collector = collector
        self._buffer: deque[tuple[list[Any], Any]] = deque()
        self._taking: Any = None
        self._next_poll = 0.0
        self._acks: list[Any] = []
        self._fails: list[Any] = []
        self._reported = 0.0

    def next_tuple(self) -> None:
        if not self._buffer:
            now = time.monotonic()
            if self._taking is None and now >= self._next_poll:
                self._taking = self._channel.take.remote(TAKE_AT_MOST).future()
            if self._taking is not None and self._taking.done():
                taken = self._taking.result()
                self._buffer.extend(taken)
                self._taking = None
                if not taken:
                    self._next_poll = now + IDLE_POLL_SECS
        if self._buffer:
            values, msg_id = self._buffer.popleft()
            self._collector.emit(values, msg_id=msg_id)
        self._report()

    def _report(self, force: bool = False) -> None:
        if (self._acks or self._fails) and (force or time.monotonic() - self._reported >= REPORT_EVERY_SECS):
            self._channel.report.remote(self._acks, self._fails)
            self._acks, self._fails = [], []
            self._reported = time.monotonic()

    def ack(self, msg_id: Any) -> None:
        self._acks.append(msg_id)
        self._report()

    def fail(self, msg_id: Any) -> None:
        self._fails.append(msg_id)
        self._report()

    def deactivate(self) -> None:
        self._report(force=True)

    def close(self) -> None:
        self._report(force=True)
