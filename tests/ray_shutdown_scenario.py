"""The driver shuts Ray down under a running topology, without killing it first, while the
supervisor is restarting a task: the supervisor's thread must end, and nothing may connect to
(or start) Ray again -- neither that thread nor ``handle.kill()`` afterwards.

Run as a script (``python -m tests.ray_shutdown_scenario FOLDER``) by ``tests/test_node_loss.py``:
it starts and stops a Ray of its own. Prints one ``RESULT {json}`` line.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import ray

from rayflow import Config, LocalCluster
from tests.conftest import eventually
from tests.node_loss_components import read_ids
from tests.node_loss_scenario import build


def main(folder: Path) -> int:
    cluster = LocalCluster(num_cpus=2)
    handle = cluster.submit_topology("shutdown", Config(message_timeout_secs=5), build(folder, total=100_000))
    if not eventually(lambda: len(read_ids(folder, "acked")) > 0, 60):
        print("RESULT " + json.dumps({"error": "nothing was acked within 60 s"}), flush=True)
        return 1
    supervisor = handle._supervisor
    watch = next(t for t in threading.enumerate() if t.name == f"rayflow-supervisor-{handle.name}")
    ray.kill(next(iter(supervisor.actors.values())))  # a restart begins ...
    eventually(lambda: bool(supervisor.dead), 10, 0.01)
    restarting = bool(supervisor.dead)
    ray.shutdown()  # ... and Ray goes away under it
    ended = eventually(lambda: not watch.is_alive(), 20, 0.05)
    reconnected_by_thread = ray.is_initialized()  # once the thread ended, it can connect no more
    handle.kill()
    reconnected_by_kill = ray.is_initialized()
    result = {
        "restarting_at_shutdown": restarting,
        "thread_ended": ended,
        "reconnected_by_thread": reconnected_by_thread,
        "reconnected_by_kill": reconnected_by_kill,
    }
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
