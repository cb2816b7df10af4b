"""Executors: one task's logic -- a user component (or the acker) wired to its router, edge
ids and outbox -- as plain Python. The runtime drives one executor per Ray actor; unit tests
can drive them directly with in-memory send functions."""

from .acker import AckerExecutor
from .base import Executor
from .bolt import BoltExecutor
from .spout import SpoutExecutor

__all__ = ["AckerExecutor", "BoltExecutor", "Executor", "SpoutExecutor"]
