"""``AckLedger``: the acker's bookkeeping, as plain Python in flat arrays.

Per tracked spout tuple (its *root* id) the ledger keeps a 64-bit XOR checksum, the spout task
that owns the tree and whether the tree has failed. Messages, and the outcome each can cause:

- ``init(root, val, spout_task)`` -- from the spout: ``val`` is the XOR of the edge ids it sent.
- ``ack(root, val)`` -- from a bolt: its input's edge id XOR the edge ids it emitted anchored
  to that input (several acks of one sender may be XORed together into one message).
- ``fail(root)`` -- the tree failed: reported to the spout at once.
- ``reset_timeout(root)`` -- keep the tree alive: refreshes its expiry here and at the spout.

``apply(spout_task, inits, acks, fails)`` takes a whole acker payload's inits, acks and fails
at once -- exactly as calling ``init``, ``ack`` and ``fail`` on each in that order -- and returns
the settled roots grouped by spout task: what the acker executor runs, because the per-message
calls and ``Outcome`` objects cost more than the bookkeeping itself.

A tree is reported when its checksum is zero (acked) or it has failed, but never before its
init arrived: acks and fails that overtake the init are kept and settled when it comes, since
only the init tells which spout task to report to. A tree that sees no message for ``buckets``
rotations is forgotten (the spout's own pending map has already timed it out and failed it).

Why flat arrays: an acker may hold a million pending trees, and a dict of Python ints costs
~170 bytes a tree (the root and checksum are 40-byte objects each, plus the entry). Here a tree
is one slot of an open-addressing table (linear probing, at most half full) spread over four
arrays -- root, checksum, owner, expiry stamp -- 21 bytes a slot, 42 to 84 bytes a tree. Root
ids are random 64-bit numbers, so their low bits index the table directly; root 0 is reserved
(``anchoring.new_id`` never makes it). Expiry needs no per-tree timer: each slot is stamped with
the rotation it was last touched in, and a rotation drops the one cohort that has aged out,
found with ``bytearray.find`` at C speed.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Sequence
from typing import NamedTuple

from ._anchoring import ID_TYPECODE

__all__ = ["AckLedger", "Outcome", "Settled"]

ACKER_BUCKETS = 3
MIN_CAPACITY = 1024
_FREE = 255
"""The stamp of an empty slot; live stamps count rotations modulo 255, so never equal it."""
_FAILED = 1
"""Low bit of a slot's owner word; the spout task is the rest (0 until the init arrived)."""


class Outcome(NamedTuple):
    """A settled tree: tell ``spout_task`` that ``root`` was acked (or failed)."""

    spout_task: int
    root: int
    acked: bool


Settled = dict[int, tuple[list[int], list[int]]]
"""What ``apply`` settled: spout task -> (roots acked, roots failed), each in settling order."""


def _acked_and_failed() -> tuple[list[int], list[int]]:
    return [], []


class AckLedger:
    def __init__(self, buckets: int = ACKER_BUCKETS) -> None:
        if buckets < 2:
            raise ValueError("an AckLedger needs at least 2 buckets")
        self._buckets = buckets
        self._stamp = 0
        self._allocate(MIN_CAPACITY)

    def _allocate(self, capacity: int) -> None:
        self._mask = capacity - 1
        self._roots = array(ID_TYPECODE, bytes(8 * capacity))
        self._vals = array(ID_TYPECODE, bytes(8 * capacity))
        self._owners = array("I", bytes(4 * capacity))
        self._stamps = bytearray(b"\xff") * capacity
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def _slot(self, root: int) -> int:
        """The slot of ``root``, taken (empty, stamped now) if it has none. Probing is written
        inline here, the one hot loop of the acker."""
        roots = self._roots
        mask = self._mask
        i = root & mask
        r = roots[i]
        while r != root:
            if not r:
                roots[i] = root
                self._count += 1
                if self._count * 2 > mask:
                    self._resize(2 * (mask + 1))
                    return self._slot(root)
                break
            i = (i + 1) & mask
            r = roots[i]
        self._stamps[i] = self._stamp
        return i

    def _settle(self, i: int) -> Outcome | None:
        owner = self._owners[i]
        if owner < 2:  # no init yet: nobody to tell
            return None
        if owner & _FAILED:
            outcome = Outcome(owner >> 1, self._roots[i], False)
        elif not self._vals[i]:
            outcome = Outcome(owner >> 1, self._roots[i], True)
        else:
            return None
        self._remove(i)
        return outcome

    def init(self, root: int, val: int, spout_task: int) -> Outcome | None:
        i = self._slot(root)
        self._vals[i] ^= val
        self._owners[i] = spout_task << 1 | self._owners[i] & _FAILED
        return self._settle(i)

    def ack(self, root: int, val: int) -> Outcome | None:
        i = self._slot(root)
        val ^= self._vals[i]
        self._vals[i] = val
        if val and not self._owners[i] & _FAILED:
            return None
        return self._settle(i)

    def fail(self, root: int) -> Outcome | None:
        i = self._slot(root)
        self._owners[i] |= _FAILED
        return self._settle(i)

    def apply(self, spout_task: int, inits: Sequence[int], acks: Sequence[int], fails: Sequence[int]) -> Settled:
        """One acker payload (``outbox.AckerPayload``): ``inits`` flat ``(root, val, root, val,
        ...)`` from ``spout_task``, then ``acks``, flat the same way, and ``fails``, each
        applied as ``init``, ``ack`` and ``fail`` would be, in that order. Returns the trees
        settled, per spout task.

        The two loops are ``_slot`` and ``_settle`` written inline (with the arrays in locals):
        they run once per acker message, the acker's whole cost. A new root that would make the
        table more than half full goes through ``_slot``, which grows it; the locals are then
        reloaded."""
        settled: Settled = defaultdict(_acked_and_failed)
        roots, vals, owners, stamps, mask, stamp = (
            self._roots,
            self._vals,
            self._owners,
            self._stamps,
            self._mask,
            self._stamp,
        )
        owner_word = spout_task << 1
        pairs = iter(inits)
        for root, val in zip(pairs, pairs, strict=False):
            i = root & mask
            r = roots[i]
            while r != root and r:
                i = (i + 1) & mask
                r = roots[i]
            if not r:  # a new tree (an init is one, unless acks or a fail overtook it)
                if (self._count + 1) * 2 > mask:
                    i = self._slot(root)
                    roots, vals, owners, stamps, mask = self._roots, self._vals, self._owners, self._stamps, self._mask
                else:
                    roots[i] = root
                    self._count += 1
            stamps[i] = stamp
            val ^= vals[i]
            vals[i] = val
            owner = owner_word | owners[i] & _FAILED
            owners[i] = owner
            if val and not owner & _FAILED or owner < 2:
                continue
            # Settled (acks overtook the init, or the tree failed): index 0 acked, 1 failed.
            settled[owner >> 1][owner & _FAILED].append(root)
            self._remove(i)
        pairs = iter(acks)
        for root, val in zip(pairs, pairs, strict=False):
            i = root & mask
            r = roots[i]
            while r != root and r:
                i = (i + 1) & mask
                r = roots[i]
            if not r:  # the ack overtook the init: keep it, nobody to tell yet
                if (self._count + 1) * 2 > mask:
                    i = self._slot(root)
                    roots, vals, owners, stamps, mask = self._roots, self._vals, self._owners, self._stamps, self._mask
                else:
                    roots[i] = root
                    self._count += 1
            stamps[i] = stamp
            val ^= vals[i]
            vals[i] = val
            owner = owners[i]
            if val and not owner & _FAILED or owner < 2:
                continue
            settled[owner >> 1][owner & _FAILED].append(root)
            self._remove(i)
        for root in fails:  # rare: the plain path
            outcome = self.fail(root)
            if outcome is not None:
                settled[outcome.spout_task][1].append(root)
        return settled

    def reset_timeout(self, root: int) -> int | None:
        """Refresh the tree's expiry; returns the spout task to forward the reset to, if known."""
        return (self._owners[self._slot(root)] >> 1) or None

    def rotate(self) -> list[int]:
        """Advance expiry by one cohort; returns the roots forgotten."""
        self._stamp = (self._stamp + 1) % _FREE
        cohort = (self._stamp - self._buckets) % _FREE
        stamps, roots = self._stamps, self._roots
        expired = []
        i = stamps.find(cohort)
        while i >= 0:
            expired.append(roots[i])
            i = stamps.find(cohort, i + 1)
        for root in expired:
            self._remove(self._slot(root))
        if self._count * 8 < self._mask and self._mask >= MIN_CAPACITY:
            capacity = MIN_CAPACITY  # a quarter full: room to grow twice before the next resize
            while capacity < 4 * self._count:
                capacity *= 2
            self._resize(capacity)
        return expired

    def _remove(self, i: int) -> None:
        """Empty slot ``i``, shifting back the entries after it that probed past it, so that no
        lookup stops early at the hole (linear probing's deletion without tombstones)."""
        roots, vals, owners, stamps, mask = self._roots, self._vals, self._owners, self._stamps, self._mask
        j = i
        while True:
            j = (j + 1) & mask
            r = roots[j]
            if not r:
                break
            home = r & mask
            # The entry at j may fill the hole at i unless its home lies cyclically in (i, j].
            if (home <= i or home > j) if i < j else (home <= i and home > j):
                roots[i], vals[i], owners[i], stamps[i] = r, vals[j], owners[j], stamps[j]
                i = j
        roots[i] = vals[i] = owners[i] = 0
        stamps[i] = _FREE
        self._count -= 1

    def _resize(self, capacity: int) -> None:
        old = self._roots, self._vals, self._owners, self._stamps
        self._allocate(capacity)
        roots, vals, owners, stamps, mask = self._roots, self._vals, self._owners, self._stamps, self._mask
        count = 0
        for r, v, o, s in zip(*old, strict=True):
            if r:
                i = r & mask
                while roots[i]:
                    i = (i + 1) & mask
                roots[i], vals[i], owners[i], stamps[i] = r, v, o, s
                count += 1
        self._count = count
