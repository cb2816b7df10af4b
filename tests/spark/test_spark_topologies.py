"""Topologies into and out of the shared Spark, on the session's Ray: every row arrives, a
failed batch comes back through its spouts, a failed row is emitted again, a value of the wrong
type is failed and named."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from rayflow import Bolt, Config, OutputCollector, TopologyBuilder, TopologyContext, TopologyHandle, Tuple
from rayflow import submit_topology as submit_to_ray
from rayflow.testing import FeederSpout

from ..conftest import eventually
from ..topology_helpers import Board
from .helpers import (
    BOARD,
    BOARD_NAMESPACE,
    FailingWriter,
    HangingWriter,
    cancel_all_jobs,
    numbers_spout,
    read_rows,
    record_rows,
)

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

from rayflow.spark import DataFrameSink, DataFrameSpout, SchemaMismatchError, write_parquet  # noqa: E402

pytestmark = pytest.mark.spark

RunInSpark = Callable[..., Any]
CONF = Config(message_timeout_secs=60)


@pytest.fixture
def submit(spark: RunInSpark) -> Iterator[Callable[[TopologyBuilder], TopologyHandle]]:
    handles: list[TopologyHandle] = []

    def _submit(builder: TopologyBuilder) -> TopologyHandle:
        handles.append(submit_to_ray("spark-test", CONF, builder.create_topology()))
        return handles[-1]

    yield _submit
    for handle in handles:
        handle.kill()


@pytest.fixture
def board(spark: RunInSpark) -> Iterator[Any]:
    """Where ``helpers.record_rows`` leaves the rows of every batch."""
    board = Board.options(name=BOARD, namespace=BOARD_NAMESPACE).remote()
    yield board
    ray.kill(board)


def rows_table(n: int) -> pa.Table:
    return pa.table({"id": list(range(n)), "word": [f"w{i % 7}" for i in range(n)]})


class FailOnce(Bolt):
    """Passes rows on anchored, except that it fails the row with id ``victim`` the first time."""

    outputs = ["id", "word"]

    def __init__(self, victim: int) -> None:
        self.victim = victim

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector
        self.failed = False

    def execute(self, tup: Tuple) -> None:
        if tup["id"] == self.victim and not self.failed:
            self.failed = True
            self.collector.fail(tup)
            return
        self.collector.emit(list(tup.values), anchors=tup)
        self.collector.ack(tup)


class TestDataFrameSink:
    def test_every_row_reaches_spark_once(self, spark: RunInSpark, submit: Any, tmp_path: Path) -> None:
        """Parquet -> 2 spout tasks -> 2 sink tasks -> write_parquet: Spark reads back the input."""
        pq.write_table(rows_table(3000), tmp_path / "in.parquet", row_group_size=700)
        builder = TopologyBuilder()
        builder.set_spout("rows", DataFrameSpout(tmp_path / "in.parquet"), 2)
        sink = DataFrameSink(write_parquet(tmp_path / "out"), batch_rows=1000, batch_secs=0.5)
        builder.set_bolt("sink", sink, 2).shuffle_grouping("rows")
        handle = submit(builder)
        assert handle.wait(timeout=180)
        expected = [(row["id"], row["word"]) for row in rows_table(3000).to_pylist()]
        assert sorted(spark(read_rows, str(tmp_path / "out"), ["id", "word"])) == expected
        metrics = handle.metrics()
        assert metrics["rows"]["acked"] == 3000 and metrics["rows"]["failed"] == 0 and metrics["sink"]["errors"] == 0

    def test_a_failed_batch_is_replayed_until_every_row_is_written(
        self, spark: RunInSpark, submit: Any, tmp_path: Path
    ) -> None:
        """foreach_batch raises on its first two calls: those tuples fail, their spout (over a
        Ray Dataset) emits them again, and the table ends with every row exactly once."""
        dataset = ray.data.from_arrow(rows_table(1000))
        builder = TopologyBuilder()
        builder.set_spout("rows", DataFrameSpout(dataset))
        sink = DataFrameSink(FailingWriter(str(tmp_path / "out"), failures=2), batch_rows=250, batch_secs=0.5)
        builder.set_bolt("sink", sink).shuffle_grouping("rows")
        handle = submit(builder)
        assert handle.wait(timeout=180)
        ids = [row[0] for row in spark(read_rows, str(tmp_path / "out"), ["id"])]
        assert sorted(ids) == list(range(1000))
        metrics = handle.metrics()
        assert metrics["sink"]["errors"] == 2 and "simulated failure" in metrics["sink"]["last_error"]
        assert metrics["rows"]["failed"] >= 2 and metrics["rows"]["acked"] == 1000

    def test_a_batch_that_does_not_return_is_given_up_on_and_its_spark_job_cancelled(
        self, spark: RunInSpark, tmp_path: Path
    ) -> None:
        """The first ``foreach_batch`` runs a Spark job of hours: past ``message_timeout_secs``
        the sink fails the batch and cancels the job, which frees Spark for the replay."""
        builder = TopologyBuilder()
        builder.set_spout("rows", DataFrameSpout(ray.data.from_arrow(rows_table(200))))
        sink = DataFrameSink(HangingWriter(str(tmp_path / "out")), batch_secs=0.5)
        builder.set_bolt("sink", sink).shuffle_grouping("rows")
        handle = submit_to_ray("spark-deadline", Config(message_timeout_secs=4), builder.create_topology())
        try:
            assert handle.wait(timeout=90)
            metrics = handle.metrics()
        finally:
            handle.kill()
            spark(cancel_all_jobs)  # had the sink not cancelled it, the job of hours would hold Spark
        ids = {row[0] for row in spark(read_rows, str(tmp_path / "out"), ["id"])}
        assert ids == set(range(200))  # at least once: a row of a batch that timed out may come twice
        assert metrics["sink"]["errors"] >= 1 and "did not return within 4 s" in metrics["sink"]["last_error"]


class TestBesideTheDriversSpark:
    def test_a_sink_writes_while_the_driver_holds_its_own_spark_session(
        self, driver_spark: Any, submit: Any, tmp_path: Path
    ) -> None:
        """Issue 21: after the driver's ``spark_session()`` the shared Spark could not start
        ("Actor of name RAY_APP_MASTER exists": both Sparks' Java sides named their application
        master in the job's namespace) and every batch failed and was replayed forever. A spout
        over the driver's DataFrame, a sink into Parquet, read back by the driver's Spark."""
        frame = driver_spark.range(500).selectExpr("id", "concat('w', CAST(id % 7 AS STRING)) AS word")
        builder = TopologyBuilder()
        builder.set_spout("rows", DataFrameSpout(frame))
        builder.set_bolt("sink", DataFrameSink(write_parquet(tmp_path / "out"))).shuffle_grouping("rows")
        handle = submit(builder)
        assert handle.wait(timeout=120)
        rows = driver_spark.read.parquet(str(tmp_path / "out")).select("id", "word").collect()
        assert sorted(tuple(row) for row in rows) == [(i, f"w{i % 7}") for i in range(500)]
        metrics = handle.metrics()
        assert metrics["rows"]["failed"] == 0 and metrics["sink"]["errors"] == 0


class TestSharedSpark:
    def test_batch_id_blocks_never_overlap(self, ray_cluster: Any) -> None:
        """Sink tasks claim their batch ids from the cluster's one counter, not the shared
        Spark's (a ``write_parquet`` sink starts no Spark) and not their clocks (issue 20: ids
        from a restarted task's clock could repeat an acked batch's)."""
        from rayflow.spark._batch_ids import batch_id_counter

        firsts = ray.get([batch_id_counter().claim_batch_ids.remote(1024) for _ in range(8)])
        assert sorted(firsts) == [min(firsts) + 1024 * i for i in range(8)]


class TestDataFrameSpout:
    def test_a_failed_row_is_emitted_again(self, spark: RunInSpark, submit: Any, board: Any) -> None:
        """A Spark DataFrame's rows, one failed by a bolt on first sight: it comes back, once."""
        builder = TopologyBuilder()
        builder.set_spout("rows", spark(numbers_spout, 300))
        builder.set_bolt("flaky", FailOnce(victim=17)).shuffle_grouping("rows")
        builder.set_bolt("sink", DataFrameSink(record_rows, batch_rows=100, batch_secs=0.5)).shuffle_grouping("flaky")
        handle = submit(builder)
        assert handle.wait(timeout=120)
        rows = ray.get(board.all.remote())
        assert sorted(row[1] for row in rows) == list(range(300))
        assert {row[2] for row in rows} == {f"w{i}" for i in range(7)}
        assert handle.metrics()["rows"]["failed"] == 1 and handle.metrics()["rows"]["acked"] == 300


class TestSchema:
    def test_a_value_of_another_type_fails_its_tuple_and_the_error_names_the_field(
        self, submit: Any, board: Any
    ) -> None:
        feeder = FeederSpout(["id", "n"])
        builder = TopologyBuilder()
        builder.set_spout("in", feeder)
        builder.set_bolt("sink", DataFrameSink(record_rows, batch_rows=4)).shuffle_grouping("in")
        handle = submit(builder)
        for i, n in enumerate([0, 1, "two", 3]):
            feeder.feed([i, n], msg_id=i)
        assert eventually(lambda: len(feeder.acked()) + len(feeder.failed()) == 4, timeout=60)
        assert feeder.failed() == [2] and sorted(feeder.acked()) == [0, 1, 3]
        assert sorted(row[1:] for row in ray.get(board.all.remote())) == [(0, 0), (1, 1), (3, 3)]
        error = handle.metrics()["sink"]["last_error"]
        assert SchemaMismatchError.__name__ in error and "field 'n'" in error and "'two' (str)" in error
