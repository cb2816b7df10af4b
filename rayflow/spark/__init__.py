"""Spark DataFrame interop, through raydp (the ``spark`` extra: ``pip install 'rayflow[spark]'``).

How the modules stack, bottom up:

    plain Python (pyarrow)   arrow (tuples -> Arrow tables, one schema per sink task;
                             Arrow -> Spark), parquet (``write_parquet``)
    Spark in a process       scratch (what a Spark start leaves on disk, removed at its stop),
                             session (raydp settings for Java 17; ``spark_session``)
    Spark for the cluster    shared (one named actor that sink batches and ``run_in_spark`` use;
                             ``stop_spark`` stops it and the process's own),
                             batch_ids (one counter of sink batch ids, without Spark)
    components               sink (``DataFrameSink``, and the spouts' pending budget it needs),
                             spout (``DataFrameSpout``)

Importing needs pyarrow only; pyspark, raydp and Java are needed once Spark starts, and their
absence is reported then as ``SparkUnavailableError``.
"""

try:
    import pyarrow  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(f"rayflow.spark needs the spark extra ({exc}): pip install 'rayflow[spark]'") from None

from ._arrow import SchemaMismatchError
from ._parquet import write_parquet
from ._session import SparkUnavailableError, spark_session
from ._shared import run_in_spark, stop_spark
from ._sink import DataFrameSink, ForeachBatchError
from ._spout import DataFrameSpout

__all__ = [
    "DataFrameSink",
    "DataFrameSpout",
    "ForeachBatchError",
    "SchemaMismatchError",
    "SparkUnavailableError",
    "run_in_spark",
    "spark_session",
    "stop_spark",
    "write_parquet",
]
