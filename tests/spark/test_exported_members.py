"""The public surface of ``rayflow.spark``: exactly what it exports."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")

import rayflow  # noqa: E402
import rayflow.spark  # noqa: E402

SURFACE = {
    # the contract
    "DataFrameSink",
    "DataFrameSpout",
    "spark_session",
    "stop_spark",
    # beyond it: a job's own Spark work where the sinks' Spark is, and a foreach_batch
    "run_in_spark",
    "write_parquet",
    # errors
    "ForeachBatchError",
    "SchemaMismatchError",
    "SparkUnavailableError",
}


class TestExportedMembers:
    def test_all_is_the_surface(self) -> None:
        assert set(rayflow.spark.__all__) == SURFACE
        assert rayflow.spark.__all__ == sorted(rayflow.spark.__all__)

    def test_every_name_is_defined_in_rayflow_spark(self) -> None:
        for name in rayflow.spark.__all__:
            assert getattr(rayflow.spark, name).__module__.startswith("rayflow.spark."), name

    def test_errors_are_rayflow_errors(self) -> None:
        for name in ("ForeachBatchError", "SchemaMismatchError", "SparkUnavailableError"):
            assert issubclass(getattr(rayflow.spark, name), rayflow.RayflowError)
