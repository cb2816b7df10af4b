"""``DataFrameSpout``: every row of a Spark DataFrame, a Ray Dataset or Parquet, as a tracked tuple.

The source is cut into *parts* when the spout is built, in the driver: Arrow blocks in Ray's
object store (a Dataset, or a Spark DataFrame moved there by raydp) or Parquet row groups, each
with its row count. Only the parts' references travel with the spout to its tasks. Each task
takes an equal, contiguous range of rows, reads the parts of its range one at a time and turns
them into tuples ``ROWS_PER_CHUNK`` rows at a time, so no task holds more than one part and the
values of its pending rows (bounded by ``max_spout_pending``).
"""

from __future__ import annotations

import functools
import os
import sys
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .._components import OutputFieldsDeclarer, Spout
from .._errors import ConfigError

if TYPE_CHECKING:
    import pyarrow.dataset as pds

    from .._collectors import SpoutOutputCollector
    from .._context import TopologyContext

__all__ = ["DataFrameSpout"]

ROWS_PER_CHUNK = 1024
"""Rows turned into Python values at a time."""


@dataclass(frozen=True)
class _BlockPart:
    """An Arrow table in Ray's object store."""

    ref: Any
    rows: int

    def read(self, columns: list[str]) -> pa.Table:
        import ray

        return ray.get(self.ref).select(columns)


@dataclass(frozen=True)
class _RowGroupPart:
    """One row group of a Parquet file (with the dataset's schema, for partition columns)."""

    fragment: pds.ParquetFileFragment
    schema: pa.Schema
    rows: int

    def read(self, columns: list[str]) -> pa.Table:
        return self.fragment.to_table(schema=self.schema, columns=columns)


_Part = _BlockPart | _RowGroupPart


class DataFrameSpout(Spout):
    """Emits every row of ``source`` once, as a tracked tuple, and replays the rows that fail.

    ``source`` is a ``pyspark.sql.DataFrame`` (made by raydp's Spark: ``spark_session()`` or
    inside ``run_in_spark``), a ``ray.data.Dataset``, or the path of a Parquet file or directory.
    It is read when the spout is built: a DataFrame or Dataset is computed into Ray's object
    store then (a DataFrame collected as Arrow through its Spark driver), Parquet only has its metadata
    read. Parquet paths must be readable from the nodes the spout tasks run on.

    ``fields`` chooses the columns to emit, in that order (default: every column). A row's
    ``msg_id`` is its index in the source (stable across replays); with several tasks each emits
    an equal share of the rows. Once all its rows are acked, a task is exhausted, so
    ``TopologyHandle.wait()`` returns when every row has been processed.

    It runs exactly-once (``processing_guarantee="exactly_once"``): its position is the index
    of the next row its task emits, and a rollback seeks back to it. Keep the parallelism when
    a topology resumes under its name: each task's range of rows follows from it.

    Example::

        spout = DataFrameSpout("data/sentences.parquet", fields=["id", "sentence"])
        builder.set_spout("rows", spout, parallelism=2)
    """

    def __init__(self, source: Any, *, fields: Sequence[str] | None = None) -> None:
        self._parts, columns = _parts_of(source)
        if fields is None:
            fields = columns
        elif isinstance(fields, str) or not all(isinstance(name, str) for name in fields):
            raise ConfigError(f"DataFrameSpout: fields must be a list of column names, got {fields!r}")
        unknown = [name for name in fields if name not in columns]
        if unknown:
            raise ConfigError(
                f"DataFrameSpout: fields {unknown} are not columns of the source (its columns: {columns})"
            )
        self.fields = list(fields)
        self.total_rows = sum(part.rows for part in self._parts)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(self.fields)

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        tasks = context.get_component_tasks(context.this_component_id)
        index = tasks.index(context.this_task_id)
        start = self.total_rows * index // len(tasks)
        stop = self.total_rows * (index + 1) // len(tasks)
        self._collector = collector
        self._stop = stop
        self._next_row = start
        self._rows = self._read(start, stop)
        self._pending: dict[int, list[Any]] = {}
        self._replay: deque[int] = deque()

    def next_tuple(self) -> None:
        if self._replay:
            msg_id = self._replay.popleft()
            self._collector.emit(self._pending[msg_id], msg_id=msg_id)
            return
        row = next(self._rows, None)
        if row is None:
            self._collector.exhausted()
            return
        msg_id, values = row
        self._next_row = msg_id + 1
        self._pending[msg_id] = values
        self._collector.emit(values, msg_id=msg_id)

    def ack(self, msg_id: Any) -> None:
        self._pending.pop(msg_id, None)

    def fail(self, msg_id: Any) -> None:
        if msg_id in self._pending:
            self._replay.append(msg_id)

    def position(self) -> int:
        """The index of the next row this task emits (exactly-once: taken at each checkpoint)."""
        return self._next_row

    def seek(self, position: int) -> None:
        """Emit again from row ``position`` of this task's range (exactly-once: a rollback, or a
        topology resumed under its name). The source must hold the same rows as when the
        position was taken: a rewritten Parquet file replays other rows."""
        self._next_row = position
        self._rows = self._read(position, self._stop)
        self._pending.clear()
        self._replay.clear()

    def _read(self, start: int, stop: int) -> Iterator[tuple[int, list[Any]]]:
        """Rows ``start``..``stop`` of the source, with their indices, one part at a time."""
        offset = 0
        for part in self._parts:
            first, offset = offset, offset + part.rows
            lo, hi = max(start, first), min(stop, offset)
            if lo >= hi:
                continue
            table = part.read(self.fields).slice(lo - first, hi - lo)
            row_id = lo
            for chunk in table.to_batches(max_chunksize=ROWS_PER_CHUNK):
                columns = [column.to_pylist() for column in chunk.columns]
                for values in zip(*columns, strict=True):
                    yield row_id, list(values)
                    row_id += 1


def _parts_of(source: Any) -> tuple[list[_Part], list[str]]:
    """The parts of ``source`` and its column names."""
    if isinstance(source, (str, os.PathLike)):
        return _parquet_parts(os.fspath(source))
    pyspark_sql = sys.modules.get("pyspark.sql")
    if pyspark_sql is not None and isinstance(source, pyspark_sql.DataFrame):
        return _dataframe_parts(source)
    import ray.data

    if isinstance(source, ray.data.Dataset):
        return _dataset_parts(source)
    raise ConfigError(
        f"DataFrameSpout reads a Spark DataFrame, a ray.data.Dataset or a Parquet path, not {type(source).__name__}"
    )


def _parquet_parts(path: str) -> tuple[list[_Part], list[str]]:
    import pyarrow.dataset as pds

    try:
        dataset = pds.dataset(path, format="parquet", partitioning="hive")
    except FileNotFoundError:
        raise FileNotFoundError(f"no Parquet file or directory at {path}") from None
    parts: list[_Part] = []
    for fragment in dataset.get_fragments():
        for piece in fragment.split_by_row_group():
            parts.append(_RowGroupPart(piece, dataset.schema, piece.row_groups[0].num_rows))
    return parts, dataset.schema.names


def _dataset_parts(dataset: Any) -> tuple[list[_Part], list[str]]:
    import ray

    refs = dataset.to_arrow_refs()
    shapes = ray.get([_block_shape_task().remote(ref) for ref in refs])
    parts: list[_Part] = [_BlockPart(ref, rows) for ref, (rows, _) in zip(refs, shapes, strict=True) if rows]
    return parts, shapes[0][1] if shapes else []


def _dataframe_parts(frame: Any) -> tuple[list[_Part], list[str]]:
    """The DataFrame computed and collected as Arrow record batches through its Spark driver,
    each put in Ray's object store. Not ``ray.data.from_spark``: that finds Spark's executors by
    name in the calling process's Ray namespace, which the shared Spark's are not in
    (``JVM_NAMESPACE`` in ``_shared.py``), and there it hangs."""
    import ray

    parts: list[_Part] = []
    for batch in frame._collect_as_arrow():
        if batch.num_rows:
            parts.append(_BlockPart(ray.put(pa.Table.from_batches([batch])), batch.num_rows))
    return parts, list(frame.columns)


def _block_shape(table: pa.Table) -> tuple[int, list[str]]:
    return table.num_rows, table.schema.names


@functools.cache
def _block_shape_task() -> Any:
    """``_block_shape`` as a Ray task (it runs where the block is), made on first use so that
    importing this module needs no Ray."""
    import ray

    return ray.remote(num_cpus=0)(_block_shape)
