"""A ``BatchBolt`` against the same numpy work per tuple in a plain bolt, side by side in one local
Ray. Not a test: run it on a quiet machine.

    python benchmarks/batch_bolt.py [--tuples N] [--rounds 5] [--rate 2000] [--latency-secs 10]

Topology (every run): vectors (``VectorSpout``: feature vectors of ``examples/inference.py`` as
float32 bytes) -> model, one task each, one acker. The work is the example's network
(64 -> 128 -> 128 -> 128 -> 8, numpy on one core); ``model`` is

- per tuple: ``PerTuple``, a ``BasicBolt`` that calls the network on one vector per ``execute``;
- batched: the example's ``Classify``, a ``BatchBolt`` that calls it on up to 64 at once.

Throughput: ``--tuples`` vectors as fast as they go, the default pending budget; the figure is
vectors acked per second from activation until the last one is acked. Rounds alternate the
order of the two; the ratio is the median of the rounds' ratios (batched / per tuple). Beside
it, the CPU each vector cost (``psutil``, every task actor of the run, and the model's task
alone): on a box shared with other work, wall-clock rates follow the neighbours, CPU much less.

Latency: the spout paced to ``--rate`` vectors a second for ``--latency-secs``, far below either
bolt's capacity, so that no batch fills and each waits for its timeout: the spout's complete
latency (p50, p99) per tuple, batched with the default 20 ms timeout and with 5 ms, in
``--latency-rounds`` rounds (the order rotating). Reported: the medians over the rounds, and
the median of each round's difference from the per-tuple run of the same round -- what the
wait for a batch adds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil  # type: ignore[import-untyped]

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: find examples/

from examples.inference import DEVICES, READINGS, Classify, Network  # noqa: E402
from rayflow import (  # noqa: E402
    BasicBolt,
    BasicOutputCollector,
    Config,
    LocalCluster,
    Spout,
    SpoutOutputCollector,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)


class VectorSpout(Spout):
    """Emits ``total`` feature vectors ``[i, features]`` tracked by ``i`` (at ``rate`` a second
    if given), then says it is exhausted; replays what fails."""

    outputs = ["id", "features"]

    def __init__(self, total: int, rate: float | None = None) -> None:
        self.total = total
        self.rate = rate

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        r = np.random.default_rng(7).standard_normal((DEVICES, READINGS), dtype=np.float32)
        table = np.concatenate((r, r * r, np.log1p(np.abs(r)), np.sin(r)), axis=1)
        self.vectors = [row.tobytes() for row in table]
        self.collector = collector
        self.next = 0
        self.replay: list[int] = []
        self.started = time.monotonic()

    def next_tuple(self) -> None:
        if self.replay:
            i = self.replay.pop()
        elif self.next >= self.total:
            self.collector.exhausted()
            return
        elif self.rate and self.next >= (time.monotonic() - self.started) * self.rate:
            return
        else:
            i = self.next
            self.next += 1
        self.collector.emit([i, self.vectors[i % DEVICES]], msg_id=i)

    def fail(self, msg_id: Any) -> None:
        self.replay.append(msg_id)


class PerTuple(BasicBolt):
    """The work of ``Classify``, one vector per call of the network."""

    outputs = ["id", "label", "score"]

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.network = Network()

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        labels, scores = self.network(np.frombuffer(tup["features"], dtype=np.float32)[None, :])
        collector.emit([tup["id"], int(labels[0]), float(scores[0])])


def run(
    cluster: LocalCluster, kind: str, total: int, rate: float | None = None, timeout_ms: float = 20
) -> dict[str, Any]:
    builder = TopologyBuilder()
    builder.set_spout("vectors", VectorSpout(total, rate))
    model: Any = PerTuple()
    if kind == "batched":
        model = Classify()
        model.batch_timeout_ms = timeout_ms
    builder.set_bolt("model", model).shuffle_grouping("vectors")
    handle = cluster.submit_topology(
        f"bench-{kind}", Config(message_timeout_secs=60), builder.create_topology(), active=False
    )
    procs = {m["component"]: psutil.Process(m["pid"]) for m in handle.task_metrics().values()}
    before = {cid: sum(p.cpu_times()[:2]) for cid, p in procs.items()}
    started = time.perf_counter()
    handle.activate()
    if not handle.wait(timeout=900, poll_secs=0.1):
        raise RuntimeError(f"{kind}: not done after 900 s")
    elapsed = time.perf_counter() - started
    cpu = {cid: (sum(p.cpu_times()[:2]) - before[cid]) / total * 1e6 for cid, p in procs.items()}
    metrics = handle.metrics()
    handle.kill()
    spout = metrics["vectors"]
    assert spout["acked"] == total and metrics["model"]["errors"] == 0, metrics
    return {
        "tuples_per_s": total / elapsed,
        "cpu_us": {"model": cpu["model"], "all": sum(cpu.values())},
        "complete_latency_ms": spout["complete_latency_ms"],
        "batch_size": metrics["model"].get("batch_size"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tuples", type=int, default=100_000, help="vectors per throughput run")
    parser.add_argument("--rounds", type=int, default=5, help="throughput rounds, the order alternating")
    parser.add_argument("--rate", type=float, default=2_000.0, help="vectors a second in the latency runs")
    parser.add_argument("--latency-secs", type=float, default=10.0, help="length of each latency run")
    parser.add_argument("--latency-rounds", type=int, default=3, help="latency rounds, the order rotating")
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args(argv)

    paced = {"per tuple": ("per_tuple", 20.0), "batched, 20 ms": ("batched", 20.0), "batched, 5 ms": ("batched", 5.0)}
    results: dict[str, Any] = {"per_tuple": [], "batched": [], "latency": {name: [] for name in paced}}
    with LocalCluster() as cluster:
        for i in range(args.rounds):
            order = ["per_tuple", "batched"] if i % 2 == 0 else ["batched", "per_tuple"]
            for kind in order:
                results[kind].append(run(cluster, kind, args.tuples))
            print(
                f"round {i + 1}: per tuple {results['per_tuple'][-1]['tuples_per_s']:,.0f}/s, "
                f"batched {results['batched'][-1]['tuples_per_s']:,.0f}/s",
                flush=True,
            )
        names = list(paced)
        for i in range(args.latency_rounds):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                kind, timeout_ms = paced[name]
                results["latency"][name].append(
                    run(cluster, kind, int(args.rate * args.latency_secs), args.rate, timeout_ms)
                )

    ratios = [
        b["tuples_per_s"] / p["tuples_per_s"] for b, p in zip(results["batched"], results["per_tuple"], strict=True)
    ]
    results["ratio"] = {"median": statistics.median(ratios), "rounds": ratios}
    print()
    print(f"throughput, {args.tuples:,} vectors, {args.rounds} rounds (medians):")
    for kind, label in (("per_tuple", "per tuple (BasicBolt)"), ("batched", "batched (BatchBolt, 64)")):
        rates = [r["tuples_per_s"] for r in results[kind]]
        model, whole = (statistics.median(r["cpu_us"][part] for r in results[kind]) for part in ("model", "all"))
        print(
            f"  {label:<26} {statistics.median(rates):>10,.0f} vectors/s  (rounds {min(rates):,.0f}-{max(rates):,.0f});"
            f"  CPU per vector: model task {model:.1f} us, all tasks {whole:.1f} us"
        )
    spread = f"rounds {min(ratios):.2f}-{max(ratios):.2f}x"
    print(f"  batched / per tuple        {results['ratio']['median']:>10.2f}x  ({spread})")
    print()
    rounds = args.latency_rounds
    print(f"complete latency at {args.rate:,.0f} vectors/s for {args.latency_secs:g} s, {rounds} rounds (medians), ms:")
    base = results["latency"]["per tuple"]
    for name, runs in results["latency"].items():
        p50, p99 = (statistics.median(r["complete_latency_ms"][q] for r in runs) for q in ("p50", "p99"))
        line = f"  {name:<16} p50 {p50:6.1f}  p99 {p99:6.1f}"
        if runs[0]["batch_size"]:
            added = [
                statistics.median(
                    r["complete_latency_ms"][q] - b["complete_latency_ms"][q] for r, b in zip(runs, base, strict=True)
                )
                for q in ("p50", "p99")
            ]
            size = statistics.median(r["batch_size"]["mean"] for r in runs)
            line += f"  added: p50 {added[0]:+.1f}, p99 {added[1]:+.1f}  (batches of {size:.1f})"
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
