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

Where trees live. A tree starts *young*: an entry ``root -> [checksum, owner]`` of a dict,
which a message finds and updates with a hash lookup at C speed -- most trees settle there,
within milliseconds of their init. Every rotation, and whenever more than ``young`` trees are
young at once, the young trees move to the *table*, where a tree costs far less memory and
which the Python code probes itself. A tree in the table stays there until it settles or expires.

Why flat arrays: an acker may hold a million pending trees, and a dict of Python ints costs
~170 bytes a tree (the root and checksum are 40-byte objects each, plus the entry). Here a tree
is one slot of an open-addressing table (linear probing, at most half full) spread over four
arrays -- root, checksum, owner, expiry stamp -- 21 bytes a slot, 42 to 84 bytes a tree. Root
ids are random 64-bit numbers, so their low bits index the table directly; root 0 is reserved
(``anchoring.new_id`` never makes it). Expiry needs no per-tree timer: each slot is stamped with
the rotation it was last touched in, and a rotation drops the one cohort that has aged out,
found with ``bytearray.find`` at C speed. Young trees need no stamp: they were all touched
since the last rotation, which stamps them as it moves them.

This class is the contract and the fallback: ``_ledger.c`` is the same ledger as a C type (one
table, no young dict: its probing runs at C speed), which ``ledger_build`` loads where it is
built. Both must answer every message alike (``tests/test_ack_ledger.py`` runs on both).
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Sequence
from typing import NamedTuple

from .anchoring import ID_TYPECODE

__all__ = ["AckLedger", "Outcome", "Settled"]

ACKER_BUCKETS = 3
YOUNG_TREES = 16_384
"""Young trees at most, by default: about 200 bytes each, so a few MB at most."""
MIN_CAPACITY = 1024
_FREE = 255
"""The stamp of an empty slot; live stamps count rotations modulo 255, so never equal it."""
_FAILED = 1
"""Low bit of a tree's owner word; the spout task is the rest (0 until the init arrived)."""


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
    def __init__(self, buckets: int = ACKER_BUCKETS, young: int = YOUNG_TREES) -> None:
        if buckets < 2:
            raise ValueError("an AckLedger needs at least 2 buckets")
        self._buckets = buckets
        self._stamp = 0
        self._young: dict[int, list[int]] = {}
        """The young trees: root -> [checksum, owner word]. A root is young or in the table,
        never both."""
        self._most_young = max(1, young)
        self._allocate(MIN_CAPACITY)

    def _allocate(self, capacity: int) -> None:
        self._mask = capacity - 1
        self._roots = array(ID_TYPECODE, bytes(8 * capacity))
        self._vals = array(ID_TYPECODE, bytes(8 * capacity))
        self._owners = array("I", bytes(4 * capacity))
        self._stamps = bytearray(b"\xff") * capacity
        self._count = 0
        """Trees in the table."""

    def __len__(self) -> int:
        return self._count + len(self._young)

    @property
    def capacity(self) -> int:
        """Slots in the table (a power of two): what the table's memory is proportional to."""
        return self._mask + 1

    # -- one message at a time ------------------------------------------------------------------
    def _tree(self, root: int) -> list[int] | int:
        """Where ``root``'s tree is: its young entry, or its slot in the table; a new young
        entry if it is in neither (the oldest young trees moving to the table first if the
        young are many)."""
        tree = self._young.get(root)
        if tree is not None:
            return tree
        if self._count:
            i = self._find(root)
            if i >= 0:
                self._stamps[i] = self._stamp
                return i
        return self._new_young(root)

    def _new_young(self, root: int) -> list[int]:
        young = self._young
        if len(young) >= self._most_young:
            self._age()
        tree = young[root] = [0, 0]
        return tree

    def _settle_young(self, root: int, tree: list[int]) -> Outcome | None:
        val, owner = tree
        if owner < 2 or val and not owner & _FAILED:  # no init yet, or pending
            return None
        del self._young[root]
        return Outcome(owner >> 1, root, not owner & _FAILED)

    def init(self, root: int, val: int, spout_task: int) -> Outcome | None:
        tree = self._tree(root)
        if isinstance(tree, int):
            self._vals[tree] ^= val
            self._owners[tree] = spout_task << 1 | self._owners[tree] & _FAILED
            return self._settle(tree)
        tree[0] ^= val
        tree[1] = spout_task << 1 | tree[1] & _FAILED
        return self._settle_young(root, tree)

    def ack(self, root: int, val: int) -> Outcome | None:
        tree = self._tree(root)
        if isinstance(tree, int):
            self._vals[tree] ^= val
            return self._settle(tree)
        tree[0] ^= val
        return self._settle_young(root, tree)

    def fail(self, root: int) -> Outcome | None:
        tree = self._tree(root)
        if isinstance(tree, int):
            self._owners[tree] |= _FAILED
            return self._settle(tree)
        tree[1] |= _FAILED
        return self._settle_young(root, tree)

    def reset_timeout(self, root: int) -> int | None:
        """Refresh the tree's expiry; returns the spout task to forward the reset to, if known."""
        tree = self._tree(root)
        owner = self._owners[tree] if isinstance(tree, int) else tree[1]
        return (owner >> 1) or None

    # -- a whole payload ------------------------------------------------------------------------
    def apply(self, spout_task: int, inits: Sequence[int], acks: Sequence[int], fails: Sequence[int]) -> Settled:
        """One acker payload (``outbox.AckerPayload``): ``inits`` flat ``(root, val, root, val,
        ...)`` from ``spout_task``, then ``acks``, flat the same way, and ``fails``, each
        applied as ``init``, ``ack`` and ``fail`` would be, in that order. Returns the trees
        settled, per spout task.

        The two loops are ``init`` and ``ack`` written inline for a young tree: they run once
        per acker message, the acker's whole cost. A tree in the table (rare: one that lived
        through a rotation) takes the one-message path."""
        settled: Settled = defaultdict(_acked_and_failed)
        young = self._young
        find = young.get
        most_young = self._most_young
        owner_word = spout_task << 1
        pairs = iter(inits)
        for root, val in zip(pairs, pairs, strict=False):
            tree = find(root)
            if tree is None:
                if self._count and self._find(root) >= 0:
                    _record(settled, self.init(root, val, spout_task))
                    continue
                if len(young) >= most_young:
                    self._age()
                tree = young[root] = [0, 0]
            val ^= tree[0]
            owner = owner_word | tree[1] & _FAILED
            if val and not owner & _FAILED or owner < 2:
                tree[0] = val
                tree[1] = owner
                continue
            del young[root]
            settled[owner >> 1][owner & _FAILED].append(root)
        pairs = iter(acks)
        for root, val in zip(pairs, pairs, strict=False):
            tree = find(root)
            if tree is None:
                if self._count and self._find(root) >= 0:
                    _record(settled, self.ack(root, val))
                    continue
                if len(young) >= most_young:
                    self._age()
                tree = young[root] = [0, 0]
            val ^= tree[0]
            owner = tree[1]
            if val and not owner & _FAILED or owner < 2:
                tree[0] = val
                continue
            del young[root]
            settled[owner >> 1][owner & _FAILED].append(root)
        for root in fails:  # rare: the plain path
            _record(settled, self.fail(root))
        return settled

    # -- the table ------------------------------------------------------------------------------
    def _age(self) -> None:
        """Move every young tree to the table, stamped now."""
        for root, (val, owner) in self._young.items():
            i = self._slot(root)
            self._vals[i] = val
            self._owners[i] = owner
        self._young.clear()

    def _find(self, root: int) -> int:
        """The slot of ``root`` in the table, or -1."""
        roots = self._roots
        mask = self._mask
        i = root & mask
        r = roots[i]
        while r != root:
            if not r:
                return -1
            i = (i + 1) & mask
            r = roots[i]
        return i

    def _slot(self, root: int) -> int:
        """The slot of ``root`` in the table, taken (empty, stamped now) if it has none."""
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

    def rotate(self) -> list[int]:
        """Advance expiry by one cohort; returns the roots forgotten."""
        self._age()
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


def _record(settled: Settled, outcome: Outcome | None) -> None:
    if outcome is not None:
        settled[outcome.spout_task][0 if outcome.acked else 1].append(outcome.root)
