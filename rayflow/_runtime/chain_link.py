"""The tasks of one chain in one actor (``rayflow/_chaining.py``): how they reach each other,
and how the actor sends what they all have waiting.

``ChainLink`` is the link of every task in the actor: a data payload for a task of the same
actor is handed to its executor's ``receive`` at once, as it is (no pickling: the chained task
gets the objects emitted, as Storm's executors in one worker do); anything else goes on the
streams. ``ChainOutboxes`` stands for the tasks' outboxes where the actor sends or looks at
"the outbox": data flushes go upstream first, so that what the host's flush hands a chained
task goes out with that task's own flush.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .transport import StreamTransport

if TYPE_CHECKING:
    from .._executors import Executor
    from .._outbox import Outbox

__all__ = ["ChainLink", "ChainOutboxes"]

logger = logging.getLogger("rayflow")


class ChainLink:
    """Delivers to the tasks of this actor by a call, to the others through ``transport``."""

    def __init__(self, transport: StreamTransport) -> None:
        self._transport = transport
        self.local: dict[int, Executor] = {}
        """The executors of this actor's tasks, by task id (filled in as they are built)."""

    def send_data(self, dest: int, payload: Any) -> None:
        executor = self.local.get(dest)
        if executor is None:
            self._transport.send_data(dest, payload)
            return
        try:
            executor.receive(payload)
        except Exception:  # as a frame that cannot be executed: its trees time out and replay
            logger.exception("task %d: a batch from task %d could not be executed", dest, payload[0])

    def send_control(self, dest: int, payload: Any) -> None:
        self._transport.send_control(dest, payload)

    def backlog(self, dest: int) -> int:
        """A chained task works off what it is given before the call returns: no backlog."""
        return 0 if dest in self.local else self._transport.backlog(dest)


class ChainOutboxes:
    """The outboxes of one actor's tasks, host first and each chained task after its upstream,
    seen as one: what ``TaskActor`` flushes and measures."""

    def __init__(self, outboxes: list[Outbox]) -> None:
        self._outboxes = outboxes
        self.batch_size = min(o.batch_size for o in outboxes)

    @property
    def urgent(self) -> bool:
        return any(o.urgent for o in self._outboxes)

    def flush(self) -> None:
        for outbox in self._outboxes:
            outbox.flush()

    def flush_data(self) -> None:
        for outbox in self._outboxes:
            outbox.flush_data()

    def flush_control(self) -> None:
        for outbox in self._outboxes:
            outbox.flush_control()

    def control_size(self) -> int:
        return sum(o.control_size() for o in self._outboxes)

    def data_empty(self) -> bool:
        return all(o.data_empty() for o in self._outboxes)

    def is_empty(self) -> bool:
        return all(o.is_empty() for o in self._outboxes)
