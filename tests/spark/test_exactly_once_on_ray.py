"""``DataFrameSink`` under exactly-once on the session's Ray, read back by the shared Spark: a
bolt fails rows after passing them on, each failure rolls the topology back, and the Parquet
table holds every row exactly once -- through ``write_parquet``, and through a ``foreach_batch``
of one's own run in the shared Spark."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rayflow import Bolt, Config, OutputCollector, TopologyBuilder, TopologyContext, Tuple
from rayflow import submit_topology as submit_to_ray

from ..conftest import eventually
from .helpers import ReplacingWriter, read_rows

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

from rayflow.spark import DataFrameSink, DataFrameSpout, write_parquet  # noqa: E402

pytestmark = pytest.mark.spark

RunInSpark = Callable[..., Any]
ROWS = 2000


class PassThenFail(Bolt):
    """Passes every row on, anchored; rows ``victims`` are then failed, once per task: what
    reached the sink before the failure must be rolled back with it."""

    outputs = ["id", "word"]

    def __init__(self, victims: set[int]) -> None:
        self.victims = set(victims)

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        self.collector.emit(list(tup.values), anchors=tup)
        if tup["id"] in self.victims:
            self.victims.discard(tup["id"])
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


def _run(tmp_path: Path, sink: DataFrameSink, done: Callable[[], bool]) -> dict[str, Any]:
    """Parquet rows -> 2 spout tasks -> PassThenFail (2 tasks) -> ``sink`` (2 tasks), exactly-once,
    until ``done()``; returns the metrics."""
    table = pa.table({"id": list(range(ROWS)), "word": [f"w{i % 7}" for i in range(ROWS)]})
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=300)
    builder = TopologyBuilder()
    builder.set_spout("rows", DataFrameSpout(tmp_path / "in.parquet"), 2)
    builder.set_bolt("flaky", PassThenFail({150, 1500}), 2).shuffle_grouping("rows")
    builder.set_bolt("sink", sink, 2).shuffle_grouping("flaky")
    conf = Config(
        processing_guarantee="exactly_once",
        message_timeout_secs=60,
        checkpoint_interval_ms=500,
        state_provider_config={"dir": str(tmp_path / "state")},  # a run of its own: nothing to resume
    )
    handle = submit_to_ray("spark-exactly-once", conf, builder.create_topology())
    try:
        assert handle.wait(timeout=180)
        # The spouts are done once the last COMMIT passed them; the sink tasks commit just after.
        assert eventually(done, timeout=30)
        return handle.metrics()
    finally:
        handle.kill()


def test_write_parquet_holds_every_row_once_after_rollbacks(spark: RunInSpark, tmp_path: Path) -> None:
    out = tmp_path / "out"

    def published() -> bool:
        return (
            not any(p.name.startswith("_staging") for p in out.iterdir())
            and len(pq.ParquetDataset(out).read(columns=["id"])) >= ROWS
        )

    metrics = _run(tmp_path, DataFrameSink(write_parquet(out), batch_rows=400), published)
    rows = spark(read_rows, str(out), ["id", "word"])
    assert sorted(rows) == [(i, f"w{i % 7}") for i in range(ROWS)]
    assert metrics["rows"]["acked"] == ROWS  # once each, at the commit that covers it
    assert metrics["sink"]["rollbacks"] >= 1


def test_a_foreach_batch_gets_each_row_once(spark: RunInSpark, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()

    def written() -> bool:
        return sum(len(pq.ParquetDataset(p).read(columns=["id"])) for p in out.iterdir()) >= ROWS

    _run(tmp_path, DataFrameSink(ReplacingWriter(str(out))), written)
    rows = spark(read_rows, str(out), ["id", "word"])
    assert sorted(rows) == [(i, f"w{i % 7}") for i in range(ROWS)]
