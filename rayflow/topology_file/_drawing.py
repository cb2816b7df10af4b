"""Drawing a topology: components (class, parallelism) and the groupings on the edges.

DOT source comes from the ``graphviz`` package; SVG and PNG need Graphviz's ``dot`` program,
which ``graphviz`` runs (``graphviz.ExecutableNotFound`` when it is not on ``PATH``). Mermaid
text needs nothing: GitHub and most Markdown viewers draw it.
"""

from __future__ import annotations

from pathlib import Path

import graphviz

from .._topology import ComponentSpec, Topology

__all__ = ["RENDERED_FORMATS", "TEXT_FORMATS", "to_dot", "to_mermaid", "write_graph"]

TEXT_FORMATS = (".dot", ".gv", ".mmd")
RENDERED_FORMATS = (".svg", ".png", ".pdf")

_SPOUT_STYLE = {"shape": "box", "style": "rounded,filled", "fillcolor": "#fde9c8", "color": "#c7862b"}
_BOLT_STYLE = {"shape": "box", "style": "filled", "fillcolor": "#dcebf7", "color": "#4a7bb0"}


def _components(topology: Topology) -> list[ComponentSpec]:
    return sorted(topology.components.values(), key=lambda c: (not c.is_spout, c.id))


def _label(component: ComponentSpec) -> tuple[str, str]:
    kind = "spout" if component.is_spout else "bolt"
    return component.id, f"{type(component.component).__name__} · {kind} × {component.parallelism}"


def _edges(topology: Topology) -> list[tuple[str, str, str]]:
    """(source, bolt, label) per subscription; the label names the grouping, and the stream
    unless it is the default one."""
    edges = []
    for bolt in sorted(topology.bolts, key=lambda c: c.id):
        for sub in bolt.inputs:
            label = sub.grouping.describe()
            if sub.stream != "default":
                label = f"{sub.stream}: {label}"
            edges.append((sub.component, bolt.id, label))
    return edges


def to_dot(topology: Topology, name: str) -> graphviz.Digraph:
    """The topology as a Graphviz digraph, left to right."""
    graph = graphviz.Digraph(
        name=name,
        graph_attr={"rankdir": "LR", "label": name, "labelloc": "t", "fontname": "Helvetica", "fontsize": "16"},
        node_attr={"fontname": "Helvetica", "fontsize": "12"},
        edge_attr={"fontname": "Helvetica", "fontsize": "10", "color": "#555555"},
    )
    for component in _components(topology):
        title, detail = _label(component)
        graph.node(
            component.id,
            f"{title}\\n{detail}",
            **(_SPOUT_STYLE if component.is_spout else _BOLT_STYLE),
        )
    for source, target, label in _edges(topology):
        graph.edge(source, target, label=f" {label} ")
    return graph


def to_mermaid(topology: Topology, name: str) -> str:
    """The topology as a Mermaid flowchart."""
    ids = {c.id: f"c{i}" for i, c in enumerate(_components(topology))}
    lines = ["---", f"title: {_mermaid_text(name)}", "---", "flowchart LR"]
    for component in _components(topology):
        title, detail = _label(component)
        text = f"{_mermaid_text(title)}<br/><small>{_mermaid_text(detail)}</small>"
        lines.append(
            f'    {ids[component.id]}(["{text}"])' if component.is_spout else f'    {ids[component.id]}["{text}"]'
        )
    for source, target, label in _edges(topology):
        lines.append(f'    {ids[source]} -->|"{_mermaid_text(label)}"| {ids[target]}')
    return "\n".join(lines) + "\n"


def _mermaid_text(text: str) -> str:
    return text.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


def write_graph(topology: Topology, name: str, path: str | Path) -> None:
    """Write the drawing in the format the suffix of ``path`` names (see ``TEXT_FORMATS`` and
    ``RENDERED_FORMATS``). Raises ``ValueError`` for another suffix and
    ``graphviz.ExecutableNotFound`` when a rendered format needs ``dot`` and it is missing."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".mmd":
        path.write_text(to_mermaid(topology, name), encoding="utf-8")
    elif suffix in (".dot", ".gv"):
        path.write_text(to_dot(topology, name).source, encoding="utf-8")
    elif suffix in RENDERED_FORMATS:
        path.write_bytes(to_dot(topology, name).pipe(format=suffix[1:]))
    else:
        known = ", ".join(TEXT_FORMATS + RENDERED_FORMATS)
        raise ValueError(f"cannot draw to {path.name}: the file name must end in one of {known}")
