"""``TupleWindow``: what one activation of a windowed bolt hands its ``execute``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from .._tuple import Tuple

__all__ = ["TupleWindow"]


@dataclass(frozen=True)
class TupleWindow:
    """The tuples of one window, oldest first (Storm's ``TupleWindow``).

    ``start_ts`` and ``end_ts`` are the window's bounds in ms -- it holds the tuples with
    ``start_ts <= timestamp < end_ts`` -- on event time the tuples' own timestamps, on processing
    time the bolt's clock; ``None`` for windows whose length is a count. The tuples are acked by
    the bolt once no later window can hold them: do not ack them yourself.
    """

    tuples: list[Tuple]
    new: list[Tuple] = field(default_factory=list)
    expired: list[Tuple] = field(default_factory=list)
    start_ts: float | None = None
    end_ts: float | None = None

    def get(self) -> list[Tuple]:
        """Every tuple in the window, oldest first."""
        return self.tuples

    def get_new(self) -> list[Tuple]:
        """The tuples that were in no window delivered before this one."""
        return self.new

    def get_expired(self) -> list[Tuple]:
        """The tuples that left the window since the last activation (acked already)."""
        return self.expired

    def __len__(self) -> int:
        return len(self.tuples)

    def __iter__(self) -> Iterator[Tuple]:
        return iter(self.tuples)
