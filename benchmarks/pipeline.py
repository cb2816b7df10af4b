"""End to end: broker -> spout -> a parsing bolt -> ``DataFrameSink(write_parquet)``, edge by edge,
beside the bare client, in one run. Not a test: run it on a quiet machine, with the brokers of
``benchmarks/brokers.py`` on 127.0.0.1 and Java 17 for Spark.

    python benchmarks/pipeline.py [--messages N] [--rounds 1] [--brokers rabbitmq redis nats] [--json out.json]

For each broker whose connector and client import (the others are skipped, with the reason),
every configuration drains the same N JSON messages from a fresh queue or stream, all on
defaults (``Config()``, one task per component, ``DataFrameSink(write_parquet(path))``):

- ``bare client``: the bare loop of ``benchmarks/brokers.py`` (imported, not copied), which
  parses each message and acks it; for NATS the faster of its two, the hand-made pull with a
  callback (nats-py's own ``fetch`` drains at about a third of its pace);
- ``spout``: the broker's spout into a bolt that only acks (how fast the spout drains);
- ``+ parse``: the spout into a bolt that parses each message (``json.loads``) into
  ``(id, user, amount, note)``, anchored, into a bolt that only acks;
- ``+ parquet``: the same into ``DataFrameSink(write_parquet(path))`` through the shared Spark:
  end to end, broker to Parquet. The rows written are counted afterwards.

The clock runs from activation until the broker holds no unacked message (the last ack of the
spout reached it); filling is not timed, nor is the shared Spark's start (it starts first).
Each edge's ratio is against the edge before it; ``/ bare`` is against the bare client. With
``--rounds`` above 1 the order of the configurations turns round every round and each figure is
the median.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere: find benchmarks/ and rayflow/

from rayflow import BasicBolt, Config, LocalCluster, TopologyBuilder  # noqa: E402
from rayflow._components import Bolt, Spout  # noqa: E402

EDGES = ("bare client", "spout", "+ parse", "+ parquet")


class Ack(BasicBolt):
    """Acks what it gets (a ``BasicBolt`` acks after ``execute``)."""

    def execute(self, tup: Any, collector: Any) -> None:
        pass


class Parse(BasicBolt):
    """A message's body (JSON) as a row, anchored to it."""

    outputs = ["id", "user", "amount", "note"]

    def execute(self, tup: Any, collector: Any) -> None:
        record = json.loads(tup[0])
        collector.emit([record["id"], record["user"], record["amount"], record["note"]])


@dataclass
class Source:
    """A filled queue or stream: the spout that drains it, whether it is drained, and cleanup."""

    spout: Spout
    drained: Callable[[], bool]
    close: Callable[[], object]


@dataclass
class Broker:
    """How to benchmark one broker: its bare client's loop, and a filled source for the spout."""

    name: str
    bare: Callable[[int], dict[str, Any]]
    source: Callable[[int], Source]


def rabbitmq() -> Broker:
    from benchmarks import brokers
    from rayflow.connectors.rabbitmq import RabbitMQSpout

    def source(n: int) -> Source:
        queue = brokers.fill_queue(n)
        return Source(RabbitMQSpout(queue), lambda: brokers.queue_state(queue)[0] == 0, lambda: _drop_queue(queue))

    def _drop_queue(queue: str) -> None:
        brokers.delete_queue(queue)

    return Broker("rabbitmq", brokers.run_bare_pika, source)


def redis_stream() -> Broker:
    import redis

    from benchmarks import brokers
    from rayflow.connectors.redis import RedisStreamSpout

    def source(n: int) -> Source:
        stream = brokers.fill_stream(n)
        spout = RedisStreamSpout(stream, "bench", fields=("body",))
        return Source(
            spout,
            lambda: brokers.stream_pending(stream, "bench") == 0,
            lambda: redis.Redis.from_url(brokers.REDIS_URL).delete(stream),
        )

    return Broker("redis", brokers.run_bare_redis, source)


def nats_jetstream() -> Broker:
    from benchmarks import brokers
    from rayflow.connectors.nats import NatsJetStreamSpout

    def source(n: int) -> Source:
        stream = brokers.fill_nats_stream(n)
        spout = NatsJetStreamSpout(stream, "bench", fields=("data",))
        return Source(
            spout, lambda: brokers.nats_unacked(stream, "bench") == 0, lambda: brokers.delete_nats_stream(stream)
        )

    return Broker("nats", brokers.run_bare_nats_callback, source)


BROKERS: dict[str, Callable[[], Broker]] = {"rabbitmq": rabbitmq, "redis": redis_stream, "nats": nats_jetstream}
"""Each broker's benchmark, built when asked for: a broker whose connector or client does not
import (``ImportError``) is skipped. Add one here to benchmark it."""


def available(names: list[str]) -> list[Broker]:
    found = []
    for name in names:
        try:
            found.append(BROKERS[name]())
        except ImportError as exc:
            print(f"skipped {name}: {exc}", flush=True)
    return found


def run_topology(cluster: LocalCluster, broker: Broker, edge: str, n: int, out: Path) -> dict[str, Any]:
    """One drain of ``n`` messages through the topology of ``edge``; msgs/s from activation until
    the broker holds none unacked."""
    source = broker.source(n)
    builder = TopologyBuilder()
    builder.set_spout("source", source.spout)
    last = "source"
    if edge != "spout":
        builder.set_bolt("parse", Parse()).shuffle_grouping("source")
        last = "parse"
    sink: Bolt | BasicBolt = Ack()
    target = out / f"{broker.name}-{uuid.uuid4().hex[:6]}"
    if edge == "+ parquet":
        from rayflow.spark import DataFrameSink, write_parquet

        sink = DataFrameSink(write_parquet(target))
    builder.set_bolt("sink", sink).shuffle_grouping(last)
    name = f"pipeline-{broker.name}-{uuid.uuid4().hex[:6]}"
    handle = cluster.submit_topology(name, Config(), builder.create_topology(), active=False)
    try:
        started = time.perf_counter()
        handle.activate()
        deadline = started + 900
        from benchmarks.brokers import wait_for_acks

        wait_for_acks(handle, n, started, deadline, f"{broker.name} {edge}")
        while not source.drained():  # the broker hears of the last acks at the spout's next flush
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{broker.name} {edge}: not drained after 900 s")
            time.sleep(0.005)
        elapsed = time.perf_counter() - started
        metrics = handle.metrics()["source"]
    finally:
        handle.kill()
        source.close()
    result = {"msgs_per_s": n / elapsed, "seconds": elapsed, "replayed": metrics["failed"]}
    if edge == "+ parquet":
        import pyarrow.parquet as pq

        result["rows_written"] = pq.read_table(target).num_rows  # at least n: duplicates are replays
        shutil.rmtree(target, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages per run")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--brokers", nargs="*", default=list(BROKERS), choices=list(BROKERS))
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    n = args.messages
    brokers = available(args.brokers)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {b.name: {edge: [] for edge in EDGES} for b in brokers}
    out = Path(tempfile.mkdtemp(prefix="rayflow-pipeline-bench-"))
    with LocalCluster() as cluster:
        from rayflow.spark import stop_spark
        from rayflow.spark._shared import shared_spark

        started = time.perf_counter()
        shared_spark()
        print(f"shared Spark start (not timed below): {time.perf_counter() - started:.0f} s", flush=True)
        try:
            for round_ in range(args.rounds):
                for broker in brokers:
                    for edge in EDGES if round_ % 2 == 0 else reversed(EDGES):
                        if edge == "bare client":
                            result = broker.bare(n)
                        else:
                            result = run_topology(cluster, broker, edge, n, out)
                        runs[broker.name][edge].append(result)
                        shown = f"{result['msgs_per_s']:>9,.0f} msg/s"
                        extra = f"  rows written {result['rows_written']:,}" if "rows_written" in result else ""
                        print(f"  round {round_ + 1}: {broker.name:<9} {edge:<12} {shown}{extra}", flush=True)
        finally:
            stop_spark()
            shutil.rmtree(out, ignore_errors=True)

    table: dict[str, dict[str, float]] = {
        name: {edge: statistics.median(r["msgs_per_s"] for r in rs) for edge, rs in edges.items() if rs}
        for name, edges in runs.items()
    }
    print(f"\n{n:,} messages a run, msg/s (median of {args.rounds}); each ratio against the edge before it")
    print(f"{'broker':<10}" + "".join(f"{edge:>12}{'':10}" for edge in EDGES) + f"{'end to end / bare':>18}")
    for name, rates in table.items():
        cells, before = [], None
        for edge in EDGES:
            rate = rates[edge]
            cells.append(f"{rate:>12,.0f}" + (f" ({rate / before:.2f}x)" if before else " " * 8) + "  ")
            before = rate
        print(f"{name:<10}" + "".join(cells) + f"{rates['+ parquet'] / rates['bare client']:>18.2f}x")
    if args.json:
        results = {"machine": {"cpus": os.cpu_count()}, "messages": n, "msgs_per_s": table, "runs": runs}
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
