"""Word count into Spark: the classic topology, its counts written as Parquet by a DataFrameSink,
then queried with Spark SQL.

    sentences --shuffle--> split --fields(word)--> count --shuffle--> sink (DataFrameSink)

``count`` (``WordCount`` of examples/wordcount.py) emits ``(word, count so far)`` for every word
it sees, so the sink writes a changelog of the counts; each batch goes to
``<tmp>/rayflow-wordcount-spark/batch_id=N/``. Spark then takes each word's latest count. It all
runs in one Spark -- the shared one the sink's batches run in -- with the final query sent there
by ``run_in_spark``, so the job starts Spark once (~25 s) and holds ~1.6 GB for it, not twice.

The check at the end: the counts Spark finds add up to the words the count tasks counted (every
last count of a word is in an acked tuple tree, so it was written). Exits 1 if not, or if a
sentence was never acked.

Run it:  python examples/wordcount_spark.py        (configs/wordcount_spark.yaml: the same, as a file)
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: find examples/

from examples.wordcount import SentenceSpout, SplitSentence, WordCount  # noqa: E402
from rayflow import Config, LocalCluster, TopologyBuilder  # noqa: E402
from rayflow.spark import DataFrameSink, run_in_spark, stop_spark, write_parquet  # noqa: E402

OUTPUT = Path(tempfile.gettempdir()) / "rayflow-wordcount-spark"
write_counts = write_parquet(OUTPUT)
"""The sink's ``foreach_batch``; configs/wordcount_spark.yaml names it by its dotted path."""


def latest_counts(spark: Any, path: str, top: int) -> tuple[list[tuple[str, int]], int]:
    """Runs in the shared Spark: each word's latest count; the ``top`` largest and their total."""
    spark.read.parquet(path).createOrReplaceTempView("changes")
    latest = spark.sql("SELECT word, max(count) AS count FROM changes GROUP BY word")
    rows = latest.orderBy(latest["count"].desc(), "word").limit(top).collect()
    total = latest.agg({"count": "sum"}).collect()[0][0] or 0
    return [(row["word"], row["count"]) for row in rows], int(total)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=10_000)
    parser.add_argument("--batch-rows", type=int, default=20_000, help="rows per DataFrame the sink writes")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    args = parser.parse_args(argv)

    shutil.rmtree(OUTPUT, ignore_errors=True)
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(args.sentences))
    builder.set_bolt("split", SplitSentence(), parallelism=2).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), parallelism=2).fields_grouping("split", ["word"])
    sink = DataFrameSink(write_counts, batch_rows=args.batch_rows, batch_secs=2.0)
    builder.set_bolt("sink", sink).shuffle_grouping("count")
    conf = Config(message_timeout_secs=60, max_spout_pending=2_000)

    with LocalCluster() as cluster:
        print("starting Spark and the topology (about half a minute)...", flush=True)
        handle = cluster.submit_topology("wordcount-spark", conf, builder.create_topology())
        finished = handle.wait(timeout=args.timeout)
        metrics = handle.metrics()
        handle.kill()
        top, total = run_in_spark(latest_counts, str(OUTPUT), 10) if OUTPUT.exists() else ([], 0)
        stop_spark()

    spout, counted = metrics["sentences"], metrics["count"]["executed"]
    print("top words (Spark SQL over the sink's Parquet):")
    for word, count in top:
        print(f"  {word:<10} {count:>8,}")
    print(f"sentences: {args.sentences:,}  acked: {spout['acked']:,}  replayed: {spout['failed']:,}")
    print(f"words counted by the topology: {counted:,}  by Spark from the latest counts: {total:,}")
    ok = finished and spout["acked"] == args.sentences and total == counted
    print(f"every sentence acked and every count written: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
