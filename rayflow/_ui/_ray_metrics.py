"""The recorder's polls exported the Ray way (``ray.util.metrics``), so rayflow's metrics are on
Ray's metrics endpoint -- Prometheus scrapes it, Ray's dashboard and Grafana show it -- next to
Ray's own, named ``ray_rayflow_task_*`` and ``ray_rayflow_component_*`` there (Ray adds the
``ray_`` prefix, and ``_total`` to counters).

``ray.util.metrics`` records events, while the tasks report totals: a counter is increased by
what it grew since the last poll (by its whole value after a reset), a gauge is set, and a
histogram observes each new sample of a bucket at the bucket's midpoint (above the last bound:
at 1.5 times it). So Ray's buckets and counts are the tasks' own; its ``_sum`` is close, not
exact (``/metrics`` of the web page has the exact one). That replay costs the driver a few
microseconds per sample (``benchmarks/metrics_export.py``), so histograms go to Ray per task
only: a component's is ``sum by (le, component)`` of its tasks'.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from ray.util.metrics import Counter, Gauge, Histogram

from .._metrics import LATENCY_BUCKETS_SECS
from ._recorder import MetricsRecorder, Poll, increase
from ._series import Histogram as Buckets
from ._series import families

__all__ = ["RayMetricsExporter"]


@cache
def _midpoints(bounds: tuple[float, ...]) -> list[float]:
    """Where a sample of each bucket is observed: its middle, 1.5 times the last bound above it."""
    return [(low + high) / 2 for low, high in zip((0.0, *bounds[:-1]), bounds, strict=True)] + [bounds[-1] * 1.5]


_METRICS: dict[str, Any] = {}
"""Ray's metric objects by name, shared by the exporters of every topology of this driver (their
series differ by the ``topology`` label)."""


class RayMetricsExporter:
    """A listener of ``recorder`` that records each poll in Ray's metrics."""

    def __init__(self, recorder: MetricsRecorder) -> None:
        self._topology = recorder.handle.name
        self._last: dict[tuple[str, tuple[str, ...]], Any] = {}
        recorder.listeners.append(self.record)

    def _metric(
        self, name: str, kind: str, text: str, labels: tuple[str, ...], bounds: tuple[float, ...] = LATENCY_BUCKETS_SECS
    ) -> Any:
        metric = _METRICS.get(name)
        if metric is None:
            if kind == "counter":
                metric = Counter(name, text, tag_keys=labels)
            elif kind == "gauge":
                metric = Gauge(name, text, tag_keys=labels)
            else:
                metric = Histogram(name, text, boundaries=list(bounds), tag_keys=labels)
            _METRICS[name] = metric
        return metric

    def record(self, poll: Poll) -> None:
        for family in families(poll, self._topology):
            if family.kind == "histogram" and "task" not in family.labels:
                continue  # replaying every sample twice would double the cost: sum the tasks' by le
            first = family.samples[0].value
            bounds = first.bounds if isinstance(first, Buckets) else LATENCY_BUCKETS_SECS
            metric = self._metric(family.name, family.kind, family.help, family.labels, bounds)
            for sample in family.samples:
                key = (family.name, tuple(sample.labels[name] for name in family.labels))
                value = sample.value
                if isinstance(value, Buckets):
                    self._observe(metric, key, value, sample.labels)
                elif family.kind == "gauge":
                    metric.set(value, tags=sample.labels)
                else:
                    grown = increase(self._last.get(key, 0.0), value)
                    self._last[key] = value
                    if grown > 0:
                        metric.inc(grown, tags=sample.labels)

    def _observe(self, metric: Any, key: tuple[str, tuple[str, ...]], now: Buckets, tags: dict[str, str]) -> None:
        before: Buckets | None = self._last.get(key)
        self._last[key] = now
        then = before.buckets if before is not None and before.count <= now.count else [0] * len(now.buckets)
        below_now = below_then = 0
        for midpoint, total_now, total_then in zip(_midpoints(now.bounds), now.buckets, then, strict=True):
            new = (total_now - below_now) - (total_then - below_then)
            below_now, below_then = total_now, total_then
            for _ in range(max(new, 0)):
                metric.observe(midpoint, tags=tags)
