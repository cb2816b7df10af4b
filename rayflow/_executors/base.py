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

Every payload goes out through a ``Link``: the driver decides what a send is (a frame on a stream, a
queue in a test).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from .._config import Config
from .._context import TopologyContext
from .._groupings import ShuffleGrouping
from .._metrics import TaskMetrics
from .._outbox import Outbox
from .._router import Route, Router
from .._topology import ACKER_COMPONENT, Topology

__all__ = ["Emitter", "Executor", "Link", "LoadView", "Observer", "Timer"]

LOAD_REFRESH_SECS = 0.1
"""How often a task re-weighs its shuffle groupings from its link's backlog view."""
DISTINCT_ERRORS = 100
"""A task logs the traceback of this many distinct errors in full; past them, any new error is
counted with the rest (``Executor.report_error``)."""

logger = logging.getLogger("rayflow")

Timer = tuple[float, Callable[[], None]]
"""A periodic action: call ``action`` every ``period`` seconds."""


class Link(Protocol):
    """Where an executor's payloads go. Payloads are opaque to the link: it delivers each, in
    order per destination, to ``receive`` (data) or ``receive_control`` (acker traffic) of the
    executor of task ``dest``."""

    def send_data(self, dest: int, payload: Any) -> None: ...

    def send_control(self, dest: int, payload: Any) -> None: ...


class LoadView(Protocol):
    """Optionally, a link also says how far behind each destination is; shuffle groupings then
    prefer the tasks that keep up (see ``ShuffleGrouping.update_load``)."""

    def backlog(self, dest: int) -> int:
        """Tuples sent to ``dest`` (data payloads: ``len(payload[1])`` each) not yet processed."""
        ...


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
        self.acker_tasks = context.get_component_tasks(ACKER_COMPONENT)
        self.outbox = Outbox(
            self.task_id, self.conf.batch_size, link.send_data, link.send_control, self.acker_tasks, self._unsendable
        )
        self.metrics = TaskMetrics(self.component_id, self.kind)
        self.debug = self.conf.debug
        self._observer: Observer | None = None
        self._watched = self.debug
        """Does an emit owe the observer or the debug log anything? (One test on the hot path.)"""
        self.flush_after_receive = True
        """Does ``receive`` send the data batches it filled partly? A driver that sends them
        itself (coalescing the output of queued input batches) sets this to ``False``."""
        self._link = link
        self.restarted = False
        """Is this task a later start of a task that ran before (or started after the rest of
        its topology)? Set by the runtime before ``start``. Its peers may have sent to the old
        task until they heard of this one, so what they sent meanwhile is lost."""
        self._errors_seen: dict[tuple[str, str, int], int] = {}
        """How often each distinct error happened: (type, file, line where it was raised)."""

    @property
    def observer(self) -> Observer | None:
        """Who watches this task (the in-process runner's recorder), if anyone."""
        return self._observer

    @observer.setter
    def observer(self, observer: Observer | None) -> None:
        self._observer = observer
        self._watched = observer is not None or self.debug
        self._watch_changed()

    def _watch_changed(self) -> None:
        """An observer came or went: an executor that built its emits knowing whether anyone
        watches builds them again."""

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

    def peer_restarted(self, task_id: int) -> None:
        """Task ``task_id`` was started again after its actor died (whatever it held is lost)."""

    @property
    def finished(self) -> bool:
        return True

    # -- shared helpers -------------------------------------------------------------------------
    def _unsendable(self, exc: BaseException, values: object) -> None:
        self.report_error(exc, f"emitted values that cannot be pickled (the tuple's trees fail): {values!r:.200}")

    def report_error(self, exc: BaseException, where: str) -> None:
        """Count and log a user error; the task carries on.

        The log stays readable (and small) when the same error happens on every tuple: the
        first time an error is seen -- the same type raised at the same line -- it is logged
        with its full traceback; its repeats are counted, and logged (without the traceback)
        the 10th, 100th, 1,000th ... time, with the count so far."""
        self.metrics.errors += 1
        self.metrics.last_error = f"{where}: {type(exc).__name__}: {exc}"
        key = _error_key(exc)
        seen = self._errors_seen
        if key not in seen and len(seen) >= DISTINCT_ERRORS:
            key = ("", "", 0)  # one count for every error past the distinct ones
        times = seen[key] = seen.get(key, 0) + 1
        if times == 1:
            logger.error(
                "component %r task %d: %s: %s: %s",
                self.component_id,
                self.task_id,
                where,
                type(exc).__name__,
                exc,
                exc_info=exc,
            )
        elif times >= 10 and str(times).rstrip("0") == "1":  # 10, 100, 1000, ...
            logger.error(
                "component %r task %d: %s: %s: %s (the same error %s times so far; "
                "the first was logged with its traceback)",
                self.component_id,
                self.task_id,
                where,
                type(exc).__name__,
                exc,
                f"{times:,}",
            )

    def snapshot(self) -> dict[str, Any]:
        self.metrics.transferred = self.outbox.transferred
        return self.metrics.snapshot()


def _error_key(exc: BaseException) -> tuple[str, str, int]:
    """What makes two errors the same: their type and the line that raised them."""
    tb = exc.__traceback__
    if tb is None:
        return type(exc).__qualname__, "", 0
    while tb.tb_next is not None:
        tb = tb.tb_next
    return type(exc).__qualname__, tb.tb_frame.f_code.co_filename, tb.tb_lineno


class Emitter(Executor):
    """An executor whose component emits (spouts and bolts): its router, and what every emit
    does before the tuple's tree is decided."""

    def __init__(self, topology: Topology, conf: Config, context: TopologyContext, link: Link) -> None:
        super().__init__(topology, conf, context, link)
        self.router = Router(topology, context)
        self.routes = self.router.routes
        self._batches = {task: self.outbox.batch(task) for r in self.routes.values() for task in r.tasks}
        self._shuffles = [g for g in self.router.groupings() if isinstance(g, ShuffleGrouping) and len(g.targets) > 1]

    def timers(self) -> list[Timer]:
        if self._shuffles and hasattr(self._link, "backlog"):
            return [(LOAD_REFRESH_SECS, self._update_load)]
        return []

    def _update_load(self) -> None:
        backlog = self._link.backlog  # type: ignore[attr-defined]
        for grouping in self._shuffles:
            grouping.update_load(backlog)

    def _checked_targets(self, stream: str, values: list[Any], direct_task: int | None) -> tuple[Route, list[int]]:
        """The route and targets of an emit off the fast path: direct, or about to raise."""
        if direct_task is None:
            targets = self.router.targets(stream, values)
        else:
            targets = self.router.direct_target(direct_task, stream, values)
        return self.routes[stream], targets

    def _emitted(self, stream: str, values: list[Any], targets: list[int], msg_id: Any = None) -> None:
        """What an emit owes the observer and the debug log (neither is on the hot path)."""
        if self.observer is not None:
            self.observer.emitted(self.component_id, stream, values)
        if self.debug:
            logger.info(
                "%s:%d emit %s %r msg_id=%r -> %s", self.component_id, self.task_id, stream, values, msg_id, targets
            )
