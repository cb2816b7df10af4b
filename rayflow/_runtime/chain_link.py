"""The tasks of one chain in one actor (``rayflow/_chaining.py``): how they reach each other,
and how the actor sends what they all have waiting.

``ChainLink`` is the link of every task in the actor: a data payload for a task of the same
actor is queued for it as it is (no pickling: the chained task gets the objects emitted, as
Storm's executors in one worker do), and the actor executes it on its next turn; anything
else goes on the streams. Queued, not called: a chained bolt that takes long must not hold up
its host between batches (a broker spout's heartbeats run on the same event loop, and so do
the actor's answers). ``ChainOutboxes`` stands for the tasks' outboxes where the actor sends
or looks at "the outbox": upstream first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .transport import StreamTransport

if TYPE_CHECKING:
    from .._outbox import Outbox

__all__ = ["ChainLink", "ChainOutboxes"]


class ChainLink:
    """Queues payloads for the tasks of this actor (``local``), sends the rest through
    ``transport``; ``queued`` is told of each payload queued."""

    def __init__(self, transport: StreamTransport, local: set[int], queued: Callable[[], None]) -> None:
        self._transport = transport
        self._local = local
        self._queued = queued
        self.inbox: deque[tuple[int, Any]] = deque()
        """Payloads for the chained tasks, (task, payload), in the order they were sent."""
        self.tuples = 0
        """Tuples in ``inbox``."""

    def send_data(self, dest: int, payload: Any) -> None:
        if dest not in self._local:
            self._transport.send_data(dest, payload)
            return
        self.inbox.append((dest, payload))
        self.tuples += len(payload[1])
        self._queued()

    def take(self) -> tuple[int, Any]:
        """The oldest payload queued, and its task."""
        dest, payload = self.inbox.popleft()
        self.tuples -= len(payload[1])
        return dest, payload

    def send_control(self, dest: int, payload: Any) -> None:
        self._transport.send_control(dest, payload)

    def backlog(self, dest: int) -> int:
        if dest in self._local:
            return sum(len(p[1]) for d, p in self.inbox if d == dest)
        return self._transport.backlog(dest)


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
