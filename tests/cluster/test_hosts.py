"""Separate hosts, for real: three network namespaces with their own IPs, a Ray head and two
workers started on them by ``ray start``, a topology spread over all three. One worker host is
lost (every process in it killed), the other is cut off the network for 20 s and healed: every
message is acked, none lost, and the recovery times are printed (``pytest -s``).

Needs root and iproute2 (CI runs as root); skips with the reason elsewhere. Everything it
starts lives in its namespaces and dies with them: no ``ray stop``, which would stop every Ray
on the machine.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.hosts import Hosts, cannot_make_hosts
from tests.cluster.hosts_driver import TOTAL

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parent.parent.parent
RAY_PORT = 6380
"""The head's GCS port, inside host 0's namespace (6379 is Redis' on the machine)."""
NODE_DEATH = {
    "health_check_initial_delay_ms": 2000,
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 4,
}
"""A host that does not answer 4 health checks a second apart is dead: within ~5 s."""
START_SECS = 120.0
START_ATTEMPTS = 3
HEAD_NOT_THERE = "No node info found for head node"
DRIVER_SECS = 300.0


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    reason = cannot_make_hosts()
    if reason is not None:
        pytest.skip(reason)
    made = Hosts(3)
    try:
        yield made
    finally:
        made.close()


def ray_env(token: str) -> dict[str, str]:
    """Ray's token authentication on, with this cluster's own token (not the machine's
    ``~/.ray/auth_token``, which ``ray start`` would otherwise pick up)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token, RAY_USAGE_STATS_ENABLED="0")
    # A raylet stops if its node's agent has not started within this; on a loaded machine
    # (CI shares its cores) importing the agent alone can take tens of seconds.
    env["RAY_agent_register_timeout_ms"] = "180000"
    return env


def ray_start(hosts: Hosts, host: int, temp: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    argv = [
        sys.executable,
        "-m",
        "ray.scripts.scripts",
        "start",
        f"--node-ip-address={hosts.ips[host]}",
        "--num-cpus=1",
        f"--temp-dir={temp / f'h{host}'}",
        "--object-store-memory=100000000",
        "--disable-usage-stats",
        "--include-log-monitor=false",  # the driver does not take the workers' logs
    ]
    if host == 0:
        argv += [
            "--head",
            f"--port={RAY_PORT}",
            "--include-dashboard=false",
            f"--system-config={json.dumps(NODE_DEATH)}",
        ]
    else:
        argv += [f"--address={hosts.ips[0]}:{RAY_PORT}"]
    with (temp / f"start-h{host}.log").open("w") as log:  # a file: Ray's daemons inherit it, a pipe would stay open
        return subprocess.Popen(hosts.command(host, argv), env=env, stdout=log, stderr=subprocess.STDOUT, text=True)


def started(proc: subprocess.Popen[str], temp: Path, host: int) -> str:
    """Wait for ``ray start``; what it printed. ``ray start`` gives a raylet 30 s to register
    (not a setting): on a loaded machine it may register later, its processes running on, so
    that is not a failure -- the driver waits for every host to join."""
    try:
        proc.wait(timeout=START_SECS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    output = (temp / f"start-h{host}.log").read_text()
    late = "timed out during startup" in output
    assert proc.returncode == 0 or late or HEAD_NOT_THERE in output, (
        f"Ray did not start on host {host}:\n{output[-3000:]}"
    )
    return output


def start_cluster(hosts: Hosts, temp: Path, env: dict[str, str]) -> None:
    """A head on host 0, then a worker on each other host; a worker that found the head not
    registered yet (it may register late) tries again."""
    started(ray_start(hosts, 0, temp, env), temp, 0)
    waiting = [1, 2]
    for _attempt in range(START_ATTEMPTS):
        procs = {host: ray_start(hosts, host, temp, env) for host in waiting}
        waiting = [host for host, proc in procs.items() if HEAD_NOT_THERE in started(proc, temp, host)]
        if not waiting:
            return
    pytest.fail(f"the head was not registered after {START_ATTEMPTS} attempts of the workers")


def test_a_host_lost_and_a_host_cut_off_lose_no_message(hosts: Hosts) -> None:
    token = secrets.token_hex(32)
    env = ray_env(token)
    with tempfile.TemporaryDirectory(prefix="rfh") as scratch:  # short: Ray's socket paths live under it
        temp = Path(scratch)
        start_cluster(hosts, temp, env)
        folder = temp / "ledger"
        folder.mkdir()
        args = {"folder": str(folder), "address": f"{hosts.ips[0]}:{RAY_PORT}", "hosts": hosts.describe()}
        driver = subprocess.Popen(
            hosts.command(0, [sys.executable, "-m", "tests.cluster.hosts_driver", json.dumps(args)]),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            output, _ = driver.communicate(timeout=DRIVER_SECS)
        except subprocess.TimeoutExpired:
            driver.kill()
            output, _ = driver.communicate()
            pytest.fail(f"the driver did not end within {DRIVER_SECS:.0f} s:\n{output[-3000:]}")
        finally:
            for host in range(len(hosts.names)):  # every process of the cluster, before its files go
                hosts.kill(host)
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the driver printed no result (exit {driver.returncode}):\n{output[-3000:]}"
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    print(f"\nseparate hosts {hosts.ips}: placement {result.get('placement')}")
    for event in result["events"]:
        print(f"  {event}")
    print(f"  every message acked {result.get('all_acked_after_secs')} s after the last recovery")
    assert driver.returncode == 0 and "error" not in result, f"{result}\n{output[-3000:]}"
    assert result["lost"] == [] and result["acked"] == TOTAL, f"messages lost: {result}"
    assert result["unseen"] == 0, f"acked messages that never reached the sink: {result}"
    for event in result["events"]:
        assert event.get("alive_after_secs") is not None, f"not every task came back: {event}"
        assert event.get("caught_up_after_secs") is not None, f"what was in flight was not replayed: {event}"
