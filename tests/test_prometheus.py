"""Prometheus metrics: the latency histograms the tasks keep, the families the driver exports
from them (``/metrics`` of the web page, and Ray's metrics), and a scrape during a real run.

The first tests need no Ray: a stand-in handle answers ``task_metrics`` with snapshots of real
``TaskMetrics``, and the exposition is parsed back with ``prometheus_client``'s own parser. The
last ones scrape a word count running on the session's Ray.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from rayflow import Config, TopologyHandle, submit_topology
from rayflow._metrics import LATENCY_BUCKETS_SECS, LatencySamples, TaskMetrics
from rayflow._ui import UiServer
from rayflow._ui._prometheus import PrometheusExposition
from rayflow._ui._recorder import MetricsRecorder

from .conftest import eventually
from .ui_helpers import FakeHandle, get, task, wordcount

DEADLINE = 60.0
"""How long a condition may take on a shared, busy machine."""


def scrape(text: str) -> dict[str, list[Sample]]:
    """Every sample of a Prometheus text, by sample name (``x_total``, ``x_bucket``...)."""
    samples: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def value(samples: dict[str, list[Sample]], name: str, **labels: str) -> float:
    (match,) = [s for s in samples[name] if all(s.labels.get(k) == v for k, v in labels.items())]
    return float(match.value)


def buckets(samples: dict[str, list[Sample]], name: str, **labels: str) -> list[tuple[str, float]]:
    """The ``_bucket`` samples of one series of histogram ``name``, in the order exported."""
    return [
        (s.labels["le"], float(s.value))
        for s in samples[f"{name}_bucket"]
        if all(s.labels.get(k) == v for k, v in labels.items())
    ]


class TestLatencyHistogram:
    def test_a_sample_on_a_bound_counts_in_that_bounds_bucket(self) -> None:
        """Prometheus' ``le`` is "less than or equal": 1 ms is in the 1 ms bucket."""
        samples = LatencySamples()
        samples.add(0.001)
        cumulative = samples.snapshot()["buckets"]
        at = LATENCY_BUCKETS_SECS.index(0.001)
        assert cumulative[at - 1] == 0 and cumulative[at] == 1

    def test_buckets_are_cumulative_and_end_with_the_count(self) -> None:
        samples = LatencySamples()
        for seconds in (0.00005, 0.003, 0.003, 0.2, 120.0):
            samples.add(seconds)
        cumulative = samples.snapshot()["buckets"]
        assert len(cumulative) == len(LATENCY_BUCKETS_SECS) + 1
        assert cumulative == sorted(cumulative)
        assert cumulative[0] == 1 and cumulative[-2] == 4 and cumulative[-1] == samples.count == 5


class TestExposition:
    """Two polls of a spout and a bolt of two tasks, exported and parsed back."""

    @pytest.fixture
    def handle(self) -> FakeHandle:
        handle = FakeHandle("words")
        spout = TaskMetrics("sentences", "spout")
        spout.emitted = spout.transferred = 100
        spout.acked = 90
        spout.failed = 3
        spout.count("dead_lettered", 2)  # as a broker spout counts what it dead-letters
        spout.count("skipped", 5)
        for seconds in (0.002, 0.02, 0.2):
            spout.latency("complete_latency_ms").add(seconds)
        bolts = [TaskMetrics("split", "bolt"), TaskMetrics("split", "bolt")]
        for i, bolt in enumerate(bolts):
            bolt.executed = bolt.acked = 40 + i
            bolt.busy_secs = 0.25 * (i + 1)
            bolt.latency("process_latency_ms").add(0.0004)
            bolt.latency("execute_latency_ms").add(0.0003)
        handle.tasks = {
            1: task(spout, 1, pending=7, timed_out=1, exhausted=False),
            2: task(bolts[0], 2, pending=0),
            3: task(bolts[1], 3, pending=0),
        }
        handle.tasks[2]["uptime_secs"] = handle.tasks[3]["uptime_secs"] = 1.0
        return handle

    def exported(self, handle: FakeHandle) -> dict[str, list[Sample]]:
        recorder = MetricsRecorder(handle)
        recorder.poll()
        return scrape(PrometheusExposition(recorder).render().decode())

    def test_every_task_is_labelled_by_topology_component_task_and_node(self, handle: FakeHandle) -> None:
        samples = self.exported(handle)
        emitted = {s.labels["task"]: s for s in samples["rayflow_task_emitted_total"]}
        assert set(emitted) == {"1", "2", "3"}
        assert emitted["1"].labels == {"topology": "words", "component": "sentences", "task": "1", "node": "node-a"}
        assert emitted["1"].value == 100

    def test_components_sum_their_tasks_and_capacity_is_the_busiest_tasks(self, handle: FakeHandle) -> None:
        samples = self.exported(handle)
        assert value(samples, "rayflow_component_executed_total", component="split") == 40 + 41
        assert value(samples, "rayflow_component_capacity", component="split") == pytest.approx(0.5)
        assert value(samples, "rayflow_task_capacity", task="2") == pytest.approx(0.25)
        assert value(samples, "rayflow_component_pending", component="sentences") == 7

    def test_a_counter_a_task_does_not_have_is_not_exported_for_it(self, handle: FakeHandle) -> None:
        samples = self.exported(handle)
        assert [s.labels["task"] for s in samples["rayflow_task_dead_lettered_total"]] == ["1"]
        assert [s.labels["task"] for s in samples["rayflow_task_timed_out_total"]] == ["1"]
        assert "rayflow_task_checkpoints_total" not in samples

    def test_a_components_own_counters_are_one_family_by_name(self, handle: FakeHandle) -> None:
        samples = self.exported(handle)
        (own,) = samples["rayflow_task_own_counter_total"]
        assert own.labels["counter"] == "skipped" and own.labels["task"] == "1" and own.value == 5
        assert value(samples, "rayflow_component_own_counter_total", component="sentences", counter="skipped") == 5
        assert value(samples, "rayflow_component_dead_lettered_total", component="sentences") == 2

    def test_latencies_are_histograms_with_cumulative_buckets(self, handle: FakeHandle) -> None:
        samples = self.exported(handle)
        name = "rayflow_task_complete_latency_seconds"
        series = buckets(samples, name, task="1")
        assert [le for le, _ in series] == [f"{b:g}" for b in LATENCY_BUCKETS_SECS] + ["+Inf"]
        counts = [count for _, count in series]
        assert counts == sorted(counts) and counts[-1] == 3
        assert dict(series)["0.0025"] == 1 and dict(series)["0.025"] == 2
        assert value(samples, f"{name}_count", task="1") == 3
        assert value(samples, f"{name}_sum", task="1") == pytest.approx(0.222)
        component = [c for _, c in buckets(samples, "rayflow_component_process_latency_seconds", component="split")]
        assert component[-1] == 2  # both tasks' samples

    def test_a_counter_grows_between_two_scrapes(self, handle: FakeHandle) -> None:
        recorder = MetricsRecorder(handle)
        exposition = PrometheusExposition(recorder)
        recorder.poll()
        before = scrape(exposition.render().decode())
        handle.tasks[1]["emitted"] = 250
        recorder.poll()
        after = scrape(exposition.render().decode())
        assert value(before, "rayflow_task_emitted_total", task="1") == 100
        assert value(after, "rayflow_task_emitted_total", task="1") == 250


@pytest.fixture(scope="module")
def running(ray_cluster: str) -> Iterator[tuple[TopologyHandle, str]]:
    """A word count at 500 sentences a second with its page served: (handle, page URL)."""
    conf = Config(message_timeout_secs=10, max_spout_pending=500)
    handle = submit_topology("prometheus-wordcount", conf, wordcount(rate=500))
    page = UiServer()
    try:
        yield handle, page.serve(handle).url
    finally:
        handle.kill()
        page.close()


def test_metrics_are_scraped_during_a_run(running: tuple[TopologyHandle, str]) -> None:
    """``/metrics`` parses as Prometheus text; the spout's emitted grows from one scrape to a
    later one; every histogram's buckets are cumulative and end with its count."""
    _, url = running

    def scraped() -> dict[str, list[Sample]]:
        status, body = get(url + "metrics")
        assert status == 200
        return scrape(body.decode())

    def component(name: str) -> float:
        return value(scraped(), name, component="sentences")

    first = component("rayflow_component_emitted_total")
    assert eventually(lambda: component("rayflow_component_emitted_total") > first, timeout=DEADLINE)
    assert eventually(lambda: component("rayflow_component_complete_latency_seconds_count") > 0, timeout=DEADLINE)
    samples = scraped()
    for name in ("rayflow_task_complete_latency_seconds", "rayflow_task_process_latency_seconds"):
        for task_id in {s.labels["task"] for s in samples[f"{name}_bucket"]}:
            counts = [c for _, c in buckets(samples, name, task=task_id)]
            assert counts == sorted(counts)
            assert counts[-1] == value(samples, f"{name}_count", task=task_id)


def test_metrics_reach_rays_metrics_endpoint(running: tuple[TopologyHandle, str]) -> None:
    """Recorded with ``ray.util.metrics``, they are on the node's Ray metrics endpoint (what
    Ray's dashboard and a Prometheus scraping Ray read), prefixed ``ray_``."""
    import ray

    node = next(n for n in ray.nodes() if n["Alive"])
    port = node.get("MetricsExportPort")
    if not port:
        pytest.skip("this Ray node exports no metrics (no metrics agent)")
    endpoint = f"http://{node['NodeManagerAddress']}:{port}/metrics"

    def exported() -> bool:
        with urllib.request.urlopen(endpoint, timeout=10) as response:
            text = response.read().decode()
        return bool(re.search(r'^ray_rayflow_task_emitted_total\{[^}]*topology="prometheus-wordcount"', text, re.M))

    # Ray's agent exports what a process recorded every few seconds.
    assert eventually(exported, timeout=DEADLINE, interval=1.0)
