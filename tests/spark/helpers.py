"""What the Spark tests run inside the shared Spark: ``foreach_batch`` functions and queries.

They live in an importable module so that the shared Spark's process imports them by name; state
kept here (``_calls``) lives in that process, across batches.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import ray

from rayflow.spark import DataFrameSpout, write_parquet

BOARD = "rayflow-spark-test-board"
BOARD_NAMESPACE = "rayflow-tests"

_calls: Counter[str] = Counter()


class FailingWriter:
    """``write_parquet(path)``, except that its first ``failures`` calls raise."""

    def __init__(self, path: str, failures: int) -> None:
        self.path = path
        self.failures = failures

    def __call__(self, df: Any, batch_id: int) -> None:
        _calls[self.path] += 1
        if _calls[self.path] <= self.failures:
            raise RuntimeError(f"simulated failure of call {_calls[self.path]}")
        write_parquet(self.path)(df, batch_id)


class HangingWriter:
    """``write_parquet(path)``, except that its first call runs a Spark job that would take hours."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, df: Any, batch_id: int) -> None:
        _calls[self.path] += 1
        if _calls[self.path] == 1:
            df.sparkSession.range(0, 10**13, numPartitions=1).selectExpr("sum(id)").collect()
        write_parquet(self.path)(df, batch_id)


class ReplacingWriter:
    """A ``foreach_batch`` as exactly-once asks of one: batch ``N`` replaces the directory
    ``path/batch=N`` (written again, it is not added twice)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, df: Any, batch_id: int) -> None:
        df.write.mode("overwrite").parquet(f"{self.path}/batch={batch_id}")


def cancel_all_jobs(spark: Any) -> None:
    """Cancel every Spark job of the shared Spark: after a test that started a job of hours, so
    that whatever it left running never holds the executor core the next tests need."""
    spark.sparkContext.cancelAllJobs()


def record_rows(df: Any, batch_id: int) -> None:
    """Hand the batch's rows to the test's board (``tests.topology_helpers.Board`` named BOARD)."""
    board = ray.get_actor(BOARD, namespace=BOARD_NAMESPACE)
    ray.get(board.add.remote([(batch_id, *row) for row in df.collect()]))


def read_rows(spark: Any, path: str, columns: list[str]) -> list[tuple[Any, ...]]:
    """Every row written under ``path``, as tuples of ``columns``."""
    return [tuple(row) for row in spark.read.parquet(path).select(*columns).collect()]


def numbers_spout(spark: Any, rows: int) -> DataFrameSpout:
    """A spout of a Spark DataFrame of ``rows`` rows: ``id`` and ``word`` (``w`` + id % 7)."""
    frame = spark.range(rows).selectExpr("id", "concat('w', CAST(id % 7 AS STRING)) AS word").repartition(3)
    return DataFrameSpout(frame)


def spark_scratch(spark: Any) -> dict[str, Any]:
    """Where the Spark of this process keeps its temporary files: its scratch directory, what it
    holds, ``spark.local.dir``, and the copies of Ray's Java library its driver JVM has loaded."""
    import os

    from rayflow.spark import _session
    from rayflow.spark._scratch import loaded_library_copies

    scratch = _session._scratch_dir
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    return {
        "scratch": scratch,
        "contents": sorted(os.listdir(scratch)) if scratch and os.path.isdir(scratch) else [],
        "local_dir": spark.sparkContext.getConf().get("spark.local.dir"),
        "library_copies": [str(path) for path in loaded_library_copies(pid)],
    }


def write_together(spark: Any, path: str, batches: dict[int, list[int]]) -> None:
    """``write_parquet(path).write_together`` of one DataFrame per batch (column ``x``)."""
    from rayflow.spark._parquet import ParquetBatchWriter

    frames = [(spark.createDataFrame([(x,) for x in xs], "x long"), batch_id) for batch_id, xs in batches.items()]
    ParquetBatchWriter(path).write_together(frames)


def written_both_ways(spark: Any, path: str, batch_id: int) -> dict[str, Any]:
    """A table of every column type ``arrow_writable`` admits (with nulls), written as batch
    ``batch_id`` by Spark (``write_parquet(path/spark)(df, batch_id)``) and by pyarrow
    (``write_parquet(path/arrow).write_arrow``); what ``spark.read.parquet`` gives of each."""
    import datetime

    import pyarrow as pa

    from rayflow.spark._arrow import to_spark_dataframe
    from rayflow.spark._parquet import arrow_writable

    table = pa.table(
        {
            "i64": pa.array([1, None, -(2**40)], pa.int64()),
            "i32": pa.array([1, 2, None], pa.int32()),
            "i16": pa.array([1, None, 3], pa.int16()),
            "i8": pa.array([None, 2, 3], pa.int8()),
            "f64": pa.array([0.5, None, float("inf")], pa.float64()),
            "f32": pa.array([1.5, 2.5, None], pa.float32()),
            "flag": pa.array([True, None, False], pa.bool_()),
            "text": pa.array(["a", None, "ü"], pa.string()),
            "raw": pa.array([b"\x00", b"", None], pa.binary()),
            "day": pa.array([datetime.date(2026, 11, 25), None, datetime.date(1970, 1, 1)], pa.date32()),
        }
    )
    assert arrow_writable(table.schema)
    write_parquet(f"{path}/spark")(to_spark_dataframe(spark, table), batch_id)
    write_parquet(f"{path}/arrow").write_arrow(table, batch_id)
    read = {}
    for way in ("spark", "arrow"):
        frame = spark.read.parquet(f"{path}/{way}")
        read[way] = {
            "schema": frame.schema.jsonValue(),
            "rows": sorted((tuple(row) for row in frame.collect()), key=repr),
        }
    return read
