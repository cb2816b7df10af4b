"""``DataFrameSink`` and ``DataFrameSpout`` under exactly-once, in process (pyarrow only, no Ray
or Spark): each checkpoint's rows are committed with the checkpoint, so the Parquet table holds
every row once after a sentence failed halfway, after a commit that raised and after a sink task
killed between its PREPARE and its COMMIT; a ``foreach_batch`` of one's own gets each
checkpoint's rows once, at the commit, under a batch id made of the checkpoint and the task.

The topology is ``tests/sink_components.py``'s: sentences -> a split that fails sentence 13 once
after emitting two of its words -> the sink (two tasks)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.dataset as pds  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from rayflow import Config, TopologyBuilder, TopologyContext  # noqa: E402
from rayflow.spark import DataFrameSink, DataFrameSpout, write_parquet  # noqa: E402
from rayflow.spark._checkpointed import CHECKPOINT_BATCH_SPAN, checkpoint_batch_id  # noqa: E402
from rayflow.spark._parquet import ParquetBatchWriter  # noqa: E402
from rayflow.testing import InProcessTopology, complete_topology  # noqa: E402
from tests.sink_components import FAILURES, SENTENCES, SplitFailingOnce, build, expected_rows  # noqa: E402

EXACTLY_ONCE = Config(processing_guarantee="exactly_once", max_spout_pending=10)


@pytest.fixture
def failing(request: pytest.FixtureRequest) -> Iterator[str]:
    """The split fails sentence 13 once, after two of its words."""
    key = request.node.name
    FAILURES[key] = {13}
    yield key
    FAILURES.pop(key, None)


def sink_task(run: InProcessTopology, index: int) -> int:
    """The task id of the sink's task ``index`` (batch ids and staging names carry the index)."""
    return [t for t, c in sorted(run.layout.items()) if c == "sink"][index]


def table_rows(path: Path) -> list[tuple[Any, ...]]:
    table = pds.dataset(str(path), format="parquet", partitioning="hive").to_table()
    return sorted(zip(*(table[c].to_pylist() for c in ("id", "index", "word")), strict=True))


def staged(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.startswith("_"))


class Recorded:
    """A ``foreach_batch`` of one's own that takes Arrow tables: each call replaces what the
    batch id held, as the contract asks; ``calls`` counts the calls per batch id."""

    written: dict[str, dict[int, list[tuple[Any, ...]]]] = {}
    calls: dict[str, Counter[int]] = {}

    def __init__(self, key: str) -> None:
        self.key = key
        Recorded.written[key], Recorded.calls[key] = {}, Counter()

    def __call__(self, df: Any, batch_id: int) -> None:
        raise AssertionError("every batch of these tests is an Arrow table")

    def write_arrow(self, table: pa.Table, batch_id: int) -> None:
        Recorded.calls[self.key][batch_id] += 1
        rows = zip(*(table[c].to_pylist() for c in ("id", "index", "word")), strict=True)
        Recorded.written[self.key][batch_id] = sorted(rows)

    def rows(self) -> list[tuple[Any, ...]]:
        return sorted(row for rows in Recorded.written[self.key].values() for row in rows)


class TestWriteParquet:
    def test_a_sentence_failed_halfway_lands_once(self, failing: str, tmp_path: Path) -> None:
        out = tmp_path / "words"
        result = complete_topology(build(failing, DataFrameSink(write_parquet(out))), EXACTLY_ONCE)
        assert table_rows(out) == expected_rows()
        assert staged(out) == []
        assert result.failed("sentences") == []
        assert result.metrics()["sink"]["rollbacks"] >= 1

    def test_batches_are_named_by_checkpoint_and_task(self, failing: str, tmp_path: Path) -> None:
        out = tmp_path / "words"
        run = InProcessTopology(build(failing, DataFrameSink(write_parquet(out))), EXACTLY_ONCE)
        tasks = set(range(2))  # the sink's tasks, by their index among its tasks
        for _ in range(10):
            run.advance(1.0)
            run.run()
        run.close()
        ids = [int(p.name.split("=")[1]) for p in out.iterdir() if p.name.startswith("batch_id=")]
        assert ids and all(i % CHECKPOINT_BATCH_SPAN in tasks and i // CHECKPOINT_BATCH_SPAN >= 1 for i in ids)
        assert checkpoint_batch_id(12, 7) == 12_000_007

    def test_a_sink_killed_between_prepare_and_commit_publishes_by_name(
        self, failing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The first publish raises, so that task holds a sealed staging directory until the
        COMMIT comes again; it is killed meanwhile, and its next incarnation publishes the
        directory it finds under the checkpoint's name."""
        out = tmp_path / "words"
        publish = ParquetBatchWriter.publish
        raised: list[str] = []

        def publish_failing_once(writer: ParquetBatchWriter, staging: str, batch_id: int) -> None:
            if not raised:
                raised.append(staging)
                raise OSError("simulated: the rename failed")
            publish(writer, staging, batch_id)

        monkeypatch.setattr(ParquetBatchWriter, "publish", publish_failing_once)
        run = InProcessTopology(build(failing, DataFrameSink(write_parquet(out))), EXACTLY_ONCE)
        while not raised:
            run.advance(1.0)
            run.run()
        victim = sink_task(run, int(raised[0].rsplit("-", 1)[1]))
        assert raised[0] in staged(out)
        run.kill(victim)
        for _ in range(10):
            run.advance(1.0)
            run.run()
        assert run.finished
        run.close()
        assert table_rows(out) == expected_rows()
        assert staged(out) == []

    def test_at_least_once_is_as_before(self, failing: str, tmp_path: Path) -> None:
        """At-least-once: the words of sentence 13 written before it failed are written again.
        (More may be: the sink writes on a thread of its own in real time while the simulated
        clock runs ahead, so a slow write can outlast a tree's timeout and be replayed.)"""
        out = tmp_path / "words"
        complete_topology(build(failing, DataFrameSink(write_parquet(out), batch_secs=0.5)))
        rows = table_rows(out)
        assert sorted(set(rows)) == expected_rows()
        assert len(rows) >= len(expected_rows()) + 2
        assert staged(out) == []


class TestForeachBatch:
    def test_each_checkpoint_is_written_once_at_its_commit(self, failing: str) -> None:
        recorded = Recorded(failing)
        complete_topology(build(failing, DataFrameSink(recorded)), EXACTLY_ONCE)
        assert recorded.rows() == expected_rows()
        assert set(Recorded.calls[failing].values()) == {1}

    def test_a_commit_that_raised_writes_the_same_rows_again(self, failing: str, tmp_path: Path) -> None:
        """A commit raises after its write; the task is killed before the COMMIT comes again.
        Its next incarnation reads the checkpoint's rows back from the state provider and
        writes them again under the same batch id: replaced, not added."""
        recorded = Recorded(failing)
        write_arrow = Recorded.write_arrow
        raised: list[int] = []

        def write_then_fail_once(self: Recorded, table: pa.Table, batch_id: int) -> None:
            write_arrow(self, table, batch_id)
            if not raised:
                raised.append(batch_id)
                raise OSError("simulated: the connection dropped after the write")

        conf = EXACTLY_ONCE.merged({"state_provider": "sqlite", "state_provider_config": {"dir": str(tmp_path)}})
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Recorded, "write_arrow", write_then_fail_once)
            run = InProcessTopology(build(failing, DataFrameSink(recorded)), conf)
            while not raised:
                run.advance(1.0)
                run.run()
            run.kill(sink_task(run, raised[0] % CHECKPOINT_BATCH_SPAN))
            for _ in range(10):
                run.advance(1.0)
                run.run()
            assert run.finished
            run.close()
        assert recorded.rows() == expected_rows()
        assert Recorded.calls[failing][raised[0]] == 2

    def test_inputs_of_other_fields_are_refused(self) -> None:
        from rayflow.spark._checkpointed import CheckpointRows, StagedBatches

        class Row:
            def __init__(self, fields: list[str]) -> None:
                self.fields, self.values = fields, [1] * len(fields)

        batches = StagedBatches("sink", 3, {}, {"state_provider": "memory"}, "sink", lambda table, batch_id: None)
        rows = CheckpointRows(1, checkpoint_batch_id(1, 3))
        batches.add(rows, Row(["a"]))  # type: ignore[arg-type]
        with pytest.raises(Exception, match="give each stream a DataFrameSink of its own"):
            batches.add(rows, Row(["b"]))  # type: ignore[arg-type]


class TestDataFrameSpout:
    def test_rows_of_parquet_through_a_rollback_land_once(self, failing: str, tmp_path: Path) -> None:
        """``DataFrameSpout`` seeks back by row offset: the sentences of a Parquet file, split
        with one failure, reach the sink's table once each."""
        source = tmp_path / "sentences.parquet"
        pq.write_table(pa.table({"id": list(range(len(SENTENCES))), "sentence": SENTENCES}), source, row_group_size=7)
        out = tmp_path / "words"
        builder = TopologyBuilder()
        builder.set_spout("sentences", DataFrameSpout(str(source)), parallelism=2)
        builder.set_bolt("split", SplitFailingOnce(failing), parallelism=2).shuffle_grouping("sentences")
        builder.set_bolt("sink", DataFrameSink(write_parquet(out)), parallelism=2).shuffle_grouping("split")
        result = complete_topology(builder.create_topology(), EXACTLY_ONCE)
        assert table_rows(out) == expected_rows()
        assert sorted(result.acked("sentences")) == list(range(len(SENTENCES)))

    def test_position_and_seek_are_row_offsets(self, tmp_path: Path) -> None:
        source = tmp_path / "n.parquet"
        pq.write_table(pa.table({"n": list(range(10))}), source, row_group_size=3)
        spout, emitted = DataFrameSpout(str(source)), Emitted()
        spout.open({}, TopologyContext(1, {1: "rows"}, {}), emitted)  # type: ignore[arg-type]
        assert spout.position() == 0
        spout.next_tuple()
        spout.next_tuple()
        assert spout.position() == 2
        spout.seek(7)
        spout.next_tuple()
        spout.seek(1)
        spout.next_tuple()
        assert emitted.rows == [(0, [0]), (1, [1]), (7, [7]), (1, [1])]
        assert spout.position() == 2


class Emitted:
    """What a spout uses of its collector."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, list[Any]]] = []

    def emit(self, values: list[Any], msg_id: Any = None) -> None:
        self.rows.append((msg_id, values))

    def exhausted(self) -> None:
        pass
