"""``write_parquet`` without Spark: the batch is produced by pyarrow instead of Spark, through
the same staging-then-rename path. A batch appears whole or not at all, and once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.dataset as pds  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from rayflow.spark import write_parquet  # noqa: E402


def producing(values: list[int]):
    def produce(directory: str) -> None:
        os.makedirs(directory)
        pq.write_table(pa.table({"x": values}), f"{directory}/part-0.parquet")

    return produce


def read(path: Path) -> list[dict[str, int]]:
    table = pds.dataset(str(path), format="parquet", partitioning="hive").to_table()
    return sorted(table.to_pylist(), key=lambda row: (row["batch_id"], row["x"]))


class TestWriteParquet:
    def test_each_batch_lands_in_its_own_directory(self, tmp_path: Path) -> None:
        writer = write_parquet(tmp_path / "out")
        assert writer.write(3, producing([1, 2])) == f"{tmp_path}/out/batch_id=3"
        writer.write(7, producing([5]))
        assert read(tmp_path / "out") == [{"x": 1, "batch_id": 3}, {"x": 2, "batch_id": 3}, {"x": 5, "batch_id": 7}]
        assert sorted(os.listdir(tmp_path / "out")) == ["batch_id=3", "batch_id=7"]

    def test_a_batch_written_again_replaces_the_earlier_copy(self, tmp_path: Path) -> None:
        writer = write_parquet(tmp_path)
        writer.write(1, producing([1, 2]))
        writer.write(1, producing([9]))
        assert read(tmp_path) == [{"x": 9, "batch_id": 1}]
        assert os.listdir(tmp_path) == ["batch_id=1"]

    def test_a_failed_write_leaves_nothing_and_keeps_the_earlier_copy(self, tmp_path: Path) -> None:
        writer = write_parquet(tmp_path)
        writer.write(1, producing([1]))

        def half_then_crash(directory: str) -> None:
            producing([2])(directory)
            raise OSError("executor lost")

        with pytest.raises(OSError, match="executor lost"):
            writer.write(1, half_then_crash)
        with pytest.raises(OSError):
            writer.write(2, half_then_crash)
        assert read(tmp_path) == [{"x": 1, "batch_id": 1}] and os.listdir(tmp_path) == ["batch_id=1"]

    def test_readers_skip_a_batch_still_being_written(self, tmp_path: Path) -> None:
        """What a crash mid-write leaves behind (a ``_staging-...`` directory) is invisible."""
        writer = write_parquet(tmp_path)
        writer.write(1, producing([1]))
        producing([2])(str(tmp_path / "_staging-batch_id=2-0123456789ab"))
        assert read(tmp_path) == [{"x": 1, "batch_id": 1}]

    def test_a_relative_path_is_made_absolute_where_the_writer_is_made(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)
        assert write_parquet("out").path == str(tmp_path / "out")
        assert write_parquet("file:///data/out").path == "file:///data/out"
