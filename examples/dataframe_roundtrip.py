"""A Spark DataFrame through a topology and back into Spark, with the result checked against
Spark's own.

    rows (DataFrameSpout) --shuffle--> words (SplitWords) --shuffle--> sink (DataFrameSink: Parquet)

1. In the shared Spark (``run_in_spark``): a DataFrame of sentences ``(id, sentence)``, Spark's
   own word counts of it, and the spout, built there from the DataFrame (its rows move to Ray's
   object store; the spout carries references to them). One Spark serves the whole job: the
   sink's batches run in it too.
2. The topology splits every sentence into ``(id, position, word)`` rows. ``words`` fails some
   sentences on purpose and the sink's ``foreach_batch`` raises on some batches, so rows are
   replayed from the spout; a sentence replayed after some of its words were written writes
   those words twice (at-least-once).
3. Spark reads the Parquet back, keeps one row per ``(id, position)`` and counts the words.
   Exits 1 unless that equals Spark's own counts.

Run it:  python examples/dataframe_roundtrip.py
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: find examples/

from examples.wordcount import SENTENCES  # noqa: E402
from rayflow import BasicBolt, BasicOutputCollector, Config, FailedException, LocalCluster, TopologyBuilder  # noqa: E402
from rayflow import Tuple as RayflowTuple  # noqa: E402
from rayflow.spark import DataFrameSink, DataFrameSpout, run_in_spark, stop_spark, write_parquet  # noqa: E402

OUTPUT = Path(tempfile.gettempdir()) / "rayflow-dataframe-roundtrip"


def make_source(spark: Any, rows: int) -> tuple[DataFrameSpout, dict[str, int]]:
    """Runs in the shared Spark: the sentences, a spout over them and Spark's word counts."""
    from pyspark.sql import functions as F

    pick = F.element_at(F.array(*map(F.lit, SENTENCES)), (F.col("id") % len(SENTENCES) + 1).cast("int"))
    frame = spark.range(rows).select("id", pick.alias("sentence")).repartition(4)
    counts = frame.select(F.explode(F.split("sentence", " ")).alias("word")).groupBy("word").count()
    return DataFrameSpout(frame), {row["word"]: row["count"] for row in counts.collect()}


def count_words(spark: Any, path: str) -> tuple[dict[str, int], int]:
    """Runs in the shared Spark: word counts of what the sink wrote, one row per (id, position);
    and how many rows were written more than once."""
    written = spark.read.parquet(path)
    unique = written.dropDuplicates(["id", "position"])
    counts = {row["word"]: row["count"] for row in unique.groupBy("word").count().collect()}
    return counts, written.count() - unique.count()


class SplitWords(BasicBolt):
    """``(id, sentence)`` -> ``(id, position, word)`` per word; fails a ``fail_rate`` of sentences."""

    outputs = ["id", "position", "word"]

    def __init__(self, fail_rate: float) -> None:
        self.fail_rate = fail_rate

    def execute(self, tup: RayflowTuple, collector: BasicOutputCollector) -> None:
        if random.random() < self.fail_rate:
            raise FailedException("on purpose: the spout replays this sentence")
        for position, word in enumerate(tup["sentence"].split()):
            collector.emit([tup["id"], position, word])


class FlakyParquet:
    """``write_parquet(path)`` that raises on a ``fail_rate`` of batches (before writing)."""

    def __init__(self, path: Path, fail_rate: float) -> None:
        self.write = write_parquet(path)
        self.fail_rate = fail_rate

    def __call__(self, df: Any, batch_id: int) -> None:
        if random.random() < self.fail_rate:
            raise RuntimeError(f"on purpose: batch {batch_id} is not written, its rows are replayed")
        self.write(df, batch_id)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000, help="sentences in the DataFrame")
    parser.add_argument("--fail-rate", type=float, default=0.002, help="fraction of sentences the words bolt fails")
    parser.add_argument("--batch-fail-rate", type=float, default=0.25, help="fraction of batches the sink fails")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    args = parser.parse_args(argv)

    shutil.rmtree(OUTPUT, ignore_errors=True)
    print("starting a local Ray, then the topology (20-45 s on a busy box)...", flush=True)
    with LocalCluster() as cluster:
        print("starting Spark (about half a minute)...", flush=True)
        spout, expected = run_in_spark(make_source, args.rows)
        builder = TopologyBuilder()
        builder.set_spout("rows", spout, parallelism=2)
        builder.set_bolt("words", SplitWords(args.fail_rate), parallelism=2).shuffle_grouping("rows")
        sink = DataFrameSink(FlakyParquet(OUTPUT, args.batch_fail_rate), batch_rows=5_000, batch_secs=1.0)
        builder.set_bolt("sink", sink, parallelism=2).shuffle_grouping("words")
        handle = cluster.submit_topology("roundtrip", Config(message_timeout_secs=60), builder.create_topology())
        finished = handle.wait(timeout=args.timeout)
        metrics = handle.metrics()
        handle.kill()
        counts, duplicates = run_in_spark(count_words, str(OUTPUT)) if OUTPUT.exists() else ({}, 0)
        stop_spark()

    rows = metrics["rows"]
    print(f"sentences: {args.rows:,}  acked: {rows['acked']:,}  replayed: {rows['failed']:,}")
    print(f"sink batches failed (and replayed): {metrics['sink']['errors']:,}")
    print(f"words written: {sum(counts.values()) + duplicates:,}, of which written twice: {duplicates:,}")
    same = finished and counts == expected
    print(f"the topology's word counts equal Spark's own: {'yes' if same else 'NO'}")
    if not same:
        differ = sorted(w for w in expected.keys() | counts.keys() if expected.get(w) != counts.get(w))
        print("  differ: " + ", ".join(f"{w} {counts.get(w, 0)} vs {expected.get(w, 0)}" for w in differ[:10]))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
