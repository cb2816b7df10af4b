"""rayflow: Apache Storm's reliability model on Ray.

How the package stacks, bottom up:

    plain Python, no Ray      errors, config, tuple, components, context, groupings, topology,
                              anchoring, rotating_map, ack_ledger, outbox, router, collectors,
                              metrics, executors/
    on Ray                    runtime/ (one actor per task around an executor), testing

Everything a user needs is re-exported here; ``rayflow.testing`` holds ``FeederSpout``. The
runtime names are loaded on first use, so the plain-Python layer imports without Ray.
"""

from typing import TYPE_CHECKING, Any

from .collectors import BasicOutputCollector, OutputCollector, SpoutOutputCollector
from .components import BasicBolt, Bolt, OutputFieldsDeclarer, Spout
from .config import Config
from .context import TopologyContext
from .errors import ConfigError, EmitError, FailedException, RayflowError, TopologyError
from .groupings import CustomStreamGrouping, StreamId
from .topology import BoltDeclarer, Topology, TopologyBuilder
from .tuple import Tuple

if TYPE_CHECKING:
    from .runtime import LocalCluster, TopologyHandle, submit_topology

_RUNTIME_NAMES = {"LocalCluster", "TopologyHandle", "submit_topology"}


def __getattr__(name: str) -> Any:
    if name in _RUNTIME_NAMES:
        from . import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'rayflow' has no attribute {name!r}")


__all__ = [
    "BasicBolt",
    "BasicOutputCollector",
    "Bolt",
    "BoltDeclarer",
    "Config",
    "ConfigError",
    "CustomStreamGrouping",
    "EmitError",
    "FailedException",
    "LocalCluster",
    "OutputCollector",
    "OutputFieldsDeclarer",
    "RayflowError",
    "Spout",
    "SpoutOutputCollector",
    "StreamId",
    "Topology",
    "TopologyBuilder",
    "TopologyContext",
    "TopologyError",
    "TopologyHandle",
    "Tuple",
    "submit_topology",
]
