"""``DataFrameSink`` without Spark or Ray: the shared Spark replaced by a fake whose results the
test completes by hand. What is batched when, when tuples are acked or failed, batch ids, and
what the sink does while Spark cannot start."""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from datetime import datetime
from typing import Any

import pytest

pytest.importorskip("pyarrow")
import pyarrow.dataset as pds  # noqa: E402

from rayflow import ConfigError, Spout, TopologyBuilder  # noqa: E402
from rayflow._executors.bolt import MAX_TIMED  # noqa: E402
from rayflow.spark import (  # noqa: E402
    DataFrameSink,
    ForeachBatchError,
    SchemaMismatchError,
    SparkUnavailableError,
    write_parquet,
)
from rayflow.spark import _batch_ids as batch_ids_module  # noqa: E402
from rayflow.spark import _shared as shared_module  # noqa: E402
from rayflow.spark import _sink as sink_module  # noqa: E402
from rayflow.spark._parquet import ParquetBatchWriter  # noqa: E402
from rayflow.spark._shared import root_cause  # noqa: E402
from rayflow.spark._sink import (  # noqa: E402
    BATCH_ID_BLOCK,
    LINGER_SECS,
    MAX_INFLIGHT,
    MAX_INFLIGHT_TOGETHER,
    RESULT_POLL_SECS,
    RETRY_SECS,
    Batcher,
)
from rayflow.testing import InProcessTopology  # noqa: E402
from tests.conftest import eventually  # noqa: E402


class Row:
    """What the sink uses of a tuple."""

    def __init__(self, *values: Any, fields: tuple[str, ...] = ("word", "n"), tick: bool = False) -> None:
        self.values = list(values)
        self.fields = list(fields)
        self._tick = tick

    def is_tick(self) -> bool:
        return self._tick

    def __repr__(self) -> str:
        return f"Row{tuple(self.values)}"


TICK = Row(0.5, fields=("rate_secs",), tick=True)


def timed(word: str, n: int) -> Row:
    """A row with a timestamp column, which ``write_parquet`` leaves to Spark (``arrow_writable``)."""
    return Row(word, n, datetime(2026, 11, 25, 12, 0, n), fields=("word", "n", "at"))


class Collector:
    def __init__(self) -> None:
        self.acked: list[Row] = []
        self.failed: list[Row] = []
        self.reset: list[Row] = []
        self.errors: list[BaseException] = []

    def reset_timeout(self, tup: Row) -> None:
        self.reset.append(tup)

    def ack(self, tup: Row) -> None:
        self.acked.append(tup)

    def fail(self, tup: Row) -> None:
        self.failed.append(tup)

    def report_error(self, exc: BaseException) -> None:
        self.errors.append(exc)


class Context:
    def __init__(self, task: int, tasks: list[int]) -> None:
        self.this_task_id = task
        self.this_component_id = "sink"
        self._tasks = tasks

    def get_component_tasks(self, component_id: str) -> list[int]:
        return list(self._tasks)


def ref(future: Future[Any]) -> Any:
    """What a sink uses of an ``ObjectRef``."""
    return type("Ref", (), {"future": lambda _self: future})()


class FakeSpark:
    """Stands for the shared Spark's handle: ``foreach_batch.remote(...)`` records the call and
    returns a result the test completes; and for the batch id counter's: ``claim_batch_ids.remote(n)``
    counts as it does, from ``first_id``."""

    def __init__(self, first_id: int = 1_000, *, returns_at_once: bool = False) -> None:
        self.returns_at_once = returns_at_once
        self.calls: list[tuple[int, Any, Future[Any]]] = []
        self.foreach_batch = self
        self.next_id = first_id
        self.cancelled: list[int] = []
        self.claim_batch_ids = type("Method", (), {"remote": lambda _self, count: self._claim(count)})()
        self.cancel_batch = type("Method", (), {"remote": lambda _self, batch_id: self.cancelled.append(batch_id)})()

    def remote(self, fn: Any, table: Any, batch_id: int) -> Any:
        future: Future[Any] = Future()
        self.calls.append((batch_id, table, future))
        if self.returns_at_once:
            future.set_result(None)
        return ref(future)

    def _claim(self, count: int) -> Any:
        future: Future[Any] = Future()
        future.set_result(self.next_id)
        self.next_id += count
        return ref(future)

    def finish(self, index: int, error: BaseException | None = None) -> None:
        future = self.calls[index][2]
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(sink_module, "time", clock)
    return clock


@pytest.fixture
def spark(monkeypatch: pytest.MonkeyPatch) -> FakeSpark:
    fake = FakeSpark()
    monkeypatch.setattr(shared_module, "shared_spark", lambda *args, **kwargs: fake)
    monkeypatch.setattr(
        batch_ids_module, "claim_batch_ids", lambda count: fake.claim_batch_ids.remote(count).future().result()
    )
    return fake


def prepared(sink: DataFrameSink, task: int = 1, tasks: tuple[int, ...] = (1,)) -> Collector:
    collector = Collector()
    sink.prepare({"message_timeout_secs": 30.0}, Context(task, list(tasks)), collector)  # type: ignore[arg-type]
    return collector


def write(df: Any, batch_id: int) -> None:
    """A foreach_batch (never called here: the fake Spark only records)."""


class TestBatcher:
    def test_a_batch_is_sealed_when_it_has_batch_rows(self) -> None:
        batcher = Batcher(batch_rows=2, batch_secs=5.0)
        assert batcher.add(Row("a", 1), 0.0) is None
        full = batcher.add(Row("b", 2), 0.1)
        assert full is not None and [t.values for t in full.tuples] == [["a", 1], ["b", 2]] and len(batcher) == 0

    def test_a_batch_is_due_batch_secs_after_its_first_tuple(self) -> None:
        batcher = Batcher(batch_rows=100, batch_secs=5.0)
        batcher.add(Row("a", 1), 10.0)
        batcher.add(Row("b", 2), 14.0)
        assert batcher.due(14.9) == []
        [due] = batcher.due(15.0)
        assert len(due.tuples) == 2 and batcher.due(100.0) == []

    def test_tuples_of_different_fields_go_to_different_batches(self) -> None:
        batcher = Batcher(batch_rows=2, batch_secs=5.0)
        batcher.add(Row("a", 1), 0.0)
        assert batcher.add(Row(1.5, fields=("x",)), 0.0) is None
        assert batcher.add(Row("b", 2), 0.0).fields == ("word", "n")  # type: ignore[union-attr]
        assert [b.fields for b in batcher.due(10.0)] == [("x",)]


class TestDataFrameSink:
    def test_tuples_are_acked_only_once_foreach_batch_has_returned(self, spark: FakeSpark, clock: Clock) -> None:
        sink = DataFrameSink(write, batch_rows=2)
        collector = prepared(sink)
        rows = [Row("a", 1), Row("b", 2)]
        for row in rows:
            sink.execute(row)
        [(_, table, _)] = spark.calls
        assert table.to_pylist() == [{"word": "a", "n": 1}, {"word": "b", "n": 2}]
        assert collector.acked == []
        spark.finish(0)
        sink.execute(TICK)
        assert collector.acked == rows and collector.failed == []

    def test_a_raising_foreach_batch_fails_the_batch_and_is_reported(self, spark: FakeSpark, clock: Clock) -> None:
        sink = DataFrameSink(write, batch_rows=2)
        collector = prepared(sink)
        rows = [Row("a", 1), Row("b", 2)]
        for row in rows:
            sink.execute(row)
        spark.finish(0, ValueError("disk full"))
        sink.execute(Row("c", 3))  # results are also looked at on every tuple
        assert collector.failed == rows and collector.acked == []
        [error] = collector.errors
        assert isinstance(error, ForeachBatchError) and "ValueError: disk full" in str(error)
        assert f"batch {spark.calls[0][0]} (2 rows)" in str(error)

    def test_a_partial_batch_goes_after_linger_secs_when_spark_has_room(self, spark: FakeSpark, clock: Clock) -> None:
        """With the defaults (10,000 rows, 5 s) and the spouts' default pending budget of 5,000,
        no batch ever fills: it must not wait 5 s for rows that cannot come."""
        sink = DataFrameSink(write)
        assert sink.get_component_configuration() == {"tick_tuple_freq_secs": RESULT_POLL_SECS}
        prepared(sink)
        for i in range(5_000):
            sink.execute(Row("a", i))
        assert spark.calls == []
        clock.now += 2 * LINGER_SECS
        sink.execute(TICK)
        [(_, table, _)] = spark.calls
        assert table.num_rows == 5_000

    def test_a_batch_grows_while_spark_is_busy_until_batch_secs(self, spark: FakeSpark, clock: Clock) -> None:
        sink = DataFrameSink(write, batch_rows=100, batch_secs=2.0)
        prepared(sink)
        for i in range(MAX_INFLIGHT):  # Spark busy: every slot taken
            sink.execute(Row("a", i))
            clock.now += 2 * LINGER_SECS
            sink.execute(TICK)
        assert len(spark.calls) == MAX_INFLIGHT
        sink.execute(Row("b", 1))
        clock.now += 1.0
        sink.execute(Row("b", 2))
        clock.now += 0.9
        sink.execute(TICK)
        assert len(spark.calls) == MAX_INFLIGHT  # it grows: no room, not yet batch_secs old
        clock.now += 0.1
        sink.execute(TICK)  # batch_secs old: sealed, and queued for the first free slot
        spark.finish(0)
        sink.execute(TICK)
        assert spark.calls[-1][1].column("n").to_pylist() == [1, 2]

    def test_at_most_max_inflight_batches_are_in_spark(self, spark: FakeSpark, clock: Clock) -> None:
        """Sealed batches wait for a free slot, and go in order once results come back."""
        sink = DataFrameSink(write, batch_rows=1)
        collector = prepared(sink)
        for i in range(MAX_INFLIGHT + 2):
            sink.execute(Row("w", i))
        assert len(spark.calls) == MAX_INFLIGHT
        spark.finish(1)
        sink.execute(TICK)
        assert len(spark.calls) == MAX_INFLIGHT + 1 and [r.values[1] for r in collector.acked] == [1]
        assert spark.calls[-1][1].column("n").to_pylist() == [MAX_INFLIGHT]

    def test_write_parquet_batches_fill_behind_a_running_write_and_queue_deeper(
        self, spark: FakeSpark, clock: Clock, tmp_path: Any
    ) -> None:
        """What waits behind a write goes with the next Spark job (the shared Spark writes it
        together), so a ``write_parquet`` sink sends a batch that has not filled only when none
        of its batches is in Spark, and queues more full ones behind a running write. (Batches
        with a timestamp column: those go to Spark; the others the task writes itself.)"""
        sink = DataFrameSink(write_parquet(tmp_path), batch_rows=2)
        collector = prepared(sink)
        sink.execute(timed("a", 0))
        clock.now += 2 * LINGER_SECS
        sink.execute(TICK)  # Spark idle: the lone row goes
        assert len(spark.calls) == 1
        sink.execute(timed("b", 1))
        clock.now += 2 * LINGER_SECS
        sink.execute(TICK)
        assert len(spark.calls) == 1  # a write runs: the batch grows instead
        for n in range(2, 2 + 2 * MAX_INFLIGHT_TOGETHER):
            sink.execute(timed("c", n))
        assert len(spark.calls) == MAX_INFLIGHT_TOGETHER  # full batches queue behind the write
        assert [table.num_rows for _, table, _ in spark.calls] == [1] + [2] * (MAX_INFLIGHT_TOGETHER - 1)
        spark.finish(0)
        sink.execute(TICK)
        assert [r.values[1] for r in collector.acked] == [0] and len(spark.calls) == MAX_INFLIGHT_TOGETHER + 1

    def test_batch_ids_increase_and_differ_between_the_tasks_of_a_sink(self, spark: FakeSpark, clock: Clock) -> None:
        ids: dict[int, list[int]] = {}
        for task in (4, 5):
            sink = DataFrameSink(write, batch_rows=1)
            prepared(sink, task, (4, 5))
            before = len(spark.calls)
            for i in range(3):
                sink.execute(Row("w", i))
                spark.finish(len(spark.calls) - 1)
            ids[task] = [batch_id for batch_id, _, _ in spark.calls[before:]]
        assert ids[4] == sorted(set(ids[4])) and ids[5] == sorted(set(ids[5]))
        assert not set(ids[4]) & set(ids[5])

    def test_a_restarted_task_never_reuses_a_batch_id_whatever_its_clock(
        self, spark: FakeSpark, clock: Clock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Issue 20: ids came from the task's wall clock, so a task restarted on a node whose
        clock is behind reused an id, and ``write_parquet`` replaced an acked batch."""
        used: list[int] = []
        for wall_clock in (1_700_000_000.0, 1_600_000_000.0):  # the restart's clock is behind
            monkeypatch.setattr(Clock, "time", lambda _self, now=wall_clock: now)
            sink = DataFrameSink(write, batch_rows=1)
            prepared(sink)
            for i in range(BATCH_ID_BLOCK + 2):  # past one claimed block
                sink.execute(Row("w", i))
                spark.finish(len(spark.calls) - 1)
                sink.execute(TICK)
            used += [batch_id for batch_id, _, _ in spark.calls[len(used) :]]
        assert len(used) == len(set(used)) == 2 * (BATCH_ID_BLOCK + 2)
        assert used == sorted(used)

    def test_a_batch_not_back_within_the_message_timeout_is_failed_and_its_slot_freed(
        self, spark: FakeSpark, clock: Clock
    ) -> None:
        """A ``foreach_batch`` that hangs held its slot for good: after ``MAX_INFLIGHT`` of them
        the sink wrote nothing more. Past ``message_timeout_secs`` (its tuples have timed out and
        are being replayed) the batch is failed, reported, its Spark jobs cancelled."""
        sink = DataFrameSink(write, batch_rows=1)
        collector = prepared(sink)  # message_timeout_secs=30
        rows = [Row("w", i) for i in range(MAX_INFLIGHT + 1)]
        for row in rows:
            sink.execute(row)
        assert len(spark.calls) == MAX_INFLIGHT
        clock.now += 29.9
        sink.execute(TICK)
        assert collector.failed == [] and len(spark.calls) == MAX_INFLIGHT
        clock.now += 0.1
        sink.execute(TICK)
        assert collector.failed == rows[:MAX_INFLIGHT]
        assert spark.cancelled == [batch_id for batch_id, _, _ in spark.calls[:MAX_INFLIGHT]]
        assert "did not return within 30 s (message_timeout_secs)" in str(collector.errors[0])
        assert len(spark.calls) == MAX_INFLIGHT + 1  # the slots went to the next batch
        spark.finish(0)  # a late result is ignored
        spark.finish(MAX_INFLIGHT)
        sink.execute(TICK)
        assert collector.acked == rows[MAX_INFLIGHT:]

    def test_a_value_that_does_not_fit_fails_its_tuple_and_the_rest_is_written(
        self, spark: FakeSpark, clock: Clock
    ) -> None:
        sink = DataFrameSink(write, batch_rows=3)
        collector = prepared(sink)
        good, bad, other = Row("a", 1), Row("b", "two"), Row("c", 3)
        for row in (good, bad, other):
            sink.execute(row)
        assert collector.failed == [bad]
        [error] = collector.errors
        assert isinstance(error, SchemaMismatchError) and error.field == "n"
        assert spark.calls[0][1].column("n").to_pylist() == [1, 3]
        spark.finish(0)
        sink.execute(TICK)
        assert collector.acked == [good, other]

    def test_a_batch_with_no_row_that_fits_is_not_sent(self, spark: FakeSpark, clock: Clock) -> None:
        sink = DataFrameSink(write, batch_rows=1, schema={"n": "int64"})
        collector = prepared(sink)
        sink.execute(Row("a", "x"))
        assert spark.calls == [] and len(collector.failed) == 1


class Numbers(Spout):
    """Emits the numbers a test queues, tracked by themselves; records the acked ones."""

    outputs = ["word", "n"]

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.queue: list[int] = []
        self.acked: list[int] = []

    def next_tuple(self) -> None:
        if self.queue:
            n = self.queue.pop(0)
            self.collector.emit(["w", n], msg_id=n)

    def ack(self, msg_id: Any) -> None:
        self.acked.append(msg_id)


class ParkedWriter(ParquetBatchWriter):
    """``write_parquet(path)`` whose ``write_arrow`` waits for ``go`` and raises ``error`` if set."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.go = threading.Event()
        self.error: BaseException | None = None
        self.written: list[int] = []

    def write_arrow(self, table: Any, batch_id: int) -> None:
        assert self.go.wait(30), "the test never let the write go"
        if self.error is not None:
            raise self.error
        super().write_arrow(table, batch_id)
        self.written.append(batch_id)


class TestArrowWriter:
    """``write_parquet`` is an ``ArrowBatchWriter``: the sink task writes its batches with pyarrow
    on a thread of its own, with the contract of any ``foreach_batch``, and never starts Spark for
    them; a batch with a column type pyarrow cannot write as Spark would still goes to Spark."""

    @pytest.fixture
    def no_spark(self, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
        """Every attempt to reach the shared Spark, recorded; it gives a ``FakeSpark``."""
        attempts: list[Any] = []

        def shared_spark(*args: Any, **kwargs: Any) -> Any:
            attempts.append(FakeSpark())
            return attempts[-1]

        monkeypatch.setattr(shared_module, "shared_spark", shared_spark)
        return attempts

    def test_tuples_are_acked_only_once_the_write_returned(
        self, no_spark: list[Any], clock: Clock, tmp_path: Any
    ) -> None:
        writer = ParkedWriter(str(tmp_path))
        sink = DataFrameSink(writer, batch_rows=2)
        collector = prepared(sink)
        rows = [Row("a", 1), Row("b", 2)]
        for row in rows:
            sink.execute(row)
        sink.execute(TICK)
        assert collector.acked == [] and writer.written == []
        writer.go.set()

        def acked() -> bool:
            sink.execute(TICK)
            return collector.acked == rows

        assert eventually(acked) and collector.failed == [] and collector.errors == []
        assert no_spark == []  # neither prepare nor the batch started Spark

    def test_a_raising_write_fails_the_batch_and_is_reported(
        self, no_spark: list[Any], clock: Clock, tmp_path: Any
    ) -> None:
        writer = ParkedWriter(str(tmp_path))
        writer.error = OSError("disk full")
        writer.go.set()
        sink = DataFrameSink(writer, batch_rows=2)
        collector = prepared(sink)
        rows = [Row("a", 1), Row("b", 2)]
        for row in rows:
            sink.execute(row)

        def failed() -> bool:
            sink.execute(TICK)
            return collector.failed == rows

        assert eventually(failed) and collector.acked == []
        [error] = collector.errors
        assert isinstance(error, ForeachBatchError) and "OSError: disk full" in str(error)
        assert os.listdir(tmp_path) == []  # nothing left behind

    def test_each_batch_lands_in_its_own_directory_as_spark_lays_it_out(
        self, spark: FakeSpark, clock: Clock, tmp_path: Any
    ) -> None:
        sink = DataFrameSink(write_parquet(tmp_path), batch_rows=2)
        collector = prepared(sink)
        for i in range(4):
            sink.execute(Row(f"w{i}", i))

        def acked() -> bool:
            sink.execute(TICK)
            return len(collector.acked) == 4

        assert eventually(acked) and spark.calls == []
        first = spark.next_id - BATCH_ID_BLOCK
        assert sorted(os.listdir(tmp_path)) == [f"batch_id={first}", f"batch_id={first + 1}"]
        files = sorted(os.listdir(tmp_path / f"batch_id={first}"))
        assert files[0] == "_SUCCESS" and len(files) == 2 and files[1].endswith(".snappy.parquet")
        table = pds.dataset(str(tmp_path), format="parquet", partitioning="hive").to_table()
        assert sorted(table.to_pylist(), key=lambda row: row["n"]) == [
            {"word": f"w{i}", "n": i, "batch_id": first + i // 2} for i in range(4)
        ]

    def test_a_batch_with_a_type_pyarrow_cannot_write_as_spark_would_goes_to_spark(
        self, no_spark: list[Any], clock: Clock, tmp_path: Any
    ) -> None:
        sink = DataFrameSink(write_parquet(tmp_path), batch_rows=1)
        prepared(sink)
        assert no_spark == []
        sink.execute(timed("a", 0))
        [spark] = no_spark
        [(_, table, _)] = spark.calls
        assert table.column_names == ["word", "n", "at"] and os.listdir(tmp_path) == []


class TestLatencySampling:
    def test_process_latency_keeps_sampling_on_a_sink_that_holds_its_ticks(
        self, monkeypatch: pytest.MonkeyPatch, clock: Clock
    ) -> None:
        """Issue 20: a sink holds a tuple until Spark has written its batch; ticks timed like
        tuples filled the bolt's ``MAX_TIMED`` slots for good after ~1,000 ticks, and
        ``process_latency_ms`` stopped sampling. Ticks are untimed: it samples on."""
        spark = FakeSpark(returns_at_once=True)
        monkeypatch.setattr(shared_module, "shared_spark", lambda *args, **kwargs: spark)
        builder = TopologyBuilder()
        builder.set_spout("rows", Numbers())
        builder.set_bolt("sink", DataFrameSink(write)).shuffle_grouping("rows")
        run = InProcessTopology(builder.create_topology())
        spout, samples = run.components("rows")[0], run.task("sink").metrics.latency("process_latency_ms")
        for n in range(3):
            for _ in range(MAX_TIMED + 1):
                clock.now += RESULT_POLL_SECS
                run.advance(RESULT_POLL_SECS)
            before = samples.count
            spout.queue.append(n)
            run.run()
            for _ in range(round(LINGER_SECS / RESULT_POLL_SECS) + 3):  # the batch lingers, is sent, is acked
                clock.now += RESULT_POLL_SECS
                run.advance(RESULT_POLL_SECS)
            assert spout.acked == list(range(n + 1)) and samples.count == before + 1


class TestSparkUnavailable:
    """A Spark that cannot start is reported with its cause, and the sink holds its tuples
    (timeouts reset, so the spouts stop at their pending budget) instead of failing them into a
    replay loop; it tries again after ``RETRY_SECS``, doubling."""

    @pytest.fixture
    def starts(self, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
        """What each attempt to reach the shared Spark gives: an exception to raise, or a handle."""
        outcomes: list[Any] = []

        def shared_spark(*args: Any, **kwargs: Any) -> Any:
            outcome = outcomes.pop(0)
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome

        monkeypatch.setattr(shared_module, "shared_spark", shared_spark)
        return outcomes

    def test_rows_are_held_not_failed_until_spark_starts(self, starts: list[Any], clock: Clock) -> None:
        cause = SparkUnavailableError("Spark did not start: java.lang.OutOfMemoryError: Java heap space")
        spark = FakeSpark()
        starts += [cause, cause, spark]
        sink = DataFrameSink(write, batch_rows=2)
        collector = prepared(sink)  # does not raise: the topology carries on
        [error] = collector.errors
        assert isinstance(error, SparkUnavailableError) and error.__cause__ is cause
        assert "java.lang.OutOfMemoryError: Java heap space" in str(error) and "tried again in 5 s" in str(error)
        rows = [Row("a", i) for i in range(4)]
        for row in rows:
            sink.execute(row)
        assert collector.failed == [] and collector.reset == rows[:2]  # the sealed batch's timeouts reset
        clock.now += RETRY_SECS
        sink.execute(TICK)  # the second attempt fails too: the next waits twice as long
        assert len(collector.errors) == 2 and "tried again in 10 s" in str(collector.errors[1])
        clock.now += RETRY_SECS
        sink.execute(TICK)  # a third of the message timeout later, every held tuple's again
        assert spark.calls == [] and not starts[:-1] and collector.reset[2:] == rows
        clock.now += RETRY_SECS
        sink.execute(TICK)
        assert [call[1].column("n").to_pylist() for call in spark.calls] == [[0, 1], [2, 3]]
        spark.finish(0)
        spark.finish(1)
        sink.execute(TICK)
        assert collector.acked == rows and collector.failed == []

    def test_a_batch_that_finds_spark_gone_is_held_again_not_failed(self, starts: list[Any], clock: Clock) -> None:
        spark, again = FakeSpark(), FakeSpark()
        starts += [spark, again]
        sink = DataFrameSink(write, batch_rows=2)
        collector = prepared(sink)
        rows = [Row("a", 1), Row("b", 2)]
        for row in rows:
            sink.execute(row)
        spark.finish(0, SparkUnavailableError("the shared Spark was stopped"))
        sink.execute(TICK)
        assert collector.failed == [] and "the shared Spark was stopped" in str(collector.errors[0])
        clock.now += RETRY_SECS
        sink.execute(TICK)
        [(_, table, _)] = again.calls
        assert table.column("n").to_pylist() == [1, 2]

    def test_the_cause_is_found_under_the_wrappers(self) -> None:
        class Java:
            def toString(self) -> str:  # noqa: N802 - py4j's name
                return "java.lang.IllegalArgumentException: Actor of name RAY_APP_MASTER exists"

        java_error = RuntimeError("An error occurred while calling o0.startUpAppMaster.")
        java_error.java_exception = Java()  # type: ignore[attr-defined]
        task_error = RuntimeError("ray::RayDPSparkMaster.start_up()\n  File ...")
        task_error.cause = java_error  # type: ignore[attr-defined]
        assert root_cause(task_error) == "java.lang.IllegalArgumentException: Actor of name RAY_APP_MASTER exists"
        assert root_cause(ValueError("first\nlast line")) == "ValueError: last line"


class TestConstruction:
    def test_a_dotted_path_is_checked_when_the_sink_is_built(self) -> None:
        assert DataFrameSink("rayflow.spark.write_parquet").foreach_batch == "rayflow.spark.write_parquet"
        with pytest.raises(ConfigError, match="no 'nope' in rayflow.spark"):
            DataFrameSink("rayflow.spark.nope")
        with pytest.raises(ConfigError, match="not a dotted import path"):
            DataFrameSink("write")

    @pytest.mark.parametrize(
        "kwargs, message",
        [({"batch_rows": 0}, "batch_rows must be an integer >= 1"), ({"batch_secs": 0}, "batch_secs must be")],
    )
    def test_bad_sizes_are_rejected(self, kwargs: dict[str, Any], message: str) -> None:
        with pytest.raises(ConfigError, match=message):
            DataFrameSink(write, **kwargs)
