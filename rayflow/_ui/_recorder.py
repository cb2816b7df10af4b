"""``MetricsRecorder``: a running topology's metrics, polled once per ``POLL_SECS`` by a thread
in the driver and kept for the web page and the exporters.

The task actors count everything themselves (``rayflow/_metrics.py``); reading them costs one
Ray call per task, so one thread reads them for everyone who looks: the page, ``/metrics`` and
Ray's metrics. Each poll is a ``Poll`` -- when, every task's metrics, their sum per component --
and from one poll to the next the recorder keeps:

- ``history``: a point per poll over the last ``HISTORY_SECS``: each component's throughput
  (a spout's emitted/s, a bolt's executed/s) and each spout's complete latency, the mean over
  the trees sampled in that interval (from the histogram's sum and count, so it is exact);
- ``errors``: every error a task raised or reported, as seen at a poll: a task's
  ``last_error_at`` moved, so its ``last_error`` is new, with how many errors it counted since
  the poll before. Newest first, at most ``MAX_ERRORS``. Two errors of one task between two
  polls show as one, with its count.

Listeners (the Ray metrics exporter) get each poll, on the thread. Polling stops once the handle
is killed (its actors are gone), and ``when_killed`` is called (the page closes with it); the
last poll stays readable.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._runtime.handle import component_metrics

__all__ = ["HISTORY_SECS", "MAX_ERRORS", "POLL_SECS", "MetricsRecorder", "Poll", "Polled"]

logger = logging.getLogger("rayflow")

POLL_SECS = 1.0
HISTORY_SECS = 600.0
"""How far back the throughput and latency plots reach."""
MAX_ERRORS = 200


class Polled(Protocol):
    """What the recorder needs of a ``TopologyHandle`` (a test can stand in for one)."""

    name: str
    killed: bool

    def task_metrics(self) -> dict[int, dict[str, Any]]: ...


@dataclass(frozen=True)
class Poll:
    """One reading of every task (``handle.task_metrics()``); ``time`` is ``time.time()``."""

    time: float
    tasks: dict[int, dict[str, Any]]
    components: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, tasks: dict[int, dict[str, Any]], at: float | None = None) -> Poll:
        """``components`` is ``handle.metrics()``'s shape, with each one's ``kind``."""
        components = component_metrics(tasks) if tasks else {}
        for m in tasks.values():
            components[m["component"]]["kind"] = m["kind"]
        return cls(time.time() if at is None else at, tasks, components)


def increase(before: float, after: float) -> float:
    """How much a counter grew; a counter that went down was reset (its task restarted) and
    grew by its whole new value."""
    return after - before if after >= before else after


def _throughput_count(m: dict[str, Any]) -> int:
    return int(m["emitted"] if m["kind"] == "spout" else m["executed"])


def history_point(before: Poll, after: Poll) -> dict[str, Any]:
    """Per component, tuples per second between two polls (a spout's emitted, a bolt's
    executed); per spout, the mean complete latency (ms) of the trees sampled in between, or
    ``None`` when none completed."""
    span = max(after.time - before.time, 1e-9)
    throughput: dict[str, float] = {}
    latency: dict[str, float | None] = {}
    for cid, m in after.components.items():
        if m["kind"] == "acker":
            continue
        previous = before.components.get(cid)
        was = _throughput_count(previous) if previous else 0
        throughput[cid] = increase(was, _throughput_count(m)) / span
    for cid in (cid for cid, m in after.components.items() if m["kind"] == "spout"):
        total = count = 0.0
        for task, m in after.tasks.items():
            if m["component"] != cid:
                continue
            now = m["latencies"].get("complete_latency_ms")
            if not now:
                continue
            then = before.tasks.get(task, {}).get("latencies", {}).get("complete_latency_ms") or {}
            if now["count"] >= then.get("count", 0):
                total += now["total"] - then.get("total", 0.0)
                count += now["count"] - then.get("count", 0)
            else:  # the task restarted
                total += now["total"]
                count += now["count"]
        latency[cid] = total / count * 1000.0 if count else None
    return {"time": after.time, "throughput": throughput, "complete_latency_ms": latency}


def new_errors(before: Poll | None, after: Poll) -> list[dict[str, Any]]:
    """The errors of ``after``'s tasks that ``before`` did not show, oldest first."""
    found = []
    for task, m in after.tasks.items():
        at = m.get("last_error_at")
        if at is None or not m.get("last_error"):
            continue
        was = before.tasks.get(task, {}) if before else {}
        if was.get("last_error_at") == at:
            continue
        count = int(increase(was.get("errors", 0), m.get("errors", 0))) or 1
        found.append({"time": at, "task": task, "component": m["component"], "error": m["last_error"], "count": count})
    return sorted(found, key=lambda e: e["time"])


class MetricsRecorder:
    """Polls ``handle`` on a daemon thread from ``start`` until ``stop`` or the handle is killed;
    then, on that thread, calls ``when_killed``."""

    def __init__(
        self, handle: Polled, poll_secs: float = POLL_SECS, *, when_killed: Callable[[], None] | None = None
    ) -> None:
        self.handle = handle
        self.when_killed = when_killed
        self.poll_secs = poll_secs
        self.started = time.time()
        self.history: deque[dict[str, Any]] = deque(maxlen=max(2, int(HISTORY_SECS / poll_secs)))
        self.errors: deque[dict[str, Any]] = deque(maxlen=MAX_ERRORS)
        self.listeners: list[Callable[[Poll], None]] = []
        self._last: Poll | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rayflow-metrics-{handle.name}", daemon=True)

    @property
    def last(self) -> Poll | None:
        """The latest poll (``None`` before the first)."""
        with self._lock:
            return self._last

    def history_since(self, since: float) -> list[dict[str, Any]]:
        """The history's points after time ``since``, oldest first."""
        with self._lock:
            return [point for point in self.history if point["time"] > since]

    def recent_errors(self) -> list[dict[str, Any]]:
        """The errors seen, newest first."""
        with self._lock:
            return list(self.errors)

    def start(self) -> None:
        """Poll now (unless polled already), then once per ``poll_secs`` on the thread."""
        if self.last is None:
            self.poll()
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.poll_secs * 5)

    def poll(self) -> Poll:
        """Read every task now, record what changed, tell the listeners."""
        reading = Poll.of(self.handle.task_metrics())
        with self._lock:
            before, self._last = self._last, reading
            if before is not None:
                self.history.append(history_point(before, reading))
            for error in new_errors(before, reading):
                self.errors.appendleft(error)
        for listener in self.listeners:
            try:
                listener(reading)
            except Exception:  # an exporter's trouble must not stop the page
                logger.exception("topology %r: a metrics listener failed", self.handle.name)
        return reading

    def _run(self) -> None:
        while not self._stopping.wait(self.poll_secs):
            if self.handle.killed:
                if self.when_killed is not None:
                    self.when_killed()
                return
            try:
                self.poll()
            except Exception:
                logger.exception("topology %r: reading the metrics failed", self.handle.name)
