"""A task's log on the driver: what the ``rayflow`` logger logs inside a task's actor -- a
component's errors with their tracebacks, ``topology.debug``'s emits, refused streams -- is
logged again by the driver's ``rayflow`` logger, prefixed with the topology, task and process.

Ray runs rayflow's own local instance with ``log_to_driver`` off (and a cluster joined may have
it off too): a worker's stderr never reaches the user. So each task's process keeps what the
``rayflow`` logger logs there, INFO and above, in a bounded buffer (``TaskLog``), and the
supervisor holds one ``next_logs`` call per task that returns as soon as there is something to
carry: a long poll, so no call is made while a task logs nothing, and one call carries every
record logged since the last. ``shutdown`` returns what was logged while the task closed.

The buffer keeps the newest ``MAX_RECORDS``; older ones are counted as dropped, and the driver
says how many.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import deque
from typing import NamedTuple

__all__ = ["MAX_RECORDS", "LogBatch", "TaskLog", "install", "replay"]

MAX_RECORDS = 1000
"""Records a task keeps for the driver between two ``next_logs`` calls."""


class LogBatch(NamedTuple):
    """What a task logged since the last batch: ``(levelno, text)`` pairs, the text with its
    traceback, and how many older records did not fit."""

    pid: int
    records: list[tuple[int, str]]
    dropped: int


class TaskLog(logging.Handler):
    """Keeps the records of the logger it is attached to for ``next_batch``."""

    def __init__(self, capacity: int = MAX_RECORDS) -> None:
        super().__init__(logging.INFO)
        self._records: deque[tuple[int, str]] = deque(maxlen=capacity)
        self._dropped = 0
        self._guard = threading.Lock()  # a record may come from another thread than the loop's
        self._ready: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake_pending = False
        self.closing = False
        """Set by ``shutdown``: from then on ``next_batch`` keeps the records for ``drain``."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:
            self.handleError(record)
            return
        with self._guard:
            if len(self._records) == self._records.maxlen:
                self._dropped += 1
            self._records.append((record.levelno, text))
            wake = self._loop is not None and not self._wake_pending
            self._wake_pending = self._wake_pending or wake
        if wake:
            assert self._loop is not None and self._ready is not None
            try:
                self._loop.call_soon_threadsafe(self._ready.set)
            except RuntimeError:  # the loop is closed: the actor is going away
                pass

    def drain(self) -> LogBatch:
        """Every record kept, and the count of those dropped, now."""
        with self._guard:
            records, dropped = list(self._records), self._dropped
            self._records.clear()
            self._dropped = 0
            self._wake_pending = False
        return LogBatch(os.getpid(), records, dropped)

    async def next_batch(self) -> LogBatch:
        """Wait until something is logged, then ``drain``."""
        if self._ready is None:
            self._ready = asyncio.Event()
            with self._guard:
                self._loop = asyncio.get_running_loop()
        while True:
            with self._guard:
                if self._records and not self.closing:
                    break
                self._wake_pending = False
                self._ready.clear()
            await self._ready.wait()
        return self.drain()


_installed: TaskLog | None = None


def install() -> TaskLog:
    """The process's ``TaskLog``, attached to the ``rayflow`` logger (once per process), which
    then logs INFO and above."""
    global _installed
    if _installed is None:
        _installed = TaskLog()
        _installed.setFormatter(logging.Formatter("%(message)s"))
        logger = logging.getLogger("rayflow")
        logger.addHandler(_installed)
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
    return _installed


def replay(logger: logging.Logger, where: str, batch: LogBatch) -> None:
    """Log ``batch`` again on this side, each record at its own level, after ``where`` and the
    process it came from."""
    for levelno, text in batch.records:
        if logger.isEnabledFor(levelno):
            logger.log(levelno, "[%s, pid %d] %s", where, batch.pid, text)
    if batch.dropped:
        logger.warning(
            "[%s, pid %d] %d earlier log record(s) dropped: more than %d waited for the driver",
            where,
            batch.pid,
            batch.dropped,
            MAX_RECORDS,
        )
