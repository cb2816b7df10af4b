"""Executors: one task's logic -- a user component (or the acker) wired to its router, edge
ids and outbox -- as plain Python, with one lifecycle for every kind (see ``base.py``). The
Ray actor and the in-process runner both build them with ``make_executor`` and drive them
through that lifecycle alone."""

from __future__ import annotations

from .._config import Config
from .._context import TopologyContext
from .._state.checkpoint import CHECKPOINT_COMPONENT
from .._topology import ACKER_COMPONENT, Topology
from .base import Executor, Link, Observer, Timer
from .bolt import BoltExecutor
from .checkpoint_spout import CheckpointSpoutExecutor
from .spout import SpoutExecutor

__all__ = [
    "BoltExecutor",
    "CheckpointSpoutExecutor",
    "Executor",
    "Link",
    "Observer",
    "SpoutExecutor",
    "Timer",
    "make_executor",
]


def make_executor(topology: Topology, conf: Config, context: TopologyContext, link: Link) -> Executor:
    """The executor for ``context.this_task_id``: the acker, a spout's or a bolt's."""
    component = context.this_component_id
    cls: type[Executor]
    if component == ACKER_COMPONENT:
        # Imported here: the acker's executor (``_acking``) builds on ``.base``, so importing it
        # at the top would make ``import rayflow._acking.executor`` first go round in a circle.
        from .._acking.executor import AckerExecutor

        cls = AckerExecutor
    elif component == CHECKPOINT_COMPONENT:
        cls = CheckpointSpoutExecutor
    elif topology.components[component].is_spout:
        cls = SpoutExecutor
    else:
        # Imported here for the same reason: the table names the stateful kind, which lives in
        # ``_state`` and builds on ``.bolt_kind`` (``import rayflow._state.bolt_kind`` first).
        from .kinds import bolt_kind

        return BoltExecutor(topology, conf, context, link, bolt_kind(topology.components[component].component))
    return cls(topology, conf, context, link)
