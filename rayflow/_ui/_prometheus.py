"""``/metrics``: the recorder's latest poll in Prometheus' text format, for users without Ray's
metrics stack.

A custom collector on a registry of its own: nothing is kept between scrapes, each scrape
renders the latest poll (at most ``POLL_SECS`` old), so a task's counters are exactly what it
counted, histograms included (``_bucket`` cumulative, ``_sum``, ``_count``).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from ._recorder import MetricsRecorder
from ._series import Histogram, families

__all__ = ["CONTENT_TYPE", "PrometheusExposition"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _TopologyCollector(Collector):
    def __init__(self, recorder: MetricsRecorder) -> None:
        self._recorder = recorder

    def collect(self) -> Iterator[Metric]:
        poll = self._recorder.last
        if poll is None:
            return
        for family in families(poll, self._recorder.handle.name):
            labels = list(family.labels)
            if family.kind == "histogram":
                histograms = HistogramMetricFamily(family.name, family.help, labels=labels)
                for sample in family.samples:
                    assert isinstance(sample.value, Histogram)
                    bounds = [f"{bound:g}" for bound in sample.value.bounds] + ["+Inf"]
                    buckets = list(zip(bounds, map(float, sample.value.buckets), strict=True))
                    histograms.add_metric([sample.labels[name] for name in labels], buckets, sample.value.sum)
                yield histograms
                continue
            kind = CounterMetricFamily if family.kind == "counter" else GaugeMetricFamily
            metric = kind(family.name, family.help, labels=labels)
            for sample in family.samples:
                assert not isinstance(sample.value, Histogram)
                metric.add_metric([sample.labels[name] for name in labels], sample.value)
            yield metric


class PrometheusExposition:
    """Renders ``recorder``'s latest poll as the text a Prometheus server scrapes."""

    def __init__(self, recorder: MetricsRecorder) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_TopologyCollector(recorder))

    def render(self) -> bytes:
        return generate_latest(self.registry)
