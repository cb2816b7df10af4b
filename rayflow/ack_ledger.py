"""``AckLedger``: the acker's bookkeeping, as plain Python.

Per tracked spout tuple (its *root* id) the ledger keeps a 64-bit XOR checksum, the spout task
that owns the tree and whether the tree has failed. Messages, and the outcome each can cause:

- ``init(root, val, spout_task)`` -- from the spout: ``val`` is the XOR of the edge ids it sent.
- ``ack(root, val)`` -- from a bolt: its input's edge id XOR the edge ids it emitted anchored
  to that input (several acks of one sender may be XORed together into one message).
- ``fail(root)`` -- the tree failed: reported to the spout at once.
- ``reset_timeout(root)`` -- keep the tree alive: refreshes its expiry here and at the spout.

A tree is reported when its checksum is zero (acked) or it has failed, but never before its
init arrived: acks and fails that overtake the init are kept and settled when it comes, since
only the init tells which spout task to report to. Entries live in a ``RotatingMap``; a tree
that sees no message for a whole rotation cycle is forgotten (the spout's own pending map has
already timed it out and failed it).
"""

from __future__ import annotations

from typing import NamedTuple

from .rotating_map import RotatingMap

__all__ = ["AckLedger", "Outcome"]

ACKER_BUCKETS = 3


class Outcome(NamedTuple):
    """A settled tree: tell ``spout_task`` that ``root`` was acked (or failed)."""

    spout_task: int
    root: int
    acked: bool


class _Tree:
    __slots__ = ("val", "spout_task", "failed")

    def __init__(self) -> None:
        self.val = 0
        self.spout_task: int | None = None
        self.failed = False


class AckLedger:
    def __init__(self, buckets: int = ACKER_BUCKETS) -> None:
        self._pending: RotatingMap[int, _Tree] = RotatingMap(buckets)

    def __len__(self) -> int:
        return len(self._pending)

    def _settle(self, root: int, tree: _Tree) -> Outcome | None:
        if tree.spout_task is None:
            return None
        if tree.failed:
            self._pending.pop(root)
            return Outcome(tree.spout_task, root, False)
        if tree.val == 0:
            self._pending.pop(root)
            return Outcome(tree.spout_task, root, True)
        return None

    def init(self, root: int, val: int, spout_task: int) -> Outcome | None:
        tree = self._pending.touch(root, _Tree)
        tree.val ^= val
        tree.spout_task = spout_task
        return self._settle(root, tree)

    def ack(self, root: int, val: int) -> Outcome | None:
        tree = self._pending.touch(root, _Tree)
        tree.val ^= val
        if tree.spout_task is None or (tree.val and not tree.failed):
            return None
        return self._settle(root, tree)

    def fail(self, root: int) -> Outcome | None:
        tree = self._pending.touch(root, _Tree)
        tree.failed = True
        return self._settle(root, tree)

    def reset_timeout(self, root: int) -> int | None:
        """Refresh the tree's expiry; returns the spout task to forward the reset to, if known."""
        return self._pending.touch(root, _Tree).spout_task

    def rotate(self) -> list[int]:
        """Advance expiry by one cohort; returns the roots forgotten."""
        return list(self._pending.rotate())
