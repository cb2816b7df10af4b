"""rayflow: Apache Storm's reliability model on Ray.

How the package stacks, bottom up:

    plain Python, no Ray      _errors, _suggest, _dotted, _urls, _pending, _config, _resources
                              (what a component asks of the cluster), _tuple, _components,
                              _context, _groupings, _topology, _chaining (which bolts run
                              in their upstream's actor), _acking/ (its edge ids and ledger
                              here, its executor with the executors), _rotating_map, _outbox,
                              _router, _collectors, _metrics, _state/ (its stateful bolt kind
                              with the executors), _exactly_once/, _windows/, _executors/,
                              _run_checks, _sinks
    on Ray                    _runtime/ (one actor per task around an executor; placement: where
                              the actors go and what they ask of the cluster), _ui/ (the web
                              page and the Prometheus metrics of a running topology, in the driver:
                              it takes a handle), _local_cluster (LocalCluster: a local Ray, its
                              topologies and their pages, put together)
    public subpackages        testing (in-process runner, FeederSpout), topology_file (YAML
                              topologies), connectors (brokers), spark (DataFrames), state
                              (state providers; _state/ has the checkpoint protocol)

Implementation modules are private (a leading underscore); every public name is re-exported here
or by a public subpackage, and ``tests/test_exported_members.py`` pins the surface both ways.

Everything a user needs is re-exported here; ``rayflow.testing`` holds ``FeederSpout``. The
runtime names (and ``SpecError``) are loaded on first use, so the plain-Python layer imports
without Ray.
"""

from typing import TYPE_CHECKING, Any

from ._collectors import BasicOutputCollector, BatchOutputCollector, OutputCollector, SpoutOutputCollector
from ._components import BasicBolt, BatchBolt, Bolt, OutputFieldsDeclarer, Spout, StatefulBolt
from ._config import Config
from ._context import TopologyContext
from ._errors import ConfigError, EmitError, FailedException, RayflowError, StateError, TopologyError
from ._groupings import CustomStreamGrouping, StreamId
from ._sinks import TwoPhaseCommitSink
from ._state.key_value import KeyValueState
from ._topology import BoltDeclarer, Topology, TopologyBuilder
from ._tuple import Tuple
from ._windows import Count, Duration, TupleWindow, WindowedBolt

if TYPE_CHECKING:
    from ._local_cluster import LocalCluster
    from ._runtime import TopologyHandle, submit_topology
    from .topology_file import SpecError

_LAZY = {
    "LocalCluster": "_local_cluster",
    "TopologyHandle": "_runtime",
    "submit_topology": "_runtime",
    "SpecError": "topology_file",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rayflow' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)


__all__ = [
    "BasicBolt",
    "BasicOutputCollector",
    "BatchBolt",
    "BatchOutputCollector",
    "Bolt",
    "BoltDeclarer",
    "Config",
    "ConfigError",
    "Count",
    "CustomStreamGrouping",
    "Duration",
    "EmitError",
    "FailedException",
    "KeyValueState",
    "LocalCluster",
    "OutputCollector",
    "OutputFieldsDeclarer",
    "RayflowError",
    "SpecError",
    "Spout",
    "SpoutOutputCollector",
    "StateError",
    "StatefulBolt",
    "StreamId",
    "Topology",
    "TopologyBuilder",
    "TopologyContext",
    "TopologyError",
    "TopologyHandle",
    "Tuple",
    "TupleWindow",
    "TwoPhaseCommitSink",
    "WindowedBolt",
    "submit_topology",
]
