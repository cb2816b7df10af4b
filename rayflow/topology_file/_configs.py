"""The ``config:`` mappings of a topology file (the topology's and each component's), checked
by ``rayflow.Config`` itself and each problem put on the line of its key.

``Config`` is the one place that knows the keys, their Storm spellings and their bounds; this
module only words its findings the way the rest of the file's problems are worded.
"""

from __future__ import annotations

from .._config import Config, ConfigProblem
from ._document import Node
from ._errors import Problem
from ._models import SECTIONS
from ._validation import describe_error

__all__ = ["config_problems"]


def config_problems(tree: Node) -> list[Problem]:
    """Every problem in the topology's ``config`` and in each component's ``config``. The nodes
    found wrong are marked reported, so that later checks do not report them a second time."""
    mappings = [tree.child("config")]
    for section in SECTIONS:
        entries = tree.child(section)
        if entries is not None and isinstance(entries.value, list):
            mappings += [entry.child("config") for entry in entries.value]
    return [p for node in mappings if node is not None and isinstance(node.value, dict) for p in _check(node)]


def _check(node: Node) -> list[Problem]:
    # Keys that are not strings are the schema's to report.
    keys = {key: child for key, child in node.value.items() if isinstance(key, str)}
    problems = []
    for found in Config.problems({key: child.plain() for key, child in keys.items()}):
        child = keys[found.key]
        child.reported = True
        problems.append(node.problem(_message(found, keys), (found.key,)))
    return problems


def _message(found: ConfigProblem, keys: dict[str, Node]) -> str:
    if found.error is not None:
        return describe_error(found.error, Config)
    if found.same_as is not None:
        other = keys[found.same_as]
        where = f"line {other.line}" if other.file == keys[found.key].file else f"{other.file}:{other.line}"
        return f"{found.message} (the other is at {where})"
    return found.message
