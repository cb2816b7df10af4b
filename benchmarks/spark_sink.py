"""DataFrameSink benchmark: how fast rows go from a topology through the shared Spark into
Parquet, and what starting Spark costs. Not a test: run it on a quiet machine.

    python benchmarks/spark_sink.py [--rows N] [--batch-rows 10000 50000] [--sinks 1 2] [--json out.json]

A spout emits ``--rows`` tracked rows ``(id, word, value)`` as fast as it may; they go, shuffled,
to the sink tasks. Each configuration is submitted inactive and timed from ``activate`` to the
last ack (``wait``), so actor start-up and the sink's ``prepare`` are not counted. Besides
``write_parquet``, the same rows go to a ``foreach_batch`` that only builds the DataFrame and
runs a no-op write (Spark's fixed cost per batch), and to a bolt that just acks (the topology
without Spark). Start-up: the shared Spark (raydp start and one warm-up write), and with
``--driver-session`` also ``spark_session()`` in this process once the shared one is stopped.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from rayflow import BasicBolt, Config, LocalCluster, Spout, TopologyBuilder, submit_topology  # noqa: E402
from rayflow.spark import DataFrameSink, spark_session, stop_spark, write_parquet  # noqa: E402
from rayflow.spark._shared import shared_spark  # noqa: E402

WORDS = ["the", "cow", "jumped", "over", "moon", "apple", "day", "doctor", "away", "seven"]


class RowSpout(Spout):
    """``total`` tracked rows, shared out among its tasks."""

    outputs = ["id", "word", "value"]

    def __init__(self, total: int) -> None:
        self.total = total

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        tasks = context.get_component_tasks(context.this_component_id)
        self.ids = iter(range(tasks.index(context.this_task_id), self.total, len(tasks)))
        self.collector = collector

    def next_tuple(self) -> None:
        row = next(self.ids, None)
        if row is None:
            self.collector.exhausted()
            return
        self.collector.emit([row, WORDS[row % len(WORDS)], row * 0.5], msg_id=row)


class Ack(BasicBolt):
    def execute(self, tup: Any, collector: Any) -> None:
        pass


def noop_write(df: Any, batch_id: int) -> None:
    """Build the DataFrame and run a job that writes nothing: Spark's cost per batch."""
    df.write.format("noop").mode("overwrite").save()


def run(rows: int, sink: Any, sinks: int) -> dict[str, Any]:
    builder = TopologyBuilder()
    builder.set_spout("rows", RowSpout(rows))
    builder.set_bolt("sink", sink, parallelism=sinks).shuffle_grouping("rows")
    conf = Config(message_timeout_secs=120, max_spout_pending=50_000)
    handle = submit_topology("spark-sink-bench", conf, builder.create_topology(), active=False)
    try:
        started = time.perf_counter()
        handle.activate()
        if not handle.wait(timeout=900):
            raise RuntimeError("the topology did not finish in 900 s")
        elapsed = time.perf_counter() - started
        metrics = handle.metrics()
    finally:
        handle.kill()
    latency = metrics["rows"]["complete_latency_ms"]
    return {
        "secs": round(elapsed, 2),
        "rows_per_sec": round(rows / elapsed),
        "replayed": metrics["rows"]["failed"],
        "complete_latency_p50_ms": round(latency["p50"]),
        "complete_latency_p99_ms": round(latency["p99"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch-rows", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument("--sinks", type=int, nargs="+", default=[1, 2], help="sink tasks")
    parser.add_argument("--driver-session", action="store_true", help="also time spark_session() in this process")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)

    results: dict[str, Any] = {"rows": args.rows, "runs": []}
    out = Path(tempfile.mkdtemp(prefix="rayflow-spark-bench-"))
    with LocalCluster():
        started = time.perf_counter()
        shared_spark()
        results["shared_spark_start_secs"] = round(time.perf_counter() - started, 1)
        print(f"shared Spark start (raydp + warm-up write): {results['shared_spark_start_secs']} s", flush=True)

        header = ("foreach_batch", "batch_rows", "sinks", "secs", "rows/s", "p50 ms", "p99 ms")
        print("{:<16} {:>10} {:>5} {:>7} {:>9} {:>8} {:>8}".format(*header))
        plan = [("no Spark", None, 1)]
        plan += [(kind, b, s) for b in args.batch_rows for s in args.sinks for kind in ("noop write", "write_parquet")]
        for kind, batch_rows, sinks in plan:
            if batch_rows is None:
                sink: Any = Ack()
            else:
                target = write_parquet(out / f"{batch_rows}-{sinks}") if kind == "write_parquet" else noop_write
                sink = DataFrameSink(target, batch_rows=batch_rows, batch_secs=2.0)
            result = run(args.rows, sink, sinks)
            results["runs"].append({"foreach_batch": kind, "batch_rows": batch_rows, "sinks": sinks, **result})
            print(
                f"{kind:<16} {batch_rows or '-':>10} {sinks:>5} {result['secs']:>7} {result['rows_per_sec']:>9,} "
                f"{result['complete_latency_p50_ms']:>8,} {result['complete_latency_p99_ms']:>8,}",
                flush=True,
            )
        stop_spark()
        if args.driver_session:
            started = time.perf_counter()
            spark_session()
            results["driver_session_start_secs"] = round(time.perf_counter() - started, 1)
            print(f"spark_session() start in the driver: {results['driver_session_start_secs']} s")
            stop_spark()
    shutil.rmtree(out, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
