"""Reading a topology file together with the files it ``includes``.

    includes:
      - base.yaml                          # same as {file: base.yaml, override: false}
      - {file: tuning.yaml, override: true}

Paths are relative to the including file. Included files may include others; a file that
includes itself, directly or through others, is an include cycle. Merging, key by key:

- ``override: false`` (the default): the including file wins; the included file fills in.
- ``override: true``: the included file wins.
- ``config`` merges setting by setting (``ackers`` and ``topology.acker.executors`` are one);
  ``spouts`` and ``bolts`` merge by ``id`` (the winner's entry
  replaces the whole component); ``streams`` by (``from``, ``to``, ``grouping.stream``);
  anything else is replaced whole. Later includes win over earlier ones.

One load reads each real path once, however often and under whatever names (symlinks, ``..``)
it is included: the file's tree, with its own includes merged, is kept and merged again where
it is included again. Reading stays within the load's ``Budget`` (files, bytes, values; see
``_reading``), and so does merging: a merge whose result would hold more than ``MAX_VALUES``
values is refused at the include's line, so a chain of files each including the next twice
cannot double a list at every level.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any

from .._config import Config
from ._document import Node, parse_document
from ._errors import Problem
from ._models import IncludeSpec
from ._reading import MAX_VALUES, Budget, OverBudget
from ._substitution import substitute
from ._validation import validate_node

__all__ = ["read_tree"]


def read_tree(
    path: str | Path, properties: Mapping[str, str], environ: Mapping[str, str]
) -> tuple[Node | None, list[Problem]]:
    """Read ``path``, substitute placeholders, parse, and merge its includes. ``None`` when the
    file itself cannot be read or parsed; every problem found is returned either way."""
    reader = _Reader(properties, environ)
    tree = reader.read(str(path), None, [])
    return tree, reader.problems


class _Reader:
    def __init__(self, properties: Mapping[str, str], environ: Mapping[str, str]) -> None:
        self.properties = properties
        self.environ = environ
        self.problems: list[Problem] = []
        self.budget = Budget()
        self.done: dict[str, Node | None] = {}
        """Each real path read, and its tree with its includes merged (``None``: unreadable)."""
        self._sizes: dict[int, tuple[Node, int]] = {}

    def read(self, file: str, included_at: Node | None, stack: list[tuple[str, str]]) -> Node | None:
        """Parse ``file``; ``stack`` holds the (real path, shown name) of the files including it."""
        real = os.path.realpath(file)
        reals = [seen for seen, _ in stack]
        if real in reals and included_at is not None:
            cycle = [name for _, name in stack[reals.index(real) :]]
            self.problems.append(included_at.problem(f"include cycle: {' -> '.join([*cycle, file])}"))
            return None
        if real in self.done:
            return self.done[real]
        self.done[real] = tree = self._parse(file, included_at)
        if tree is not None and isinstance(tree.value, dict) and "includes" in tree.value:
            self.done[real] = tree = self._merge_includes(tree, file, [*stack, (real, file)])
        return tree

    def _parse(self, file: str, included_at: Node | None) -> Node | None:
        def cannot(reason: str) -> None:
            if included_at is None:
                self.problems.append(Problem(file, 0, "", f"cannot read the file: {reason}"))
            else:
                self.problems.append(included_at.problem(f"cannot read included file {file}: {reason}"))

        try:
            text = self.budget.read(file)
            text, placeholders = substitute(text, self.properties, self.environ, self.budget.bytes_left())
            self.budget.charge_bytes(len(text))
        except OverBudget as exc:
            if exc.line:
                self.problems.append(Problem(file, exc.line, "", str(exc)))
            else:
                cannot(str(exc))
            return None
        except (OSError, ValueError) as exc:
            cannot(exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc))
            return None
        tree, problems = parse_document(text, file, placeholders, self.budget)
        self.problems += problems
        return tree

    def _merge_includes(self, tree: Node, file: str, stack: list[tuple[str, str]]) -> Node:
        entries = tree.value["includes"]
        own = Node({k: v for k, v in tree.value.items() if k != "includes"}, tree.file, tree.line, tree.path)
        if not isinstance(entries.value, list):
            self.problems.append(entries.problem("must be a list of files to include"))
            return own
        under: Node | None = None
        over: Node | None = None
        for entry in entries.value:
            include = self._include_spec(entry)
            if include is None:
                continue
            target = os.path.normpath(os.path.join(os.path.dirname(file), include.file))
            included = self.read(target, entry.child("file") or entry, stack)
            if included is None:
                continue
            if not isinstance(included.value, dict):
                self.problems.append(included.problem("an included file must be a mapping, like a topology file"))
                continue
            side, other = (over, under) if include.override else (under, over)
            side = included if side is None else merge(side, included)
            if self._size(side) + self._size(own) + (0 if other is None else self._size(other)) > MAX_VALUES:
                self.problems.append(
                    (entry.child("file") or entry).problem(
                        f"with this include the file would hold more than {MAX_VALUES:,} values and keys, the limit"
                        " for one load (a file included many times over?)"
                    )
                )
                continue
            if include.override:
                over = side
            else:
                under = side
        merged = own if under is None else merge(under, own)
        if over is not None:
            merged = merge(merged, over)
        return Node(merged.value, tree.file, tree.line, tree.path)

    def _size(self, node: Node) -> int:
        """How many values and keys ``node`` holds, each shared subtree counted where it appears;
        remembered per node (nodes are never changed once merged), so each is counted once."""
        known = self._sizes.get(id(node))
        if known is not None:
            return known[1]
        value = node.value
        if isinstance(value, dict):
            size = 1 + sum(1 + self._size(child) for child in value.values())
        else:
            size = 1 + sum(self._size(child) for child in value) if isinstance(value, list) else 1
        self._sizes[id(node)] = (node, size)
        return size

    def _include_spec(self, entry: Node) -> IncludeSpec | None:
        if isinstance(entry.value, str):
            entry = Node(
                {"file": Node(entry.value, entry.file, entry.line, entry.path)}, entry.file, entry.line, entry.path
            )
        spec, problems = validate_node(IncludeSpec, entry)
        self.problems += problems
        return spec


def merge(low: Node, high: Node) -> Node:
    """Two top-level mappings merged; ``high``'s values win (see the module doc)."""
    out: dict[Any, Node] = {}
    for key in [*low.value, *(k for k in high.value if k not in low.value)]:
        if key == "includes":
            continue
        a, b = low.value.get(key), high.value.get(key)
        if a is None or b is None:
            out[key] = a if b is None else b
        elif key == "config" and isinstance(a.value, dict) and isinstance(b.value, dict):
            out[key] = Node({**_without_settings_of(a.value, b.value), **b.value}, b.file, b.line, b.path)
        elif key in ("spouts", "bolts") and isinstance(a.value, list) and isinstance(b.value, list):
            out[key] = _merge_list(a, b, _component_key)
        elif key == "streams" and isinstance(a.value, list) and isinstance(b.value, list):
            out[key] = _merge_list(a, b, _stream_key)
        else:
            out[key] = b
    return Node(out, high.file, high.line, high.path)


def _without_settings_of(low: dict[Any, Node], high: dict[Any, Node]) -> dict[Any, Node]:
    """``low``'s config keys less those setting what ``high`` sets, under either spelling: an
    including file's ``ackers`` replaces an included ``topology.acker.executors``."""
    settings = {Config.setting(k) for k in high if isinstance(k, str)}
    return {k: v for k, v in low.items() if not (isinstance(k, str) and Config.setting(k) in settings)}


def _merge_list(low: Node, high: Node, key_of: Callable[[Node], Hashable | None]) -> Node:
    items = list(low.value)
    position = {key_of(n): i for i, n in enumerate(items)}
    for node in high.value:
        key = key_of(node)
        if key is not None and key in position:
            items[position[key]] = node
        else:
            items.append(node)
    return Node(items, high.file, high.line, high.path)


def _scalar_at(node: Node, *keys: str) -> Hashable | None:
    for key in keys:
        child = node.child(key)
        if child is None:
            return None
        node = child
    return node.value if isinstance(node.value, (str, int)) else None


def _component_key(node: Node) -> Hashable | None:
    return _scalar_at(node, "id")


def _stream_key(node: Node) -> Hashable | None:
    source, target = _scalar_at(node, "from"), _scalar_at(node, "to")
    if source is None or target is None:
        return None
    return source, target, _scalar_at(node, "grouping", "stream") or "default"
