"""What a topology is: its components (``ComponentSpec``), their inputs (``Subscription``) and the
graph of them (``Topology``).

Kept apart from ``_topology``, which builds and checks the graph, so that what reads a graph
(the key groups of ``_state``, the runtime) needs nothing of how it was built: ``create_topology``
calls into ``_state.key_groups``, which reads a ``Topology``, and neither imports the other back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._components import BasicBolt, BatchBolt, Bolt, Spout, StatefulBolt, StreamDeclaration
from ._groupings import Grouping
from ._windows.bolt import WindowedBolt

__all__ = ["ACKER_COMPONENT", "ComponentSpec", "Subscription", "Topology"]

ACKER_COMPONENT = "__acker"


@dataclass
class Subscription:
    """A bolt's input: a stream of a component, and how its tuples are spread over the bolt."""

    component: str
    stream: str
    grouping: Grouping


@dataclass
class ComponentSpec:
    id: str
    component: Spout | Bolt | BasicBolt | BatchBolt | WindowedBolt
    parallelism: int
    config: dict[str, Any]
    inputs: list[Subscription] = field(default_factory=list)
    streams: dict[str, StreamDeclaration] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    """Ray's actor options for each task, as given (``rayflow/_resources.py``); checked by
    ``create_topology``, read by the runtime as ``Resources.of(spec.resources)``."""

    @property
    def is_spout(self) -> bool:
        return isinstance(self.component, Spout)


@dataclass
class Topology:
    """A validated graph of components. Built by ``TopologyBuilder.create_topology``."""

    components: dict[str, ComponentSpec]

    @property
    def spouts(self) -> list[ComponentSpec]:
        return [c for c in self.components.values() if c.is_spout]

    @property
    def bolts(self) -> list[ComponentSpec]:
        return [c for c in self.components.values() if not c.is_spout]

    @property
    def stateful(self) -> bool:
        """Has a ``StatefulBolt``: checkpoints run (``create_topology`` adds their spout)."""
        return any(isinstance(c.component, StatefulBolt) for c in self.components.values())

    def task_layout(self, ackers: int) -> dict[int, str]:
        """Task id -> component id: components sorted by id get consecutive ids from 1, as in
        Storm; the acker tasks come last."""
        layout: dict[int, str] = {}
        for cid in sorted(self.components):
            for _ in range(self.components[cid].parallelism):
                layout[len(layout) + 1] = cid
        for _ in range(ackers):
            layout[len(layout) + 1] = ACKER_COMPONENT
        return layout

    def stream_fields(self) -> dict[str, dict[str, tuple[str, ...]]]:
        return {cid: {s: d.fields for s, d in c.streams.items()} for cid, c in self.components.items()}

    def subscribers(self, component_id: str) -> dict[str, list[tuple[str, Grouping]]]:
        """For each stream of ``component_id``: the bolts subscribed to it and their groupings."""
        out: dict[str, list[tuple[str, Grouping]]] = {}
        for bolt in self.bolts:
            for sub in bolt.inputs:
                if sub.component == component_id:
                    out.setdefault(sub.stream, []).append((bolt.id, sub.grouping))
        return out
