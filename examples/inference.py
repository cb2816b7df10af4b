"""Model inference in a stream, reliably: a batched model bolt on rayflow.

    events (EventSpout) --shuffle--> features (Featurize) --shuffle--> model (Classify) --shuffle--> alerts (Alerts)

Each event is a device's sixteen sensor readings, tracked by its id. ``features`` turns them into
a vector of 64 features; ``model``, a ``BatchBolt``, scores up to 64 vectors in one call of a
small neural network (a multi-layer perceptron built here from a seed: nothing is downloaded),
so that the per-call cost of numpy -- or of a GPU kernel launch -- is paid once a batch, not once
an event; ``alerts`` counts the events classified as alerts. An event whose tree fails anywhere
is replayed by the spout, and every one is acked in the end: batching changes how the model is
called, not what is acked (each output is anchored to its own input).

On a GPU: when the Ray cluster has a GPU, ``model`` asks for one (``resources={"num_gpus": 1}``),
and its task runs the network on it with CuPy if that is installed (the arrays move there in
``prepare``); otherwise numpy on the CPU, with the same code.

Features travel as float32 bytes, not as numpy arrays: bytes pickle in a fraction of an array's
time, and a batch of them becomes one matrix in one ``numpy.frombuffer`` call.

Run it:  python examples/inference.py                     (on Ray: throughput, p99 latency)
         python examples/inference.py --per-sec 2000      (paced: the latency a batch's wait adds)
         python examples/inference.py --in-process        (no Ray, the simulated clock)
The same topology as a file: configs/inference.yaml (``rayflow run configs/inference.yaml``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter, deque
from types import ModuleType
from typing import Any

import numpy as np

from rayflow import (
    BasicBolt,
    BasicOutputCollector,
    BatchBolt,
    BatchOutputCollector,
    Config,
    Spout,
    SpoutOutputCollector,
    Topology,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)

READINGS = 16
"""Sensor readings per event."""
DEVICES = 1024
"""Devices whose readings the events carry, in turn."""
FEATURES = 4 * READINGS
HIDDEN = (128, 128, 128)
"""The widths of the network's hidden layers."""
CLASSES = 8
ALERT = 0
"""The class that raises an alert."""
CONF = Config(message_timeout_secs=30)


class EventSpout(Spout):
    """Emits ``total`` events (shared out among its tasks), each ``[id, readings]`` with the
    readings as float32 bytes, tracked by its id; replays what fails. ``per_sec`` paces each
    task to that many new events a second."""

    outputs = ["id", "readings"]

    def __init__(self, total: int = 100_000, per_sec: float | None = None) -> None:
        self.total = total
        self.per_sec = per_sec

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        tasks = context.get_component_tasks(context.this_component_id)
        self.ids = iter(range(tasks.index(context.this_task_id), self.total, len(tasks)))
        self.replay: deque[int] = deque()
        self.collector = collector
        self.started, self.sent = time.monotonic(), 0
        self.devices = np.random.default_rng(7).standard_normal((DEVICES, READINGS), dtype=np.float32)

    def next_tuple(self) -> None:
        if self.replay:
            event: int | None = self.replay.popleft()
        elif self.per_sec and self.sent >= (time.monotonic() - self.started) * self.per_sec:
            return
        else:
            event = next(self.ids, None)
            self.sent += 1
        if event is None:
            self.collector.exhausted()
            return
        self.collector.emit([event, self.devices[event % DEVICES].tobytes()], msg_id=event)  # a replay: the same

    def fail(self, msg_id: Any) -> None:
        self.replay.append(msg_id)


class Featurize(BasicBolt):
    """Readings -> 64 features: each reading, its square, its log-magnitude and its sine."""

    outputs = ["id", "features"]

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        r = np.frombuffer(tup["readings"], dtype=np.float32)
        features = np.concatenate((r, r * r, np.log1p(np.abs(r)), np.sin(r)))
        collector.emit([tup["id"], features.tobytes()])


class Network:
    """A multi-layer perceptron, FEATURES -> HIDDEN... -> CLASSES, its weights drawn from
    ``seed`` (every task builds the same one), on the array module ``xp`` (numpy or CuPy)."""

    def __init__(self, xp: ModuleType = np, seed: int = 7) -> None:
        rng = np.random.default_rng(seed)
        sizes = (FEATURES, *HIDDEN, CLASSES)
        self.xp = xp
        self.layers = [
            (xp.asarray(rng.standard_normal((n_in, n_out), dtype=np.float32) / np.sqrt(n_in)), xp.zeros(n_out, "f4"))
            for n_in, n_out in zip(sizes, sizes[1:], strict=False)
        ]

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of features -> each row's class and its probability, as numpy arrays."""
        xp = self.xp
        h = xp.asarray(x)
        for weights, bias in self.layers[:-1]:
            h = xp.maximum(h @ weights + bias, 0)
        weights, bias = self.layers[-1]
        logits = h @ weights + bias
        p = xp.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        return _on_host(p.argmax(axis=1)), _on_host(p.max(axis=1))


def array_module() -> ModuleType:
    """CuPy when this task was given a GPU (Ray sets ``CUDA_VISIBLE_DEVICES`` for it) and CuPy
    is installed; numpy otherwise."""
    if os.environ.get("CUDA_VISIBLE_DEVICES"):
        try:
            import cupy  # type: ignore[import-not-found]
        except ImportError:
            return np
        return cupy  # type: ignore[no-any-return]
    return np


def _on_host(a: Any) -> np.ndarray:
    return np.asarray(a.get() if hasattr(a, "get") else a)  # a CuPy array is copied back to the host


class Classify(BatchBolt):
    """Scores a batch of feature vectors in one call of the network; emits ``[id, label,
    score]`` per event, anchored to it."""

    outputs = ["id", "label", "score"]
    batch_size = 64
    batch_timeout_ms = 20

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.network = Network(array_module())

    def execute_batch(self, tuples: list[Tuple], collector: BatchOutputCollector) -> None:
        x = np.frombuffer(b"".join(tup["features"] for tup in tuples), dtype=np.float32).reshape(len(tuples), -1)
        labels, scores = self.network(x)
        for tup, label, score in zip(tuples, labels.tolist(), scores.tolist(), strict=True):
            collector.emit([tup["id"], label, score], anchors=tup)


class Alerts(BasicBolt):
    """Counts the events of each class, and those that raise an alert (class ``ALERT``, with a
    probability of at least ``threshold``)."""

    def __init__(self, threshold: float = 0.5) -> None:
        self.threshold = threshold

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.labels: Counter[int] = Counter()
        self.alerts = 0

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        self.labels[tup["label"]] += 1
        if tup["label"] == ALERT and tup["score"] >= self.threshold:
            self.alerts += 1


def build(events: int = 100_000, per_sec: float | None = None, gpus: float = 0.0, model_tasks: int = 1) -> Topology:
    """The topology; with ``gpus``, each ``model`` task asks Ray for that many GPUs."""
    builder = TopologyBuilder()
    builder.set_spout("events", EventSpout(events, per_sec))
    builder.set_bolt("features", Featurize()).shuffle_grouping("events")
    resources = {"num_gpus": gpus} if gpus else None
    builder.set_bolt("model", Classify(), model_tasks, resources=resources).shuffle_grouping("features")
    builder.set_bolt("alerts", Alerts()).shuffle_grouping("model")
    return builder.create_topology()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--per-sec", type=float, default=None, help="pace the spout (default: as fast as it goes)")
    parser.add_argument("--model-tasks", type=int, default=1, help="tasks of the model bolt (one per GPU)")
    parser.add_argument("--in-process", action="store_true", help="run without Ray, on the simulated clock")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds (Ray)")
    args = parser.parse_args(argv)

    if args.in_process:
        from rayflow.testing import complete_topology

        result = complete_topology(build(args.events, model_tasks=args.model_tasks), CONF)
        finished, metrics, elapsed, gpus = result.finished, result.metrics(), 0.0, 0.0
    else:
        import ray

        from rayflow import LocalCluster

        print("starting a local Ray, then the topology (20-45 s on a busy box)...", flush=True)
        with LocalCluster() as cluster:
            cluster_gpus = ray.cluster_resources().get("GPU", 0)  # type: ignore[no-untyped-call]
            gpus = 1.0 if cluster_gpus >= args.model_tasks else 0.0
            topology = build(args.events, args.per_sec, gpus, args.model_tasks)
            handle = cluster.submit_topology("inference", CONF, topology)
            started = time.perf_counter()
            finished = handle.wait(timeout=args.timeout)
            elapsed = time.perf_counter() - started
            metrics = handle.metrics()
            handle.kill()

    events, batch = metrics["events"], metrics["model"]["batch_size"]
    where = f"{args.model_tasks} GPU task(s)" if gpus else f"{args.model_tasks} CPU task(s), numpy"
    print(f"model: {where}; batches of {batch['mean']:.1f} events on average (at most {Classify.batch_size})")
    print(f"events: {args.events:,}  acked: {events['acked']:,}  failed and replayed: {events['failed']:,}")
    if not args.in_process:  # the simulated clock's run says nothing of either
        latency = events["complete_latency_ms"]
        print(f"throughput: {events['acked'] / elapsed:,.0f} events/s over {elapsed:.1f} s")
        print(f"complete latency ms: p50 {latency['p50']:.1f}  p99 {latency['p99']:.1f}")
    all_acked = finished and events["acked"] == args.events
    print(f"every event acked: {'yes' if all_acked else 'NO'}")
    return 0 if all_acked else 1


if __name__ == "__main__":
    sys.exit(main())
