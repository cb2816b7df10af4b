"""A host of a running topology is lost; the topology recovers and loses nothing.

Run as a script (``python -m tests.node_loss_scenario FOLDER``) by ``tests/test_node_loss.py``:
it needs a Ray of its own (a ``ray.cluster_utils.Cluster``: a head without CPUs, where the
driver is, and two workers), while the pytest process keeps the session's Ray.

The topology (``node_loss_components.py``) is placed by Ray's SPREAD over the two workers. Once
a quarter of the messages are acked, the worker holding the most kinds of task (spout, bolt,
acker) is removed, its processes killed as a lost host's would be. Node death is noticed fast
(``FAST_NODE_DEATH``); the supervisor starts the lost tasks on the worker left.

``--ray-defaults``: Ray's own node-death detection, not the fast one. ``--stateful``: the relay
is a stateful bolt (state in SQLite files in FOLDER), so the topology has a checkpoint spout,
and the node lost is the one holding it. ``--both``: the plain variant, then the stateful one on
the same cluster (a new worker joins after the first loss): one cluster start for both.

Prints one ``RESULT {json}`` line per variant: what was on the lost node, when the lost tasks
were alive again and when every message was acked (seconds after the loss), and the ids lost.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import ray

from rayflow import Config, TopologyBuilder
from rayflow._runtime import TopologyHandle, submit_topology
from rayflow._state.checkpoint import CHECKPOINT_COMPONENT
from tests.conftest import eventually
from tests.node_loss_components import CountingRelay, LedgerSpout, Relay, Seen, read_ids

TOTAL = 1_000
"""At the rate below the loss comes 1.3 s into the stream and each spout task still has 375
messages to emit, about 4 s more: the lost spout's share is emitted by its restarted task and the
bolt's and acker's trees lost with the node are replayed, which is what the scenario is about; a
longer stream only adds wall time after that."""
RATE_PER_SPOUT_TASK = 100.0
FAST_NODE_DEATH = {
    "health_check_initial_delay_ms": 1000,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 3,
}
"""Ray's GCS declares a node dead after this many failed health checks in a row (defaults:
5000 ms initial delay, every 3000 ms, 10000 ms timeout, 5 failures): here within ~2 s."""
CONF = Config(message_timeout_secs=5, max_spout_pending=200, ackers=2)
DEADLINE_SECS = 90.0


def build(folder: Path, total: int = TOTAL, stateful: bool = False) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("source", LedgerSpout(str(folder), total, RATE_PER_SPOUT_TASK), parallelism=2)
    relay = CountingRelay() if stateful else Relay()
    builder.set_bolt("relay", relay, parallelism=2).shuffle_grouping("source")
    builder.set_bolt("sink", Seen(str(folder)), parallelism=2).fields_grouping("relay", ["n"])
    return builder.create_topology()


def kinds_by_node(handle: TopologyHandle) -> dict[str, set[str]]:
    """The kinds of task on each node (the checkpoint spout is ``checkpoint``)."""
    found: dict[str, set[str]] = {}
    for info in handle.task_metrics().values():
        kind = "checkpoint" if info["component"] == CHECKPOINT_COMPONENT else str(info["kind"])
        found.setdefault(str(info["node_id"]), set()).add(kind)
    return found


def alive_off(handle: TopologyHandle, lost_node: str) -> bool:
    """Every task answers, none on the lost node."""
    tasks = handle.task_metrics().values()
    return all(t["alive"] and t["node_id"] != lost_node for t in tasks)


def outcome(folder: Path, total: int) -> dict[str, Any]:
    acked, seen = read_ids(folder, "acked"), read_ids(folder, "seen")
    everything = set(range(total))
    return {"acked": len(acked & everything), "lost": sorted(everything - acked)[:20], "unseen": len(everything - seen)}


def lose_a_node(cluster: Any, workers: list[Any], folder: Path, stateful: bool) -> dict[str, Any]:
    """One variant on the cluster's two live workers: submit, lose the node holding the most
    kinds of task (the checkpoint spout's, if there is one) a quarter of the way in, measure the
    recovery; what was on the lost node and the figures."""
    folder.mkdir()
    conf = CONF
    if stateful:
        state = {
            "state_provider": "sqlite",
            "state_provider_config": {"dir": str(folder)},
            "checkpoint_interval_ms": 500,
        }
        conf = CONF.merged(state)
    name = "node-loss-stateful" if stateful else "node-loss"
    handle = submit_topology(name, conf, build(folder, stateful=stateful))
    result: dict[str, Any] = {"variant": "stateful" if stateful else "plain"}
    try:
        if not eventually(lambda: len(read_ids(folder, "acked")) >= TOTAL // 4, 60):
            result["error"] = "a quarter of the messages were not acked within 60 s"
            return result
        placed = kinds_by_node(handle)
        # the node with the checkpoint spout, if there is one, else the one with the most kinds of task
        lost_id, lost_kinds = max(placed.items(), key=lambda item: ("checkpoint" in item[1], len(item[1])))
        victim = next(w for w in workers if w.node_id == lost_id)
        result.update(lost_node_kinds=sorted(lost_kinds), acked_at_loss=len(read_ids(folder, "acked")))
        lost_at = time.monotonic()
        cluster.remove_node(victim, allow_graceful=False)
        workers.remove(victim)
        if eventually(lambda: alive_off(handle, lost_id), DEADLINE_SECS):
            result["alive_after_secs"] = round(time.monotonic() - lost_at, 1)
        if eventually(lambda: len(read_ids(folder, "acked") & set(range(TOTAL))) == TOTAL, DEADLINE_SECS):
            result["all_acked_after_secs"] = round(time.monotonic() - lost_at, 1)
        result["restarts"] = sum(int(t["restarts"]) for t in handle.task_metrics().values())
        return result
    finally:
        result.update(outcome(folder, TOTAL))
        handle.kill()


def main(folder: Path, system_config: dict[str, Any], variants: list[bool]) -> int:
    """Run each variant (``True``: stateful) in turn on one cluster, a new worker added after
    each loss so that every variant starts on two; one ``RESULT`` line per variant."""
    from ray.cluster_utils import Cluster

    temp_dir = str(folder / "ray")  # not /tmp/ray: its ray_current_cluster would point others' ray.init here
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "include_dashboard": False,
            "temp_dir": temp_dir,
            "_system_config": system_config,
        },
    )

    def add_worker() -> Any:
        return cluster.add_node(num_cpus=1, object_store_memory=80 * 1024 * 1024, temp_dir=temp_dir)

    workers = [add_worker() for _ in range(2)]
    ray.init(address=cluster.address, log_to_driver=False)
    failed = False
    try:
        for stateful in variants:
            while len(workers) < 2:
                workers.append(add_worker())
            cluster.wait_for_nodes()
            result = lose_a_node(cluster, workers, folder / ("stateful" if stateful else "plain"), stateful)
            failed = failed or "error" in result
            print("RESULT " + json.dumps(result), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    chosen = [False, True] if "--both" in sys.argv else ["--stateful" in sys.argv]
    sys.exit(main(Path(sys.argv[1]), {} if "--ray-defaults" in sys.argv else FAST_NODE_DEATH, chosen))
