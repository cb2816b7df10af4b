"""The shared Spark: one Spark application in one named Ray actor, for the whole cluster.

Why an actor: a ``DataFrameSink`` runs as several tasks, each a Ray actor in its own process,
and a SparkSession belongs to the process that started it (py4j). A Spark per sink task would be
a 1.6 GB, 25-second application per task. So the sink tasks hand their batches, as Arrow tables,
to this actor, which turns each into a DataFrame and calls the user's ``foreach_batch`` there.
The driver reaches the same Spark with ``run_in_spark`` -- for the final query of a job, or to
build a ``DataFrameSpout`` from a DataFrame -- so a job holds one Spark, not two.

The actor is detached and named (``rayflow-spark`` in namespace ``rayflow``): it outlives the
task that happened to start it, restarted sink tasks find it again, and ``stop_spark()`` (or the
end of the Ray cluster) stops it. Calls run on threads, batches at most one per executor core
at a time, so with several cores a ``foreach_batch`` runs concurrently with itself (on
different batches) and must be safe to.

``write_parquet`` batches come here only when a column has a type pyarrow cannot write as
Spark would (``arrow_writable``); the others the sink task writes itself
(``ParquetBatchWriter.write_arrow``), and batch ids come from their own counter
(``batch_ids.py``), so a topology whose sinks only write Parquet never starts Spark. Batches
for ``write_parquet`` that do come here and queue behind a running write go together: the next
call to get an executor core writes every batch waiting for the same path (and schema) in one
Spark job (``ParquetBatchWriter.write_together``), and each call returns once its batch is in
place, or raises what that job raised. A job costs about as much for a few rows as for many; so
the rows that arrive during a write are written by the next job, as in Structured Streaming,
while every batch keeps its own ``batch_id`` and directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._dotted import resolve_function
from .._errors import ConfigError, RayflowError
from ._scratch import remove_session_library_copy
from ._session import SparkSettings, SparkUnavailableError, start_spark, stop_spark_session, stop_started_spark

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from ._parquet import ParquetBatchWriter

__all__ = [
    "SHARED_NAME",
    "SHARED_NAMESPACE",
    "root_cause",
    "run_in_spark",
    "settings_from_conf",
    "shared_spark",
    "stop_shared_spark",
    "stop_spark",
]

logger = logging.getLogger("rayflow")

SHARED_NAME = "rayflow-spark"
SHARED_NAMESPACE = "rayflow"
CONCURRENCY = 64
"""Calls the shared Spark serves at once (on threads). Batches run at most one per executor
core at a time (more only thrash: 8 batches of 5,000 rows took 12 s at once, 5 s one by one);
the others wait their turn, which leaves threads for ``run_in_spark`` meanwhile."""

JVM_NAMESPACE = "rayflow-spark-jvm"
"""The Ray namespace of the shared Spark's Java side, apart from the job's, where a driver's own
``spark_session()`` puts its Java side: raydp names its application master ``RAY_APP_MASTER``
in that namespace, so two Sparks in one namespace cannot both start. The price: inside the shared
Spark, ``ray.data.from_spark`` looks for the executors in the job's namespace and hangs, so
``DataFrameSpout`` collects a DataFrame as Arrow instead."""

CANCEL_AGAIN_SECS = 1.0
"""A cancelled batch whose call is still running has its job group cancelled again this often:
a job the call starts after a cancel (``cancelJobGroup`` stops only the jobs running then)
would otherwise hold an executor core for as long as it takes."""
CANCEL_AGAIN_TIMES = 600
REMEMBERED_CANCELS = 10_000
"""Cancelled batch ids kept, for calls that arrive after their cancel (oldest forgotten first)."""

DEFAULT_SETTINGS = SparkSettings(app_name="rayflow-shared")
"""Its own application name: raydp names its actors after it, and ``spark_session()`` in a
driver uses ``rayflow``."""


class BatchCancelled(RayflowError):
    """The sink gave up on this batch (past ``message_timeout_secs``) before it was written here:
    it is failed and replayed, so it is not written."""


@dataclass
class _Waiting:
    """A ``write_parquet`` batch waiting for a write; ``done`` once it is in place or failed."""

    table: pa.Table
    batch_id: int
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class SharedSpark:
    """The body of the shared Spark actor. Startup errors are kept, not raised, so that the
    caller gets them as they are (a constructor that raises surfaces as ``ActorDiedError``)."""

    def __init__(self, settings: SparkSettings) -> None:
        self._settings = settings
        self._error: Exception | None = None
        self._spark: SparkSession | None = None
        self._batch_slots = threading.BoundedSemaphore(settings.executors * settings.cores)
        self._waiting_lock = threading.Lock()
        self._waiting: dict[tuple[str, str], list[_Waiting]] = {}
        self._job_groups: dict[int, str] = {}
        """The job group of each batch being written with others (its jobs are theirs)."""
        self._writing: dict[int, threading.Event] = {}
        """Batches whose call runs now (its jobs may start any time), set when it ends."""
        self._cancelled: dict[int, None] = {}
        """Batches the sink gave up on, oldest first: a call for one of them that has not started
        yet does not start."""
        try:
            self._spark = start_spark(settings, jvm_namespace=JVM_NAMESPACE)
            self._warm_up()
        except SparkUnavailableError as exc:
            self._error = exc
        except Exception as exc:  # Spark's own start-up failures: py4j and Java errors
            self._error = SparkUnavailableError(f"Spark did not start: {root_cause(exc)}")

    def _warm_up(self) -> None:
        """Write one tiny batch as Parquet and throw it away: the first job of a Spark pays
        10-15 s of JIT and Python worker start-up, which would otherwise land on the first
        batch (and count against its tuples' timeout)."""
        import pyarrow as pa

        from ._arrow import to_spark_dataframe

        scratch = tempfile.mkdtemp(prefix="rayflow-spark-warm-up-")
        try:
            to_spark_dataframe(self._session(), pa.table({"x": [1]})).write.mode("overwrite").parquet(scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def startup_error(self) -> Exception | None:
        return self._error

    def settings(self) -> SparkSettings:
        return self._settings

    def foreach_batch(self, fn: Callable[[DataFrame, int], Any] | str, table: pa.Table, batch_id: int) -> None:
        """``fn(DataFrame of table, batch_id)``; ``fn`` may be a dotted import path."""
        from ._arrow import to_spark_dataframe
        from ._parquet import PARTITION, ParquetBatchWriter

        function = resolve_function(fn) if isinstance(fn, str) else fn
        if isinstance(function, ParquetBatchWriter) and PARTITION not in table.column_names:
            self._write_together(function, table, batch_id)
            return
        with self._batch_slots:  # jobs beyond the executor cores only thrash
            spark = self._session()
            refused, done = self._start_writing([batch_id])
            if refused:
                raise _given_up(batch_id)
            try:
                # Thread-local (pyspark pins a JVM thread to each Python thread): tags this batch's jobs.
                spark.sparkContext.setJobGroup(
                    _job_group(batch_id), f"rayflow batch {batch_id}", interruptOnCancel=True
                )
                function(to_spark_dataframe(spark, table), batch_id)
            finally:
                self._stop_writing([batch_id], done)

    def _start_writing(self, ids: list[int]) -> tuple[set[int], threading.Event]:
        """The ids of ``ids`` the sink gave up on already (not to be written; their cancel is
        spent), and the event set when the others are written: they are marked as being written
        from now on, so a cancel keeps cancelling their jobs until they end."""
        with self._waiting_lock:
            refused = {batch_id for batch_id in ids if batch_id in self._cancelled}
            for batch_id in refused:
                del self._cancelled[batch_id]
            done = threading.Event()
            self._writing.update((batch_id, done) for batch_id in ids if batch_id not in refused)
        return refused, done

    def _stop_writing(self, ids: list[int], done: threading.Event) -> None:
        with self._waiting_lock:
            for batch_id in ids:
                self._writing.pop(batch_id, None)
                self._cancelled.pop(batch_id, None)
        done.set()

    def _write_together(self, writer: ParquetBatchWriter, table: pa.Table, batch_id: int) -> None:
        """Wait for a core; then write this batch and every other one waiting for the same path
        and schema in one job -- unless a call that got a core first has written it already."""
        key = (writer.path, str(table.schema))
        mine = _Waiting(table, batch_id)
        with self._waiting_lock:
            self._waiting.setdefault(key, []).append(mine)
        with self._batch_slots:
            if not mine.done.is_set():
                with self._waiting_lock:
                    group = self._waiting.pop(key, [])
                if group:  # else every waiting batch, this one too, is being written on another core
                    self._write_group(writer, group)
        mine.done.wait()
        if mine.error is not None:
            raise mine.error

    def _write_group(self, writer: ParquetBatchWriter, group: list[_Waiting]) -> None:
        from ._arrow import to_spark_dataframe

        refused, done = self._start_writing([waiting.batch_id for waiting in group])
        for waiting in group:
            if waiting.batch_id in refused:
                waiting.error = _given_up(waiting.batch_id)
                waiting.done.set()
        group = [waiting for waiting in group if waiting.batch_id not in refused]
        if not group:
            return
        job_group = _job_group(group[0].batch_id)
        ids = [waiting.batch_id for waiting in group]
        with self._waiting_lock:
            self._job_groups.update(dict.fromkeys(ids, job_group))
        try:
            spark = self._session()
            spark.sparkContext.setJobGroup(job_group, f"rayflow batches {ids}", interruptOnCancel=True)
            frames = [(to_spark_dataframe(spark, waiting.table), waiting.batch_id) for waiting in group]
            if len(frames) == 1:
                writer(*frames[0])
            else:
                writer.write_together(frames)
        except BaseException as exc:
            for waiting in group:
                waiting.error = exc
        finally:
            with self._waiting_lock:
                for batch_id in ids:
                    self._job_groups.pop(batch_id, None)
            self._stop_writing(ids, done)
            for waiting in group:
                waiting.done.set()

    def cancel_batch(self, batch_id: int) -> None:
        """Cancel the Spark jobs of a batch whose sink gave up waiting for it (and so those of
        the batches written together with it, which fail and are replayed)."""
        with self._waiting_lock:
            self._cancelled[batch_id] = None
            while len(self._cancelled) > REMEMBERED_CANCELS:
                del self._cancelled[next(iter(self._cancelled))]
            job_group = self._job_groups.get(batch_id, _job_group(batch_id))
            running = self._writing.get(batch_id)
        if self._spark is None:
            return
        self._spark.sparkContext.cancelJobGroup(job_group)
        if running is not None:  # its call may start another job yet: cancel until it ends
            threading.Thread(
                target=self._keep_cancelling, args=(job_group, running), name=f"rayflow-cancel-{batch_id}", daemon=True
            ).start()

    def _keep_cancelling(self, job_group: str, running: threading.Event) -> None:
        for _ in range(CANCEL_AGAIN_TIMES):
            if running.wait(CANCEL_AGAIN_SECS) or self._spark is None:
                return
            with contextlib.suppress(Exception):
                self._spark.sparkContext.cancelJobGroup(job_group)

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return fn(self._session(), *args, **kwargs)

    def stop(self) -> None:
        if self._spark is not None:
            stop_started_spark()
            self._spark = None

    def _session(self) -> SparkSession:
        if self._spark is None:
            raise self._error or SparkUnavailableError("the shared Spark was stopped")
        return self._spark


def shared_spark(settings: SparkSettings | None = None, *, wait: bool = True) -> Any:
    """The handle of the shared Spark actor, starting it with ``settings`` if it is not running.

    With ``wait`` (the default) this blocks until Spark is up (~25 s the first time) and raises
    ``SparkUnavailableError`` if it cannot start; without, calls made on the handle queue until
    it is up. When it already runs with other settings, those stay (and a warning says so).
    """
    import ray

    if not ray.is_initialized():
        raise SparkUnavailableError(
            "the shared Spark runs on the connected Ray cluster: call ray.init() first, or use rayflow.LocalCluster()"
        )
    settings = settings or DEFAULT_SETTINGS
    handle = (
        _remote_class()
        .options(
            name=SHARED_NAME,
            namespace=SHARED_NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            max_concurrency=CONCURRENCY,
        )
        .remote(settings)
    )
    if wait:
        error, running = ray.get([handle.startup_error.remote(), handle.settings.remote()])
        if error is not None:
            ray.kill(handle)  # so that the next attempt starts afresh
            raise error
        if running != settings:
            logger.warning(
                "the shared Spark already runs with %s; asked for %s (stop_spark() to restart)", running, settings
            )
    return handle


def _given_up(batch_id: int) -> BatchCancelled:
    return BatchCancelled(f"batch {batch_id}: the sink gave up on it before it was written")


def _job_group(batch_id: int) -> str:
    return f"rayflow-batch-{batch_id}"


def root_cause(exc: BaseException) -> str:
    """What went wrong at the bottom of ``exc``: through Ray's task errors (``cause``), Python's
    exception chain and py4j's Java exception, the innermost error as ``Type: first line``."""
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = getattr(exc, "cause", None) or exc.__cause__
        if not isinstance(inner, BaseException):
            break
        exc = inner
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            return str(java.toString())
        except Exception:  # the JVM may be gone: fall back to py4j's text
            pass
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"


@functools.cache
def _remote_class() -> Any:
    import ray

    return ray.remote(SharedSpark)


def run_in_spark(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Run ``fn(spark, *args, **kwargs)`` in the shared Spark and return its result.

    The Spark that ``DataFrameSink`` batches run in, started here if it is not running yet. The
    result travels back pickled: return plain values or rows (``df.collect()``), not DataFrames.
    Use it for the final query of a job, or to build a ``DataFrameSpout`` from a DataFrame,
    without starting a second Spark in the driver::

        def top_words(spark, path):
            return spark.read.parquet(path).orderBy("count", ascending=False).limit(3).collect()

        rows = run_in_spark(top_words, "/tmp/counts")
    """
    import ray

    return ray.get(shared_spark().run.remote(fn, args, kwargs))


def stop_spark() -> None:
    """Stop this process's Spark (``spark_session``) and the shared Spark of ``DataFrameSink``
    and ``run_in_spark``, whichever are running. Their memory is freed; sinks still running
    start the shared one again on their next batch."""
    stop_spark_session()
    stop_shared_spark()


def stop_shared_spark() -> None:
    """Stop the shared Spark if it runs (its JVMs first, then the actor); then remove the Ray
    session's copy of Ray's Java library on this node if no Spark here uses it any more."""
    import ray

    if not ray.is_initialized():
        return
    try:
        handle = ray.get_actor(SHARED_NAME, namespace=SHARED_NAMESPACE)
    except ValueError:
        handle = None
    if handle is not None:
        try:
            ray.get(handle.stop.remote(), timeout=60)
        except Exception as exc:  # it may be dying already; it is killed below either way
            logger.warning("stopping the shared Spark: %s: %s", type(exc).__name__, exc)
        ray.kill(handle)
    remove_session_library_copy()


def settings_from_conf(conf: Mapping[str, Any]) -> SparkSettings:
    """The shared Spark's settings from a topology's config: its ``spark.*`` keys.

    ``spark.executor.instances``, ``spark.executor.cores`` and ``spark.executor.memory`` size it
    (default 1, 1 and ``1g``); every other ``spark.*`` key is passed on to Spark as it is."""
    given = {key: value for key, value in conf.items() if isinstance(key, str) and key.startswith("spark.")}
    executors = _positive_int(given.pop("spark.executor.instances", DEFAULT_SETTINGS.executors), "instances")
    cores = _positive_int(given.pop("spark.executor.cores", DEFAULT_SETTINGS.cores), "cores")
    memory = str(given.pop("spark.executor.memory", DEFAULT_SETTINGS.memory))
    configs = {key: str(value) for key, value in given.items()}
    return dataclasses.replace(DEFAULT_SETTINGS, executors=executors, cores=cores, memory=memory, configs=configs)


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"spark.executor.{name} must be an integer >= 1, got {value!r}")
    return value
