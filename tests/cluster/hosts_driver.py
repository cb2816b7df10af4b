"""The driver of the separate-hosts test: runs inside host 0, joins the Ray cluster of the three
hosts, runs the node-loss topology (``tests/node_loss_components.py``) spread over them, and
while it runs (a) kills every process of one worker host, then (b) cuts the other off the
network for ``CUT_SECS`` and heals it.

For each event it measures how long until every task answers again (none on a host that is
gone) and until every message that was behind at the event (ids below the highest acked one,
not acked: in flight, or lost with the host) is acked. Prints one ``RESULT {json}`` line.

Usage: ``python -m tests.cluster.hosts_driver '{"folder": ..., "address": ..., "hosts": ...}'``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from rayflow import Config
from rayflow._runtime import TopologyHandle, submit_topology
from tests.cluster.hosts import Hosts
from tests.conftest import eventually
from tests.node_loss_components import read_ids
from tests.node_loss_scenario import build

TOTAL = 4_000
CUT_SECS = 20.0
CONF = Config(message_timeout_secs=5, max_spout_pending=200, ackers=2)
STEP_SECS = 90.0
"""The bound of each wait (cluster up, progress, recovery)."""


class Run:
    def __init__(self, handle: TopologyHandle, folder: Path, hosts: Hosts) -> None:
        self.handle = handle
        self.folder = folder
        self.hosts = hosts
        self.gone: set[int] = set()

    def host_of(self, node_id: str) -> int | None:
        ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
        ip = ips.get(node_id)
        return self.hosts.ips.index(ip) if ip in self.hosts.ips else None

    def placement(self) -> dict[int, list[str]]:
        """The kinds of task on each host."""
        found: dict[int, list[str]] = {}
        for info in self.handle.task_metrics().values():
            host = self.host_of(str(info["node_id"]))
            if host is not None:
                found.setdefault(host, []).append(str(info["kind"]))
        return {host: sorted(kinds) for host, kinds in sorted(found.items())}

    def acked(self) -> set[int]:
        return read_ids(self.folder, "acked")

    def all_answer(self) -> bool:
        tasks = self.handle.task_metrics().values()
        return all(t["alive"] and self.host_of(str(t["node_id"])) not in self.gone for t in tasks)

    def event(self, name: str, act: Callable[[], dict[str, Any]], gone: int | None) -> dict[str, Any]:
        """Do ``act`` and measure the recovery from it (seconds since ``act`` began)."""
        acked = self.acked()
        behind = set(range(max(acked, default=-1) + 1)) - acked
        figures: dict[str, Any] = {"event": name, "acked_before": len(acked), "behind": len(behind)}
        started = time.monotonic()
        figures.update(act())
        figures["act_secs"] = round(time.monotonic() - started, 1)
        if gone is not None:
            self.gone.add(gone)
        if eventually(self.all_answer, STEP_SECS, 0.2):
            figures["alive_after_secs"] = round(time.monotonic() - started, 1)
        if eventually(lambda: behind <= self.acked(), STEP_SECS, 0.2):
            figures["caught_up_after_secs"] = round(time.monotonic() - started, 1)
        figures["placement_after"] = self.placement()
        return figures


def main(args: dict[str, Any]) -> int:
    folder = Path(args["folder"])
    hosts = Hosts.of(**args["hosts"])
    result: dict[str, Any] = {"events": []}
    ray.init(address=args["address"], log_to_driver=False)
    handle = None
    try:
        if not eventually(lambda: sum(n["Alive"] for n in ray.nodes()) == len(hosts.ips), STEP_SECS, 0.2):
            result["error"] = f"not every host joined Ray: {[n['NodeManagerAddress'] for n in ray.nodes()]}"
            return 1
        handle = submit_topology("hosts", CONF, build(folder, TOTAL))
        run = Run(handle, folder, hosts)
        result["placement"] = placement = run.placement()
        workers = [h for h in (1, 2) if placement.get(h)]
        if len(workers) < 2:
            result["error"] = f"a worker host holds no task: {placement}"
            return 1
        if not eventually(lambda: len(run.acked()) >= TOTAL * 0.15, STEP_SECS, 0.2):
            result["error"] = "15% of the messages were not acked in time"
            return 1
        lost, cut = workers
        result["events"].append(run.event(f"host {lost} lost", lambda: {"killed": hosts.kill(lost)}, lost))

        def partition() -> dict[str, Any]:
            """Cut, and heal after ``CUT_SECS``; meanwhile, note when every task answered from the
            hosts left (the cut host's tasks declared dead and started elsewhere)."""
            hosts.cut(cut)
            started = time.monotonic()
            figures: dict[str, Any] = {}
            run.gone.add(cut)
            while time.monotonic() - started < CUT_SECS:
                if "moved_after_secs" not in figures and run.all_answer():
                    figures["moved_after_secs"] = round(time.monotonic() - started, 1)
                time.sleep(0.5)
            run.gone.discard(cut)
            hosts.heal(cut)
            return figures

        result["events"].append(run.event(f"host {cut} cut off for {CUT_SECS:.0f} s", partition, None))
        started = time.monotonic()
        if eventually(lambda: len(run.acked() & set(range(TOTAL))) == TOTAL, 2 * STEP_SECS, 0.2):
            result["all_acked_after_secs"] = round(time.monotonic() - started, 1)
        result["restarts"] = sum(int(t["restarts"]) for t in handle.task_metrics().values())
        return 0
    finally:
        acked, seen = read_ids(folder, "acked"), read_ids(folder, "seen")
        everything = set(range(TOTAL))
        result.update(
            acked=len(acked & everything), lost=sorted(everything - acked)[:20], unseen=len(everything - seen)
        )
        if handle is not None:
            handle.kill()
        ray.shutdown()
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
