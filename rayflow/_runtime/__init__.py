"""The Ray runtime: one actor per task, each a thin asyncio shell around an executor.

cluster.py     submit_topology: place the actors and wire them up; a local Ray's settings
handle.py      TopologyHandle: activate, deactivate, kill, wait, metrics
task_actor.py  the actor: executes frames, runs the spout loop, timers and ticks
streams.py     authenticated streams between task actors: framing and credits
transport.py   sends payloads on those streams and bounds the tuples in flight
supervisor.py  restarts a task whose actor died
"""

from .cluster import submit_topology
from .handle import TopologyHandle

__all__ = ["TopologyHandle", "submit_topology"]
