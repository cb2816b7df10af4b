"""Word count into Spark: the classic topology, its counts written as Parquet by a DataFrameSink,
then queried with Spark SQL.

    sentences --shuffle--> split --fields(word)--> count --shuffle--> sink (DataFrameSink)

``count`` (``WordCount`` of examples/wordcount.py) emits ``(word, count so far)`` for every word
it sees, so the sink writes a changelog of the counts; each batch goes to
``<tmp>/rayflow-wordcount-spark/batch_id=N/``. ``write_parquet`` writes each batch itself, with
pyarrow, so the topology runs without Spark. Spark starts once, after the topology, for the
query (~25 s and ~1.6 GB, in the shared Spark that ``run_in_spark`` sends it to): each word's
latest count.

``max_spout_pending`` is left unset: the sink sets the spouts' budget to what its batches need
(``batch_rows`` trees for each batch it may be writing and one filling, per spout task), so a
budget set lower would hold every batch below ``batch_rows`` and be warned about.

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
from rayflow import Config, LocalCluster, Topology, TopologyBuilder  # noqa: E402
from rayflow.spark import DataFrameSink, run_in_spark, stop_spark, write_parquet  # noqa: E402

OUTPUT = Path(tempfile.gettempdir()) / "rayflow-wordcount-spark"
write_counts = write_parquet(OUTPUT)
"""The sink's ``foreach_batch``; configs/wordcount_spark.yaml names it by its dotted path."""

CONF = Config(message_timeout_secs=60)
"""No ``max_spout_pending``: the sink's need decides it (see the module docstring)."""


def build(sentences: int, batch_rows: int = 10_000) -> Topology:
    """The topology, as configs/wordcount_spark.yaml describes it."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(sentences))
    builder.set_bolt("split", SplitSentence(), parallelism=2).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), parallelism=2).fields_grouping("split", ["word"])
    sink = DataFrameSink(write_counts, batch_rows=batch_rows, batch_secs=2.0)
    builder.set_bolt("sink", sink).shuffle_grouping("count")
    return builder.create_topology()


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
    parser.add_argument("--batch-rows", type=int, default=10_000, help="rows per DataFrame the sink writes")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    args = parser.parse_args(argv)

    shutil.rmtree(OUTPUT, ignore_errors=True)
    print("starting a local Ray, then the topology (20-45 s on a busy box)...", flush=True)
    with LocalCluster() as cluster:
        handle = cluster.submit_topology("wordcount-spark", CONF, build(args.sentences, args.batch_rows))
        finished = handle.wait(timeout=args.timeout)
        metrics = handle.metrics()
        handle.kill()
        print("starting Spark for the query (about half a minute)...", flush=True)
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
