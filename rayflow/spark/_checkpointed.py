"""``DataFrameSink`` under exactly-once: each checkpoint's rows committed with the checkpoint.

Under ``processing_guarantee="exactly_once"`` a ``DataFrameSink`` is driven as a
``TwoPhaseCommitSink`` (``rayflow/_sinks.py``): its transaction is what one task received for one
checkpoint, and it is written as one batch whose id comes from the checkpoint,
``checkpoint_batch_id(txid, task)``, so the same checkpoint written again is the same batch.

- ``write_parquet`` (``StagedParquet``): rows go out as they come, ``batch_rows`` at a time, as
  Parquet files in a staging directory named by the checkpoint and the task
  (``_staging-checkpoint-<txid>-task-<task>``; readers skip names that start with ``_``),
  written on the sink task's writing thread (through the shared Spark for a column type pyarrow
  cannot write as Spark would). The pre-commit writes the rest, waits for every file and seals
  the directory (``_SUCCESS``); the commit renames it into place as ``batch_id=N``, replacing
  any copy there; an abort deletes it. A restarted task finds it by its name, so it can publish
  or delete what its previous incarnation staged.
- any other ``foreach_batch`` (``StagedBatches``): the pre-commit builds the checkpoint's rows
  into one Arrow table and keeps it, durably, in the topology's state provider (under the task's
  namespace); the commit calls ``foreach_batch(df, batch_id)`` with it, then drops it. A task
  restarted before the commit reads the table back from there. So ``foreach_batch`` never sees
  rows a rollback voids, and may see a batch again -- the same rows under the same id -- after a
  commit that raised or a task that died within it: it must replace what an earlier call with
  that ``batch_id`` wrote, as Spark's own ``foreachBatch`` contract asks.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .._errors import ConfigError
from .._state.checkpoint import namespace
from .._state.key_value import DELETED
from .._state.provider import StateProvider, task_provider
from ._arrow import TableBuilder
from ._parquet import ParquetBatchWriter, arrow_writable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from .._tuple import Tuple

__all__ = [
    "CHECKPOINT_BATCH_SPAN",
    "CheckpointRows",
    "SparkPart",
    "StagedBatches",
    "StagedParquet",
    "checkpoint_batch_id",
]

CHECKPOINT_BATCH_SPAN = 1_000_000
"""Batch ids of one checkpoint: ``txid * CHECKPOINT_BATCH_SPAN + task``, so an id reads as the
checkpoint's txid followed by the task id (six digits)."""

SparkCall = Callable[[Any, pa.Table, int], "Future[Any]"]
"""Runs ``fn(DataFrame of table, batch_id)`` in the shared Spark; its result as a future."""


def checkpoint_batch_id(txid: int, task: int) -> int:
    """The batch id of what task ``task`` writes for checkpoint ``txid``."""
    return txid * CHECKPOINT_BATCH_SPAN + task


@dataclass
class CheckpointRows:
    """The transaction of one sink task for one checkpoint."""

    txid: int
    batch_id: int
    fields: tuple[str, ...] | None = None
    rows: list[list[Any]] = field(default_factory=list)
    parts: list[Future[Any]] = field(default_factory=list)
    """``StagedParquet``: the files written or being written."""
    table: pa.Table | None = None
    """``StagedBatches``: the rows, built at the pre-commit."""


class _Staged:
    """What both ways share: the rows of a checkpoint, built into tables of one schema."""

    def __init__(self, name: str, task: int, schema: dict[str, pa.DataType]) -> None:
        self._name = name
        self._task = task
        self._schema = schema
        self._builders: dict[tuple[str, ...], TableBuilder] = {}

    def begin(self, txid: int) -> CheckpointRows:
        return CheckpointRows(txid, checkpoint_batch_id(txid, self._task))

    def _build(self, fields: tuple[str, ...], rows: list[list[Any]]) -> pa.Table:
        """``rows`` as a table; a value that does not fit its column raises: under exactly-once
        a row cannot be failed alone, so its checkpoint rolls back."""
        builder = self._builders.get(fields)
        if builder is None:
            builder = self._builders[fields] = TableBuilder(fields, self._schema)
        built = builder.build(rows)
        if built.errors:
            raise built.errors[0]
        assert built.table is not None
        return built.table

    def close(self) -> None:
        """Release what the task holds (nothing, unless a subclass says otherwise)."""


class StagedParquet(_Staged):
    """``write_parquet`` under exactly-once: staged files, published at the commit."""

    def __init__(
        self,
        name: str,
        task: int,
        schema: dict[str, pa.DataType],
        writer: ParquetBatchWriter,
        batch_rows: int,
        write: Callable[[Callable[[], None]], Future[Any]],
        spark: SparkCall,
    ) -> None:
        super().__init__(name, task, schema)
        self._writer = writer
        self._batch_rows = batch_rows
        self._write = write
        self._spark = spark

    def staging(self, txid: int) -> str:
        return f"_staging-checkpoint-{txid}-task-{self._task}"

    def begin(self, txid: int) -> CheckpointRows:
        self._writer.discard(self.staging(txid))  # what an attempt whose abort failed left
        return super().begin(txid)

    def add(self, rows: CheckpointRows, tup: Tuple) -> None:
        fields = tuple(tup.fields)
        if rows.fields != fields:
            self._flush(rows)
            rows.fields = fields
        rows.rows.append(tup.values)
        if len(rows.rows) >= self._batch_rows:
            self._flush(rows)

    def _flush(self, rows: CheckpointRows) -> None:
        """Write the rows gathered so far as one more file of the checkpoint's staging directory."""
        if not rows.rows:
            return
        assert rows.fields is not None
        table = self._build(rows.fields, rows.rows)
        rows.rows = []
        staging = self.staging(rows.txid)
        part = f"part-{len(rows.parts):05d}-{uuid.uuid4()}-c000.snappy.parquet"
        if arrow_writable(table.schema):
            rows.parts.append(self._write(lambda: self._writer.write_part(table, staging, part)))
        else:
            rows.parts.append(self._spark(SparkPart(self._writer.path, staging, part), table, rows.batch_id))

    def pre_commit(self, rows: CheckpointRows) -> None:
        self._flush(rows)
        if not rows.parts:
            return  # nothing to publish
        for part in rows.parts:
            part.result()
        self._writer.seal(self.staging(rows.txid))

    def commit(self, rows: CheckpointRows) -> None:
        self.recover_and_commit(rows.txid)

    def abort(self, rows: CheckpointRows) -> None:
        wait(rows.parts)  # a file still being written would land after the delete
        self._writer.discard(self.staging(rows.txid))

    def recover_and_commit(self, txid: int) -> None:
        staging = self.staging(txid)
        if self._writer.sealed(staging):  # else published already, or empty
            self._writer.publish(staging, checkpoint_batch_id(txid, self._task))

    def recover_and_abort(self, txid: int) -> None:
        self._writer.discard(self.staging(txid))


class StagedBatches(_Staged):
    """Any other ``foreach_batch`` under exactly-once: the rows kept in the state provider at
    the pre-commit, handed to ``foreach_batch`` at the commit."""

    def __init__(
        self,
        name: str,
        task: int,
        schema: dict[str, pa.DataType],
        conf: dict[str, Any],
        component: str,
        write: Callable[[pa.Table, int], None],
    ) -> None:
        super().__init__(name, task, schema)
        self._namespace = namespace(conf, component, task)
        self._conf = conf
        self._provider: StateProvider | None = None
        self._write_batch = write

    @property
    def provider(self) -> StateProvider:
        if self._provider is None:
            self._provider = task_provider(self._conf)
        return self._provider

    def add(self, rows: CheckpointRows, tup: Tuple) -> None:
        fields = tuple(tup.fields)
        if rows.fields is None:
            rows.fields = fields
        elif rows.fields != fields:
            raise ConfigError(
                f"DataFrameSink {self._name!r}: under exactly-once a task writes one batch per checkpoint, so "
                f"its inputs must all have the same fields; got {list(fields)} after {list(rows.fields)}: give "
                "each stream a DataFrameSink of its own"
            )
        rows.rows.append(tup.values)

    def pre_commit(self, rows: CheckpointRows) -> None:
        if not rows.rows:
            return
        assert rows.fields is not None
        rows.table = self._build(rows.fields, rows.rows)
        rows.rows = []
        self._keep(rows.txid, _to_bytes(rows.table))

    def commit(self, rows: CheckpointRows) -> None:
        if rows.table is not None:
            self._write_batch(rows.table, rows.batch_id)
            self._keep(rows.txid, None)
            rows.table = None

    def abort(self, rows: CheckpointRows) -> None:
        if rows.table is not None:
            self._keep(rows.txid, None)

    def recover_and_commit(self, txid: int) -> None:
        data, _ = self.provider.load(self._namespace)
        kept = data.get(_key(txid))
        if kept is not None:
            self._write_batch(_from_bytes(kept), checkpoint_batch_id(txid, self._task))
            self._keep(txid, None)

    def recover_and_abort(self, txid: int) -> None:
        self._keep(txid, None)

    def _keep(self, txid: int, table: bytes | None) -> None:
        """Store (or, with ``None``, drop) the rows of checkpoint ``txid``, durably."""
        provider = self.provider
        provider.stage(self._namespace, txid, {_key(txid): DELETED if table is None else table})
        provider.commit(self._namespace, txid)

    def close(self) -> None:
        if self._provider is not None:
            self._provider.close()


class SparkPart:
    """A ``foreach_batch`` for the shared Spark: writes its DataFrame as the one file ``part`` of
    the staging directory ``staging`` under ``path`` (for column types only Spark writes as Spark
    reads them)."""

    def __init__(self, path: str, staging: str, part: str) -> None:
        self.path = path
        self.staging = staging
        self.part = part

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        from pyarrow import fs as pafs

        scratch = f"{self.path.rstrip('/')}/{self.staging}/_writing-{self.part}"
        df.coalesce(1).write.mode("overwrite").parquet(scratch)
        filesystem, root = pafs.FileSystem.from_uri(scratch)
        written = [
            info.path
            for info in filesystem.get_file_info(pafs.FileSelector(root))
            if info.base_name.endswith(".parquet")
        ]
        for index, path in enumerate(written):  # one file, unless Spark made more of it
            name = self.part if not index else self.part.replace(".parquet", f"-{index}.parquet")
            filesystem.move(path, f"{os.path.dirname(root)}/{name}")
        filesystem.delete_dir(root)


def _key(txid: int) -> str:
    return f"rows/{txid}"


def _to_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _from_bytes(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
