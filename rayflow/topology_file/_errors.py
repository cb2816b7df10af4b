"""``SpecError``: everything wrong with a topology file, each problem at its file and line."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .._errors import RayflowError

__all__ = ["Problem", "SpecError"]


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


class SpecError(RayflowError):
    """A topology file cannot be used. ``problems`` lists every problem found, in file order."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = sorted(set(problems), key=lambda p: (p.file, p.line, p.path, p.message))
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"invalid topology file ({len(self.problems)} problem(s)):\n{lines}")
