"""DataFrameSink benchmark: how fast rows go from a topology through the shared Spark into
Parquet, and what starting Spark costs. Not a test: run it on a quiet machine.

    python benchmarks/spark_sink.py [--rows N] [--batch-rows 10000 50000] [--sinks 1 2] [--json out.json]
    python benchmarks/spark_sink.py --defaults [--rows N] [--rounds 3]

``--defaults`` runs everything with its defaults (``Config()``, ``DataFrameSink(write_parquet(path))``)
side by side, interleaved over ``--rounds`` rounds, medians reported: a last bolt that only
acks; ``write_parquet`` (an ``ArrowBatchWriter``: the sink task writes its batches with pyarrow,
no Spark job); the same with ``batch_rows=50,000``; and a user's own ``foreach_batch`` that
writes Parquet through Spark (``df.write.parquet``: a DataFrame and a Spark job per batch), with
the default batches and with ``batch_rows=50,000``.
Each ratio is against the ack-only run of its round; the pending column is the budget per spout
task the run had (``rayflow/_pending.py``). Then what one batch of 5,000 rows costs: inside
the shared Spark, its DataFrame through pandas or as Arrow handed to Spark's JVM (without a job,
with a no-op write, with ``write_parquet``); from this process, the sink's Ray call to the shared
Spark with a ``foreach_batch`` that does nothing, and ``write_arrow`` without Spark. The shared
Spark runs (idle) during every run, as it must for the last of them.

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
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from rayflow import BasicBolt, Config, LocalCluster, Spout, TopologyBuilder, submit_topology  # noqa: E402
from rayflow._run_checks import config_to_run  # noqa: E402
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


def run(rows: int, sink: Any, sinks: int, conf: Config | None = None) -> dict[str, Any]:
    builder = TopologyBuilder()
    builder.set_spout("rows", RowSpout(rows))
    builder.set_bolt("sink", sink, parallelism=sinks).shuffle_grouping("rows")
    conf = conf or Config(message_timeout_secs=120, max_spout_pending=50_000)
    topology = builder.create_topology()
    pending = config_to_run(topology, conf, reach=False).max_spout_pending
    handle = submit_topology("spark-sink-bench", conf, topology, active=False)
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
        "max_spout_pending": pending,
        "replayed": metrics["rows"]["failed"],
        "complete_latency_p50_ms": round(latency["p50"]),
        "complete_latency_p99_ms": round(latency["p99"]),
    }


def dataframe_costs(spark: Any, rows: int, repeats: int) -> dict[str, float]:
    """Median seconds to build a DataFrame of ``rows`` benchmark rows and run a no-op write on it,
    through pandas (``createDataFrame(table.to_pandas())``, the sink before) and through
    ``to_spark_dataframe`` (Arrow straight to the JVM)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from rayflow.spark._arrow import to_spark_dataframe

    table = benchmark_table(rows)
    scratch = Path(tempfile.mkdtemp(prefix="rayflow-spark-bench-costs-"))
    ways = {
        "arrow -> DataFrame, no job": lambda i: to_spark_dataframe(spark, table),
        "pandas + noop": lambda i: noop_write(
            spark.createDataFrame(table.to_pandas(), schema=from_arrow_schema(table.schema)), i
        ),
        "arrow + noop": lambda i: noop_write(to_spark_dataframe(spark, table), i),
        "arrow + write_parquet": lambda i: write_parquet(scratch)(to_spark_dataframe(spark, table), i),
    }
    costs = {}
    for name, write in ways.items():
        times = []
        for i in range(repeats):
            started = time.perf_counter()
            write(i)
            times.append(time.perf_counter() - started)
        costs[name] = statistics.median(times)
    shutil.rmtree(scratch, ignore_errors=True)
    return costs


def spark_write(df: Any, batch_id: int) -> None:
    """A user's own ``foreach_batch``: Spark writes the batch (a DataFrame) as Parquet. The
    sink hands it a DataFrame through the shared Spark, a Spark job per batch."""
    df.write.mode("overwrite").parquet(f"{SPARK_WRITE_ROOT}/batch_id={batch_id}")


SPARK_WRITE_ROOT = tempfile.gettempdir() + "/rayflow-spark-bench-user"


def defaults(rows: int, out: Path, rounds: int) -> dict[str, Any]:
    """Everything at its defaults, side by side, interleaved over ``rounds`` rounds: a last bolt
    that only acks, ``DataFrameSink(write_parquet(p))`` (written by the sink task with pyarrow),
    the same with ``batch_rows=50_000``, and a user's ``foreach_batch`` that writes Parquet
    through Spark (with the default and with 50,000-row batches). Each ratio is against the
    ack-only run of its round; medians over rounds."""
    from rayflow.spark import run_in_spark

    plan: list[tuple[str, Any]] = [
        ("ack only", lambda i: Ack()),
        ("write_parquet, defaults", lambda i: DataFrameSink(write_parquet(out / f"defaults-{i}"))),
        ("write_parquet, batch 50k", lambda i: DataFrameSink(write_parquet(out / f"50k-{i}"), batch_rows=50_000)),
        ("user fn via Spark", lambda i: DataFrameSink(spark_write)),
        ("user fn via Spark, 50k", lambda i: DataFrameSink(spark_write, batch_rows=50_000)),
    ]
    results: dict[str, Any] = {"rows": rows, "rounds": rounds, "runs": []}
    print(f"{'round':>5} {'last bolt':<26} {'pending':>8} {'secs':>7} {'rows/s':>9} {'ratio':>6} {'replayed':>8}")
    for i in range(rounds):
        base = 0
        for name, make in plan:
            result = run(rows, make(i), 1, Config())
            base = base or result["rows_per_sec"]  # the round's ack-only run
            result["ratio"] = round(result["rows_per_sec"] / base, 3)
            results["runs"].append({"round": i, "last_bolt": name, **result})
            print(
                f"{i:>5} {name:<26} {result['max_spout_pending']:>8,} {result['secs']:>7} "
                f"{result['rows_per_sec']:>9,} {result['ratio']:>6} {result['replayed']:>8}",
                flush=True,
            )
    print(f"median of {rounds} rounds:")
    results["medians"] = {}
    for name, _ in plan:
        runs = [r for r in results["runs"] if r["last_bolt"] == name]
        median = {
            "rows_per_sec": round(statistics.median(r["rows_per_sec"] for r in runs)),
            "ratio": round(statistics.median(r["ratio"] for r in runs), 3),
        }
        results["medians"][name] = median
        print(f"      {name:<26} {median['rows_per_sec']:>9,} rows/s  {median['ratio']:>6}x of ack only", flush=True)
    costs = run_in_spark(dataframe_costs, 5_000, 7)
    costs.update(batch_costs(5_000, 7))
    results["batch_5000_rows_secs"] = {name: round(secs, 4) for name, secs in costs.items()}
    print(
        "one batch of 5,000 rows, median of 7: "
        + ", ".join(f"{name} {secs * 1000:.1f} ms" for name, secs in costs.items()),
        flush=True,
    )
    return results


def benchmark_table(rows: int) -> Any:
    import pyarrow as pa

    return pa.table(
        {
            "id": list(range(rows)),
            "word": [WORDS[i % len(WORDS)] for i in range(rows)],
            "value": [i * 0.5 for i in range(rows)],
        }
    )


def nothing(df: Any, batch_id: int) -> None:
    """A ``foreach_batch`` that does nothing with its DataFrame."""


def batch_costs(rows: int, repeats: int) -> dict[str, float]:
    """Median seconds, seen from this process, of one batch of ``rows`` benchmark rows: the sink's
    Ray call to the shared Spark with a ``foreach_batch`` that does nothing (the call, the table's
    trip and the DataFrame), and ``write_parquet``'s ``write_arrow`` here, without Spark."""
    import ray

    from rayflow.spark._shared import shared_spark

    table = benchmark_table(rows)
    handle = shared_spark()
    scratch = Path(tempfile.mkdtemp(prefix="rayflow-spark-bench-arrow-"))
    writer = write_parquet(scratch)
    ways = {
        "Ray call + DataFrame, no job": lambda i: ray.get(handle.foreach_batch.remote(nothing, table, i)),
        "write_arrow (pyarrow, no Spark)": lambda i: writer.write_arrow(table, i),
    }
    costs = {}
    for name, way in ways.items():
        times = []
        for i in range(repeats):
            started = time.perf_counter()
            way(i)
            times.append(time.perf_counter() - started)
        costs[name] = statistics.median(times)
    shutil.rmtree(scratch, ignore_errors=True)
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch-rows", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument("--sinks", type=int, nargs="+", default=[1, 2], help="sink tasks")
    parser.add_argument("--driver-session", action="store_true", help="also time spark_session() in this process")
    parser.add_argument(
        "--defaults", action="store_true", help="all defaults: ack only, write_parquet, a user's function through Spark"
    )
    parser.add_argument("--rounds", type=int, default=3, help="--defaults: interleaved rounds (medians reported)")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)

    results: dict[str, Any] = {"rows": args.rows, "runs": []}
    out = Path(tempfile.mkdtemp(prefix="rayflow-spark-bench-"))
    with LocalCluster():
        started = time.perf_counter()
        shared_spark()
        results["shared_spark_start_secs"] = round(time.perf_counter() - started, 1)
        print(f"shared Spark start (raydp + warm-up write): {results['shared_spark_start_secs']} s", flush=True)
        if args.defaults:
            results = {**results, **defaults(args.rows, out, args.rounds)}
            shutil.rmtree(SPARK_WRITE_ROOT, ignore_errors=True)
            stop_spark()
            shutil.rmtree(out, ignore_errors=True)
            if args.json:
                args.json.write_text(json.dumps(results, indent=2) + "\n")
            return 0

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
