"""What the metrics export costs, side by side in one run, in CPU time (``time.process_time``).

    python benchmarks/metrics_export.py [--tasks N] [--samples-per-poll N] [--polls N]

1. In a task, per sampled latency: ``LatencySamples.add`` with the histogram's bucket count
   against the same ``add`` without it (what it was before the histograms), in ns per sample.
2. In the driver, per poll of a topology of ``--tasks`` tasks (spouts and bolts half and half),
   each with ``--samples-per-poll`` new latency samples since the poll before: building the
   families, rendering ``/metrics`` (Prometheus text), and recording them in Ray's metrics
   (``ray.util.metrics``, on a local Ray started here), in CPU-µs per poll.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rayflow._metrics import SAMPLE_SIZE, LatencySamples, TaskMetrics  # noqa: E402
from rayflow._ui._prometheus import PrometheusExposition  # noqa: E402
from rayflow._ui._recorder import MetricsRecorder, Poll  # noqa: E402
from rayflow._ui._series import families  # noqa: E402


class WithoutBuckets:
    """``LatencySamples.add`` as it was before the histograms."""

    __slots__ = ("recent", "total", "count")

    def __init__(self) -> None:
        self.recent: deque[float] = deque(maxlen=SAMPLE_SIZE)
        self.total = 0.0
        self.count = 0

    def add(self, seconds: float) -> None:
        self.recent.append(seconds)
        self.total += seconds
        self.count += 1


def cpu_ns_per_call(call: Callable[[float], None], values: list[float]) -> float:
    started = time.process_time_ns()
    for value in values:
        call(value)
    return (time.process_time_ns() - started) / len(values)


class Handle:
    """Tasks whose counters and latencies grow by a fixed amount at every ``task_metrics``."""

    def __init__(self, tasks: int, samples: int) -> None:
        self.name = "bench"
        self.killed = False
        self.samples = samples
        kinds = ["spout" if i < max(tasks // 2, 1) else "bolt" for i in range(tasks)]
        self.metrics = [TaskMetrics(kind, kind) for kind in kinds]

    def task_metrics(self) -> dict[int, dict[str, Any]]:
        out = {}
        for task, m in enumerate(self.metrics):
            m.emitted += 1000
            m.acked += 1000
            for name in ("complete_latency_ms",) if m.kind == "spout" else ("process_latency_ms", "execute_latency_ms"):
                samples = m.latency(name)
                for _ in range(self.samples):
                    samples.add(random.lognormvariate(-5, 1.5))
            snap = m.snapshot(pid=1, node_id="n", pending=10, exhausted=False, timed_out=0)
            out[task] = {**snap, "component": m.component_id, "alive": True, "restarts": 0}
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--samples-per-poll", type=int, default=1000)
    parser.add_argument("--polls", type=int, default=30)
    args = parser.parse_args()

    values = [random.lognormvariate(-5, 1.5) for _ in range(1_000_000)]
    rounds = {"with buckets": LatencySamples().add, "without buckets": WithoutBuckets().add}
    results = {name: min(cpu_ns_per_call(add, values) for _ in range(3)) for name, add in rounds.items()}
    print("LatencySamples.add, CPU-ns per sample (best of 3 x 1M):")
    for name, ns in results.items():
        print(f"  {name:<16} {ns:7.1f}")
    print(f"  ratio with/without: {results['with buckets'] / results['without buckets']:.2f}")

    import ray

    from rayflow._runtime.cluster import local_ray_options
    from rayflow._ui._ray_metrics import RayMetricsExporter

    ray.init(**local_ray_options(1))
    handle = Handle(args.tasks, args.samples_per_poll)
    recorder = MetricsRecorder(handle)
    exposition = PrometheusExposition(recorder)
    exporter = RayMetricsExporter(recorder)
    recorder.listeners.clear()  # timed one by one below
    costs: dict[str, list[float]] = {"families": [], "/metrics text": [], "Ray metrics": []}
    for _ in range(args.polls):
        poll: Poll = recorder.poll()
        steps: list[tuple[str, Callable[[], object]]] = [
            ("families", lambda poll=poll: families(poll, "bench")),
            ("/metrics text", exposition.render),
            ("Ray metrics", lambda poll=poll: exporter.record(poll)),
        ]
        for name, step in steps:
            started = time.process_time_ns()
            step()
            costs[name].append((time.process_time_ns() - started) / 1000)
    ray.shutdown()
    histograms = args.tasks // 2 * 1 + (args.tasks - args.tasks // 2) * 2
    print(
        f"per poll of {args.tasks} tasks, {args.samples_per_poll} new samples per latency "
        f"({histograms} task histograms), CPU-us (median of {args.polls} polls, the first one left out):"
    )
    for name, spent in costs.items():
        print(f"  {name:<14} {sorted(spent[1:])[len(spent) // 2]:10.0f}")


if __name__ == "__main__":
    main()
