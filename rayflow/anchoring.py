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

__all__ = ["anchored_edges", "new_id"]

_bits = random.SystemRandom().getrandbits
_rng = random.Random(_bits(64))
_getrandbits = _rng.getrandbits


def new_id() -> int:
    """A random non-zero 64-bit id (zero would vanish from an XOR)."""
    v = _getrandbits(64)
    while not v:
        v = _getrandbits(64)
    return v


def anchored_edges(anchor_edges: list[dict[int, int]]) -> tuple[dict[int, int], list[int]]:
    """Edges for one tuple emitted to one task, anchored to tuples whose edges are given.

    Returns the new tuple's ``{root: edge id}`` and, per anchor, the edge id to XOR into that
    anchor's ack value. Each anchor gets its own edge id: two anchors in the same tree then
    contribute two distinct ids that the new tuple's ack clears together, which one shared id
    would cancel out and let the tree complete early.
    """
    edges: dict[int, int] = {}
    per_anchor = []
    for roots in anchor_edges:
        if not roots:
            per_anchor.append(0)
            continue
        edge = new_id()
        per_anchor.append(edge)
        for root in roots:
            edges[root] = edges.get(root, 0) ^ edge
    return edges, per_anchor
