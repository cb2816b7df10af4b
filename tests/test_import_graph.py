"""The import graph of ``rayflow/``: no circle between its modules, so that the house stays
walkable bottom up (``rayflow/__init__.py`` draws the layers).

Every import counts, at module level, inside a function or under ``if TYPE_CHECKING:``: a
deferred import still ties two modules together, and a type-only one ties them for the reader
and the type checker (a circle through one is usually a type that lives in the wrong module).

``KNOWN`` lists the circles being taken apart in other changes; the test passes with them,
fails for any other circle, and fails when a listed one is gone, so the list only shrinks.
The known circles and the imports that go up a layer are printed (``pytest -s`` or ``-rP``).

The walk cannot see one kind of circle: importing ``a.b.m`` runs package ``a.b``'s ``__init__``
first, so a module that imports ``a.b.m`` while ``a.b``'s ``__init__`` imports it back stops on a
half-made module, although no two modules import each other. So every module is also imported
first, in a fresh interpreter.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import rayflow

ROOT = Path(rayflow.__file__).parent

KNOWN: list[tuple[tuple[str, ...], str]] = [
    # (module patterns a circle lies within, why it may be there for now); none left
]

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # bottom up, as rayflow/__init__.py's docstring stacks them; a module in none is plain Python
    ("on Ray", ("rayflow._runtime", "rayflow._ui", "rayflow._local_cluster")),
    (
        "public subpackages",
        ("rayflow.testing", "rayflow.topology_file", "rayflow.connectors", "rayflow.spark", "rayflow.state"),
    ),
    ("the command", ("rayflow._cli", "rayflow.__main__")),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def imports(name: str) -> set[str]:
    """The modules of ``rayflow`` that module ``name`` imports."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(filter(None, [base, node.module]))
            found |= {f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module for a in node.names}
    return (found & MODULES.keys()) - {name}


GRAPH = {name: imports(name) for name in MODULES}


def reachable(start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(GRAPH[start])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(GRAPH[name])
    return seen


def circles() -> list[frozenset[str]]:
    """Each set of modules that import one another round a circle (strongly connected)."""
    reach = {name: reachable(name) for name in GRAPH}
    found = {frozenset({a} | {b for b in reach[a] if a in reach[b]}) for a in GRAPH if a in reach[a]}
    return sorted(found, key=sorted)


def one_circle(modules: frozenset[str]) -> str:
    """A shortest way round from the first of ``modules`` back to it, for the message."""
    start = min(modules)
    paths = {start: [start]}
    todo = [start]
    while todo:
        name = todo.pop(0)
        for target in sorted(GRAPH[name] & modules):
            if target == start:
                return " -> ".join([*paths[name], start])
            if target not in paths:
                paths[target] = [*paths[name], target]
                todo.append(target)
    raise AssertionError(f"no circle through {start}")


def known_as(modules: frozenset[str]) -> str | None:
    for patterns, why in KNOWN:
        if all(any(fnmatch(name, p) for p in patterns) for name in modules):
            return why
    return None


def layer(name: str) -> int:
    """0 for plain Python, then the index in ``LAYERS`` plus one."""
    for index, (_, prefixes) in reversed(list(enumerate(LAYERS))):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return index + 1
    return 0


def test_no_import_circle_but_the_known_ones() -> None:
    found = circles()
    for modules in found:
        if known_as(modules):
            print(f"known circle ({known_as(modules)}): {one_circle(modules)}")
    unknown = [one_circle(modules) for modules in found if known_as(modules) is None]
    assert not unknown, "import circles in rayflow/:\n" + "\n".join(unknown)
    gone = [why for patterns, why in KNOWN if not any(known_as(m) == why for m in found)]
    assert not gone, "no circle left for these KNOWN entries; remove them:\n" + "\n".join(gone)


def test_report_imports_that_go_up_a_layer() -> None:
    """Printed, not failed: the layers are the ones ``rayflow/__init__.py`` describes."""
    names = ["plain Python", *(name for name, _ in LAYERS)]
    for source in sorted(GRAPH):
        if source == "rayflow":  # the package re-exports every layer
            continue
        for target in sorted(GRAPH[source]):
            if layer(target) > layer(source):
                print(f"layering: {source} ({names[layer(source)]}) imports {target} ({names[layer(target)]})")


def test_the_walk_sees_imports_of_every_kind() -> None:
    """Relative, absolute and deferred imports are all edges (a check on the walk itself)."""
    assert "rayflow._config" in GRAPH["rayflow._topology"]
    assert "rayflow._pending" in GRAPH["rayflow._config"]
    assert "rayflow.spark._shared" in GRAPH["rayflow.spark._sink"]  # inside a method


FIRST_IMPORTS = """
import importlib, json, sys
failed = {}
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "rayflow" or m.startswith("rayflow.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] == "rayflow":
            failed[name] = repr(exc)
        # else: an optional extra that is not installed (pyspark, pika, ...)
    except Exception as exc:
        failed[name] = repr(exc)
print(json.dumps(failed))
"""
"""Imports each module named on the command line as the first module of ``rayflow`` loaded (the
modules loaded before are dropped; libraries stay loaded, so one interpreter does them all)."""


def test_every_module_imports_first() -> None:
    """``python -c "import rayflow.<module>"`` works for every module, e.g. the stateful kind
    (``rayflow._state.bolt_kind``), whose ``BoltKind`` import runs ``rayflow._executors``'s
    ``__init__``: a table of kinds imported at its top would import the stateful kind back."""
    names = [name for name in MODULES if name != "rayflow.__main__"]  # that one runs the command
    done = subprocess.run(
        [sys.executable, "-c", FIRST_IMPORTS, *names], capture_output=True, text=True, check=True, timeout=600
    )
    failed = json.loads(done.stdout.splitlines()[-1])
    assert not failed, "modules that cannot be imported first:\n" + "\n".join(f"{k}: {v}" for k, v in failed.items())
