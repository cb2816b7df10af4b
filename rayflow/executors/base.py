"""What every executor has: its place in the topology, an outbox, metrics, error reporting, and
one lifecycle.

The lifecycle is the same for every kind of task, so whatever drives an executor -- the Ray
actor, or the in-process runner of ``rayflow.testing`` -- needs no switch on its type. A method
that does not apply to a kind is a no-op there:

    start()          once, after construction: a bolt is prepared (a spout opens on activate)
    activate()       spouts: open the first time, then let ``next_tuple`` be called
    deactivate()     spouts: stop calling ``next_tuple``; acks and fails still arrive
    run_burst(n)     spouts: call ``next_tuple`` up to n times (``wants_next_tuple`` says if worth it)
    receive(p)       a data payload from another task (bolts)
    receive_control(p)  acker traffic: inits/acks/fails to an acker, results to a spout
    timers()         (period, action) pairs the driver calls every period: timeouts, ticks
    close()          spouts close, bolts clean up; what waits in the outbox is sent
    finished         a spout that is exhausted with nothing pending (others: always True)

Every payload goes out through a ``Link``: the driver decides what a send is (a Ray call, a
queue in a test).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from ..config import Config
from ..context import TopologyContext
from ..metrics import TaskMetrics
from ..outbox import Outbox
from ..topology import ACKER_COMPONENT, Topology

__all__ = ["Executor", "Link", "Observer", "Timer"]

logger = logging.getLogger("rayflow")

Timer = tuple[float, Callable[[], None]]
"""A periodic action: call ``action`` every ``period`` seconds."""


class Link(Protocol):
    """Where an executor's payloads go. Payloads are opaque to the link: it delivers each, in
    order per destination, to ``receive`` (data) or ``receive_control`` (acker traffic) of the
    executor of task ``dest``."""

    def send_data(self, dest: int, payload: Any) -> None: ...

    def send_control(self, dest: int, payload: Any) -> None: ...


class Observer(Protocol):
    """Watches what a task does, for the in-process runner (``None`` on Ray: nothing watches)."""

    def emitted(self, component: str, stream: str, values: list[Any]) -> None: ...

    def acked(self, component: str, msg_id: Any) -> None: ...

    def failed(self, component: str, msg_id: Any) -> None: ...


class Executor:
    kind = ""
    is_source = False
    """True for executors whose ``run_burst`` produces tuples (spouts): the driver loops on it."""

    def __init__(self, topology: Topology, conf: Config, context: TopologyContext, link: Link) -> None:
        self.topology = topology
        self.context = context
        self.task_id = context.this_task_id
        self.component_id = context.this_component_id
        spec = topology.components.get(self.component_id)
        self.conf = conf.merged(spec.config if spec else None)
        self.outbox = Outbox(self.task_id, self.conf.batch_size, link.send_data, link.send_control)
        self.metrics = TaskMetrics(self.component_id, self.kind)
        self.acker_tasks = context.get_component_tasks(ACKER_COMPONENT)
        self.debug = self.conf.debug
        self.observer: Observer | None = None

    # -- lifecycle (no-ops unless a kind needs them) --------------------------------------------
    def start(self) -> None:
        pass

    def activate(self) -> None:
        pass

    def deactivate(self) -> None:
        pass

    def close(self) -> None:
        self.outbox.flush()

    def timers(self) -> list[Timer]:
        return []

    def wants_next_tuple(self) -> bool:
        return False

    def run_burst(self, max_calls: int) -> int:
        return 0

    def receive(self, payload: Any) -> None:
        raise TypeError(f"task {self.task_id} ({self.kind} {self.component_id!r}) takes no data tuples")

    def receive_control(self, payload: Any) -> None:
        raise TypeError(f"task {self.task_id} ({self.kind} {self.component_id!r}) takes no acker traffic")

    @property
    def finished(self) -> bool:
        return True

    # -- shared helpers -------------------------------------------------------------------------
    def acker_for(self, root: int) -> int:
        """Trees are sharded over the ackers by root id."""
        ackers = self.acker_tasks
        return ackers[root % len(ackers)]

    def report_error(self, exc: BaseException, where: str) -> None:
        """Count and log a user error; the task carries on."""
        self.metrics.errors += 1
        self.metrics.last_error = f"{where}: {type(exc).__name__}: {exc}"
        logger.error(
            "component %r task %d: %s: %s: %s",
            self.component_id,
            self.task_id,
            where,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )

    def snapshot(self) -> dict[str, Any]:
        return self.metrics.snapshot()
