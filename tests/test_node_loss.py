"""Storm's promise when a whole host goes: its tasks start on the hosts left, every tree completes.

A ``ray.cluster_utils.Cluster`` of two workers needs a Ray of its own, so the scenario runs in a
subprocess (``node_loss_scenario.py``) and this process keeps the session's Ray. The node
holding a spout, a bolt and an acker task is removed mid-stream; then, on the same cluster with a
new worker, the node holding a stateful topology's checkpoint spout; the figures are printed
(``pytest -s``). And when the driver shuts Ray down under a topology, nothing starts it again
(``ray_shutdown_scenario.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.node_loss_scenario import TOTAL

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parent.parent
SCENARIO_SECS = 420.0
"""For both node-loss variants in one run (each bounds its own waits)."""


STARTUP_TIMED_OUT = "timed out during startup"
"""Ray gives a new node's raylet 30 s to register (not a setting): on a loaded machine it may
not, before the scenario began. Such a run is made again, once."""


def run_scenario(folder: Path, *args: str, module: str = "tests.node_loss_scenario") -> list[dict[str, Any]]:
    """Run a scenario script in its own session; whatever it leaves running is killed with it.
    Its results, one per ``RESULT`` line, each with the script's exit status."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    for attempt in range(2):
        run = folder / f"run{attempt}"
        run.mkdir()
        with subprocess.Popen(
            [sys.executable, "-m", module, str(run), *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        ) as proc:
            output, timed_out = "", False
            try:
                output, _ = proc.communicate(timeout=SCENARIO_SECS)
            except subprocess.TimeoutExpired:
                timed_out = True
            with contextlib.suppress(ProcessLookupError):  # a Ray node it left behind
                os.killpg(proc.pid, signal.SIGKILL)
            if timed_out:  # what it printed (a second communicate() after one that ended repeats it)
                output = proc.communicate()[0] or ""
        lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
        if lines or STARTUP_TIMED_OUT not in output:
            break
    assert lines, f"the scenario printed no result (exit {proc.returncode}):\n{output[-3000:]}"
    results: list[dict[str, Any]] = [json.loads(line.removeprefix("RESULT ")) for line in lines]
    for result in results:
        result["exit"] = proc.returncode
        result["output"] = output[-3000:]
    return results


@pytest.fixture(scope="module")
def node_losses() -> dict[str, dict[str, Any]]:
    """Both variants, one after the other on one cluster (its start is most of a variant's time):
    each variant's result by name."""
    with tempfile.TemporaryDirectory(prefix="rfnl") as folder:  # short: Ray's socket paths live under it
        return {result["variant"]: result for result in run_scenario(Path(folder), "--both")}


@pytest.mark.parametrize("variant", ["plain", "stateful"])
def test_a_lost_host_s_tasks_start_on_the_host_left_and_every_message_is_acked(
    node_losses: dict[str, dict[str, Any]], variant: str
) -> None:
    """Plain: the lost node holds a spout, a bolt and an acker task. Stateful (a stateful bolt,
    so a checkpoint spout): the lost node holds the checkpoint spout."""
    assert variant in node_losses, f"the {variant} variant printed no result: {list(node_losses.values())}"
    result = node_losses[variant]
    stateful = variant == "stateful"
    print(
        f"\nnode loss ({', '.join(result.get('lost_node_kinds', []))} on the lost node, "
        f"{result.get('acked_at_loss')} of {TOTAL} acked then): tasks alive again after "
        f"{result.get('alive_after_secs')} s, every message acked after {result.get('all_acked_after_secs')} s, "
        f"{result.get('restarts')} restarts"
    )
    assert "error" not in result, result
    expected = {"checkpoint", "bolt"} if stateful else {"spout", "bolt", "acker"}
    assert expected <= set(result["lost_node_kinds"]), result
    assert result["lost"] == [] and result["acked"] == TOTAL, f"messages lost: {result}"
    assert result["unseen"] == 0, f"acked messages that never reached the sink: {result}"
    assert result.get("alive_after_secs") is not None, "the lost tasks were not running again within the deadline"


def test_ray_shut_down_under_a_restarting_supervisor_is_not_started_again() -> None:
    with tempfile.TemporaryDirectory(prefix="rfsd") as folder:
        result = run_scenario(Path(folder), module="tests.ray_shutdown_scenario")[-1]
    assert result["exit"] == 0, result
    assert result["restarting_at_shutdown"], f"the supervisor was not restarting a task at the shutdown: {result}"
    assert result["thread_ended"], f"the supervisor's thread outlived Ray: {result}"
    assert not result["reconnected_by_thread"], "the supervisor's thread connected to Ray again"
    assert not result["reconnected_by_kill"], "handle.kill() after ray.shutdown() connected to Ray again"
