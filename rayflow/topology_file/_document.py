"""A parsed topology file that remembers where every value came from.

The text is parsed with PyYAML's ``SafeLoader`` (JSON parses too) into a tree of ``Node``: each
holds a plain value, the file, the 1-based line and its path in that file (``bolts[1].class``).
Only plain data comes out: a YAML tag that asks for a Python object is a problem, never obeyed.
Nodes keep their origin when ``includes`` moves them into another document, so an error found
after merging still names the file and line the user wrote.

Parsing stays within the load's ``Budget`` (``_reading``): values are counted as they are
composed, nesting and the length of a value are checked there too, and before anything is built
the size each alias and merge key would expand to is worked out from the composed graph, once per
node. A billion-laughs file is refused at the line where its expansion passes the limit, after
reading its few dozen nodes, not after building a million.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from ._errors import Problem
from ._reading import MAX_DEPTH, MAX_SCALAR_CHARS, MAX_VALUES, Budget, OverBudget
from ._substitution import Placeholders

__all__ = ["Node", "join_path", "parse_document"]

_PLAIN_KEY = re.compile(r"[A-Za-z_][\w.\-]*\Z")
_MERGE_TAG = "tag:yaml.org,2002:merge"
_COLLECTION_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


def join_path(path: str, key: Any) -> str:
    """``bolts`` + 1 -> ``bolts[1]``; ``bolts[1]`` + ``class`` -> ``bolts[1].class``."""
    if isinstance(key, str) and _PLAIN_KEY.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{key!r}]"


@dataclass
class Node:
    """A value of a parsed file: ``value`` is ``dict[Any, Node]``, ``list[Node]`` or a scalar."""

    value: Any
    file: str
    line: int
    path: str
    reported: bool = False
    """A problem with this value was reported while parsing: later checks keep quiet about it."""

    def plain(self) -> Any:
        """The value as plain Python data, without locations."""
        if isinstance(self.value, dict):
            return {k: v.plain() for k, v in self.value.items()}
        if isinstance(self.value, list):
            return [v.plain() for v in self.value]
        return self.value

    def child(self, key: Any) -> Node | None:
        value = self.value
        found: Node | None = None
        if isinstance(value, dict):
            found = value.get(key)
        elif isinstance(value, list) and isinstance(key, int) and 0 <= key < len(value):
            found = value[key]
        return found

    def locate(self, loc: Sequence[Any]) -> tuple[Node, str]:
        """The deepest node along ``loc`` and the path of ``loc`` expressed from that node's file."""
        node, path = self, self.path
        for i, key in enumerate(loc):
            nxt = node.child(key)
            if nxt is None:
                for rest in loc[i:]:
                    path = join_path(path, rest)
                break
            node, path = nxt, nxt.path
        return node, path

    def reported_within(self) -> bool:
        """Whether a problem was reported for this value or anything inside it."""
        if self.reported:
            return True
        children = (
            self.value.values() if isinstance(self.value, dict) else self.value if isinstance(self.value, list) else ()
        )
        return any(child.reported_within() for child in children)

    def reported_along(self, loc: Sequence[Any]) -> bool:
        node: Node | None = self
        for key in loc:
            if node is None or node.reported:
                break
            node = node.child(key)
        return node is not None and node.reported

    def problem(self, message: str, loc: Sequence[Any] = ()) -> Problem:
        """A problem at ``loc`` below this node, placed at the deepest line that exists."""
        node, path = self.locate(loc)
        return Problem(node.file, node.line, path, message)


def parse_document(
    text: str, file: str, placeholders: Placeholders, budget: Budget | None = None
) -> tuple[Node | None, list[Problem]]:
    """Parse one file, counting its values against ``budget`` (a fresh one when not given). A
    YAML syntax error, or a file over the budget, yields no tree; other problems (duplicate
    keys, tags, unresolved placeholders) are reported alongside the tree."""
    budget = Budget() if budget is None else budget
    try:
        loader = _BoundedLoader(text, budget)
    except yaml.reader.ReaderError as exc:
        return None, [_reader_problem(exc, text, file)]
    try:
        root = loader.get_single_node()
        if root is None:
            return None, [Problem(file, 1, "", "the file is empty: a topology needs at least name and spouts")]
        budget.charge_values(max(_expanded_size(root) - loader.composed, 0))
        builder = _TreeBuilder(loader, file, placeholders)
        return builder.build(root, "", root.start_mark.line + 1), builder.problems
    except _Refused as exc:
        return None, [Problem(file, exc.line, "", exc.message)]
    except yaml.reader.ReaderError as exc:
        return None, [_reader_problem(exc, text, file)]
    except yaml.MarkedYAMLError as exc:
        return None, [_syntax_problem(exc, file)]
    except yaml.YAMLError as exc:
        return None, [Problem(file, 1, "", f"invalid YAML: {exc}")]
    except RecursionError:
        return None, [Problem(file, 1, "", f"invalid YAML: nested more than {MAX_DEPTH} levels deep")]
    finally:
        loader.dispose()


class _Refused(Exception):
    """The file cannot be parsed within its limits: ``message`` says why, at 1-based ``line``."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(line, message)
        self.line = line
        self.message = message


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's ``SafeLoader`` composing within a budget: each value composed is counted (so a
    file of a million tiny values stops at the limit, not after the million), nesting deeper
    than ``MAX_DEPTH`` and a value longer than ``MAX_SCALAR_CHARS`` are refused at their line."""

    def __init__(self, text: str, budget: Budget) -> None:
        super().__init__(text)
        self.budget = budget
        self.composed = 0
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        line = self.peek_event().start_mark.line + 1  # type: ignore[no-untyped-call]
        if self._depth >= MAX_DEPTH:
            raise _Refused(line, f"invalid YAML: nested more than {MAX_DEPTH} levels deep")
        try:
            self.budget.charge_values(1)
        except OverBudget as exc:
            raise _Refused(line, str(exc)) from None
        self.composed += 1
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if isinstance(node, yaml.ScalarNode) and len(node.value) > MAX_SCALAR_CHARS:
            raise _Refused(
                line, f"a value of {len(node.value):,} characters, longer than the {MAX_SCALAR_CHARS:,} allowed"
            )
        return node


def _expanded_size(root: yaml.Node) -> int:
    """How many values and keys building ``root`` makes, each alias and merge key expanded where
    it is used: worked out once per composed node, so in time linear in the file. Raises ``_Refused``
    at the first collection whose expansion passes ``MAX_VALUES``. A recursive alias counts as
    one value (the builder reports it)."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: yaml.Node) -> int:
        if isinstance(node, yaml.ScalarNode):
            return 1
        known = sizes.get(id(node))
        if known is not None:
            return known
        if id(node) in open_:
            return 1
        open_.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                total = 1 + sum(size(item) for item in node.value)
            else:
                total = 1 + sum(size(value) + (key.tag != _MERGE_TAG) for key, value in node.value)
        finally:
            open_.discard(id(node))
        if total > MAX_VALUES:
            raise _Refused(
                node.start_mark.line + 1,
                f"the aliases or merge keys in this value expand to more than {MAX_VALUES:,} values and keys,"
                " the limit for one load",
            )
        sizes[id(node)] = total
        return total

    return size(root)


def _reader_problem(exc: yaml.reader.ReaderError, text: str, file: str) -> Problem:
    """A character YAML does not allow (NUL, most control characters), on its line."""
    line = text.count("\n", 0, exc.position) + 1
    column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
    return Problem(
        file, line, "", f"invalid YAML: the character #x{exc.character:04x} is not allowed (column {column})"
    )


def _syntax_problem(exc: yaml.MarkedYAMLError, file: str) -> Problem:
    """PyYAML's own words, context first: ``while parsing a flow sequence (line 3), expected ',' or
    ']', but got '<stream end>' (column 1)``, placed on the line where parsing stopped."""
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark else 1
    parts = []
    if exc.context:
        started = exc.context_mark
        parts.append(exc.context + (f" (line {started.line + 1})" if started and started.line + 1 != line else ""))
    if exc.problem:
        parts.append(exc.problem + (f" (column {mark.column + 1})" if mark else ""))
    return Problem(file, line, "", "invalid YAML: " + ", ".join(parts))


class _TreeBuilder:
    def __init__(self, loader: _BoundedLoader, file: str, placeholders: Placeholders) -> None:
        self.loader = loader
        self.file = file
        self.placeholders = placeholders
        self.problems: list[Problem] = []
        self._open: set[int] = set()

    def report(self, line: int, path: str, message: str) -> None:
        self.problems.append(Problem(self.file, line, path, message))

    def build(self, node: yaml.Node, path: str, line: int) -> Node:
        if len(self._open) >= MAX_DEPTH:
            self.report(line, path, f"nested more than {MAX_DEPTH} levels deep")
            return Node(None, self.file, line, path, reported=True)
        if id(node) in self._open:
            self.report(line, path, "an alias refers to a node that contains it (recursive alias)")
            return Node(None, self.file, line, path, reported=True)
        if isinstance(node, yaml.ScalarNode):
            value, ok = self._scalar(node, path)
            return Node(value, self.file, line, path, reported=not ok)
        if node.tag not in _COLLECTION_TAGS:
            self.report(line, path, _tag_message(node.tag))
            return Node(None, self.file, line, path, reported=True)
        self._open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return Node(self._mapping(node, path), self.file, line, path)
            items = [
                self.build(item, join_path(path, i), item.start_mark.line + 1) for i, item in enumerate(node.value)
            ]
            return Node(items, self.file, line, path)
        finally:
            self._open.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, path: str) -> dict[Any, Node]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue
            key, line = self.loader.construct_object(key_node), key_node.start_mark.line + 1
            if key in first_line:
                self.report(line, join_path(path, key), f"duplicate key (first given at line {first_line[key]})")
            first_line.setdefault(key, line)
        self.loader.flatten_mapping(node)
        out: dict[Any, Node] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                self.report(line, path, "a key must be a plain value, not a list or mapping")
                continue
            key, ok = self._scalar(key_node, path)
            out[key] = self.build(value_node, join_path(path, key), line)
            out[key].reported |= not ok
        return out

    def _scalar(self, node: yaml.ScalarNode, path: str) -> tuple[Any, bool]:
        """The value, and whether it is sound (no problem reported)."""
        try:
            value = self.loader.construct_object(node)
        except yaml.constructor.ConstructorError:
            self.report(node.start_mark.line + 1, path, _tag_message(node.tag))
            return None, False
        if not isinstance(value, str):
            return value, True
        value, problems = self.placeholders.restore(value)
        for message in problems:
            self.report(node.start_mark.line + 1, path, message)
        return value, not problems


def _tag_message(tag: str) -> str:
    return f"the YAML tag {tag} is not allowed: a topology file holds plain data only"
