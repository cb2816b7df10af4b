"""``DataFrameSpout`` and ``DataFrameSink`` in topology files: built from their dotted paths with
``class(*args, **kwargs)``; mistakes are reported like any other, before anything starts."""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402
import ray  # noqa: E402

from rayflow import submit_topology  # noqa: E402
from rayflow.spark import DataFrameSink, DataFrameSpout  # noqa: E402
from rayflow.topology_file import SpecError, load_topology  # noqa: E402

from ..topology_helpers import Board  # noqa: E402
from .helpers import BOARD, BOARD_NAMESPACE  # noqa: E402

TOPOLOGY = """\
    name: parquet-to-spark
    config:
      topology.message.timeout.secs: 60
    spouts:
      - id: rows
        class: rayflow.spark.DataFrameSpout
        args: [${source}]
        parallelism: 2
    bolts:
      - id: sink
        class: rayflow.spark.DataFrameSink
        kwargs: {foreach_batch: ${foreach_batch}, batch_rows: 40, batch_secs: 0.5}
    streams:
      - {from: rows, to: sink, grouping: {type: fields, fields: [word]}}
"""


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": list(range(100)), "word": [f"w{i % 9}" for i in range(100)]}), path)
    return path


RECORD = "tests.spark.helpers.record_rows"


@pytest.fixture
def topology_file(tmp_path: Path) -> Path:
    path = tmp_path / "topology.yaml"
    path.write_text(dedent(TOPOLOGY))
    return path


class TestTopologyFile:
    def test_the_spout_and_the_sink_are_built_from_the_file(self, topology_file: Path, source: Path) -> None:
        loaded = load_topology(topology_file, {"source": str(source), "foreach_batch": RECORD})
        spout, sink = loaded.topology.components["rows"].component, loaded.topology.components["sink"].component
        assert isinstance(spout, DataFrameSpout) and spout.total_rows == 100 and spout.fields == ["id", "word"]
        assert isinstance(sink, DataFrameSink) and sink.foreach_batch == RECORD

    def test_a_foreach_batch_that_does_not_import_is_reported(self, topology_file: Path, source: Path) -> None:
        with pytest.raises(SpecError) as raised:
            load_topology(topology_file, {"source": str(source), "foreach_batch": "tests.spark.helpers.record_rowz"})
        [problem] = raised.value.problems
        assert problem.path == "bolts[0].kwargs"
        assert "no 'record_rowz' in tests.spark.helpers (did you mean 'record_rows'?)" in problem.message

    def test_a_missing_parquet_source_is_reported(self, topology_file: Path, tmp_path: Path) -> None:
        with pytest.raises(SpecError) as raised:
            load_topology(topology_file, {"source": str(tmp_path / "nope"), "foreach_batch": RECORD})
        [problem] = raised.value.problems
        assert problem.path == "spouts[0].args"
        assert f"no Parquet file or directory at {tmp_path}/nope" in problem.message

    @pytest.mark.spark
    def test_the_file_runs(self, spark: object, topology_file: Path, source: Path) -> None:
        """Every row of the Parquet file reaches ``foreach_batch``, in the shared Spark."""
        board = Board.options(name=BOARD, namespace=BOARD_NAMESPACE).remote()
        loaded = load_topology(topology_file, {"source": str(source), "foreach_batch": RECORD})
        handle = submit_topology(loaded.name, loaded.config, loaded.topology)
        try:
            assert handle.wait(timeout=120)
            rows = ray.get(board.all.remote())
        finally:
            handle.kill()
            ray.kill(board)
        assert sorted((row[1], row[2]) for row in rows) == [(i, f"w{i % 9}") for i in range(100)]
