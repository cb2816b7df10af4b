"""One shared Spark for the Spark tests, on the session's Ray.

``PYSPARK_PYTHON`` is set here, at import, which is before the session's Ray starts: Spark's
executors start their Python workers with it (unset, the system python has no pyspark).
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def spark_missing() -> str | None:
    """Why Spark cannot run here, or ``None``."""
    if shutil.which("java") is None:
        return "Spark needs Java 17 on PATH: `java` was not found"
    for module in ("pyarrow", "pyspark", "raydp"):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"Spark needs the spark extra: {module} cannot be imported ({exc}; pip install -e '.[spark]')"
    return None


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """The shared Spark (started once, ~25 s), as ``run_in_spark``; stopped at the end."""
    reason = spark_missing()
    if reason:
        pytest.skip(reason)
    request.getfixturevalue("ray_cluster")
    from rayflow.spark import run_in_spark, stop_spark
    from rayflow.spark._shared import shared_spark

    shared_spark()
    try:
        yield run_in_spark
    finally:
        stop_spark()


@pytest.fixture(scope="session")
def driver_spark(spark: Callable[..., Any]) -> Any:
    """``spark_session()`` in this process, beside the shared Spark (a second Spark application,
    ~10 s and ~1.6 GB more): the contract's way for a driver to read results. The ``spark``
    fixture's ``stop_spark()`` stops it."""
    from rayflow.spark import spark_session

    return spark_session()
