"""Operator chaining: a bolt fed one-to-one by its upstream runs in its upstream's process.

Flink chains operators connected one-to-one into one task, so that records pass by a function
call instead of a socket. rayflow does the same for a bolt whose every input comes from one
component through ``shuffle``, ``none`` or ``local_or_shuffle`` and which has as many tasks:
task *i* of the bolt is *chained* to task *i* of its upstream, runs in the same Ray actor, and
takes every tuple that task emits to it (the shuffle becomes one-to-one, which it may: any
spread is a valid shuffle). What it saves is a crossing per tuple -- pickling, a frame, the
other process's wake-up -- and a process; what it keeps is everything else: the tuple is the
same, its tree is anchored and acked as before, the acker sees the same messages, and a
failure fails it. A chained task dies with its host's process and is restarted with it, as
Storm's executors die with their worker.

A link is chained only where nothing can tell the difference but speed:

- chaining is on for the topology and both components (``rayflow.chaining``, in the
  topology's config or in a component's own);
- the bolt's inputs all come from one component, through ``shuffle``, ``none`` or
  ``local_or_shuffle`` (a fields grouping decides the task itself; ``all``, ``global``,
  ``direct`` and custom groupings too), on any of its streams;
- both have the same number of tasks and ask Ray for the same resources;
- the upstream has no liveness duties of its own: a broker spout's ``upkeep`` (heartbeats,
  in-progress acks) runs on its task's event loop, which a chained bolt's batch would hold up
  for as long as the batch takes -- longer than a broker's patience, with a slow bolt;
- neither takes part in checkpoints: a stateful bolt's topology, or an exactly-once one, is
  not chained (the checkpoint stream reaches every task of a bolt from every task upstream).

A chain can be longer (a spout, a bolt chained to it, a bolt chained to that one): every task
of a chain runs in the actor of its first task, its *host*. The drawings and ``task_metrics``
show what is chained (``host``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._config import Config
from ._context import TopologyContext
from ._groupings import Grouping, LocalOrShuffleGrouping, NoneGrouping, ShuffleGrouping, StreamId
from ._topology import ComponentSpec, Subscription, Topology

__all__ = ["ChainPlan", "ForwardGrouping", "chain_plan", "chained_components"]

_CHAINABLE = (ShuffleGrouping, NoneGrouping, LocalOrShuffleGrouping)
"""The groupings a chained link may replace by one-to-one delivery: they promise no task."""


class ForwardGrouping(Grouping):
    """One-to-one: task *i* of the source sends every tuple to task *i* of the target, the task
    chained to it (``chain_plan`` puts it in place of the shuffle it replaces)."""

    kind = "chained"

    def __init__(self, replaces: Grouping) -> None:
        self.replaces = replaces
        """The grouping the user asked for, as the drawings show it."""
        self._target: list[int] = []

    def prepare(self, context: TopologyContext, stream: StreamId, target_tasks: list[int]) -> None:
        super().prepare(context, stream, target_tasks)
        self._target = [self.targets[context.this_task_index]]

    def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]:
        return self._target

    def _fixed(self) -> list[int] | None:
        return self._target

    def describe(self) -> str:
        return f"{self.replaces.describe()}, chained"


def _chaining_on(topology: Topology, conf: Config, component: str) -> bool:
    spec = topology.components[component]
    return bool(conf.merged(spec.config).chaining)


def chained_components(topology: Topology, conf: Config | None = None) -> dict[str, str]:
    """Each bolt chained to its upstream, by component id: bolt -> upstream (module docstring).
    ``conf`` is the topology's config (its default when ``None``)."""
    conf = Config.of(conf)
    if topology.stateful or conf.processing_guarantee == "exactly_once":
        return {}
    chained: dict[str, str] = {}
    for spec in topology.bolts:
        upstream = _only_upstream(spec)
        if upstream is None or upstream not in topology.components:
            continue
        source = topology.components[upstream]
        if (
            getattr(source.component, "upkeep", None) is None
            and source.parallelism == spec.parallelism
            and source.resources == spec.resources
            and _chaining_on(topology, conf, upstream)
            and _chaining_on(topology, conf, spec.id)
        ):
            chained[spec.id] = upstream
    return chained


def _only_upstream(spec: ComponentSpec) -> str | None:
    """The one component every input of ``spec`` comes from through a chainable grouping."""
    sources = {sub.component for sub in spec.inputs}
    if len(sources) != 1 or not all(type(sub.grouping) in _CHAINABLE for sub in spec.inputs):
        return None
    (source,) = sources
    return None if source == spec.id else source


@dataclasses.dataclass(frozen=True)
class ChainPlan:
    """How a topology runs chained: ``topology`` with each chained link's grouping replaced by
    a ``ForwardGrouping``, and ``hosts``: each chained task -> the task whose actor runs it."""

    topology: Topology
    hosts: dict[int, int]

    def guests(self, host: int) -> list[int]:
        """The tasks ``host``'s actor runs besides its own, upstream first."""
        return [task for task, h in self.hosts.items() if h == host]


def chain_plan(topology: Topology, conf: Config, layout: dict[int, str]) -> ChainPlan:
    """The chained form of ``topology`` for ``layout`` (task -> component)."""
    chained = chained_components(topology, conf)
    if not chained:
        return ChainPlan(topology, {})
    tasks: dict[str, list[int]] = {}
    for task, component in sorted(layout.items()):
        tasks.setdefault(component, []).append(task)

    def head(component: str) -> str:
        while component in chained:
            component = chained[component]
        return component

    def depth(component: str) -> int:
        return 0 if component not in chained else 1 + depth(chained[component])

    hosts: dict[int, int] = {}
    for component in sorted(chained, key=lambda c: (depth(c), c)):
        for index, task in enumerate(tasks[component]):
            hosts[task] = tasks[head(component)][index]
    specs = {cid: dataclasses.replace(spec) for cid, spec in topology.components.items()}
    for cid in chained:
        specs[cid].inputs = [
            Subscription(sub.component, sub.stream, ForwardGrouping(sub.grouping)) for sub in specs[cid].inputs
        ]
    return ChainPlan(Topology(specs), hosts)
