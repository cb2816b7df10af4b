"""``DataFrameSpout`` over Parquet without Ray: the spout driven by hand. Every row once, by its
index; the rows shared out among the tasks; a failed row emitted again; exhausted at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

from rayflow import ConfigError, OutputFieldsDeclarer  # noqa: E402
from rayflow.spark import DataFrameSpout  # noqa: E402


class Collector:
    def __init__(self) -> None:
        self.emitted: list[tuple[Any, list[Any]]] = []
        self.exhausted_calls = 0

    def emit(self, values: list[Any], msg_id: Any = None) -> None:
        self.emitted.append((msg_id, values))

    def exhausted(self) -> None:
        self.exhausted_calls += 1


class Context:
    this_component_id = "rows"

    def __init__(self, task: int, tasks: list[int]) -> None:
        self.this_task_id = task
        self._tasks = tasks

    def get_component_tasks(self, component_id: str) -> list[int]:
        return self._tasks


@pytest.fixture
def parquet(tmp_path: Path) -> Path:
    """Two files of 10 rows, in row groups of 4: ``id`` 0..19 and ``word``."""
    for part, ids in enumerate((range(10), range(10, 20))):
        table = pa.table({"id": list(ids), "word": [f"w{i}" for i in ids]})
        pq.write_table(table, tmp_path / f"part-{part}.parquet", row_group_size=4)
    return tmp_path


def opened(spout: DataFrameSpout, task: int = 1, tasks: tuple[int, ...] = (1,)) -> Collector:
    collector = Collector()
    spout.open({}, Context(task, list(tasks)), collector)  # type: ignore[arg-type]
    return collector


def drain(spout: DataFrameSpout, collector: Collector) -> None:
    while not collector.exhausted_calls:
        spout.next_tuple()


class TestDataFrameSpout:
    def test_fields_are_the_columns(self, parquet: Path) -> None:
        declarer = OutputFieldsDeclarer()
        DataFrameSpout(parquet).declare_output_fields(declarer)
        assert declarer.streams["default"].fields == ("id", "word")

    def test_every_row_is_emitted_once_with_its_index(self, parquet: Path) -> None:
        spout = DataFrameSpout(str(parquet))
        collector = opened(spout)
        drain(spout, collector)
        assert collector.emitted == [(i, [i, f"w{i}"]) for i in range(20)]

    def test_the_tasks_share_the_rows_out(self, parquet: Path) -> None:
        """Three tasks: contiguous ranges of 6, 7 and 7 rows that together are every row once."""
        spout = DataFrameSpout(parquet, fields=["id"])
        seen = []
        for task in (3, 4, 5):
            collector = opened(spout, task, (3, 4, 5))
            drain(spout, collector)
            seen.append([msg_id for msg_id, _ in collector.emitted])
        assert [len(ids) for ids in seen] == [6, 7, 7] and sum(seen, []) == list(range(20))

    def test_a_failed_row_is_emitted_again_with_its_values(self, parquet: Path) -> None:
        spout = DataFrameSpout(parquet, fields=["word", "id"])
        collector = opened(spout)
        drain(spout, collector)
        spout.ack(2)
        spout.fail(5)
        spout.fail(2)  # already acked: nothing to replay
        collector.emitted.clear()
        spout.next_tuple()
        spout.next_tuple()
        assert collector.emitted == [(5, ["w5", 5])] and collector.exhausted_calls == 2

    def test_unknown_fields_are_a_clear_error(self, parquet: Path) -> None:
        with pytest.raises(ConfigError, match=r"DataFrameSpout: fields \['count'\] are not columns of the source"):
            DataFrameSpout(parquet, fields=["id", "count"])

    def test_a_source_of_another_kind_is_a_clear_error(self) -> None:
        with pytest.raises(ConfigError, match="reads a Spark DataFrame, a ray.data.Dataset or a Parquet path"):
            DataFrameSpout([1, 2, 3])
