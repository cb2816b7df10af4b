"""Issue 22 item 11: a Spark run left two 40 MB copies of Ray's Java library in Ray's temporary
directory and ``spark-*`` directories in the system's. A Spark that rayflow starts keeps its
temporary files in a scratch directory of its own, removed when it stops; the copy of the
library its driver JVM extracted is gone once it has started; the Ray session's copy (the Java
workers') is gone once no Spark here uses it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rayflow.spark import _session
from rayflow.spark._scratch import LIBRARY, SCRATCH_PREFIX, session_library_copy
from rayflow.spark._shared import stop_shared_spark
from tests.conftest import eventually
from tests.spark.helpers import spark_scratch


def test_a_stopped_spark_leaves_neither_its_scratch_nor_copies_of_rays_java_library(
    spark: Callable[..., Any],
) -> None:
    running = spark(spark_scratch)
    scratch = Path(running["scratch"])
    assert scratch.name.startswith(SCRATCH_PREFIX) and running["local_dir"] == str(scratch)
    assert running["contents"], "Spark kept nothing in its scratch directory: it writes elsewhere"
    (driver_copy,) = running["library_copies"]  # loaded, so Spark runs on it ...
    assert not Path(driver_copy).exists() and not Path(driver_copy).parent.exists()  # ... but its file is gone
    in_session = session_library_copy()
    assert in_session is not None and in_session.name == LIBRARY  # the executors' copy, while they run

    stop_shared_spark()

    assert not scratch.exists()
    if _session._session is None:  # no Spark of the driver's own (the driver_spark fixture) runs on it
        assert eventually(lambda: session_library_copy() is None, timeout=30)
