"""The connectors' import graph, read from the source (``ast``): no module of
``rayflow.connectors`` imports, directly or around a circle, one that imports it back, and the
protocol packages' ``__init__`` import nothing (each says so in its docstring)."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import rayflow.connectors

ROOT = Path(rayflow.connectors.__file__).parent
PACKAGE = "rayflow.connectors"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def imports(path: Path, modules: set[str]) -> set[str]:
    """The modules of the package that ``path`` imports at run time (not under ``TYPE_CHECKING``)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {module for module in found if module in modules and module != name}


def graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in ROOT.rglob("*.py")}
    return {name: imports(path, set(paths)) for name, path in paths.items()}


def test_no_import_circle_inside_the_connectors() -> None:
    try:
        tuple(TopologicalSorter(graph()).static_order())
    except CycleError as circle:
        raise AssertionError(f"an import circle: {' -> '.join(circle.args[1])}") from None


def test_protocol_packages_import_nothing_themselves() -> None:
    edges = graph()
    for package in (f"{PACKAGE}._amqp", f"{PACKAGE}._nats"):
        assert edges[package] == set(), package


def test_the_graph_sees_the_imports() -> None:
    """The walk finds what the spouts import (so an empty graph cannot pass the tests above)."""
    edges = graph()
    assert f"{PACKAGE}._amqp.consumer" in edges[f"{PACKAGE}.rabbitmq"]
    assert f"{PACKAGE}._amqp.codec" in edges[f"{PACKAGE}._amqp.consumer"]
    assert f"{PACKAGE}._nats.wire" in edges[f"{PACKAGE}._nats.connection"]
