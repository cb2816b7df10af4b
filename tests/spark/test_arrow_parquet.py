"""``write_parquet``'s Arrow path against Spark's: a batch written by pyarrow in the sink task
(``write_arrow``) reads back through ``spark.read.parquet`` with the same schema and rows as the
same batch written by Spark, for every column type the sink writes that way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")


def test_spark_reads_an_arrow_written_batch_as_a_spark_written_one(spark: Any, tmp_path: Path) -> None:
    from tests.spark.helpers import written_both_ways

    read = spark(written_both_ways, str(tmp_path), 42)
    assert read["arrow"]["schema"] == read["spark"]["schema"]
    assert read["arrow"]["rows"] == read["spark"]["rows"]
    assert len(read["arrow"]["rows"]) == 3 and read["arrow"]["schema"]["fields"][-1]["name"] == "batch_id"
