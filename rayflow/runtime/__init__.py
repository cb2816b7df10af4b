"""The Ray runtime: one actor per task, each a thin asyncio shell around an executor.

cluster.py     LocalCluster and submit_topology: place the actors and wire them up
handle.py      TopologyHandle: activate, deactivate, kill, wait, metrics
task_actor.py  the actor: serves batches, runs the spout loop, timers and ticks
transport.py   sends payloads as Ray calls and bounds the batches in flight
"""

from .cluster import LocalCluster, submit_topology
from .handle import TopologyHandle

__all__ = ["LocalCluster", "TopologyHandle", "submit_topology"]
