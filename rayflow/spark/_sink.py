"""``DataFrameSink``: a bolt that hands its input to Spark in batches, as DataFrames.

A sink task gathers tuples into batches (``Batcher``: by rows, and by age on tick tuples), turns
each into an Arrow table (``TableBuilder``) and sends it to the shared Spark (``shared.py``),
where ``foreach_batch(df, batch_id)`` runs. It does not wait for the call: the batch's tuples
are held and acked when the call has returned, or failed if it raised -- checked on every tuple
and every tick -- so a Spark job of several seconds never stalls the task's event loop. At most
``MAX_INFLIGHT`` batches of a task are in Spark at once; sealed batches queue behind them, and
the spouts' ``max_spout_pending`` bounds how many tuples that can be.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._components import Bolt
from .._dotted import DottedPathError, resolve
from .._errors import ConfigError, RayflowError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from .._collectors import OutputCollector
    from .._context import TopologyContext
    from .._tuple import Tuple
    from ._arrow import TableBuilder

__all__ = ["Batch", "Batcher", "DataFrameSink", "ForeachBatchError", "resolve_function"]

logger = logging.getLogger("rayflow")

MAX_INFLIGHT = 2
"""Batches one sink task may have in Spark at once: one being written while the next is built."""
RESULT_POLL_SECS = 0.5
"""Ticks come at least this often, so a finished batch is acked soon even when no tuple arrives."""

ForeachBatch = Callable[["DataFrame", int], Any]


class ForeachBatchError(RayflowError):
    """``foreach_batch`` raised (or the shared Spark died) on a batch; its tuples were failed."""


def resolve_function(dotted: str) -> Callable[..., Any]:
    """The callable at ``package.module.function`` (or ``package.module.object``)."""
    obj = resolve(dotted, "package.module.function")
    if not callable(obj):
        raise DottedPathError(f"{dotted} is a {type(obj).__name__}, not a function")
    function: Callable[..., Any] = obj
    return function


@dataclass
class Batch:
    """Tuples of one set of fields, gathered since ``opened`` (a ``time.monotonic`` reading)."""

    fields: tuple[str, ...]
    opened: float
    tuples: list[Tuple] = field(default_factory=list)


class Batcher:
    """Gathers tuples into batches of at most ``batch_rows``, sealed when full or when the
    oldest tuple has waited ``batch_secs``. Tuples of different fields (a sink subscribed to
    several streams) go to different batches."""

    def __init__(self, batch_rows: int, batch_secs: float) -> None:
        self.batch_rows = batch_rows
        self.batch_secs = batch_secs
        self._open: dict[tuple[str, ...], Batch] = {}

    def add(self, tup: Tuple, now: float) -> Batch | None:
        """Add ``tup``; returns the batch it filled, if it did."""
        key = tuple(tup.fields)
        batch = self._open.get(key)
        if batch is None:
            batch = self._open[key] = Batch(key, now)
        batch.tuples.append(tup)
        if len(batch.tuples) >= self.batch_rows:
            return self._open.pop(key)
        return None

    def due(self, now: float) -> list[Batch]:
        """Seal and return the batches that have waited ``batch_secs`` or longer."""
        keys = [key for key, batch in self._open.items() if now - batch.opened >= self.batch_secs]
        return [self._open.pop(key) for key in keys]

    def __len__(self) -> int:
        return sum(len(batch.tuples) for batch in self._open.values())


@dataclass
class _InFlight:
    batch_id: int
    tuples: list[Tuple]
    result: Future[Any]


class DataFrameSink(Bolt):
    """Writes its input to Spark: every batch of tuples becomes a DataFrame whose columns are the
    input fields, and ``foreach_batch(df, batch_id)`` runs on it in the shared Spark.

    - A batch is sealed at ``batch_rows`` tuples, or ``batch_secs`` after its first tuple came.
    - Its tuples are acked once ``foreach_batch`` has returned. If it raises, they are failed
      (their spouts replay them) and the error is reported (``metrics()[id]["errors"]``); the
      topology carries on. So a batch is written at least once: make ``foreach_batch``
      idempotent per ``batch_id`` (``write_parquet`` is) and de-duplicate downstream by a key.
    - ``batch_id`` increases within a task's run and is unique across the sink's tasks and
      across restarts of a task (it counts from the task's start time in milliseconds), so that
      tasks writing to one place never overwrite each other's batches.
    - Column types are inferred from the first batch with a value for the field, or declared
      with ``schema`` (``{"count": "int64"}`` or a ``pyarrow.Schema``). A value that does not fit
      its column fails its tuple, with a ``SchemaMismatchError`` naming the field; the rest of
      the batch is written.
    - ``foreach_batch`` is a function or its dotted import path (``"package.module.function"``,
      for topology files); it must be importable or picklable, as it runs in another process.
    - The shared Spark starts when the first sink task starts (``prepare`` waits for it, ~25 s);
      the topology config's ``spark.*`` keys configure it: ``spark.executor.instances``,
      ``spark.executor.cores`` and ``spark.executor.memory`` (default 1, 1, ``1g``) size it, the
      others go to Spark as they are. If it already runs, it is used as it is.

    Keep ``batch_secs`` plus the time a ``foreach_batch`` takes well under the topology's
    ``message_timeout_secs``, or held tuples time out and are replayed (duplicates, not loss).

    Example::

        sink = DataFrameSink(write_parquet("/data/counts"), batch_secs=2.0)
        builder.set_bolt("sink", sink, parallelism=2).shuffle_grouping("count")
    """

    def __init__(
        self,
        foreach_batch: ForeachBatch | str,
        *,
        batch_rows: int = 10_000,
        batch_secs: float = 5.0,
        schema: Mapping[str, Any] | pa.Schema | None = None,
    ) -> None:
        if isinstance(foreach_batch, str):
            resolve_function(foreach_batch)  # fail now, not in the first batch
        elif not callable(foreach_batch):
            raise ConfigError(
                f"DataFrameSink: foreach_batch must be a function or its dotted path, got {foreach_batch!r}"
            )
        if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
            raise ConfigError(f"DataFrameSink: batch_rows must be an integer >= 1, got {batch_rows!r}")
        if isinstance(batch_secs, bool) or not isinstance(batch_secs, (int, float)) or batch_secs <= 0:
            raise ConfigError(f"DataFrameSink: batch_secs must be a number of seconds > 0, got {batch_secs!r}")
        from ._arrow import parse_schema

        self.foreach_batch = foreach_batch
        self.batch_rows = batch_rows
        self.batch_secs = float(batch_secs)
        self.schema = parse_schema(schema)

    def get_component_configuration(self) -> dict[str, Any]:
        return {"tick_tuple_freq_secs": min(self.batch_secs, RESULT_POLL_SECS)}

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        from ._shared import settings_from_conf, shared_spark

        self._collector = collector
        tasks = context.get_component_tasks(context.this_component_id)
        self._tasks = len(tasks)
        self._index = tasks.index(context.this_task_id)
        self._next_seq = int(time.time() * 1000)
        self._batcher = Batcher(self.batch_rows, self.batch_secs)
        self._builders: dict[tuple[str, ...], TableBuilder] = {}
        self._sealed: deque[Batch] = deque()
        self._inflight: list[_InFlight] = []
        timeout = conf.get("message_timeout_secs")
        if timeout and self.batch_secs >= timeout / 2:
            logger.warning(
                "sink %r: batch_secs=%s is not well under message_timeout_secs=%s: tuples may time out and replay",
                context.this_component_id,
                self.batch_secs,
                timeout,
            )
        self._settings = settings_from_conf(conf)
        self._spark: Any = None
        self._spark = shared_spark(self._settings)  # waits until Spark is up; raises if it cannot start

    def execute(self, tup: Tuple) -> None:
        now = time.monotonic()
        if tup.is_tick():  # untracked: nothing to ack
            self._sealed.extend(self._batcher.due(now))
        else:
            full = self._batcher.add(tup, now)
            if full is not None:
                self._sealed.append(full)
        self._collect()
        self._submit()

    # -- batches to Spark and back -------------------------------------------------------------
    def _submit(self) -> None:
        while self._sealed and len(self._inflight) < MAX_INFLIGHT:
            batch = self._sealed.popleft()
            table, tuples = self._table(batch)
            if table is None:
                continue
            entry = _InFlight(self._next_seq * self._tasks + self._index, tuples, Future())
            self._next_seq += 1
            try:
                ref = self._shared_spark().foreach_batch.remote(self.foreach_batch, table, entry.batch_id)
                entry.result = ref.future()
            except Exception as exc:  # could not even hand it over: fail it like a failed call
                entry.result.set_exception(exc)
            self._inflight.append(entry)
        self._collect()

    def _table(self, batch: Batch) -> tuple[pa.Table | None, list[Tuple]]:
        """The batch as an Arrow table, and its tuples that are in it; the others are failed."""
        from ._arrow import TableBuilder

        builder = self._builders.get(batch.fields)
        if builder is None:
            builder = self._builders[batch.fields] = TableBuilder(batch.fields, self.schema)
        built = builder.build([tup.values for tup in batch.tuples])
        for error in built.errors:
            self._collector.report_error(error)
        rejected = built.rejected
        for row in sorted(rejected):
            self._collector.fail(batch.tuples[row])
        return built.table, [tup for row, tup in enumerate(batch.tuples) if row not in rejected]

    def _collect(self) -> None:
        """Ack the tuples of every batch whose ``foreach_batch`` returned, fail those that raised."""
        inflight = self._inflight
        if not inflight or not any(entry.result.done() for entry in inflight):
            return
        self._inflight = []
        for entry in inflight:
            if not entry.result.done():
                self._inflight.append(entry)
                continue
            error = entry.result.exception()
            if error is None:
                for tup in entry.tuples:
                    self._collector.ack(tup)
            else:
                for tup in entry.tuples:
                    self._collector.fail(tup)
                self._collector.report_error(self._describe(error, entry))

    def _describe(self, error: BaseException, entry: _InFlight) -> ForeachBatchError:
        import ray

        cause = getattr(error, "cause", None) if isinstance(error, ray.exceptions.RayTaskError) else None
        if isinstance(error, ray.exceptions.RayActorError):
            self._spark = None  # the shared Spark died: the next batch starts it again
            what = f"the shared Spark died ({str(error).strip().splitlines()[0]})"
        else:
            cause = cause or error
            text = str(cause).strip().splitlines()
            what = f"foreach_batch raised {type(cause).__name__}: {text[0] if text else ''}"
        described = ForeachBatchError(
            f"batch {entry.batch_id} ({len(entry.tuples)} rows) failed, its tuples are failed and replayed: {what}"
        )
        described.__cause__ = cause or error
        return described

    def _shared_spark(self) -> Any:
        if self._spark is None:
            from ._shared import shared_spark

            self._spark = shared_spark(self._settings, wait=False)  # calls queue until it is up
        return self._spark
