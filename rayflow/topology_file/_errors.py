"""``SpecError``: everything wrong with a topology file, each problem at its file and line."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .._errors import RayflowError

__all__ = ["SHOWN_PROBLEMS", "Problem", "SpecError"]


@dataclass(frozen=True, order=True)
class Problem:
    """One thing to fix: where (``file``, 1-based ``line``, ``path`` in the document) and what."""

    file: str
    line: int
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where} {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


SHOWN_PROBLEMS = 100
"""The most problems a ``SpecError``'s message lists (``problems`` has them all): a file with
thousands of the same mistake makes a message of a screenful, not of megabytes."""


class SpecError(RayflowError):
    """A topology file cannot be used. ``problems`` lists every problem found, in file order;
    the message the first ``SHOWN_PROBLEMS`` of them and how many more there are."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = sorted(set(problems), key=lambda p: (p.file, p.line, p.path, p.message))
        lines = [f"  {p}" for p in self.problems[:SHOWN_PROBLEMS]]
        if len(self.problems) > SHOWN_PROBLEMS:
            lines.append(f"  ... and {len(self.problems) - SHOWN_PROBLEMS:,} more")
        super().__init__(f"invalid topology file ({len(self.problems)} problem(s)):\n" + "\n".join(lines))
