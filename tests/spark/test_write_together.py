"""Batches for ``write_parquet`` that queue behind a running write are written together, in one
Spark job, each still in its own ``batch_id=N`` directory; each call returns once its batch is in
place or raises what the job raised. The shared Spark's grouping here, with Spark replaced by a
writer that records; the writing itself on pyarrow (``write_many``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.dataset as pds  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from rayflow.spark import _arrow as arrow_module  # noqa: E402
from rayflow.spark import _shared as shared_module  # noqa: E402
from rayflow.spark._parquet import ParquetBatchWriter  # noqa: E402
from rayflow.spark._shared import BatchCancelled, SharedSpark  # noqa: E402
from tests.conftest import eventually  # noqa: E402


class RecordingWriter(ParquetBatchWriter):
    """Records what it is asked to write; the first single write waits for ``release``."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.writes: list[list[int]] = []
        self.release = threading.Event()
        self.fail_together: BaseException | None = None

    def __call__(self, df: Any, batch_id: int) -> None:
        self.writes.append([batch_id])
        assert self.release.wait(10)

    def write_together(self, batches: Any) -> None:
        self.writes.append([batch_id for _, batch_id in batches])
        if self.fail_together is not None:
            raise self.fail_together


class FakeSparkContext:
    def __init__(self) -> None:
        self.cancels: list[str] = []

    def setJobGroup(self, *args: Any, **kwargs: Any) -> None:  # noqa: N802 - pyspark's name
        pass

    def cancelJobGroup(self, group: str) -> None:  # noqa: N802 - pyspark's name
        self.cancels.append(group)


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> SharedSpark:
    """The shared Spark's body with one executor core and no Spark behind it."""
    monkeypatch.setattr(arrow_module, "to_spark_dataframe", lambda spark, table: table)
    body = SharedSpark.__new__(SharedSpark)
    body.__dict__.update(
        _error=None,
        _spark=type("Session", (), {"sparkContext": FakeSparkContext()})(),
        _batch_slots=threading.BoundedSemaphore(1),
        _waiting_lock=threading.Lock(),
        _waiting={},
        _job_groups={},
        _writing={},
        _cancelled={},
    )
    return body


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(8) as executor:
        yield executor


def table(n: int) -> Any:
    return pa.table({"n": [n]})


def queue_behind_a_write(shared: SharedSpark, writer: RecordingWriter, pool: ThreadPoolExecutor) -> list[Future[Any]]:
    """Batch 1 being written, batches 2, 3 and 4 waiting behind it."""
    calls = [pool.submit(shared.foreach_batch, writer, table(1), 1)]
    assert eventually(lambda: writer.writes == [[1]])
    for queued, n in enumerate((2, 3, 4), start=1):  # one at a time: threads race to the queue
        calls.append(pool.submit(shared.foreach_batch, writer, table(n), n))
        assert eventually(lambda queued=queued: sum(len(w) for w in shared._waiting.values()) == queued)
    return calls


def test_batches_waiting_behind_a_write_go_together_in_the_next(
    shared: SharedSpark, pool: ThreadPoolExecutor, tmp_path: Path
) -> None:
    writer = RecordingWriter(str(tmp_path))
    calls = queue_behind_a_write(shared, writer, pool)
    writer.release.set()
    assert [call.result(10) for call in calls] == [None] * 4
    assert writer.writes == [[1], [2, 3, 4]]


def test_when_the_job_of_several_fails_every_batch_in_it_fails(
    shared: SharedSpark, pool: ThreadPoolExecutor, tmp_path: Path
) -> None:
    writer = RecordingWriter(str(tmp_path))
    writer.fail_together = OSError("executor lost")
    calls = queue_behind_a_write(shared, writer, pool)
    writer.release.set()
    assert calls[0].result(10) is None
    for call in calls[1:]:
        with pytest.raises(OSError, match="executor lost"):
            call.result(10)
    assert shared._waiting == {} and shared._job_groups == {}


def test_batches_written_together_land_as_if_written_one_by_one(tmp_path: Path) -> None:
    writer = ParquetBatchWriter(str(tmp_path))
    writer.write(2, lambda directory: _part(directory, [0]))  # an earlier copy of batch 2

    def produce(directory: str) -> None:
        for batch_id, values in ((1, [1, 2]), (2, [3])):
            _part(f"{directory}/batch_id={batch_id}", values)

    placed = writer.write_many([1, 2], produce)
    assert placed == [f"{tmp_path}/batch_id=1", f"{tmp_path}/batch_id=2"]
    assert sorted(os.listdir(tmp_path)) == ["batch_id=1", "batch_id=2"]
    rows = pds.dataset(str(tmp_path), format="parquet", partitioning="hive").to_table().to_pylist()
    assert sorted((row["batch_id"], row["x"]) for row in rows) == [(1, 1), (1, 2), (2, 3)]


def test_spark_writes_batches_together_where_one_by_one_would_put_them(spark: Any, tmp_path: Path) -> None:
    from tests.spark.helpers import write_together

    spark(write_together, str(tmp_path), {7: [1, 2], 8: [3], 9: [4, 5, 6]})
    assert sorted(name for name in os.listdir(tmp_path)) == ["batch_id=7", "batch_id=8", "batch_id=9"]
    rows = pds.dataset(str(tmp_path), format="parquet", partitioning="hive").to_table()
    assert rows.column_names == ["x", "batch_id"]  # the batch id only in the directory name, as one by one
    assert sorted(zip(rows.column("batch_id").to_pylist(), rows.column("x").to_pylist(), strict=True)) == [
        (7, 1),
        (7, 2),
        (8, 3),
        (9, 4),
        (9, 5),
        (9, 6),
    ]


def _part(directory: str, values: list[int]) -> None:
    os.makedirs(directory)
    pq.write_table(pa.table({"x": values}), f"{directory}/part-0.parquet")


def test_a_batch_given_up_on_before_its_call_starts_is_not_written(
    shared: SharedSpark, pool: ThreadPoolExecutor, tmp_path: Path
) -> None:
    """The sink gave up on batch 7 (past its deadline) while the call was still on its way: the
    call does not start a job that nobody waits for."""
    written: list[int] = []
    shared.cancel_batch(7)
    with pytest.raises(BatchCancelled, match="batch 7"):
        shared.foreach_batch(lambda df, batch_id: written.append(batch_id), table(7), 7)
    assert written == [] and shared._cancelled == {} and shared._writing == {}


def test_a_batch_given_up_on_while_written_has_its_jobs_cancelled_until_its_call_ends(
    shared: SharedSpark, pool: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cancelJobGroup`` stops only the jobs running then; a call that starts another job after
    the cancel (or had not started its first yet) is cancelled again, until it returns."""
    monkeypatch.setattr(shared_module, "CANCEL_AGAIN_SECS", 0.01)
    context = shared._spark.sparkContext  # type: ignore[union-attr]
    release = threading.Event()
    call = pool.submit(shared.foreach_batch, lambda df, batch_id: release.wait(10), table(8), 8)
    assert eventually(lambda: 8 in shared._writing)
    shared.cancel_batch(8)
    assert eventually(lambda: len(context.cancels) >= 3)
    assert set(context.cancels) == {"rayflow-batch-8"}
    release.set()
    call.result(10)
    assert shared._writing == {} and shared._cancelled == {}
    settled = len(context.cancels)
    assert not eventually(lambda: len(context.cancels) > settled, timeout=0.2)
