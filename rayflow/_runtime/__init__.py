"""The Ray runtime: one actor per task (and the tasks chained to it), a thin asyncio shell
around their executors.

cluster.py     submit_topology: place the actors and wire them up; a local Ray's settings
handle.py      TopologyHandle: activate, deactivate, kill, wait, metrics
task_actor.py  the actor: executes frames, runs the spout loop, timers and ticks
chain_link.py  how the tasks chained in one actor hand each other tuples, and flush together
streams.py     authenticated streams between task actors: framing and credits
transport.py   sends payloads on those streams and bounds the tuples in flight
supervisor.py  restarts a task whose actor died

``submit_topology`` and ``TopologyHandle`` are loaded on first use: every task actor's process
imports this package (its class is ``task_actor.TaskActor``), and the driver's side -- placing,
supervising, steering -- is no part of a task's work, only of its start-up time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cluster import submit_topology
    from .handle import TopologyHandle

_LAZY = {"submit_topology": "cluster", "TopologyHandle": "handle"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rayflow._runtime' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)


__all__ = ["TopologyHandle", "submit_topology"]
