"""Windowed bolts exactly-once on Ray: the windowed task is SIGKILLed mid-run, and every number
still ends in exactly one committed window.

The topology: numbers (a spout that can go back) -> relay (2 tasks) -> a processing-time
tumbling window of 1 s (2 tasks, fields(key)) that emits one row per window -> a stateful sink
counting each row (2 tasks), with ``processing_guarantee="exactly_once"`` and state in SQLite.
Once a third of the numbers are relayed, a windowed task is killed. Its open windows come back
from the last cut, what it received since is sent again after the rollback, and the sink's
committed state must hold each row once and each number in one row (which window a number
falls in depends on when it came: processing time)."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

from rayflow import Config, Duration, TopologyBuilder
from rayflow._runtime import submit_topology
from rayflow.state import SqliteStateProvider, load_component
from tests.connectors.brokers import unique

from .conftest import eventually
from .window_components import Numbers, Relay, WindowCount, WindowRows

TOTAL = 30_000


def committed_rows(state_dir: Path, name: str) -> Counter[str]:
    provider = SqliteStateProvider({"dir": str(state_dir)}, name)
    try:
        return Counter(load_component(provider, name, "sink"))
    finally:
        provider.close()


def numbers_in(rows: Counter[str]) -> list[int]:
    return sorted(int(n) for row in rows for n in row.split(":")[1].split(",") if n)


def test_a_killed_windowed_task_leaves_each_number_in_one_committed_window(ray_cluster: str, tmp_path: Path) -> None:
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers(TOTAL, keys=4))
    builder.set_bolt("relay", Relay(), parallelism=2).fields_grouping("numbers", ["key"])
    windows = WindowRows().with_tumbling_window(Duration(1))
    builder.set_bolt("windows", windows, parallelism=2).fields_grouping("relay", ["key"])
    builder.set_bolt("sink", WindowCount(), parallelism=2).fields_grouping("windows", ["window"])
    conf = Config(
        processing_guarantee="exactly_once",
        message_timeout_secs=10,
        checkpoint_interval_ms=250,
        state_provider="sqlite",
        state_provider_config={"dir": str(tmp_path)},
    )
    name = unique("eo-windows")
    handle = submit_topology(name, conf, builder.create_topology())
    try:
        assert eventually(lambda: handle.metrics()["relay"]["executed"] >= TOTAL // 3, timeout=90)
        tasks = handle.task_metrics()
        victim = min(t for t, m in tasks.items() if m["component"] == "windows")
        os.kill(tasks[victim]["pid"], signal.SIGKILL)
        assert eventually(lambda: handle.task_metrics()[victim]["pid"] != tasks[victim]["pid"], timeout=60)
        assert handle.wait(timeout=180), f"not finished: {handle.metrics()}"
        # The last windows fire a second after their numbers came, and commit with the next cut.
        assert eventually(lambda: len(numbers_in(committed_rows(tmp_path, name))) >= TOTAL, timeout=60)
        rollbacks = handle.metrics()["__checkpoint"]["rollbacks"]
    finally:
        handle.kill()
    rows = committed_rows(tmp_path, name)
    assert {row: n for row, n in rows.items() if n != 1} == {}, "a window's row committed twice"
    assert numbers_in(rows) == list(range(TOTAL)), "each number in exactly one committed window"
    assert rollbacks >= 1
