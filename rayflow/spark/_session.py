"""Starting Spark on Ray through raydp, with what it takes on Java 17 and a small machine.

``spark_session()`` starts Spark in *this* process (the process becomes the Spark driver, talking
to its JVM through py4j); the shared Spark that ``DataFrameSink`` uses starts the same way, with
the same settings, inside its own actor (``shared.py``). Either costs ~25 s and ~1.6 GB (four
JVMs), so a process holds at most one Spark; a driver's and the shared one run side by side.
Each start gets a scratch directory of its own, removed with the Spark (``scratch.py``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import RayflowError
from ._scratch import new_scratch_dir, remove_driver_library_copy, remove_scratch_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "SparkSettings",
    "SparkUnavailableError",
    "spark_session",
    "start_spark",
    "stop_spark_session",
    "stop_started_spark",
]

logger = logging.getLogger("rayflow")

_OPENS = (
    "java.lang",
    "java.lang.invoke",
    "java.io",
    "java.net",
    "java.nio",
    "java.math",
    "java.text",
    "java.util",
    "java.util.concurrent",
    "java.util.concurrent.atomic",
    "sun.nio.ch",
    "sun.nio.cs",
    "sun.security.action",
    "sun.util.calendar",
)
JAVA_17_OPTIONS = " ".join(f"--add-opens=java.base/{name}=ALL-UNNAMED" for name in _OPENS)
"""Without these in the driver, the executors and raydp's app master, Spark 3.5 on Java 17
hangs in ``ray.data.from_spark`` or a Java worker aborts ("Check failed: objects_valid")."""


class SparkUnavailableError(RayflowError):
    """Spark cannot start here: no Java on PATH, the ``spark`` extra is not installed, no Ray."""


@dataclass(frozen=True)
class SparkSettings:
    """How big a Spark to start. ``configs`` are extra Spark settings, applied last."""

    app_name: str = "rayflow"
    executors: int = 1
    cores: int = 1
    memory: str = "1g"
    configs: dict[str, str] = field(default_factory=dict)

    def spark_configs(self, scratch: str | None = None) -> dict[str, str]:
        """raydp's ``configs``: what Spark needs on Java 17 and a small machine, then ``configs``.
        ``scratch``: the directory for Spark's and its JVMs' temporary files."""
        java_options = JAVA_17_OPTIONS if scratch is None else f"{JAVA_17_OPTIONS} -Djava.io.tmpdir={scratch}"
        return {
            "spark.driver.extraJavaOptions": java_options,
            "spark.executor.extraJavaOptions": java_options,
            "spark.ray.raydp_app_master.extraJavaOptions": java_options,
            **({} if scratch is None else {"spark.local.dir": scratch}),
            # raydp's master actor would otherwise hold a whole CPU for nothing.
            "spark.ray.raydp_spark_master.actor.resource.CPU": "0",
            # Each executor would reserve its cores' worth of Ray CPUs: on a 2-core machine a
            # driver's spark_session() beside the shared Spark took both, and no topology task
            # could be placed. The executors still run ``cores`` Spark tasks at once.
            "spark.ray.raydp_spark_executor.actor.resource.cpu": "0",
            # The default 200 turns a 10k-row groupBy into minutes on one executor core.
            "spark.sql.shuffle.partitions": str(max(2, 2 * self.executors * self.cores)),
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.ui.showConsoleProgress": "false",
            **{key: str(value) for key, value in self.configs.items()},
        }


def check_spark_available() -> None:
    """Raise ``SparkUnavailableError`` saying what is missing for Spark to start here."""
    if shutil.which("java") is None:
        raise SparkUnavailableError(
            "Spark needs Java 17 on PATH and `java` was not found: install a JDK "
            "(e.g. `apt-get install openjdk-17-jre-headless`) or put its bin/ directory on PATH"
        )
    try:
        import pyspark  # noqa: F401
        import raydp  # noqa: F401
    except ImportError as exc:
        raise SparkUnavailableError(
            f"Spark on Ray needs the spark extra ({exc}): pip install 'rayflow[spark]'"
        ) from None
    import ray

    if not ray.is_initialized():
        raise SparkUnavailableError(
            "Spark runs on the connected Ray cluster: call ray.init() first, or use rayflow.LocalCluster()"
        )


def start_spark(settings: SparkSettings, *, jvm_namespace: str | None = None) -> SparkSession:
    """Start Spark in this process through raydp (~25 s). The caller makes sure it is the only one.

    raydp's Java side joins Ray as a job of its own and names its application master
    ``RAY_APP_MASTER`` in the Ray namespace of the process that starts Spark -- the same for every
    process of one Ray job, so two Sparks of one job collide ("Actor of name RAY_APP_MASTER
    exists"). ``jvm_namespace`` puts this Spark's Java side in a namespace of its own instead."""
    check_spark_available()
    # The executors start their Python workers with the driver's PYSPARK_PYTHON; unset, that is
    # the system python, which has no pyspark.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import raydp

    if jvm_namespace is not None:
        from raydp.spark import ray_cluster

        ray_cluster.RayDPSparkMaster = _master_in_namespace(jvm_namespace)

    global _scratch_dir
    scratch = new_scratch_dir()
    try:
        session: SparkSession = raydp.init_spark(
            settings.app_name,
            num_executors=settings.executors,
            executor_cores=settings.cores,
            executor_memory=settings.memory,
            configs=settings.spark_configs(scratch),
        )
    except BaseException:
        remove_scratch_dir(scratch)
        raise
    _scratch_dir = scratch
    try:
        jvm: Any = session._jvm
        remove_driver_library_copy(jvm.java.lang.ProcessHandle.current().pid())
    except Exception as exc:  # a copy left behind is no reason to fail a started Spark
        logger.debug("could not remove the Spark driver's copy of Ray's Java library: %s", exc)
    return session


def stop_started_spark() -> None:
    """Stop the Spark ``start_spark`` started in this process and remove its scratch directory."""
    global _scratch_dir
    import raydp

    try:
        raydp.stop_spark()
    finally:
        remove_scratch_dir(_scratch_dir)
        _scratch_dir = None


def _master_in_namespace(namespace: str) -> Any:
    """raydp's master actor, telling the Java side to use ``namespace`` for its Ray actors."""
    import ray
    from raydp.spark.ray_cluster_master import RayDPSparkMaster

    class NamespacedMaster(RayDPSparkMaster.__ray_actor_class__):  # type: ignore[misc]
        def _generate_ray_configs(self) -> str:
            options = json.loads(super()._generate_ray_configs())
            options["ray.job.namespace"] = namespace
            return json.dumps(options)

    return ray.remote(NamespacedMaster)


_lock = threading.Lock()
_session: SparkSession | None = None
_scratch_dir: str | None = None
"""The scratch directory of the Spark this process started (one per process, as raydp allows)."""


def spark_session(
    app_name: str = "rayflow",
    *,
    executors: int = 1,
    cores: int = 1,
    memory: str = "1g",
    configs: dict[str, Any] | None = None,
) -> SparkSession:
    """Spark on the connected Ray cluster, in this process, with the settings it needs.

    The first call starts it (~25 s, ~1.6 GB); later calls return the same session, whatever
    their arguments. ``stop_spark()`` stops it. Raises ``SparkUnavailableError`` when Java,
    pyspark/raydp or a Ray connection is missing.

    This session lives in this process: topology tasks cannot use it (py4j ties a session to
    the process that started it). ``DataFrameSink`` runs its batches in the shared Spark (see
    ``run_in_spark``), which runs beside this one (its Java side in a Ray namespace of its own);
    to hold a single Spark (~1.6 GB less), do your Spark work there rather than here::

        spark = spark_session()
        spark.range(3).count()      # 3
    """
    global _session
    with _lock:
        if _session is None:
            settings = SparkSettings(app_name, executors, cores, memory, dict(configs or {}))
            _session = start_spark(settings)
        return _session


def stop_spark_session() -> None:
    """Stop this process's Spark (``spark_session``) if it runs; ``stop_spark`` (``shared.py``,
    which knows both Sparks) calls it before it stops the shared one."""
    global _session
    with _lock:
        if _session is not None:
            stop_started_spark()
            _session = None
