"""rayflow: Apache Storm's reliability model on Ray.

How the package stacks, bottom up:

    plain Python, no Ray      errors, config, tuple, components, context, groupings, topology,
                              anchoring, rotating_map, ack_ledger, outbox, router, collectors,
                              metrics, executors/
    on Ray                    runtime/ (one actor per task around an executor), testing

Everything a user needs is re-exported here; ``rayflow.testing`` holds ``FeederSpout``. The
runtime names (and ``SpecError``) are loaded on first use, so the plain-Python layer imports
without Ray.
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
    from .spec import SpecError

_LAZY = {"LocalCluster": "runtime", "TopologyHandle": "runtime", "submit_topology": "runtime", "SpecError": "spec"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rayflow' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)


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
    "SpecError",
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
