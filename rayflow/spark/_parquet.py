"""``write_parquet``: a ``foreach_batch`` that writes every batch to its own directory, atomically.

A batch is written by Spark into a staging directory, then renamed to ``batch_id=N``. Readers
(Spark, pyarrow) skip names starting with ``_``, so they never see a half-written batch; a batch
written again under the same id (a retried Spark Structured Streaming batch, a re-run) replaces
the earlier copy instead of adding to it. ``spark.read.parquet(path)`` then reads every batch,
with ``batch_id`` as a partition column.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["ParquetBatchWriter", "write_parquet"]


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

    def write(self, batch_id: int, produce: Callable[[str], None]) -> str:
        """Make batch ``batch_id`` with ``produce(directory)``, then put it in place; returns
        where it is. If ``produce`` raises, nothing is left behind and an earlier copy stays.

        Replacing an earlier copy takes two renames (the old copy aside, the new one in), so a
        reader may miss the batch for that instant; it never sees two copies or a partial one."""
        from pyarrow import fs as pafs

        filesystem, root = pafs.FileSystem.from_uri(self.path)
        filesystem.create_dir(root, recursive=True)
        token = uuid.uuid4().hex[:12]
        name = f"batch_id={batch_id}"
        staging = f"_staging-{name}-{token}"
        try:
            produce(f"{self.path.rstrip('/')}/{staging}")
            final = f"{root}/{name}"
            if filesystem.get_file_info(final).type != pafs.FileType.NotFound:
                aside = f"{root}/_replaced-{name}-{token}"
                filesystem.move(final, aside)
                filesystem.move(f"{root}/{staging}", final)
                filesystem.delete_dir(aside)
            else:
                filesystem.move(f"{root}/{staging}", final)
        except BaseException:
            if filesystem.get_file_info(f"{root}/{staging}").type != pafs.FileType.NotFound:
                filesystem.delete_dir(f"{root}/{staging}")
            raise
        return f"{self.path.rstrip('/')}/{name}"
