"""The messages of the exactly-once protocol that are not tuples."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["ROLLBACK_REQUEST", "Barrier"]

ROLLBACK_REQUEST = "rollback-request"
"""Control payload from a spout task to the checkpoint spout: a tree failed or timed out, so the
topology must go back to the last committed cut."""


class Barrier(NamedTuple):
    """One step of a checkpoint, from the checkpoint spout to a spout task. ``root`` and
    ``edge`` place the spout task in the step's tuple tree, as a bolt's input would be: the
    spout emits the step on anchored to them, then acks ``edge``."""

    txid: int
    action: str
    root: int
    edge: int
