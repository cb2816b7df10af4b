"""``Placement``: where a topology's task actors go on the Ray cluster, and what they ask of it.

Each task is an actor with its component's ``resources`` (``rayflow/_resources.py``): Ray's
options, with ``num_cpus`` defaulting to ``task_cpus``, and a scheduling strategy --
``SPREAD`` unless the component gives one, or asks to be ``beside`` another component. The
same options make every restart of the task, so a task that asked for a GPU gets one again.

Three things Ray leaves silent are said here:

- **A request the cluster can never meet** (``check``): no live node has all one task asks
  for, or the tasks together ask more of a resource than the nodes hold. Ray would keep such
  an actor pending for ever; at submit it is a ``TopologyError`` naming the component, what it
  asks for and what the cluster has -- unless an autoscaler may add the node it needs.
- **Tasks waiting for resources** (``waiting``): what Ray reports as demand it cannot place
  now (the resources are taken, or an autoscaler is adding a node). ``start`` lets the topology
  run without them, the supervisor places them when Ray can (``Supervisor.adopt``), and
  ``task_metrics()`` shows them as ``waiting for resources``.
- **Beside another component** (``beside``): task *i* of the component starts on the node
  where task *i mod n* of the other runs at that moment (Ray's node affinity, soft: when that
  node has no room or is gone, Ray places it as usual). The tasks of the other component start
  first, so their nodes are known. Nothing moves a task afterwards: when its partner is
  restarted on another node they are apart until this task is restarted too.

An autoscaler counts as configured when the cluster says so: a node started by one carries
Ray's node-group label (``ray up``, KubeRay, Ray on Spark set it), or the autoscaler's status
report names node types of its own (the read-only monitor of a ``ray start`` or ``ray.init``
cluster names each node after its id, and adds none). The pending demand is read from the GCS's
resource state (``ray.autoscaler.v2.sdk``, as of Ray 2.60).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import ray
import ray._private.worker as ray_worker
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .._config import Config
from .._errors import TopologyError
from .._resources import Ask, Resources, unmet
from .._topology import ACKER_COMPONENT, Topology
from . import ray_calls
from .streams import Address

__all__ = ["Placement", "Started"]

logger = logging.getLogger("rayflow")

LISTEN_SLICE_SECS = 1.0
"""While tasks start, how often ``start`` looks whether the ones left are waiting for resources."""
_NODE_GROUP = "ray.io/node-group"
_AUTOSCALING_STATUS = "__autoscaling_status"


@dataclass
class Started:
    """What ``Placement.start`` started: the tasks that listen (their actors, nodes and
    addresses) and those Ray is still placing for want of resources (actor, ``listen`` call)."""

    actors: dict[int, Any] = field(default_factory=dict)
    addresses: dict[int, Address] = field(default_factory=dict)
    waiting: dict[int, tuple[Any, Any]] = field(default_factory=dict)


class Placement:
    """The Ray actor options of each task of a topology, and what they ask of the cluster."""

    def __init__(self, name: str, topology: Topology, config: Config, layout: Mapping[int, str]) -> None:
        self._name = name
        self._layout = dict(layout)
        self._task_cpus = config.task_cpus
        self._kinds = {cid: "spout" if spec.is_spout else "bolt" for cid, spec in topology.components.items()}
        self._kinds[ACKER_COMPONENT] = "acker"
        self._asked = {cid: Resources.of(spec.resources) for cid, spec in topology.components.items()}
        self._asked[ACKER_COMPONENT] = Resources()
        self._requests = {cid: asked.request(self._task_cpus) for cid, asked in self._asked.items()}
        self._partner: dict[int, int] = {}
        """Task -> the task it starts beside (``beside``: same index, modulo the other's tasks)."""
        tasks: dict[str, list[int]] = {}
        for task, cid in sorted(self._layout.items()):
            tasks.setdefault(cid, []).append(task)
        for cid, asked in self._asked.items():
            if asked.beside is not None:
                others = tasks[asked.beside]
                for index, task in enumerate(tasks.get(cid, [])):
                    self._partner[task] = others[index % len(others)]

    def request(self, task: int) -> dict[str, float]:
        """What ``task`` takes from its node, in Ray's resource names."""
        return dict(self._requests[self._layout[task]])

    def options(self, task: int, nodes: Mapping[int, str]) -> dict[str, Any]:
        """Ray's actor options for a start of ``task``; ``nodes`` says where each task runs now
        (for ``beside``)."""
        asked = self._asked[self._layout[task]]
        options = asked.actor_options(self._task_cpus)
        options["max_concurrency"] = 1000
        partner = self._partner.get(task)
        if partner is not None and partner in nodes:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
                nodes[partner], soft=True, _spill_on_unavailable=True
            )
        else:
            options["scheduling_strategy"] = asked.scheduling_strategy or "SPREAD"
        return options

    # -- at submit ------------------------------------------------------------------------------
    def check(self) -> None:
        """Refuse, within seconds, what no node of the cluster can ever hold (``TopologyError``),
        unless an autoscaler may add such a node."""
        nodes = [node for node in ray.nodes() if node.get("Alive")]  # type: ignore[no-untyped-call]
        totals = [{k: float(v) for k, v in node.get("Resources", {}).items()} for node in nodes]
        asks = []
        for cid, asked in self._asked.items():
            count = sum(1 for c in self._layout.values() if c == cid)
            if count:
                who = self._kinds[cid]
                asks.append(Ask(cid, who, count, self._requests[cid], asked.asked(self._task_cpus)))
        found = unmet(asks, totals)
        if not found:
            return
        if autoscaler_configured(nodes):
            for line in found:
                logger.warning(
                    "topology %r: %s; the autoscaler may add a node for it, until then it waits", self._name, line
                )
            return
        raise TopologyError([f"{line}; no autoscaler is configured to add a node" for line in found])

    def start(self, make_actor: Callable[[int], Any], nodes: dict[int, str]) -> Started:
        """Start every task and wait until each listens, or Ray reports it waiting for
        resources. A component ``beside`` another starts once the other's tasks are placed.
        ``nodes`` is filled in with each placed task's node. If a task fails to start, every
        actor started is killed and the error raised."""
        started = Started()
        try:
            for stage in self._stages():
                actors = {task: make_actor(task) for task in stage}
                started.actors.update(actors)
                waiting = self._listen(actors, nodes, started.addresses)
                for task in waiting:
                    del started.actors[task]
                started.waiting.update(waiting)
        except BaseException:
            for actor in [*started.actors.values(), *(a for a, _ in started.waiting.values())]:
                ray.kill(actor)
            raise
        for task in started.waiting:
            logger.warning(
                "topology %r: task %d (%s) waits for resources (%s); the topology runs without it until Ray places it",
                self._name,
                task,
                self._describe(task),
                _shown(self.request(task)),
            )
        return started

    def _stages(self) -> list[list[int]]:
        """The tasks in the order they start: a task after the task it is ``beside``."""
        stages: list[list[int]] = []
        depth: dict[int, int] = {}

        def depth_of(task: int) -> int:
            if task not in depth:
                partner = self._partner.get(task)
                depth[task] = 0 if partner is None else depth_of(partner) + 1
            return depth[task]

        for task in sorted(self._layout):
            level = depth_of(task)
            while len(stages) <= level:
                stages.append([])
            stages[level].append(task)
        return stages

    def _listen(
        self, actors: dict[int, Any], nodes: dict[int, str], addresses: dict[int, Address]
    ) -> dict[int, tuple[Any, Any]]:
        """Wait for each actor's ``listen``; what the tasks left are, once Ray has reported
        every one of them waiting for resources twice in a row: task -> (actor, listen call)."""
        calls = {actors[task].listen.remote(): task for task in actors}
        seen: set[int] | None = None
        while calls:
            ready, _ = ray.wait(list(calls), num_returns=len(calls), timeout=LISTEN_SLICE_SECS)
            for ref in ready:
                task = calls.pop(ref)
                nodes[task], addresses[task] = ray.get(ref)
            if not calls:
                break
            left = set(calls.values())
            waiting = self.waiting(left)
            if waiting == left and waiting == seen:
                return {task: (actors[task], ref) for ref, task in calls.items()}
            seen = waiting
        return {}

    # -- while it runs --------------------------------------------------------------------------
    def waiting(self, tasks: Collection[int]) -> set[int]:
        """Of ``tasks`` (being started), those Ray reports it cannot place for want of
        resources: as many as its pending demand counts for each task's request. Empty when
        Ray cannot say."""
        if not tasks:
            return set()
        try:
            demand = pending_demand()
        except ray_calls.RayGone:
            raise
        except Exception as exc:  # an older or newer Ray: no demand to show, nothing breaks
            logger.debug("Ray's pending resource demand could not be read: %s", exc)
            return set()
        found = set()
        for task in sorted(tasks, reverse=True):
            shape = _shape(self._requests[self._layout[task]])
            if demand[shape] > 0:
                demand[shape] -= 1
                found.add(task)
        return found

    def _describe(self, task: int) -> str:
        cid = self._layout[task]
        return f"{self._kinds[cid]} {cid!r}"


def _shape(request: Mapping[str, float]) -> frozenset[tuple[str, float]]:
    return frozenset((name, round(amount, 4)) for name, amount in request.items() if amount > 0)


def _shown(request: Mapping[str, float]) -> str:
    return ", ".join(f"{name} {amount:g}" for name, amount in sorted(request.items()))


def pending_demand() -> Counter[frozenset[tuple[str, float]]]:
    """The requests Ray cannot place now, counted by shape (GCS resource state)."""
    from ray.autoscaler.v2.sdk import get_cluster_resource_state

    if not ray_calls.connected():
        raise ray_calls.RayGone("Ray was shut down")
    state = get_cluster_resource_state(ray_worker.global_worker.gcs_client)  # type: ignore[attr-defined]
    demand: Counter[frozenset[tuple[str, float]]] = Counter()
    for pending in state.pending_resource_requests:
        demand[_shape(dict(pending.request.resources_bundle))] += pending.count
    return demand


def autoscaler_configured(nodes: list[dict[str, Any]]) -> bool:
    """Whether the cluster says an autoscaler may add nodes (see the module's docstring)."""
    if any(_NODE_GROUP in (node.get("Labels") or {}) for node in nodes):
        return True
    try:
        gcs: Any = ray_worker.global_worker.gcs_client  # type: ignore[attr-defined]
        report = gcs.internal_kv_get(_AUTOSCALING_STATUS.encode(), None)
        mapping = json.loads(report or b"{}").get("autoscaler_report", {}).get("node_type_mapping") or {}
    except Exception as exc:  # no report to read: nothing says an autoscaler runs
        logger.debug("the autoscaler's status could not be read: %s", exc)
        return False
    return any(kind != f"node_{node}" for node, kind in mapping.items())
