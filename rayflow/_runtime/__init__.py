"""The Ray runtime: one actor per task (and the tasks chained to it), a thin asyncio shell
around their executors.

cluster.py     submit_topology: place the actors and wire them up; a local Ray's settings
handle.py      TopologyHandle: activate, deactivate, kill, wait, metrics
task_actor.py  the actor: executes frames, runs the spout loop, timers and ticks
chain_link.py  how the tasks chained in one actor hand each other tuples, and flush together
streams.py     authenticated streams between task actors: framing and credits
transport.py   sends payloads on those streams and bounds the tuples in flight
supervisor.py  restarts a task whose actor died
"""

from .cluster import submit_topology
from .handle import TopologyHandle

__all__ = ["TopologyHandle", "submit_topology"]
