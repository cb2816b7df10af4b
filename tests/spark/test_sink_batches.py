"""``DataFrameSink`` without Spark or Ray: the shared Spark replaced by a fake whose results the
test completes by hand. What is batched when, when tuples are acked or failed, and batch ids."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

pytest.importorskip("pyarrow")

from rayflow import ConfigError  # noqa: E402
from rayflow.spark import DataFrameSink, ForeachBatchError, SchemaMismatchError  # noqa: E402
from rayflow.spark import _shared as shared_module  # noqa: E402
from rayflow.spark import _sink as sink_module  # noqa: E402
from rayflow.spark._sink import MAX_INFLIGHT, Batcher  # noqa: E402


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


class Collector:
    def __init__(self) -> None:
        self.acked: list[Row] = []
        self.failed: list[Row] = []
        self.errors: list[BaseException] = []

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


class FakeSpark:
    """Stands for the shared Spark's handle: ``foreach_batch.remote(...)`` records the call and
    returns a result the test completes."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, Any, Future[Any]]] = []
        self.foreach_batch = self

    def remote(self, fn: Any, table: Any, batch_id: int) -> Any:
        future: Future[Any] = Future()
        self.calls.append((batch_id, table, future))
        return type("Ref", (), {"future": lambda _self: future})()

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

    def test_a_partial_batch_goes_on_a_tick_after_batch_secs(self, spark: FakeSpark, clock: Clock) -> None:
        sink = DataFrameSink(write, batch_rows=100, batch_secs=2.0)
        assert sink.get_component_configuration() == {"tick_tuple_freq_secs": 0.5}
        prepared(sink)
        sink.execute(Row("a", 1))
        clock.now += 1.9
        sink.execute(TICK)
        assert spark.calls == []
        clock.now += 0.1
        sink.execute(TICK)
        assert len(spark.calls) == 1

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
