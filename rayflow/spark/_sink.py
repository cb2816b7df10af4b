"""``DataFrameSink``: a bolt that hands its input to Spark in batches, as DataFrames.

A sink task gathers tuples into batches (``Batcher``: by rows, and by age on tick tuples), turns
each into an Arrow table (``TableBuilder``) and sends it to the shared Spark (``shared.py``),
where ``foreach_batch(df, batch_id)`` runs. It does not wait for the call: the batch's tuples
are held and acked when the call has returned, or failed if it raised -- checked on every tuple
and every tick -- so a Spark job of several seconds never stalls the task's event loop.

A ``foreach_batch`` that can take the Arrow table itself (an ``ArrowBatchWriter``, as
``write_parquet`` is) is handed it on a thread of the sink task, with the same contract: no Ray
call, no DataFrame, no Spark job -- those cost a few hundred milliseconds a batch whatever its
rows, writing 10,000 rows with pyarrow a few -- and no Spark started unless a batch has a
column type the writer cannot take (``arrow_writable``); such a batch goes to Spark as any other. At most
``MAX_INFLIGHT`` batches of a task are in Spark at once (``MAX_INFLIGHT_TOGETHER`` for
``write_parquet``, whose queued batches the shared Spark writes together in one job); sealed
batches queue behind them, and the spouts' ``max_spout_pending`` bounds how many tuples that can be.

Batches grow while Spark is busy, as Structured Streaming's micro-batches do: a batch goes
when it is full, when it is ``batch_secs`` old, or -- whatever its size -- when Spark has room
for it and it has lingered ``LINGER_SECS``; for ``write_parquet``, room means none of the task's
batches is in Spark, since what waits behind a write is written together anyway. So a batch
never waits for rows the spouts are not allowed to send. A Spark job costs about as much for a
few rows as for ``batch_rows``, so the sink keeps pace only when its batches can fill: it
says what that takes of the spouts (``DataFrameSink.pending_need``), and a topology with a sink
gets a pending budget that lets them (``rayflow/_pending.py``), unless its config sets one.

When the shared Spark cannot start, the sink reports why (the cause, once per attempt), holds
its tuples -- resetting their timeouts, so that the spouts' pending budgets fill and they stop
emitting instead of replaying -- and tries again after ``RETRY_SECS``, doubling up to
``RETRY_MAX_SECS``. Nothing is failed for it, so nothing is replayed in a loop.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._dotted import resolve_function
from .._errors import ConfigError, RayflowError
from .._pending import PendingNeed
from .._sinks import TwoPhaseCommitSink
from ._session import SparkUnavailableError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from .._collectors import OutputCollector
    from .._context import TopologyContext
    from .._tuple import Tuple
    from ._arrow import TableBuilder
    from ._checkpointed import CheckpointRows, StagedBatches, StagedParquet
    from ._parquet import ArrowBatchWriter

__all__ = ["Batch", "Batcher", "DataFrameSink", "ForeachBatchError"]

logger = logging.getLogger("rayflow")

MAX_INFLIGHT = 2
"""Batches one sink task may have in Spark at once: one being written while the next is built."""
MAX_INFLIGHT_TOGETHER = 4
"""The same for ``write_parquet``: one being written, and up to three behind it, which the next
Spark job writes together (``shared.py``)."""
RESULT_POLL_SECS = 0.02
"""Ticks come at least this often, so a finished batch is acked soon even when no tuple arrives
(when the spouts have used their pending budget, none does until it is)."""
LINGER_SECS = 0.05
"""How long a batch gathers at least before it goes to a Spark with room for it (so that a trickle
of tuples does not become a Spark job, and a file, per tuple)."""
BATCH_ID_BLOCK = 1024
"""Batch ids a sink task claims from the shared Spark at a time."""
RETRY_SECS = 5.0
RETRY_MAX_SECS = 60.0
"""The first and the longest wait before a sink tries again to reach a Spark that did not start."""

ForeachBatch = Callable[["DataFrame", int], Any]


class ForeachBatchError(RayflowError):
    """``foreach_batch`` raised (or the shared Spark died) on a batch; its tuples were failed."""


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

    def due(self, now: float, age: float | None = None) -> list[Batch]:
        """Seal and return the batches that have waited ``age`` (default ``batch_secs``) or longer."""
        age = self.batch_secs if age is None else age
        keys = [key for key, batch in self._open.items() if now - batch.opened >= age]
        return [self._open.pop(key) for key in keys]

    def tuples(self) -> Iterator[Tuple]:
        """The tuples of the open batches."""
        for batch in self._open.values():
            yield from batch.tuples

    def __len__(self) -> int:
        return sum(len(batch.tuples) for batch in self._open.values())


@dataclass
class _InFlight:
    batch_id: int
    batch: Batch
    tuples: list[Tuple]
    result: Future[Any]
    sent: float
    local: bool = False
    """Written on the task's own thread (``write_arrow``), not in Spark."""


class DataFrameSink(TwoPhaseCommitSink["CheckpointRows"]):
    """Writes its input to Spark: every batch of tuples becomes a DataFrame whose columns are the
    input fields, and ``foreach_batch(df, batch_id)`` runs on it in the shared Spark.

    - A batch is sealed at ``batch_rows`` tuples, or ``batch_secs`` after its first tuple came,
      or sooner when Spark has room for it (after ``LINGER_SECS``): batches grow while Spark is
      busy, and a batch never waits for rows the spouts' pending budget holds back.
    - With ``write_parquet``, batches that wait behind a running write are written together by
      the next Spark job (each still in its own ``batch_id=N`` directory, acked once it is):
      a job costs about as much for a few rows as for many.
    - Unless the topology's config sets ``max_spout_pending``, a topology with a sink lets each
      spout task have ``batch_rows`` trees in flight for every batch a sink task it feeds may
      have in Spark, plus one filling (5 with ``write_parquet``, 3 otherwise; shared out over
      the spout tasks feeding the sink; never less than the plain default). A smaller budget
      set in the config is kept, with a warning: every Spark job then writes fewer rows, and
      the sink is slower.
    - Its tuples are acked once ``foreach_batch`` has returned. If it raises, they are failed
      (their spouts replay them) and the error is reported (``metrics()[id]["errors"]``); the
      topology carries on. So a batch is written at least once: make ``foreach_batch``
      idempotent per ``batch_id`` (``write_parquet`` is) and de-duplicate downstream by a key.
    - ``batch_id`` increases within a task's run and is unique across the sink's tasks and
      across restarts of a task: tasks claim blocks of ids from one counter for the cluster
      (a small Ray actor, not Spark), not from their clocks, so that tasks writing to one
      place never overwrite each other's batches, whatever the clocks of the nodes they are
      restarted on.
    - Column types are inferred from the first batch with a value for the field, or declared
      with ``schema`` (``{"count": "int64"}`` or a ``pyarrow.Schema``). A value that does not fit
      its column fails its tuple, with a ``SchemaMismatchError`` naming the field; the rest of
      the batch is written.
    - A ``foreach_batch`` that can take a batch as an Arrow table (``write_arrow(table,
      batch_id)``: an ``ArrowBatchWriter``, as ``write_parquet`` is) is handed the table on a
      thread of the sink task, one batch at a time, without Spark -- unless a column has a type
      it cannot take (timestamps, decimals, nested; see ``arrow_writable``): that batch goes to
      Spark. Acked after it returned, failed if it raised, as for any ``foreach_batch``.
    - ``foreach_batch`` is a function or its dotted import path (``"package.module.function"``,
      for topology files); it must be importable or picklable, as it runs in another process.
    - The shared Spark starts when the first sink task starts (``prepare`` waits for it, ~25 s),
      or for an ``ArrowBatchWriter``, when a batch first needs it (that batch waits for it);
      the topology config's ``spark.*`` keys configure it: ``spark.executor.instances``,
      ``spark.executor.cores`` and ``spark.executor.memory`` (default 1, 1, ``1g``) size it, the
      others go to Spark as they are. If it already runs, it is used as it is. It runs beside a
      driver's own ``spark_session()``.
    - If Spark cannot start, the sink reports why (``SparkUnavailableError`` with the cause, in
      ``metrics()[id]["errors"]`` and the log), holds its tuples with their timeouts reset (the
      spouts stop at their pending budget; nothing is failed or replayed) and tries again after
      5 s, then at most every 60 s.

    Under ``processing_guarantee="exactly_once"`` it commits each checkpoint's rows with the
    checkpoint, so every row lands exactly once (it is a ``TwoPhaseCommitSink``; what it
    writes is in ``rayflow/spark/_checkpointed.py``). Each task writes one batch per
    checkpoint, ``batch_id = txid * 1_000_000 + task`` (the checkpoint's txid, then the task
    id), and acks each tuple as it takes it:

    - ``write_parquet`` writes the rows as they come, ``batch_rows`` to a file, into a staging
      directory named by the checkpoint and the task (``_staging-...``, which readers skip);
      the checkpoint's PREPARE waits for the last file, its COMMIT renames the directory into
      place as ``batch_id=N``, a rollback deletes it. A checkpoint written again replaces its
      batch: a row is never published twice.
    - any other ``foreach_batch`` is called once per checkpoint and task, at the COMMIT, with
      every row the task received for that checkpoint; the rows are kept in the topology's
      state provider from the PREPARE on, so a task restarted before its COMMIT still writes
      them. It never sees rows a rollback voids, but may be called again with the same
      ``batch_id`` and the same rows (a COMMIT that raised is retried; a task may die within
      one): it must replace what an earlier call with that ``batch_id`` wrote (Spark's own
      ``foreachBatch`` contract). Its inputs must all have the same fields.

    A checkpoint waits for its PREPARE (``write_parquet``) or COMMIT (a ``foreach_batch``) to
    be written, so keep that well under the checkpoint interval. ``batch_secs`` plays no part.
    A topology started afresh under a name that already wrote to the same path numbers its
    checkpoints from 1 again, and its batches replace that run's: give it a path of its own.

    Keep ``batch_secs`` plus the time a ``foreach_batch`` takes well under the topology's
    ``message_timeout_secs``, or held tuples time out and are replayed (duplicates, not loss).
    A ``foreach_batch`` that has not returned within ``message_timeout_secs`` is given up on:
    its tuples are failed, a ``ForeachBatchError`` says so, its Spark jobs are cancelled and
    its place goes to the next batch (a call stuck outside Spark runs on; its result is ignored).

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
            function = resolve_function(foreach_batch)  # fail now, not in the first batch
        elif callable(foreach_batch):
            function = foreach_batch
        else:
            raise ConfigError(
                f"DataFrameSink: foreach_batch must be a function or its dotted path, got {foreach_batch!r}"
            )
        if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
            raise ConfigError(f"DataFrameSink: batch_rows must be an integer >= 1, got {batch_rows!r}")
        if isinstance(batch_secs, bool) or not isinstance(batch_secs, (int, float)) or batch_secs <= 0:
            raise ConfigError(f"DataFrameSink: batch_secs must be a number of seconds > 0, got {batch_secs!r}")
        from ._arrow import parse_schema
        from ._parquet import ArrowBatchWriter, ParquetBatchWriter

        self.foreach_batch = foreach_batch
        self._together = isinstance(function, ParquetBatchWriter)  # the shared Spark writes its queue together
        self._arrow = isinstance(function, ArrowBatchWriter)
        self.batch_rows = batch_rows
        self.batch_secs = float(batch_secs)
        self.schema = parse_schema(schema)

    @property
    def max_inflight(self) -> int:
        """Batches of one task in Spark at once: more for ``write_parquet``, whose waiting batches
        share a Spark job, than for a ``foreach_batch`` that makes a job of each."""
        return MAX_INFLIGHT_TOGETHER if self._together else MAX_INFLIGHT

    def pending_need(self) -> PendingNeed:
        """What one task of this sink needs in flight towards it to keep pace: ``batch_rows``
        trees for each batch it may have in Spark, and as many for the one filling meanwhile. A
        Spark job costs about as much for a few rows as for a full batch, so with fewer every
        batch leaves when Spark has room, never full, and the sink runs at a fraction of its
        pace. The runner shares this out over the spout tasks that feed the sink
        (``rayflow/_pending.py``)."""
        batches = self.max_inflight + 1
        return PendingNeed(
            batches * self.batch_rows,
            reason=f"of batch_rows={self.batch_rows} fill {batches} batches each ({batches - 1} in Spark, one filling)",
            shortfall="every Spark job writes fewer rows and the sink is slower",
            remedy="lower batch_rows",
        )

    def _has_room(self) -> bool:
        """Spark can take a batch that has not filled: a slot is free -- for ``write_parquet``,
        every slot, as what waits behind a write is written with the next one anyway."""
        return len(self._inflight) < (1 if self._max_inflight == MAX_INFLIGHT_TOGETHER else self._max_inflight)

    def get_component_configuration(self) -> dict[str, Any]:
        return {"tick_tuple_freq_secs": min(self.batch_secs, RESULT_POLL_SECS)}

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        from ._shared import settings_from_conf

        self._collector = collector
        self._name = context.this_component_id
        self._batcher = Batcher(self.batch_rows, self.batch_secs)
        self._builders: dict[tuple[str, ...], TableBuilder] = {}
        self._sealed: deque[Batch] = deque()
        self._inflight: list[_InFlight] = []
        self._max_inflight = self.max_inflight
        self._ids = range(0)
        self._writer: ArrowBatchWriter | None = None
        if self._arrow:  # resolved here too: a dotted path names it
            writer = self.foreach_batch
            self._writer = resolve_function(writer) if isinstance(writer, str) else writer  # type: ignore[assignment]
        self._writing: ThreadPoolExecutor | None = None
        self._landed = False
        """A batch's call has returned since results were last looked at (set by the call's
        future, on whatever thread completes it): so every tuple costs a look at one flag, not
        at every batch in flight; ticks look for overdue batches too."""
        timeout = conf.get("message_timeout_secs")
        if timeout and self.batch_secs >= timeout / 2:
            logger.warning(
                "sink %r: batch_secs=%s is not well under message_timeout_secs=%s: tuples may time out and replay",
                self._name,
                self.batch_secs,
                timeout,
            )
        self._hold_reset_secs = (timeout or 30) / 3
        self._deadline_secs = float(timeout or 30)
        self._settings = settings_from_conf(conf)
        self._spark: Any = None
        self._retry_at = 0.0
        self._retry_wait = RETRY_SECS
        self._held_reset_at = 0.0
        self._staged: StagedParquet | StagedBatches | None = None
        if conf.get("processing_guarantee") == "exactly_once":
            self._staged = self._staging(conf, context)
        else:
            self._claim_ids()  # here, not in the first batch: the counter may start (~1 s)
        if not self._arrow:
            self._connect()  # waits until Spark is up (~25 s the first time)

    def _staging(self, conf: dict[str, Any], context: TopologyContext) -> StagedParquet | StagedBatches:
        """How this task writes each checkpoint's rows under exactly-once."""
        from ._checkpointed import StagedBatches, StagedParquet
        from ._parquet import ParquetBatchWriter

        # The task's index among the sink's tasks, not its id: ids move when a topology is resumed
        # with another component rescaled, and a task must recover its own staged checkpoints.
        task = context.get_component_tasks(context.this_component_id).index(context.this_task_id)
        if isinstance(self._writer, ParquetBatchWriter):
            return StagedParquet(
                self._name,
                task,
                self.schema,
                self._writer,
                self.batch_rows,
                lambda write: self._thread().submit(write),
                self._in_spark,
            )
        return StagedBatches(self._name, task, self.schema, conf, self._name, self._write_now)

    def cleanup(self) -> None:
        if self._writing is not None:
            self._writing.shutdown(wait=False)
        if self._staged is not None:
            self._staged.close()

    # -- exactly-once: a transaction per checkpoint (``_checkpointed.py``) ------------------------
    def begin_transaction(self, txid: int) -> CheckpointRows:
        return self._exactly_once().begin(txid)

    def invoke(self, transaction: CheckpointRows, tup: Tuple) -> None:
        self._exactly_once().add(transaction, tup)

    def pre_commit(self, transaction: CheckpointRows) -> None:
        self._exactly_once().pre_commit(transaction)

    def commit(self, transaction: CheckpointRows) -> None:
        self._exactly_once().commit(transaction)

    def abort(self, transaction: CheckpointRows) -> None:
        self._exactly_once().abort(transaction)

    def recover_and_commit(self, txid: int) -> None:
        self._exactly_once().recover_and_commit(txid)

    def recover_and_abort(self, txid: int) -> None:
        self._exactly_once().recover_and_abort(txid)

    def _exactly_once(self) -> StagedParquet | StagedBatches:
        if self._staged is None:
            raise RayflowError(
                f"sink {self._name!r}: its transactions run only under processing_guarantee 'exactly_once'"
            )
        return self._staged

    def _in_spark(self, fn: Any, table: pa.Table, batch_id: int) -> Future[Any]:
        """``fn(DataFrame of table, batch_id)`` in the shared Spark, started if need be."""
        if self._spark is None and not self._connect():
            raise SparkUnavailableError(f"sink {self._name!r}: the shared Spark is not available (see the errors)")
        future: Future[Any] = self._spark.foreach_batch.remote(fn, table, batch_id).future()
        return future

    def _write_now(self, table: pa.Table, batch_id: int) -> None:
        """Write one batch and wait for it: ``write_arrow`` in this task when the writer takes
        the table, else ``foreach_batch`` in the shared Spark, given up (and its jobs
        cancelled) after ``message_timeout_secs``. Raises ``ForeachBatchError`` if it failed."""
        from ._parquet import arrow_writable

        try:
            if self._writer is not None and arrow_writable(table.schema):
                self._writer.write_arrow(table, batch_id)
                return
            future = self._in_spark(self.foreach_batch, table, batch_id)
            try:
                future.result(timeout=self._deadline_secs)
            except concurrent.futures.TimeoutError:
                self._spark.cancel_batch.remote(batch_id)
                raise ForeachBatchError(
                    f"batch {batch_id} ({table.num_rows} rows): foreach_batch did not return within "
                    f"{self._deadline_secs:g} s (message_timeout_secs); its Spark jobs are cancelled and the "
                    "commit is tried again at the next checkpoint interval"
                ) from None
        except (ForeachBatchError, SparkUnavailableError):
            raise
        except Exception as exc:
            raise self._describe(exc, batch_id, table.num_rows, "the commit is tried again") from exc

    def execute(self, tup: Tuple) -> None:
        now = time.monotonic()
        tick = tup.is_tick()
        if self._landed or (tick and self._inflight):
            self._collect(now)
        if tick:  # untracked: nothing to ack
            self._sealed.extend(self._batcher.due(now))
        else:
            full = self._batcher.add(tup, now)
            if full is not None:
                self._sealed.append(full)
        if not self._sealed and self._has_room():  # what waited goes
            self._sealed.extend(self._batcher.due(now, LINGER_SECS))
        if self._sealed:
            self._submit(now)

    # -- batches to Spark and back -------------------------------------------------------------
    def _submit(self, now: float) -> None:
        from ._parquet import arrow_writable

        while self._sealed and len(self._inflight) < self._max_inflight:
            batch = self._sealed.popleft()
            table, tuples = self._table(batch)
            if table is None:
                continue
            writer = self._writer if self._writer is not None and arrow_writable(table.schema) else None
            if writer is None and self._spark is None and (now < self._retry_at or not self._connect()):
                self._sealed.appendleft(Batch(batch.fields, batch.opened, tuples))  # its rejects are failed
                self._hold(now)
                return
            entry = _InFlight(self._next_batch_id(), batch, tuples, Future(), now, writer is not None)
            try:
                if writer is not None:
                    entry.result = self._thread().submit(writer.write_arrow, table, entry.batch_id)
                else:
                    entry.result = self._spark.foreach_batch.remote(self.foreach_batch, table, entry.batch_id).future()
            except Exception as exc:  # could not even hand it over: fail it like a failed call
                entry.result.set_exception(exc)
            entry.result.add_done_callback(self._on_done)
            self._inflight.append(entry)

    def _on_done(self, _: Future[Any]) -> None:
        self._landed = True

    def _thread(self) -> ThreadPoolExecutor:
        """The thread ``write_arrow`` runs on: one, so that a task's batches are written in order
        and a write never competes with the next one."""
        if self._writing is None:
            self._writing = ThreadPoolExecutor(1, thread_name_prefix=f"rayflow-sink-{self._name}")
        return self._writing

    def _connect(self) -> bool:
        """Reach the shared Spark, starting it if need be; if it cannot start, say why and when
        the next attempt is."""
        from ._shared import root_cause, shared_spark

        try:
            self._spark = shared_spark(self._settings)
        except SparkUnavailableError as exc:
            self._spark_unavailable(exc)
            return False
        except Exception as exc:  # the actor died on the way, or Ray could not reach it
            unreachable = SparkUnavailableError(f"the shared Spark cannot be reached: {root_cause(exc)}")
            unreachable.__cause__ = exc
            self._spark_unavailable(unreachable)
            return False
        self._retry_wait = RETRY_SECS
        return True

    def _spark_unavailable(self, exc: BaseException) -> None:
        self._spark = None
        self._retry_at = time.monotonic() + self._retry_wait
        error = SparkUnavailableError(
            f"sink {self._name!r}: {exc} -- its tuples are held (not failed) and Spark is tried again in "
            f"{self._retry_wait:.0f} s"
        )
        error.__cause__ = exc
        self._collector.report_error(error)
        self._retry_wait = min(2 * self._retry_wait, RETRY_MAX_SECS)

    def _hold(self, now: float) -> None:
        """Keep the held tuples' trees alive while Spark is unavailable, so that the spouts stop at
        their pending budget rather than replay what times out."""
        if now < self._held_reset_at:
            return
        self._held_reset_at = now + self._hold_reset_secs
        for batch in self._sealed:
            for tup in batch.tuples:
                self._collector.reset_timeout(tup)
        for tup in self._batcher.tuples():
            self._collector.reset_timeout(tup)

    def _next_batch_id(self) -> int:
        if not self._ids:
            self._claim_ids()
        batch_id = self._ids[0]
        self._ids = self._ids[1:]
        return batch_id

    def _claim_ids(self) -> None:
        from ._batch_ids import claim_batch_ids

        first = claim_batch_ids(BATCH_ID_BLOCK)
        self._ids = range(first, first + BATCH_ID_BLOCK)

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

    def _collect(self, now: float) -> None:
        """Ack the tuples of every batch whose ``foreach_batch`` returned, fail those that raised
        or have not returned within the deadline; a batch that found Spark unavailable is held
        again, in order, not failed."""
        self._landed = False  # before looking: a call returning meanwhile sets it again
        inflight = self._inflight
        if not inflight or not any(entry.result.done() or self._overdue(entry, now) for entry in inflight):
            return
        self._inflight = []
        unavailable: list[Batch] = []
        for entry in inflight:
            if not entry.result.done():
                if self._overdue(entry, now):
                    self._give_up(entry)
                else:
                    self._inflight.append(entry)
                continue
            error = entry.result.exception()
            if error is None:
                for tup in entry.tuples:
                    self._collector.ack(tup)
            elif isinstance(error, SparkUnavailableError) or isinstance(
                getattr(error, "cause", None), SparkUnavailableError
            ):
                unavailable.append(Batch(entry.batch.fields, entry.batch.opened, entry.tuples))
                if self._spark is not None:
                    self._spark_unavailable(error)
            else:
                for tup in entry.tuples:
                    self._collector.fail(tup)
                self._collector.report_error(
                    self._describe(error, entry.batch_id, len(entry.tuples), "its tuples are failed and replayed")
                )
        self._sealed.extendleft(reversed(unavailable))

    def _overdue(self, entry: _InFlight, now: float) -> bool:
        return now - entry.sent >= self._deadline_secs

    def _give_up(self, entry: _InFlight) -> None:
        """``foreach_batch`` has run for ``message_timeout_secs``: its tuples have timed out at
        their spouts and are being replayed, so its slot goes to the next batch. Its Spark jobs
        are cancelled; a call stuck outside Spark runs on, and its result is ignored."""
        for tup in entry.tuples:
            self._collector.fail(tup)
        self._collector.report_error(
            ForeachBatchError(
                f"batch {entry.batch_id} ({len(entry.tuples)} rows): foreach_batch did not return within "
                f"{self._deadline_secs:g} s (message_timeout_secs); its tuples are failed and replayed and its "
                "Spark jobs cancelled. Make foreach_batch faster, batches smaller (batch_rows), or raise "
                "message_timeout_secs"
            )
        )
        if self._spark is not None and not entry.local:
            self._spark.cancel_batch.remote(entry.batch_id)

    def _describe(self, error: BaseException, batch_id: int, rows: int, outcome: str) -> ForeachBatchError:
        import ray

        cause = getattr(error, "cause", None) if isinstance(error, ray.exceptions.RayTaskError) else None
        if isinstance(error, ray.exceptions.RayActorError):
            self._spark = None  # the shared Spark died: the next batch starts it again
            what = f"the shared Spark died ({str(error).strip().splitlines()[0]})"
        else:
            cause = cause or error
            text = str(cause).strip().splitlines()
            what = f"foreach_batch raised {type(cause).__name__}: {text[0] if text else ''}"
        described = ForeachBatchError(f"batch {batch_id} ({rows} rows) failed, {outcome}: {what}")
        described.__cause__ = cause or error
        return described
