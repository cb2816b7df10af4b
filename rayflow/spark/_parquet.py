"""``write_parquet``: a ``foreach_batch`` that writes every batch to its own directory, atomically.

A batch is written by Spark into a staging directory, then renamed to ``batch_id=N``. Readers
(Spark, pyarrow) skip names starting with ``_``, so they never see a half-written batch; a batch
written again under the same id (a retried Spark Structured Streaming batch, a re-run) replaces
the earlier copy instead of adding to it. ``spark.read.parquet(path)`` then reads every batch,
with ``batch_id`` as a partition column.

Several batches can be written in one Spark job (``write_together``, which the shared Spark uses
for batches queued behind a running write): Spark writes them partitioned by ``batch_id`` into
one staging directory, and each ``batch_id=N`` is then renamed into place as a single batch
would be. A Spark job costs about as much for a few rows as for many, so this is the difference
between a job per batch and a job per write.

A ``DataFrameSink`` does not need Spark for it at all: ``write_parquet`` is an
``ArrowBatchWriter``, so the sink hands it the batch's Arrow table (``write_arrow``), which
pyarrow writes in the sink task through the same staging-then-rename path, as Spark would lay
it out (one snappy ``part-*.parquet`` file and ``_SUCCESS`` per ``batch_id=N``), for the column
types Spark reads back as Spark would have written them (``ARROW_WRITABLE``). A batch with
another type (timestamps, decimals, nested) still goes to Spark.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = ["ArrowBatchWriter", "ParquetBatchWriter", "arrow_writable", "write_parquet"]


@runtime_checkable
class ArrowBatchWriter(Protocol):
    """A ``foreach_batch`` that can also take a batch as an Arrow table, without Spark.

    ``DataFrameSink`` calls ``write_arrow(table, batch_id)`` instead of ``writer(df, batch_id)``
    for a batch whose column types all pass ``arrow_writable``, on a thread of the sink task, one
    batch at a time, in order. The contract is the one of ``foreach_batch``: the batch's tuples
    are acked once it returned and failed (replayed) if it raised, so it must be idempotent per
    ``batch_id``, and what it writes must read back as what ``writer(df, batch_id)`` would
    have written."""

    def __call__(self, df: DataFrame, batch_id: int) -> Any: ...

    def write_arrow(self, table: pa.Table, batch_id: int) -> Any: ...


def arrow_writable(schema: pa.Schema) -> bool:
    """Every column of ``schema`` is of a type that Spark reads back from a Parquet file written
    by pyarrow as the type Spark gives it when it writes the column itself: signed integers,
    floats, booleans, strings, bytes and dates. (Timestamps differ in time zone handling and
    unsigned integers have no Spark type; those batches go through Spark.)"""
    import pyarrow as pa

    plain = (
        pa.types.is_signed_integer,
        pa.types.is_float32,
        pa.types.is_float64,
        pa.types.is_boolean,
        pa.types.is_string,
        pa.types.is_binary,
        pa.types.is_date32,
    )
    return all(any(kind(t) for kind in plain) for t in schema.types)


def write_parquet(path: str | os.PathLike[str]) -> ParquetBatchWriter:
    """A ``foreach_batch`` writing batch ``N`` to ``path/batch_id=N/`` as Parquet, atomically.

    ``path`` is a local path (made absolute here, so it means the same in every process; it
    must be on a filesystem the Spark executors share with the caller) or a URI pyarrow and
    Spark both understand. It works for ``DataFrameSink`` and for Spark's own
    ``df.writeStream.foreachBatch``::

        DataFrameSink(write_parquet("/data/words"))
        spark.read.parquet("/data/words")          # every batch, with a batch_id column
    """
    return ParquetBatchWriter(os.fspath(path))


class ParquetBatchWriter:
    """What ``write_parquet`` returns: call it as ``writer(df, batch_id)``."""

    def __init__(self, path: str) -> None:
        self.path = path if "://" in path else os.path.abspath(path)

    def __repr__(self) -> str:
        return f"write_parquet({self.path!r})"

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.write(batch_id, lambda target: df.write.mode("overwrite").parquet(target))

    def write_arrow(self, table: pa.Table, batch_id: int) -> None:
        """Write ``table`` as batch ``batch_id`` with pyarrow, where and how ``self(df, batch_id)``
        would: one snappy-compressed ``part-*.parquet`` file and an empty ``_SUCCESS`` in
        ``batch_id=N``, put in place atomically. For tables whose types pass ``arrow_writable``."""
        import pyarrow.parquet as pq
        from pyarrow import fs as pafs

        def produce(directory: str) -> None:
            filesystem, root = pafs.FileSystem.from_uri(directory)
            filesystem.create_dir(root, recursive=True)
            name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
            pq.write_table(table, f"{root}/{name}", filesystem=filesystem, compression="snappy")
            with filesystem.open_output_stream(f"{root}/_SUCCESS"):
                pass

        self.write(batch_id, produce)

    def write_together(self, batches: Sequence[tuple[DataFrame, int]]) -> None:
        """Write every ``(df, batch_id)`` of ``batches`` (DataFrames of one schema, without a
        ``batch_id`` column) in one Spark job; each lands as ``self(df, batch_id)`` would put it."""
        from pyspark.sql import functions

        frames = [df.withColumn(PARTITION, functions.lit(batch_id)) for df, batch_id in batches]
        union = functools.reduce(lambda a, b: a.unionByName(b), frames).coalesce(1)
        self.write_many(
            [batch_id for _, batch_id in batches],
            lambda target: union.write.mode("overwrite").partitionBy(PARTITION).parquet(target),
        )

    # -- staged batches (exactly-once: ``_checkpointed.py``) ----------------------------------------
    def write_part(self, table: pa.Table, staging: str, part: str) -> None:
        """Write ``table`` as the file ``part`` of the staging directory ``staging`` (a name in
        ``path``), as ``write_arrow`` writes a batch's one file."""
        import pyarrow.parquet as pq

        filesystem, root = self._filesystem()
        filesystem.create_dir(f"{root}/{staging}", recursive=True)
        pq.write_table(table, f"{root}/{staging}/{part}", filesystem=filesystem, compression="snappy")

    def seal(self, staging: str) -> None:
        """Mark the staging directory ``staging`` complete (its ``_SUCCESS``): it may be published."""
        filesystem, root = self._filesystem()
        filesystem.create_dir(f"{root}/{staging}", recursive=True)
        with filesystem.open_output_stream(f"{root}/{staging}/_SUCCESS"):
            pass

    def sealed(self, staging: str) -> bool:
        from pyarrow import fs as pafs

        filesystem, root = self._filesystem()
        found: bool = filesystem.get_file_info(f"{root}/{staging}/_SUCCESS").type != pafs.FileType.NotFound
        return found

    def publish(self, staging: str, batch_id: int) -> None:
        """Rename the sealed staging directory ``staging`` into place as batch ``batch_id``,
        replacing an earlier copy as ``write`` does."""
        filesystem, root = self._filesystem()
        name = f"{PARTITION}={batch_id}"
        _replace(filesystem, f"{root}/{staging}", f"{root}/{name}", f"{root}/_replaced-{name}-{uuid.uuid4().hex[:12]}")

    def discard(self, staging: str) -> None:
        """Delete the staging directory ``staging``, if there is one."""
        from pyarrow import fs as pafs

        filesystem, root = self._filesystem()
        if filesystem.get_file_info(f"{root}/{staging}").type != pafs.FileType.NotFound:
            filesystem.delete_dir(f"{root}/{staging}")

    def _filesystem(self) -> tuple[Any, str]:
        from pyarrow import fs as pafs

        filesystem, root = pafs.FileSystem.from_uri(self.path)
        return filesystem, root.rstrip("/")

    def write(self, batch_id: int, produce: Callable[[str], None]) -> str:
        """Make batch ``batch_id`` with ``produce(directory)``, then put it in place; returns
        where it is. If ``produce`` raises, nothing is left behind and an earlier copy stays.

        Replacing an earlier copy takes two renames (the old copy aside, the new one in), so a
        reader may miss the batch for that instant; it never sees two copies or a partial one."""
        return self._in_place([batch_id], f"_staging-{PARTITION}={batch_id}", produce, partitioned=False)[0]

    def write_many(self, batch_ids: Sequence[int], produce: Callable[[str], None]) -> list[str]:
        """``write`` for several batches made at once: ``produce(directory)`` writes each batch
        ``N`` of ``batch_ids`` to ``directory/batch_id=N``. Each batch is put in place as
        ``write`` does; if ``produce`` raises, none is and earlier copies stay."""
        return self._in_place(batch_ids, "_staging-many", produce, partitioned=True)

    def _in_place(
        self, batch_ids: Sequence[int], staging_name: str, produce: Callable[[str], None], *, partitioned: bool
    ) -> list[str]:
        from pyarrow import fs as pafs

        filesystem, root = pafs.FileSystem.from_uri(self.path)
        filesystem.create_dir(root, recursive=True)
        token = uuid.uuid4().hex[:12]
        staging = f"{root}/{staging_name}-{token}"
        placed = []
        try:
            produce(f"{self.path.rstrip('/')}/{staging_name}-{token}")
            for batch_id in batch_ids:
                name = f"{PARTITION}={batch_id}"
                made = f"{staging}/{name}" if partitioned else staging
                if filesystem.get_file_info(made).type != pafs.FileType.NotFound:
                    _replace(filesystem, made, f"{root}/{name}", f"{root}/_replaced-{name}-{token}")
                placed.append(f"{self.path.rstrip('/')}/{name}")
        finally:
            if filesystem.get_file_info(staging).type != pafs.FileType.NotFound:
                filesystem.delete_dir(staging)
        return placed


PARTITION = "batch_id"
"""The partition column readers see, from the directory names ``batch_id=N``."""


def _replace(filesystem: Any, made: str, final: str, aside: str) -> None:
    from pyarrow import fs as pafs

    if filesystem.get_file_info(final).type != pafs.FileType.NotFound:
        filesystem.move(final, aside)
        filesystem.move(made, final)
        filesystem.delete_dir(aside)
    else:
        filesystem.move(made, final)
