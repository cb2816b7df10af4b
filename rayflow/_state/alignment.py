"""``CheckpointAlignment``: a bolt acts on a checkpoint once every upstream task has sent it.

Each upstream task forwards a checkpoint tuple after everything it emitted before it (streams
are ordered per pair of tasks), so once a bolt holds the tuple of one checkpoint from all of
them, every input that preceded the checkpoint has reached it.

One checkpoint is one *attempt*: the checkpoint spout sends the same ``(txid, action)`` again
after a failure, a timeout or a task's restart, each time as a new tuple tree. The attempts are
told apart by their tree's root, never by ``(txid, action)`` alone: a tuple left over from an
abandoned attempt (its sender died before the other upstream tasks forwarded theirs) would
otherwise stand in for the next attempt's tuple from another task, the checkpoint would be acted
on without that task's, and the next attempt's tuple from that task would then wait alone, so
that every later attempt's tree timed out too (a rollback repeated forever). Only one attempt is
in flight at a time, so one completing means the others were abandoned: their tuples are handed
back to be failed, which is harmless."""

from __future__ import annotations

from typing import Any

from .._tuple import Tuple

__all__ = ["CheckpointAlignment"]


class CheckpointAlignment:
    def __init__(self, upstream_tasks: int, *, one_attempt: bool = False) -> None:
        self.upstream_tasks = upstream_tasks
        self.one_attempt = one_attempt
        """Exactly-once: a tuple of a new attempt abandons the attempt held at once (its
        inputs are held back, so waiting for it to complete would wait for ever)."""
        self._held: dict[tuple[Any, Any, Any], dict[int, Tuple]] = {}
        """Per attempt (txid, action, tree root): its tuples by the upstream task that sent them."""

    def add(self, tup: Tuple) -> tuple[list[Tuple], list[Tuple]]:
        """Take one checkpoint tuple. Returns the tuples of an attempt that is now complete
        (empty if none is) and the stale tuples: of abandoned attempts, and one that a later
        tuple of the same attempt from the same task replaced (a replayed stream)."""
        key = (tup.values[0], tup.values[1], _attempt(tup))
        stale: list[Tuple] = []
        if self.one_attempt and key not in self._held:
            stale = self.clear()
        held = self._held.setdefault(key, {})
        replaced = held.get(tup.source_task)
        held[tup.source_task] = tup
        if replaced is not None:
            stale.append(replaced)
        if len(held) < self.upstream_tasks:
            return [], stale
        del self._held[key]
        stale += [t for tuples in self._held.values() for t in tuples.values()]
        self._held.clear()
        return list(held.values()), stale

    def clear(self) -> list[Tuple]:
        """Give up every attempt held; returns their tuples (to be failed)."""
        stale = [t for tuples in self._held.values() for t in tuples.values()]
        self._held.clear()
        return stale


def _attempt(tup: Tuple) -> Any:
    """What tells the attempts of one checkpoint apart: the root of the tree the tuple belongs
    to (every tuple of one attempt descends from the one spout tuple). An untracked tuple has
    none: its attempts are told apart by nothing but their order."""
    tree = tup._tree
    if tree is None or tree.__class__ is int:
        return tree
    return frozenset(tree)  # type: ignore[arg-type]
