"""Drawing a topology: components (class, parallelism) and the groupings on the edges.

Operator chaining shows (``rayflow/_chaining.py``): a chained link is drawn bold and its label
ends in ", chained", and the components of one chain are framed by a dashed box (``CHAIN_LABEL``):
task *i* of each runs in the same process. Which links are chained depends on the
topology's config (``rayflow.chaining``), so each drawing takes it (the default config when
none is given); a caller that knows what runs (the web page reads each task's ``host``) passes
``chained`` instead.

DOT source comes from the ``graphviz`` package; SVG and PNG need Graphviz's ``dot`` program,
which ``graphviz`` runs (``graphviz.ExecutableNotFound`` when it is not on ``PATH``). Mermaid
text needs nothing: GitHub and most Markdown viewers draw it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import graphviz

from .._chaining import chained_components
from .._config import Config
from .._topology import ComponentSpec, Topology

__all__ = ["CHAIN_LABEL", "RENDERED_FORMATS", "TEXT_FORMATS", "to_dot", "to_mermaid", "write_graph"]

TEXT_FORMATS = (".dot", ".gv", ".mmd")
RENDERED_FORMATS = (".svg", ".png", ".pdf")
CHAIN_LABEL = "chained: task i of each runs in one process"
"""The caption of the box around a chain's components."""

_SPOUT_STYLE = {"shape": "box", "style": "rounded,filled", "fillcolor": "#fde9c8", "color": "#c7862b"}
_BOLT_STYLE = {"shape": "box", "style": "filled", "fillcolor": "#dcebf7", "color": "#4a7bb0"}
_CHAIN_STYLE = {"style": "dashed,rounded", "color": "#777777", "fontname": "Helvetica", "fontsize": "10"}
_CHAINED_EDGE = {"style": "bold", "color": "#222222"}


@dataclasses.dataclass(frozen=True)
class _Edge:
    source: str
    target: str
    label: str
    chained: bool


def _components(topology: Topology) -> list[ComponentSpec]:
    return sorted(topology.components.values(), key=lambda c: (not c.is_spout, c.id))


def _label(component: ComponentSpec) -> tuple[str, str]:
    kind = "spout" if component.is_spout else "bolt"
    return component.id, f"{type(component.component).__name__} · {kind} × {component.parallelism}"


def _chained(
    topology: Topology, conf: Config | Mapping[str, Any] | None, chained: Mapping[str, str] | None
) -> dict[str, str]:
    """bolt -> upstream for every chained link: ``chained`` as given, or as ``conf`` decides."""
    return dict(chained) if chained is not None else chained_components(topology, Config.of(conf))


def _edges(topology: Topology, chained: Mapping[str, str]) -> list[_Edge]:
    """One per subscription; the label names the grouping, the stream unless it is the default
    one, and ", chained" on a chained link."""
    edges = []
    for bolt in sorted(topology.bolts, key=lambda c: c.id):
        for sub in bolt.inputs:
            label = sub.grouping.describe()
            if sub.stream != "default":
                label = f"{sub.stream}: {label}"
            is_chained = chained.get(bolt.id) == sub.component
            edges.append(_Edge(sub.component, bolt.id, f"{label}, chained" if is_chained else label, is_chained))
    return edges


def _groups(topology: Topology, chained: Mapping[str, str]) -> list[list[ComponentSpec]]:
    """The components in drawing order (spouts first, then by id), the components of a chain
    together where the first of them stands, its head (the component whose actors run it)
    first; any other component alone."""

    def head(component: str) -> str:
        while component in chained:
            component = chained[component]
        return component

    groups: dict[str, list[ComponentSpec]] = {}
    for component in _components(topology):
        groups.setdefault(head(component.id), []).append(component)
    return [sorted(group, key=lambda c: c.id != first) for first, group in groups.items()]


def to_dot(
    topology: Topology,
    name: str,
    conf: Config | Mapping[str, Any] | None = None,
    *,
    chained: Mapping[str, str] | None = None,
) -> graphviz.Digraph:
    """The topology as a Graphviz digraph, left to right.

    Args:
        topology: what to draw.
        name: the graph's title.
        conf: the topology's config, which decides what is chained (the default one if ``None``).
        chained: bolt -> upstream of each chained link, when the caller knows what runs; it
            takes the place of what ``conf`` decides.
    """
    links = _chained(topology, conf, chained)
    graph = graphviz.Digraph(
        name=name,
        graph_attr={"rankdir": "LR", "label": name, "labelloc": "t", "fontname": "Helvetica", "fontsize": "16"},
        node_attr={"fontname": "Helvetica", "fontsize": "12"},
        edge_attr={"fontname": "Helvetica", "fontsize": "10", "color": "#555555"},
    )

    def node(into: graphviz.Digraph, component: ComponentSpec) -> None:
        title, detail = _label(component)
        into.node(component.id, f"{title}\\n{detail}", **(_SPOUT_STYLE if component.is_spout else _BOLT_STYLE))

    for index, group in enumerate(_groups(topology, links)):
        if len(group) == 1:
            node(graph, group[0])
            continue
        with graph.subgraph(name=f"cluster_chain_{index}") as box:  # "cluster_": dot frames it
            box.attr(label=CHAIN_LABEL, labeljust="l", **_CHAIN_STYLE)
            for component in group:
                node(box, component)
    for edge in _edges(topology, links):
        graph.edge(edge.source, edge.target, label=f" {edge.label} ", **(_CHAINED_EDGE if edge.chained else {}))
    return graph


def to_mermaid(
    topology: Topology,
    name: str,
    conf: Config | Mapping[str, Any] | None = None,
    *,
    chained: Mapping[str, str] | None = None,
) -> str:
    """The topology as a Mermaid flowchart; ``conf`` and ``chained`` as for ``to_dot``. A
    chained link is a thick arrow, a chain a dashed subgraph."""
    links = _chained(topology, conf, chained)
    ids = {c.id: f"c{i}" for i, c in enumerate(_components(topology))}

    def node(component: ComponentSpec, indent: str) -> str:
        title, detail = _label(component)
        text = f"{_mermaid_text(title)}<br/><small>{_mermaid_text(detail)}</small>"
        shape = f'(["{text}"])' if component.is_spout else f'["{text}"]'
        return f"{indent}{ids[component.id]}{shape}"

    lines = ["---", f"title: {_mermaid_text(name)}", "---", "flowchart LR"]
    for index, group in enumerate(_groups(topology, links)):
        if len(group) == 1:
            lines.append(node(group[0], "    "))
            continue
        lines.append(f'    subgraph chain{index} ["{_mermaid_text(CHAIN_LABEL)}"]')
        lines += [node(c, "        ") for c in group]
        lines += ["    end", f"    style chain{index} stroke-dasharray: 5 5"]
    for edge in _edges(topology, links):
        arrow = "==>" if edge.chained else "-->"
        lines.append(f'    {ids[edge.source]} {arrow}|"{_mermaid_text(edge.label)}"| {ids[edge.target]}')
    return "\n".join(lines) + "\n"


def _mermaid_text(text: str) -> str:
    return text.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


def write_graph(
    topology: Topology, name: str, path: str | Path, conf: Config | Mapping[str, Any] | None = None
) -> None:
    """Write the drawing in the format the suffix of ``path`` names (see ``TEXT_FORMATS`` and
    ``RENDERED_FORMATS``); ``conf`` is the topology's config, as for ``to_dot``. Raises
    ``ValueError`` for another suffix and ``graphviz.ExecutableNotFound`` when a rendered
    format needs ``dot`` and it is missing."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".mmd":
        path.write_text(to_mermaid(topology, name, conf), encoding="utf-8")
    elif suffix in (".dot", ".gv"):
        path.write_text(to_dot(topology, name, conf).source, encoding="utf-8")
    elif suffix in RENDERED_FORMATS:
        path.write_bytes(to_dot(topology, name, conf).pipe(format=suffix[1:]))
    else:
        known = ", ".join(TEXT_FORMATS + RENDERED_FORMATS)
        raise ValueError(f"cannot draw to {path.name}: the file name must end in one of {known}")
