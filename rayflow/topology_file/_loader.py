"""Loading a topology file: ``load_topology`` runs the whole pipeline and raises one
``SpecError`` listing every problem, or returns what ``submit_topology`` needs.

    text --substitute ${...}--> YAML --parse (lines kept)--> merge includes
         --schema (pydantic), config (rayflow.Config)--> references, classes, TopologyBuilder --> Topology
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._config import Config
from .._errors import RayflowError
from .._state.validation import check_state_settings
from .._topology import Topology
from .._windows.bolt import WindowedBolt
from .._windows.validation import config_problems as window_problems
from ._build import build_topology
from ._configs import config_problems
from ._document import Node
from ._errors import Problem, SpecError
from ._includes import read_tree
from ._models import TopologySpec
from ._resources import resources_problems
from ._validation import validate_node

__all__ = ["LoadedTopology", "load_spec", "load_topology"]


@dataclass(frozen=True)
class LoadedTopology:
    """A checked topology file: what to pass to ``submit_topology(name, config, topology)``."""

    spec: TopologySpec
    config: Config
    topology: Topology

    @property
    def name(self) -> str:
        return self.spec.name


def load_spec(
    path: str | Path, properties: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
) -> TopologySpec:
    """Read and validate a topology file without importing any class it names."""
    spec, _, problems = _read(path, properties, environ)
    if problems or spec is None:
        raise SpecError(problems)
    return spec


def load_topology(
    path: str | Path, properties: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
) -> LoadedTopology:
    """Read, validate and build a topology file. ``properties`` fill ``${key}``, ``environ``
    (default: ``os.environ``) fills ``${ENV-NAME}``. Raises ``SpecError`` listing every problem.

    Component classes are imported from the dotted paths in the file, so their modules must be
    importable (``rayflow`` puts the current directory on ``sys.path``)."""
    spec, tree, problems = _read(path, properties, environ)
    if tree is None:
        raise SpecError(problems)
    topology, build_problems = build_topology(tree, sound=spec is not None and not problems)
    problems += build_problems
    if problems or spec is None or topology is None:
        raise SpecError(problems)
    config = Config.of(spec.config)
    problems += _state_problems(tree, topology, config)
    problems += _window_problems(tree, topology, config)
    if problems:
        raise SpecError(problems)
    return LoadedTopology(spec, config, topology)


STATE_KEYS = {
    "checkpoint_interval_ms": ("checkpoint_interval_ms", "topology.state.checkpoint.interval.ms"),
    "state_provider": (
        "state_provider",
        "topology.state.provider",
        "state_provider_config",
        "topology.state.provider.config",
    ),
}
"""Where a stateful topology's settings problem is put: on the line of the key it names."""


def _state_problems(tree: Node, topology: Topology, config: Config) -> list[Problem]:
    """The state settings checked against each other and the topology (the interval against
    the message timeout, the provider's name): what the submit would refuse, on its line."""
    try:
        check_state_settings(topology, config, reach=False)
    except RayflowError as exc:
        node = tree.child("config")
        message = str(exc)
        if node is not None and isinstance(node.value, dict):
            for field, keys in STATE_KEYS.items():
                if message.startswith(field):
                    for key in keys:
                        if key in node.value:
                            return [node.problem(message, (key,))]
        return [(node or tree).problem(message)]
    return []


def _window_problems(tree: Node, topology: Topology, config: Config) -> list[Problem]:
    """Each windowed bolt's window against the config (the message timeout, the pending
    budget): what the submit would refuse, on the bolt's ``window:`` line."""
    bolts = tree.child("bolts")
    entries: dict[Any, Node] = {}
    for node in bolts.value if bolts is not None and isinstance(bolts.value, list) else []:
        id_node = node.child("id")
        if id_node is not None:
            entries[id_node.value] = node
    found: list[Problem] = []
    for spec in topology.bolts:
        bolt = spec.component
        if not isinstance(bolt, WindowedBolt) or bolt.window_settings is None:
            continue
        node = entries.get(spec.id)
        for message in window_problems(spec.id, bolt.window_settings, config.merged(spec.config)):
            if node is not None and node.child("window") is not None:
                found.append(node.problem(message, ("window",)))
            else:
                found.append((node or tree).problem(message))
    return found


def _read(
    path: str | Path, properties: Mapping[str, str] | None, environ: Mapping[str, str] | None
) -> tuple[TopologySpec | None, Node | None, list[Problem]]:
    tree, problems = read_tree(path, properties or {}, os.environ if environ is None else environ)
    if tree is None:
        return None, None, problems
    if not isinstance(tree.value, dict):
        problems.append(tree.problem("a topology file must be a mapping with name, spouts, bolts and streams"))
        return None, None, problems
    spec, schema_problems = validate_node(TopologySpec, tree)
    problems += schema_problems
    problems += config_problems(tree)
    problems += resources_problems(tree)
    return spec, tree, problems
