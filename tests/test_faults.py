"""Storm's failure cases on Ray: a task dies, and the topology keeps its promise.

From the seeds: a task dies -> its trees time out and are replayed; an acker dies -> all its
trees time out and are replayed; a spout dies -> it comes back and the source replays. rayflow
restarts every dead task under its task id, so each scenario ends with every tuple acked.
Message timeouts are short (3 s) so replays come quickly; every wait has a deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import deque
from pathlib import Path
from typing import Any

import pytest
import ray

from rayflow import (
    BasicBolt,
    Bolt,
    Config,
    Spout,
    SpoutOutputCollector,
    TopologyBuilder,
    TopologyContext,
    TopologyError,
    Tuple,
)
from rayflow._pending import DEFAULT_MAX_SPOUT_PENDING
from rayflow._runtime import TopologyHandle, submit_topology

from .conftest import eventually
from .topology_helpers import Board, Endless

pytestmark = pytest.mark.ray

TIMEOUT = 3.0


class Numbers(Spout):
    """Emits 0..total-1 (shared among its tasks), each tracked; replays whatever fails."""

    outputs = ["n"]

    def __init__(self, total: int) -> None:
        self.total = total

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        tasks = context.get_component_tasks(context.this_component_id)
        self._ids = iter(range(tasks.index(context.this_task_id), self.total, len(tasks)))
        self._replay: deque[int] = deque()
        self._collector = collector

    def next_tuple(self) -> None:
        n = self._replay.popleft() if self._replay else next(self._ids, None)
        if n is None:
            self._collector.exhausted()
        else:
            self._collector.emit([n], msg_id=n)

    def fail(self, msg_id: Any) -> None:
        self._replay.append(msg_id)


class Relay(BasicBolt):
    """Passes every number on, a little slowly, so that a run lasts long enough to kill in."""

    outputs = ["n"]

    def execute(self, tup: Tuple, collector: Any) -> None:
        time.sleep(0.0002)
        collector.emit([tup[0]])


class Sink(BasicBolt):
    def execute(self, tup: Tuple, collector: Any) -> None:
        pass


def numbers_topology(total: int) -> Any:
    """numbers -> relay (2 tasks, fields(n)) -> sink"""
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers(total))
    builder.set_bolt("relay", Relay(), parallelism=2).fields_grouping("numbers", ["n"])
    builder.set_bolt("sink", Sink()).shuffle_grouping("relay")
    return builder.create_topology()


def kill_task(handle: TopologyHandle, component: str) -> tuple[int, float]:
    """SIGKILL the process of ``component``'s first task; returns its task id and the time."""
    tasks = handle.task_metrics()
    task = min(t for t, m in tasks.items() if m["component"] == component)
    os.kill(tasks[task]["pid"], signal.SIGKILL)
    return task, time.monotonic()


@pytest.fixture
def run(ray_cluster: str) -> Any:
    handles: list[TopologyHandle] = []

    def submit(topology: Any, **conf: Any) -> TopologyHandle:
        handle = submit_topology("faults", Config(**{"message_timeout_secs": TIMEOUT, **conf}), topology)
        handles.append(handle)
        return handle

    yield submit
    for handle in handles:
        handle.kill()


@pytest.mark.parametrize("victim", ["relay", "__acker", "numbers"], ids=["bolt", "acker", "spout"])
def test_killed_task_comes_back_and_every_tuple_is_acked(run: Any, victim: str):
    """numbers -> relay(fields) -> sink, 3,000 numbers; once 500 are acked, SIGKILL one task.
    The task is restarted under its id, the handle keeps answering, and every number ends
    acked within a message timeout (plus a few seconds) of the kill."""
    total = 3000
    handle = run(numbers_topology(total), max_spout_pending=300)
    assert eventually(lambda: handle.metrics()["numbers"]["acked"] >= 500, timeout=60)
    task, killed_at = kill_task(handle, victim)

    during = handle.metrics()  # answers at once, though a task is dead or restarting
    assert set(during) == {"numbers", "relay", "sink", "__acker"}
    assert eventually(lambda: handle.task_metrics()[task]["restarts"] == 1, timeout=30)
    assert handle.wait(timeout=2 * TIMEOUT + 30)
    recovered = time.monotonic() - killed_at

    tasks = handle.task_metrics()
    assert tasks[task]["alive"] and tasks[task]["restarts"] == 1
    assert sum(m["restarts"] for m in tasks.values()) == 1
    assert handle.metrics()[victim]["restarts"] == 1
    print(f"{victim} killed: every tree acked {recovered:.1f} s after the kill")


def test_no_restart_when_max_task_restarts_is_zero(run: Any):
    """With max_task_restarts=0 a dead task stays dead; metrics say so instead of raising."""
    handle = run(numbers_topology(100_000), max_task_restarts=0)
    assert eventually(lambda: handle.metrics()["numbers"]["acked"] > 0, timeout=60)
    task, _ = kill_task(handle, "sink")
    assert eventually(lambda: not handle.task_metrics()[task]["alive"], timeout=30)
    metrics = handle.metrics()
    assert metrics["sink"]["alive"] is False and metrics["sink"]["restarts"] == 0
    assert handle.wait(timeout=0.5) is False  # never raises ActorDiedError


def _explode() -> None:
    raise RuntimeError("this bolt only loads where its GPU driver is")


class Unbuildable(BasicBolt):
    """Pickles in the driver, cannot be re-built in a worker."""

    def __reduce__(self) -> Any:
        return (_explode, ())

    def execute(self, tup: Tuple, collector: Any) -> None:
        pass


def test_component_that_cannot_be_rebuilt_is_a_submit_error(ray_cluster: str):
    """A component that cannot be re-built in its task fails the submit, naming it."""
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers(10))
    builder.set_bolt("gpu", Unbuildable()).shuffle_grouping("numbers")
    with pytest.raises(TopologyError, match=r"component 'gpu': cannot be re-built in its task .*GPU driver"):
        submit_topology("unbuildable", Config(), builder.create_topology())


class Stuck(BasicBolt):
    """Task ``stuck_task`` blocks in ``execute`` until the board's ``release`` flag is set."""

    def __init__(self, board: Any) -> None:
        self.board = board

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.stuck = context.this_task_id == min(context.get_component_tasks(context.this_component_id))

    def execute(self, tup: Tuple, collector: Any) -> None:
        while self.stuck and not ray.get(self.board.is_set.remote("release")):
            time.sleep(0.05)


def test_one_stuck_task_does_not_stall_its_siblings(run: Any):
    """numbers -> work (2 tasks, shuffle): one task blocks for good. Its sibling goes on
    receiving and acking: the producer stops only after a sizeable backlog for the stuck one."""
    board = Board.remote()
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers(100))
    builder.set_bolt("work", Stuck(board), parallelism=2).shuffle_grouping("numbers")
    handle = run(builder.create_topology())
    try:
        assert eventually(lambda: handle.metrics()["numbers"]["acked"] >= 45, timeout=20)
    finally:
        ray.get(board.set.remote("release"))


class NeverAck(Bolt):
    """Neither acks nor fails (nor keeps) its inputs: every tree stays pending until it times out."""

    def execute(self, tup: Tuple) -> None:
        pass


def test_memory_is_bounded_by_default(run: Any):
    """An endless spout into a bolt that never acks: with the default config the spout holds
    at most max_spout_pending trees and the acker a bounded number, however long it runs."""
    builder = TopologyBuilder()
    builder.set_spout("endless", Endless())
    builder.set_bolt("never", NeverAck()).shuffle_grouping("endless")
    handle = run(builder.create_topology(), message_timeout_secs=1.0)
    peak_spout = peak_acker = 0
    # Watched until three budgets' worth of trees have timed out (the spout filled its budget
    # again after each time-out, and the acker rotated past each), however long that takes.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        metrics = handle.metrics()
        peak_spout = max(peak_spout, metrics["endless"]["pending"])
        ackers = [m for m in handle.task_metrics().values() if m["kind"] == "acker"]
        peak_acker = max(peak_acker, sum(m["pending"] for m in ackers))
        if metrics["endless"]["failed"] > 3 * DEFAULT_MAX_SPOUT_PENDING:
            break
        time.sleep(0.2)
    assert metrics["endless"]["failed"] > DEFAULT_MAX_SPOUT_PENDING  # trees timed out, again and again
    assert 0 < peak_spout <= DEFAULT_MAX_SPOUT_PENDING
    assert peak_acker <= 3 * DEFAULT_MAX_SPOUT_PENDING  # the acker forgets what the spout timed out


TWO_NODES = """
    import sys

    import ray
    from ray.cluster_utils import Cluster

    from rayflow import Config
    from rayflow._runtime import submit_topology
    from tests.conftest import eventually
    from tests.test_faults import numbers_topology

    # Node death is noticed by GCS health checks: check often so the test is quick.
    fast_checks = {"health_check_period_ms": 500, "health_check_failure_threshold": 3, "health_check_timeout_ms": 500}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False, "_system_config": fast_checks},
    )
    worker = cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    cluster.wait_for_nodes()
    handle = submit_topology("nodes", Config(message_timeout_secs=3, max_spout_pending=200), numbers_topology(4000))
    placed = {m["node_id"] for m in handle.task_metrics().values()}
    print(f"spread over {len(placed)} nodes", flush=True)
    assert eventually(lambda: handle.metrics()["numbers"]["acked"] >= 500, timeout=60)
    cluster.remove_node(worker)
    acked = handle.wait(timeout=120)
    after = handle.task_metrics()
    alive = all(m["alive"] for m in after.values())
    nodes = {m["node_id"] for m in after.values()}
    restarts = sum(m["restarts"] for m in after.values())
    print(f"acked={acked} alive={alive} nodes={len(nodes)} restarts={restarts}", flush=True)
    if acked and alive and len(nodes) == 1 and restarts > 0:
        print("after node loss: every tuple acked", flush=True)
    handle.kill()
    ray.shutdown()
    cluster.shutdown()
"""


def test_tasks_spread_over_nodes_and_come_back_when_a_node_is_lost(tmp_path: Path):
    """On a two-node cluster (ray.cluster_utils.Cluster, in a subprocess of its own) the tasks
    spread over both nodes; when the worker node is removed, its tasks are re-placed on the
    head node and the topology still acks everything."""
    script = tmp_path / "two_nodes.py"
    script.write_text(textwrap.dedent(TWO_NODES))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "spread over 2 nodes" in done.stdout
    assert "after node loss: every tuple acked" in done.stdout
