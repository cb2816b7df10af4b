"""The edge-id arithmetic of Storm's XOR acker, shared by the collectors and the tests.

Every tuple sent to a task is an *edge* of the trees it belongs to and gets a random non-zero
64-bit edge id per root. The acker keeps, per root, the XOR of every edge id it has been told
about. Each edge id reaches it exactly twice -- once when created (in the emitter's ack, or the
spout's init) and once when consumed (in the receiver's ack) -- so the value returns to zero
exactly when every edge has been consumed. A zero value before that needs two random 64-bit
sums to collide, which Storm puts at once in 50 million years at 10k acks per second.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._tuple import Tuple

__all__ = ["ID_TYPECODE", "anchor", "new_id", "tree_acks"]

ID_TYPECODE = "L" if array("L").itemsize == 8 else "Q"
"""The ``array`` typecode of 64-bit unsigned ids (roots, edge ids, checksums): ``"L"`` where a C
long has 64 bits, because CPython converts an int to and from a C long directly, but to an
unsigned long long through a byte buffer -- twice the cost per id stored; ``"Q"`` elsewhere."""

_bits = random.SystemRandom().getrandbits
_rng = random.Random(_bits(64))
getrandbits = _rng.getrandbits
"""``getrandbits(64)`` is an edge id on the hot paths, which write ``getrandbits(64) or new_id()``
inline (zero, once in 2**64, must not be used: it would vanish from an XOR)."""


def new_id() -> int:
    """A random non-zero 64-bit id."""
    v = getrandbits(64)
    while not v:
        v = getrandbits(64)
    return v


def anchor(anchors: Iterable[Tuple]) -> tuple[int | dict[int, int], int]:
    """The tree of one tuple emitted to one task anchored to ``anchors`` -- ``(root, edge id)``
    when it joins one tree, ``({root: edge id}, 0)`` when several, ``(0, 0)`` when none -- with
    the new edge ids XORed into the anchors' ack values.

    Each anchor gets its own edge id: two anchors in the same tree then contribute two distinct
    ids that the new tuple's ack clears together, which one shared id would cancel out and let
    the tree complete early. (The hot paths inline the one-anchor, one-root case.)
    """
    edges: dict[int, int] = {}
    for a in anchors:
        tree = a._tree
        if not tree:  # untracked, or already acked or failed: contributes nothing
            continue
        edge = new_id()
        a._val ^= edge
        for root in (tree,) if tree.__class__ is int else tree:  # type: ignore[union-attr]
            edges[root] = edges.get(root, 0) ^ edge
    if not edges:
        return 0, 0
    if len(edges) == 1:
        ((root, edge),) = edges.items()
        return root, edge
    return edges, 0


def tree_acks(tup: Tuple) -> list[tuple[int, int]]:
    """What acking ``tup`` tells the acker: ``(root, value)`` per tree it belongs to."""
    tree, val = tup._tree, tup._val
    if not tree:
        return []
    if tree.__class__ is int:
        return [(tree, val)]
    return [(root, edge ^ val) for root, edge in tree.items()]  # type: ignore[union-attr]
