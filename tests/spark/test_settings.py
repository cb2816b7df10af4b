"""What Spark is started with, and the errors when it cannot start (no Spark needed)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")

from rayflow import ConfigError  # noqa: E402
from rayflow.spark import SparkUnavailableError  # noqa: E402
from rayflow.spark import _session as session_module  # noqa: E402
from rayflow.spark._session import JAVA_17_OPTIONS, SparkSettings, check_spark_available  # noqa: E402
from rayflow.spark._shared import settings_from_conf  # noqa: E402


class TestSparkSettings:
    def test_the_java_17_flags_go_to_the_driver_the_executors_and_the_app_master(self) -> None:
        configs = SparkSettings().spark_configs()
        for key in (
            "spark.driver.extraJavaOptions",
            "spark.executor.extraJavaOptions",
            "spark.ray.raydp_app_master.extraJavaOptions",
        ):
            assert configs[key] == JAVA_17_OPTIONS
        assert "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED" in JAVA_17_OPTIONS

    def test_small_machine_settings_and_user_configs_last(self) -> None:
        configs = SparkSettings(configs={"spark.sql.shuffle.partitions": 8}).spark_configs()
        assert configs["spark.ray.raydp_spark_master.actor.resource.CPU"] == "0"
        assert configs["spark.sql.execution.arrow.pyspark.enabled"] == "true"
        assert configs["spark.ui.showConsoleProgress"] == "false"
        assert configs["spark.sql.shuffle.partitions"] == "8"
        assert SparkSettings().spark_configs()["spark.sql.shuffle.partitions"] == "2"


class TestSettingsFromTopologyConfig:
    def test_spark_keys_size_the_shared_spark_and_the_rest_go_to_spark(self) -> None:
        settings = settings_from_conf(
            {"spark.executor.memory": "2g", "spark.executor.instances": "2", "spark.sql.ansi.enabled": True, "x": 1}
        )
        assert (settings.executors, settings.cores, settings.memory) == (2, 1, "2g")
        assert settings.configs == {"spark.sql.ansi.enabled": "True"}

    @pytest.mark.parametrize("value", [0, "two", 1.5, True])
    def test_a_bad_size_is_a_config_error(self, value: object) -> None:
        with pytest.raises(ConfigError, match="spark.executor.cores must be an integer >= 1"):
            settings_from_conf({"spark.executor.cores": value})


class TestSparkUnavailable:
    def test_no_java_on_path_is_said_plainly(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(session_module.shutil, "which", lambda name: None)
        with pytest.raises(SparkUnavailableError, match="Spark needs Java 17 on PATH and `java` was not found"):
            check_spark_available()

    def test_no_ray_connection_is_said_plainly(self, monkeypatch: pytest.MonkeyPatch) -> None:
        pytest.importorskip("raydp")
        import ray

        monkeypatch.setattr(session_module.shutil, "which", lambda name: "/usr/bin/java")
        monkeypatch.setattr(ray, "is_initialized", lambda: False)
        with pytest.raises(SparkUnavailableError, match=r"call ray.init\(\) first"):
            check_spark_available()
