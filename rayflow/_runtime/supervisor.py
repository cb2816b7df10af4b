"""``Supervisor``: notices a task's actor dying and starts the task again, as Storm's supervisor
restarts dead workers.

Every task actor holds one call that never returns (``lifeline``); when the actor dies --
killed, its process crashed, its node lost -- that call fails at once with the cause. A thread
in the driver waits on all of them. For a dead task it starts a new actor under the same task
id (the component re-built from the topology, then ``prepare``d, or ``open``ed and activated if
the topology is active), tells it where every other task listens, and tells every other task
to send to its address from now on. Routing does not change, so fields-grouped keys come back to the same task.

What the dead task held is lost: tuples queued in it, its pending trees, an acker's ledger.
Those trees fail by timeout at their spouts and are replayed -- the at-least-once promise needs
nothing more. A task that dies again soon after starting is restarted after a growing pause,
so a component that crashes its process at once cannot spin the machine; ``max_task_restarts``
bounds restarts per task (-1: always).

The same thread carries to the driver what each task logs (``task_logs.py``): it holds a second
call per task, ``next_logs``, that returns only once the task has logged something.

The thread lives in the driver because the driver owns the actors: Ray ties an actor's life
to its owner's, so a supervisor elsewhere could not outlive the driver anyway.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import ray

from .._topology import ACKER_COMPONENT
from .streams import Address
from .task_logs import LogBatch, replay

__all__ = ["Supervisor"]

logger = logging.getLogger("rayflow")

WATCH_SECS = 0.5
"""How often the watch loop looks again for lifelines that appeared (after a restart)."""
CONNECT_TIMEOUT_SECS = 60.0
QUICK_DEATH_SECS = 10.0
"""A task that dies within this long of being started is in a crash loop: back off."""
BACKOFF_SECS = (0.5, 30.0)
STOP_JOIN_SECS = 5.0


def death_cause(exc: BaseException) -> str:
    """Ray's account of an actor's death, shortened to what says why: the line starting
    "The actor is dead because ..." up to the worker's exit detail, with the pid."""
    text = str(exc)
    pid = re.search(r"\bpid: (\d+)", text)
    why = re.search(r"The actor is dead because ([^\n]*?)(?: Some common causes|$)", text, re.MULTILINE)
    reason = why.group(1).strip().rstrip(".") if why else (text.strip().splitlines() or [type(exc).__name__])[-1]
    return f"pid {pid.group(1)}: {reason}"[:300] if pid else reason[:300]


class Supervisor:
    """Keeps one actor alive per task. ``actors`` is shared with the handle and updated in place."""

    def __init__(
        self,
        name: str,
        layout: dict[int, str],
        actors: dict[int, Any],
        nodes: dict[int, str],
        addresses: dict[int, Address],
        make_actor: Callable[[int], Any],
        is_spout: Callable[[int], bool],
        max_restarts: int,
    ) -> None:
        self.name = name
        self._layout = layout
        self.actors = actors
        self.nodes = nodes
        self.addresses = addresses
        self._make_actor = make_actor
        self._is_spout = is_spout
        self._max_restarts = max_restarts
        self.restarts = dict.fromkeys(layout, 0)
        self.dead: dict[int, str] = {}
        """Tasks dead now (restarting, or given up on), with the cause."""
        self.active = False
        self._started_at = dict.fromkeys(layout, time.monotonic())
        self._backoff = dict.fromkeys(layout, BACKOFF_SECS[0])
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._lifelines: dict[Any, int] = {}
        self._log_calls: dict[Any, tuple[int, Any]] = {}
        """Each task's pending ``next_logs`` call (see ``task_logs.py``), with the actor asked."""
        self._thread = threading.Thread(target=self._watch, name=f"rayflow-supervisor-{name}", daemon=True)

    def start(self) -> None:
        for task, actor in self.actors.items():
            self._lifelines[actor.lifeline.remote()] = task
            self._ask_for_logs(task, actor)
        self._thread.start()

    def stop(self) -> None:
        """Restart nothing from now on (the topology is being killed); a restart under way is
        abandoned and its new actor killed."""
        self._stopping.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=STOP_JOIN_SECS)

    def describe(self, task: int) -> str:
        component = self._layout[task]
        kind = "acker" if component == ACKER_COMPONENT else ("spout" if self._is_spout(task) else "bolt")
        return f"task {task} ({kind} {component!r})"

    # -- what the tasks log --------------------------------------------------------------------
    def _ask_for_logs(self, task: int, actor: Any) -> None:
        self._log_calls[actor.next_logs.remote()] = (task, actor)

    def _logs_came(self, ref: Any) -> None:
        """Log what a task logged, and ask it again (unless it is gone or being replaced)."""
        task, actor = self._log_calls.pop(ref)
        try:
            batch = ray.get(ref)
        except Exception:  # the actor died: its lifeline says so, and its successor is asked anew
            return
        self.forward_logs(task, batch)
        if not self._stopping.is_set() and self.actors.get(task) is actor:
            self._ask_for_logs(task, actor)

    def forward_logs(self, task: int, batch: LogBatch) -> None:
        """Log on the driver what ``task`` logged in its actor."""
        replay(logger, f"{self.name} {self.describe(task)}", batch)

    def flush_logs(self) -> None:
        """Log the batches that came and were not read yet (once the watch loop has stopped)."""
        if not self._log_calls or self._thread.is_alive():
            return
        ready, _ = ray.wait(list(self._log_calls), num_returns=len(self._log_calls), timeout=0)
        for ref in ready:
            self._logs_came(ref)

    # -- the watch loop -----------------------------------------------------------------------
    def _watch(self) -> None:
        while not self._stopping.is_set():
            if not ray.is_initialized():  # shut down under us: a Ray call now would start Ray again
                return
            refs = [*self._lifelines, *self._log_calls]
            if not refs:
                self._stopping.wait(WATCH_SECS)
                continue
            try:
                ready, _ = ray.wait(refs, num_returns=1, timeout=WATCH_SECS)
            except Exception:  # Ray is shutting down under us
                if self._stopping.wait(WATCH_SECS):
                    return
                continue
            for ref in ready:
                if ref in self._log_calls:
                    self._logs_came(ref)
                    continue
                task = self._lifelines.pop(ref)
                try:
                    ray.get(ref)
                    cause = "its lifeline returned"  # cannot happen: lifeline never returns
                except Exception as exc:
                    cause = death_cause(exc)
                if not self._stopping.is_set():
                    self._restart(task, cause)

    def _restart(self, task: int, cause: str) -> None:
        what = self.describe(task)
        with self._lock:
            self.dead[task] = cause
        while not self._stopping.is_set():
            if 0 <= self._max_restarts <= self.restarts[task]:
                logger.error(
                    "topology %r: %s died (%s); not restarted: max_task_restarts=%d reached",
                    self.name,
                    what,
                    cause,
                    self._max_restarts,
                )
                return
            if time.monotonic() - self._started_at[task] < QUICK_DEATH_SECS:
                pause = self._backoff[task]
                self._backoff[task] = min(pause * 2, BACKOFF_SECS[1])
                if self._stopping.wait(pause):
                    return
            else:
                self._backoff[task] = BACKOFF_SECS[0]
            logger.warning("topology %r: %s died (%s); restarting it", self.name, what, cause)
            started = time.monotonic()
            self.restarts[task] += 1
            self._started_at[task] = started
            try:
                actor, node, address = self._connect(task)
            except Exception as exc:  # the new actor died too, or could not be placed
                cause = death_cause(exc)
                continue
            if self._stopping.is_set():
                ray.kill(actor)
                return
            with self._lock:
                self.actors[task] = actor
                self.nodes[task] = node
                self.addresses[task] = address
                self.dead.pop(task, None)
            self._lifelines[actor.lifeline.remote()] = task
            self._ask_for_logs(task, actor)
            for other, peer in list(self.actors.items()):
                if other != task:
                    peer.replace.remote(task, address)  # a dead peer ignores it; its own restart connects anew
            if self.active and self._is_spout(task):
                actor.activate.remote()
            logger.warning(
                "topology %r: %s restarted on node %s in %.1f s (restart %d)",
                self.name,
                what,
                node[:8],
                time.monotonic() - started,
                self.restarts[task],
            )
            return

    def _connect(self, task: int) -> tuple[Any, str, Address]:
        """A new actor for ``task``, listening, and told where every current peer listens."""
        actor = self._make_actor(task)
        try:
            node, address = ray.get(actor.listen.remote(), timeout=CONNECT_TIMEOUT_SECS)
            with self._lock:
                addresses = {**self.addresses, task: address}
                nodes = {**self.nodes, task: node}
            ray.get(actor.connect.remote(addresses, nodes), timeout=CONNECT_TIMEOUT_SECS)
        except Exception:
            ray.kill(actor)  # half-started: do not leave it running beside the next attempt
            raise
        return actor, node, address
