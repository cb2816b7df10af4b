"""Topology files: YAML (or JSON) descriptions of a topology, validated by pydantic, in the
spirit of Storm's Flux.

How the package stacks, bottom up:

    errors         Problem (file, line, path, message) and SpecError, which lists them all
    reading        the budget of one load (files, bytes, values, depth); regular files only
    substitution   ${ENV-NAME} and ${key} replaced in the text before parsing
    document       YAML -> a tree of Node that remembers each value's file and line
    models         the file format as pydantic models (TopologySpec and its parts)
    validation     pydantic errors -> Problems ("did you mean")
    configs        config: mappings checked by rayflow.Config, each problem on its key's line
    resources      resources: mappings checked as set_spout/set_bolt would, each problem on its line
    includes       reading a file and merging the files it includes
    classes        importing and constructing the classes a file names
    build          references, classes and TopologyBuilder -> Topology
    loader         load_spec / load_topology: the whole pipeline
    drawing        a Topology as Graphviz DOT or a Mermaid flowchart
"""

from ._errors import Problem, SpecError
from ._loader import LoadedTopology, load_spec, load_topology
from ._models import ComponentEntry, GroupingSpec, IncludeSpec, StreamSpec, TopologySpec
from ._substitution import read_properties

__all__ = [
    "ComponentEntry",
    "GroupingSpec",
    "IncludeSpec",
    "LoadedTopology",
    "Problem",
    "SpecError",
    "StreamSpec",
    "TopologySpec",
    "load_spec",
    "load_topology",
    "read_properties",
]
