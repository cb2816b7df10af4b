"""``CheckpointAlignment``: a bolt acts on a checkpoint once every upstream task has sent it.

Each upstream task forwards a checkpoint tuple after everything it emitted before it (streams
are ordered per pair of tasks), so once a bolt holds the tuple of a given ``(txid, action)`` from
all of them, every input that preceded the checkpoint has reached it. Only one checkpoint is
in flight at a time, so a different one completing means the others were abandoned (failed or
timed out upstream): they are handed back to be failed, which is harmless."""

from __future__ import annotations

from typing import Any

from .._tuple import Tuple

__all__ = ["CheckpointAlignment"]


class CheckpointAlignment:
    def __init__(self, upstream_tasks: int) -> None:
        self.upstream_tasks = upstream_tasks
        self._held: dict[tuple[Any, Any], list[Tuple]] = {}

    def add(self, tup: Tuple) -> tuple[list[Tuple], list[Tuple]]:
        """Take one checkpoint tuple. Returns the tuples of a checkpoint that is now complete
        (empty if none is) and the stale tuples of abandoned checkpoints."""
        key = (tup.values[0], tup.values[1])
        held = self._held.setdefault(key, [])
        held.append(tup)
        if len(held) < self.upstream_tasks:
            return [], []
        del self._held[key]
        stale = [t for tuples in self._held.values() for t in tuples]
        self._held.clear()
        return held, stale
