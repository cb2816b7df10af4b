"""Loading a topology file: ``load_topology`` runs the whole pipeline and raises one
``SpecError`` listing every problem, or returns what ``submit_topology`` needs.

    text --substitute ${...}--> YAML --parse (lines kept)--> merge includes
         --schema (pydantic)--> references, classes, TopologyBuilder --> Topology
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..config import Config
from ..errors import ConfigError
from ..topology import Topology
from .build import build_topology
from .document import Node
from .errors import Problem, SpecError
from .includes import read_tree
from .models import TopologySpec
from .validation import did_you_mean, validate_node

__all__ = ["LoadedTopology", "load_spec", "load_topology"]

_KNOWN_CONFIG_KEYS = sorted(
    {name for name in Config.model_fields} | {f.alias for f in Config.model_fields.values() if f.alias}
)


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
    config = None
    if spec is not None:
        try:
            config = Config.of(spec.config.model_dump(by_alias=True))
        except ConfigError as exc:
            problems.append(tree.problem(str(exc), ("config",)))
    if problems or spec is None or config is None or topology is None:
        raise SpecError(problems)
    return LoadedTopology(spec, config, topology)


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
    problems += _config_typos(tree)
    return spec, tree, problems


def _config_typos(tree: Node) -> list[Problem]:
    """Unknown config keys are handed to the components, as in Storm, except for a key in
    rayflow's own namespace or one a letter or two away from a key rayflow knows."""
    config = tree.child("config")
    if config is None or not isinstance(config.value, dict):
        return []
    problems = []
    for key, node in config.value.items():
        if not isinstance(key, str) or key in _KNOWN_CONFIG_KEYS:
            continue
        if key.startswith("rayflow."):
            problems.append(node.problem(f"unknown rayflow config key{did_you_mean(key, _KNOWN_CONFIG_KEYS)}"))
            continue
        typo = did_you_mean(key, _KNOWN_CONFIG_KEYS, cutoff=0.85)
        if typo:
            problems.append(node.problem(f"unknown config key{typo}"))
    return problems
