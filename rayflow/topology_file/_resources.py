"""The ``resources:`` mapping of each component of a topology file, checked by
``rayflow.Resources`` itself and each problem put on the line of its key.

``Resources`` (``rayflow/_resources.py``) is the one place that knows the options and their
bounds; this module only words its findings the way the rest of the file's problems are worded.
"""

from __future__ import annotations

from .._resources import Resources
from ._document import Node
from ._errors import Problem
from ._models import SECTIONS
from ._validation import describe_error

__all__ = ["resources_problems"]


def resources_problems(tree: Node) -> list[Problem]:
    """Every problem in each component's ``resources``. The values found wrong are marked
    reported, so that the component is not built and the builder does not report them again."""
    found = []
    for section in SECTIONS:
        entries = tree.child(section)
        for entry in entries.value if entries is not None and isinstance(entries.value, list) else []:
            node = entry.child("resources")
            if node is not None and isinstance(node.value, dict):
                found += _check(node)
    return found


def _check(node: Node) -> list[Problem]:
    keys = {key: child for key, child in node.value.items() if isinstance(key, str)}  # others: the schema's
    problems = []
    for problem in Resources.problems({key: child.plain() for key, child in keys.items()}):
        loc = tuple(problem.error["loc"]) if problem.error is not None and problem.error["loc"] else (problem.key,)
        target, _ = node.locate(loc)
        target.reported = True
        message = problem.message if problem.error is None else describe_error(problem.error, Resources)
        problems.append(node.problem(message, loc))
    return problems
