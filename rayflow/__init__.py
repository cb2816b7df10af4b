"""rayflow: Apache Storm's reliability model on Ray.

How the package stacks, bottom up:

    plain Python, no Ray      errors, config, tuple, components, context, groupings, topology,
                              anchoring, rotating_map, ack_ledger, outbox, router, collectors,
                              metrics, executors/
    on Ray                    runtime/ (one actor per task around an executor), testing

Everything a user needs is re-exported here; ``rayflow.testing`` holds ``FeederSpout``.
"""

from .collectors import BasicOutputCollector, OutputCollector, SpoutOutputCollector
from .components import BasicBolt, Bolt, OutputFieldsDeclarer, Spout
from .config import Config
from .context import TopologyContext
from .errors import ConfigError, EmitError, FailedException, RayflowError, TopologyError
from .groupings import CustomStreamGrouping, StreamId
from .runtime import LocalCluster, TopologyHandle, submit_topology
from .topology import BoltDeclarer, Topology, TopologyBuilder
from .tuple import Tuple

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
