"""What rayflow exports as metrics: a ``Poll`` turned into named families of labelled series,
ready for either exporter (``prometheus.py`` for ``/metrics``, ``ray_metrics.py`` for Ray's).

Two levels, under two prefixes, so that neither is counted twice by a ``sum``:

- ``rayflow_task_*``, labelled ``topology``, ``component``, ``task``, ``node`` (the Ray node id
  the task runs on now): every task's own counters, gauges and latency histograms;
- ``rayflow_component_*``, labelled ``topology``, ``component``: the same summed over the
  component's tasks (``capacity``: the busiest task's, as Storm's UI shows it; histograms: the
  buckets summed), for a dashboard that shows components without writing PromQL.

A counter is exported only for the tasks that have it (``timed_out`` and ``pending`` for spouts,
``capacity`` and the process/execute latencies for bolts, ``dead_lettered`` for broker spouts,
``checkpoints``/``rollbacks`` for stateful bolts, the ``batch_size`` histogram for batch
bolts). A component's own counters (``collector.count``) are one family,
``rayflow_*_own_counter``, with the name in the label ``counter``. Counters restart at zero when
a task is started again (``restarts`` grows): Prometheus takes that as a counter reset.
Histograms count the sampled latencies (one spout tree in eight, a bolt's batches), with
the bounds of ``LATENCY_BUCKETS_SECS``, and a batch bolt's batch sizes, every batch, with those
of ``BATCH_SIZE_BUCKETS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from .._metrics import BATCH_SIZE_BUCKETS, LATENCIES, LATENCY_BUCKETS_SECS
from ._recorder import Poll

__all__ = [
    "COUNTERS",
    "GAUGES",
    "HISTOGRAMS",
    "SIZE_HISTOGRAMS",
    "Family",
    "Histogram",
    "Sample",
    "families",
    "task_capacity",
]

Kind = Literal["counter", "gauge", "histogram"]

COUNTERS = {
    "emitted": "Tuples emitted (a spout's untracked tuples included).",
    "transferred": "Tuples sent to tasks (a tuple sent to n tasks counts n).",
    "acked": "A spout's tuple trees completed; a bolt's input tuples acked.",
    "failed": "A spout's tuple trees failed (timed out included); a bolt's input tuples failed.",
    "executed": "Input tuples executed.",
    "errors": "Errors a component raised or reported (the task kept running).",
    "timed_out": "A spout's tuple trees that failed because they timed out.",
    "restarts": "Times the task's actor died and the task was started again.",
    "dead_lettered": "A broker spout's messages given up on and sent to the dead-letter destination.",
    "checkpoints": "A stateful bolt's state commits.",
    "rollbacks": "A stateful bolt's state rollbacks.",
}
GAUGES = {
    "pending": "A spout's tuple trees in flight: emitted, neither acked nor failed yet.",
    "capacity": "A bolt's fraction of time spent executing (Storm's capacity; near 1: add tasks).",
    "alive": "1 while the task answers, 0 while it is dead or being restarted.",
}
HISTOGRAMS = {
    "complete_latency_ms": ("complete_latency_seconds", "A spout's tuple trees: emit to fully acked."),
    "process_latency_ms": ("process_latency_seconds", "A bolt's input tuples: arrival to ack."),
    "execute_latency_ms": ("execute_latency_seconds", "A bolt's input tuples: time in execute."),
}
SIZE_HISTOGRAMS = {
    "batch_size": ("batch_size", "A batch bolt's batches: tuples per execute_batch call."),
}
OWN_COUNTER_HELP = "A component's own counters (collector.count), by name in the label counter."
_SCALARS: tuple[tuple[dict[str, str], Kind], ...] = ((COUNTERS, "counter"), (GAUGES, "gauge"))
TASK_LABELS = ("topology", "component", "task", "node")
COMPONENT_LABELS = ("topology", "component")


@dataclass(frozen=True)
class Histogram:
    """Cumulative counts per bound of ``bounds`` then +Inf (the last is the count)."""

    buckets: list[int]
    sum: float
    bounds: tuple[float, ...] = LATENCY_BUCKETS_SECS

    @property
    def count(self) -> int:
        return self.buckets[-1]


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float | Histogram


@dataclass
class Family:
    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...]
    samples: list[Sample] = field(default_factory=list)


def task_capacity(m: dict[str, Any]) -> float:
    return float(m.get("busy_secs", 0.0)) / max(float(m.get("uptime_secs", 0.0)), 1e-9)


def _histogram(latency: dict[str, Any] | None, bounds: tuple[float, ...] = LATENCY_BUCKETS_SECS) -> Histogram:
    empty = [0] * (len(bounds) + 1)
    if not latency:
        return Histogram(empty, 0.0, bounds)
    return Histogram(list(latency.get("buckets") or empty), float(latency.get("total", 0.0)), bounds)


def _summed(histograms: list[Histogram]) -> Histogram:
    buckets = [sum(column) for column in zip(*(h.buckets for h in histograms), strict=True)]
    return Histogram(buckets, sum(h.sum for h in histograms), histograms[0].bounds)


def _task_value(name: str, m: dict[str, Any]) -> float | None:
    """A task's value of counter or gauge ``name``, ``None`` where the task has none."""
    if name == "capacity":
        return task_capacity(m) if m["kind"] == "bolt" else None
    if name == "alive":
        return 1.0 if m.get("alive") else 0.0
    if name in ("pending", "timed_out") and m["kind"] != "spout":
        return None
    value = m.get(name)
    return None if value is None else float(value)


def families(poll: Poll, topology: str) -> list[Family]:
    """Every family of both levels for ``poll``, in a stable order. Acker tasks are included
    (``component="__acker"``): their counters say how busy tracking is."""
    tasks = sorted(poll.tasks.items())
    out: list[Family] = []
    for level in ("task", "component"):
        for table, kind in _SCALARS:
            for name, text in table.items():
                values = [(task, m, _task_value(name, m)) for task, m in tasks]
                out.append(_family(level, name, kind, text, topology, values, _MERGE.get(name, sum)))
        for key, (name, text) in HISTOGRAMS.items():
            histograms = [(task, m, _histogram(m["latencies"].get(key))) for task, m in tasks if _has(m, key)]
            out.append(_family(level, name, "histogram", text, topology, histograms, _summed))
        for key, (name, text) in SIZE_HISTOGRAMS.items():
            sizes = [(task, m, _histogram(m["sizes"][key], BATCH_SIZE_BUCKETS)) for task, m in tasks if _sized(m, key)]
            out.append(_family(level, name, "histogram", text, topology, sizes, _summed))
        out.append(_own_counters(level, topology, tasks))
    return [family for family in out if family.samples]


_MERGE: dict[str, Callable[[list[float]], float]] = {"capacity": max, "alive": min}
"""How a component's value comes from its tasks' where it is not their sum."""


def _has(m: dict[str, Any], latency: str) -> bool:
    return latency in LATENCIES.get(m["kind"], ())


def _sized(m: dict[str, Any], histogram: str) -> bool:
    return histogram in m.get("sizes", ())


def _family(
    level: str,
    name: str,
    kind: Kind,
    text: str,
    topology: str,
    values: list[tuple[int, dict[str, Any], Any]],
    merge: Callable[[list[Any]], Any],
) -> Family:
    """One family: a sample per (task, its metrics, its value) at the task level, or per
    component, its tasks' values merged, at the component level. A ``None`` value is no sample."""
    family = Family(f"rayflow_{level}_{name}", kind, text, TASK_LABELS if level == "task" else COMPONENT_LABELS)
    by_component: dict[str, list[Any]] = {}
    for task, m, value in values:
        if value is None:
            continue
        if level == "task":
            family.samples.append(Sample(_task_labels(topology, task, m), value))
        by_component.setdefault(m["component"], []).append(value)
    if level == "component":
        for cid, found in by_component.items():
            family.samples.append(Sample({"topology": topology, "component": cid}, merge(found)))
    return family


def _own_counters(level: str, topology: str, tasks: list[tuple[int, dict[str, Any]]]) -> Family:
    """A component's own counters (``collector.count``), one series per name (``counter``)
    beside the task's or component's labels; those named in ``COUNTERS`` have a family already."""
    labels = (TASK_LABELS if level == "task" else COMPONENT_LABELS) + ("counter",)
    family = Family(f"rayflow_{level}_own_counter", "counter", OWN_COUNTER_HELP, labels)
    totals: dict[tuple[str, str], float] = {}
    for task, m in tasks:
        for name in m.get("custom_counters", ()):
            if name in COUNTERS:
                continue
            if level == "task":
                family.samples.append(Sample({**_task_labels(topology, task, m), "counter": name}, float(m[name])))
            key = (m["component"], name)
            totals[key] = totals.get(key, 0.0) + float(m[name])
    if level == "component":
        for (cid, name), total in totals.items():
            family.samples.append(Sample({"topology": topology, "component": cid, "counter": name}, total))
    return family


def _task_labels(topology: str, task: int, m: dict[str, Any]) -> dict[str, str]:
    return {"topology": topology, "component": m["component"], "task": str(task), "node": m.get("node_id") or ""}
