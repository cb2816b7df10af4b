"""Per-task counters and latency samples, and their sum over a component's tasks."""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import deque
from itertools import accumulate
from typing import Any

from ._errors import ConfigError

__all__ = ["LatencySamples", "SizeSamples", "TaskMetrics", "merge", "merge_by_component"]

SAMPLE_SIZE = 4096

LATENCY_BUCKETS_SECS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0
)  # fmt: skip
"""Upper bounds (inclusive, seconds) of the latency histogram's buckets; a last one, +Inf, takes
the rest. From a fast bolt's execute (0.1 ms) to a tree that takes a minute to complete."""

BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
"""Upper bounds (inclusive, tuples) of the batch size histogram's buckets: powers of two, so that
a batch size set to one of them (the default 64) is a bucket of its own."""


class LatencySamples:
    """The most recent sampled latencies (seconds), kept for percentiles, plus the mean of
    every sample and how many fell in each bucket of ``LATENCY_BUCKETS_SECS`` -- what a
    Prometheus histogram needs (``_bucket``, ``_sum``, ``_count``), since the start of the task."""

    __slots__ = ("recent", "total", "count", "buckets")

    BOUNDS: tuple[float, ...] = LATENCY_BUCKETS_SECS
    """The buckets' upper bounds."""

    def __init__(self) -> None:
        self.recent: deque[float] = deque(maxlen=SAMPLE_SIZE)
        self.total = 0.0
        self.count = 0
        self.buckets = [0] * (len(self.BOUNDS) + 1)
        """Samples per bucket (not cumulative), the last one for samples over every bound."""

    def add(self, seconds: float) -> None:
        self.recent.append(seconds)
        self.total += seconds
        self.count += 1
        self.buckets[bisect_left(self.BOUNDS, seconds)] += 1

    def snapshot(self) -> dict[str, Any]:
        """``buckets`` is cumulative, as Prometheus has it: ``buckets[i]`` samples were at most
        ``LATENCY_BUCKETS_SECS[i]``, and the last one (+Inf) is ``count``."""
        return {
            "recent": list(self.recent),
            "total": self.total,
            "count": self.count,
            "buckets": list(accumulate(self.buckets)),
        }


class SizeSamples(LatencySamples):
    """The same histogram over sizes instead of seconds (a batch bolt's batches), with the
    bounds of ``BATCH_SIZE_BUCKETS``."""

    __slots__ = ()

    BOUNDS = BATCH_SIZE_BUCKETS


class TaskMetrics:
    """What one task counts. ``snapshot`` is what travels to the driver.

    Slots, not an instance dict: the counters are bumped once per tuple, and a slot is the
    cheapest place to write an attribute. Emits are counted in two places: the Python emits add
    to ``python_emits``, the C kernel's to ``kernel_emits`` (an ``EmitCount``, a C integer: an
    int would be a new object per emit); ``emitted`` is their sum."""

    __slots__ = (
        "component_id", "kind", "python_emits", "kernel_emits", "transferred", "acked", "failed", "executed",
        "errors", "_last_error", "last_error_at", "latencies", "sizes", "busy_secs", "started", "custom",
    )  # fmt: skip

    COUNTERS = ("emitted", "transferred", "acked", "failed", "executed", "errors")

    def __init__(self, component_id: str, kind: str) -> None:
        self.component_id = component_id
        self.kind = kind
        self.python_emits = 0
        """Emits made by the Python emit paths."""
        self.kernel_emits: Any = None
        """The C kernel's count of this task's emits (``rayflow._speedups.EmitCount``: its
        ``value``), set where the kernel serves the task's emits; ``None`` elsewhere."""
        self.transferred = 0
        self.acked = 0
        self.failed = 0
        self.executed = 0
        self.errors = 0
        self._last_error: str | None = None
        self.last_error_at: float | None = None
        """When ``last_error`` was set (``time.time()``): the web page lists errors with it."""
        self.latencies: dict[str, LatencySamples] = {}
        self.sizes: dict[str, SizeSamples] = {}
        """Size histograms a kind of task keeps (a batch bolt's ``batch_size``)."""
        self.busy_secs = 0.0
        self.started = time.monotonic()
        self.custom: dict[str, int] = {}
        """A component's own counters (``SpoutOutputCollector.count``), beside the ones above."""

    @property
    def last_error(self) -> str | None:
        """The last error a component raised or reported, as ``where: Type: message``."""
        return self._last_error

    @last_error.setter
    def last_error(self, text: str | None) -> None:
        self._last_error = text
        self.last_error_at = time.time()

    def latency(self, name: str) -> LatencySamples:
        samples = self.latencies.get(name)
        if samples is None:
            samples = self.latencies[name] = LatencySamples()
        return samples

    def size(self, name: str) -> SizeSamples:
        samples = self.sizes.get(name)
        if samples is None:
            samples = self.sizes[name] = SizeSamples()
        return samples

    @property
    def emitted(self) -> int:
        """Every emit so far: the Python emits' and the C kernel's."""
        kernel = self.kernel_emits
        return self.python_emits if kernel is None else self.python_emits + int(kernel.value)

    @emitted.setter
    def emitted(self, total: int) -> None:
        """Set the total (a test's figures, a restore): what the kernel counted stays its own."""
        kernel = self.kernel_emits
        self.python_emits = total if kernel is None else total - int(kernel.value)

    def count(self, name: str, amount: int = 1) -> None:
        """Add ``amount`` to the own counter ``name``, created at 0 by its first use."""
        if name not in self.custom:
            if not isinstance(name, str) or not name.isidentifier() or name in RESERVED_NAMES:
                raise ConfigError(
                    f"a counter name must be an identifier other than {sorted(RESERVED_NAMES)}, got {name!r}"
                )
            self.custom[name] = 0
        self.custom[name] += amount

    def snapshot(self, **extra: Any) -> dict[str, Any]:
        snap: dict[str, Any] = {name: getattr(self, name) for name in self.COUNTERS}
        if self.custom:
            snap.update(self.custom)
            snap["custom_counters"] = list(self.custom)
        if self.sizes:
            snap["sizes"] = {k: v.snapshot() for k, v in self.sizes.items()}
        snap.update(
            kind=self.kind,
            last_error=self.last_error,
            last_error_at=self.last_error_at,
            latencies={k: v.snapshot() for k, v in self.latencies.items()},
            busy_secs=self.busy_secs,
            uptime_secs=time.monotonic() - self.started,
        )
        snap.update(extra)
        return snap


def _summary(samples: list[dict[str, Any]], scale: float = 1000.0) -> dict[str, float]:
    """Mean, median and 99th percentile of samples, times ``scale`` (seconds to ms by default)."""
    recent = sorted(x for s in samples for x in s["recent"])
    count = sum(s["count"] for s in samples)
    if not count:
        return {"mean": 0.0, "p50": 0.0, "p99": 0.0}

    def pct(q: float) -> float:
        return recent[min(len(recent) - 1, int(q * len(recent)))] * scale if recent else 0.0

    return {"mean": sum(s["total"] for s in samples) / count * scale, "p50": pct(0.50), "p99": pct(0.99)}


STATEFUL_COUNTERS = ("checkpoints", "rollbacks")
"""Commits and rollbacks of a stateful bolt's state."""

RESERVED_NAMES = frozenset(
    (*TaskMetrics.COUNTERS, *STATEFUL_COUNTERS)
    + ("kind", "last_error", "last_error_at", "latencies", "busy_secs", "uptime_secs", "custom_counters", "tasks")
    + ("calls_in",)
    + ("calls_out", "pending", "timed_out", "exhausted", "finished", "capacity", "restarts", "alive", "pid")
    + ("node_id", "component", "complete_latency_ms", "process_latency_ms", "execute_latency_ms")
    + ("checkpoint_latency_ms",)
    + ("sizes", "batch_size")
)
"""Keys of a snapshot or of a component's summary: an own counter may not take one of them."""

LATENCIES = {"spout": ("complete_latency_ms",), "bolt": ("process_latency_ms", "execute_latency_ms")}


def merge(snapshots: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum one component's task snapshots into the shape ``TopologyHandle.metrics`` returns."""
    kind = snapshots[0]["kind"]
    out: dict[str, Any] = {name: sum(s[name] for s in snapshots) for name in TaskMetrics.COUNTERS}
    out["tasks"] = len(snapshots)
    for name in ("calls_in", "calls_out"):
        out[name] = sum(s.get(name, 0) for s in snapshots)
    for name in STATEFUL_COUNTERS:  # only a stateful bolt's tasks have them
        if name in snapshots[0]:
            out[name] = sum(s.get(name, 0) for s in snapshots)
    for name in dict.fromkeys(n for s in snapshots for n in s.get("custom_counters", ())):
        out[name] = sum(s.get(name, 0) for s in snapshots)
    errors = [s["last_error"] for s in snapshots if s["last_error"]]
    out["last_error"] = errors[-1] if errors else None
    for name in dict.fromkeys([*LATENCIES.get(kind, ()), *(n for s in snapshots for n in s["latencies"])]):
        out[name] = _summary([s["latencies"].get(name, {"recent": [], "total": 0.0, "count": 0}) for s in snapshots])
    for name in dict.fromkeys(n for s in snapshots for n in s.get("sizes", ())):  # a batch bolt's batch_size
        out[name] = _summary([s["sizes"][name] for s in snapshots if name in s.get("sizes", ())], scale=1.0)
    if kind == "bolt":
        # Storm's capacity: the fraction of the time the busiest task spent executing.
        out["capacity"] = max(s["busy_secs"] / max(s["uptime_secs"], 1e-9) for s in snapshots)
    if kind == "spout":
        out["pending"] = sum(s["pending"] for s in snapshots)
        out["timed_out"] = sum(s.get("timed_out", 0) for s in snapshots)  # of "failed"
        out["exhausted"] = all(s["exhausted"] for s in snapshots)
    return out


def merge_by_component(layout: dict[int, str], snapshots: dict[int, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Task snapshots (keyed by task id) summed per component, the acker last: the shape of
    ``TopologyHandle.metrics()``."""
    by_component: dict[str, list[dict[str, Any]]] = {}
    for task, snap in sorted(snapshots.items()):
        by_component.setdefault(layout[task], []).append(snap)
    return {cid: merge(snaps) for cid, snaps in sorted(by_component.items(), key=lambda kv: kv[0].startswith("__"))}
