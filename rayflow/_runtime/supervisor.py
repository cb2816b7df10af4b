"""``Supervisor``: notices a task's actor dying and starts the task again, as Storm's supervisor
restarts dead workers.

Every task actor holds one call that never returns (``lifeline``); when the actor dies --
killed, its process crashed, its node lost -- that call fails at once with the cause. A thread
in the driver waits on all of them. For a dead task it starts a new actor under the same task
id (the component re-built from the topology, then ``prepare``d, or ``open``ed and activated if
the topology is active), tells it where every other task listens, and tells every other task
to send to its address from now on. Routing does not change, so fields-grouped keys come back to the same task.

A task is dead when Ray says so (``ActorDiedError``). "Unavailable" (``ActorUnavailableError``:
its process or node does not answer, Ray does not know yet why) is not death: the node may be
partitioned and come back, or dead and not yet noticed -- a new actor started then could be
placed on that very node, which looks idle, and never start. So the lifeline is asked again
every ``REASK_SECS`` until the actor answers or Ray declares it dead, which for a lost node
takes its node-death detection (``docs/cluster.md``).

Restarts run side by side, without blocking the thread: a restart is a small state machine
(``Restart``: waiting out its pause, then the new actor's ``listen`` call, then its ``connect``
call) advanced whenever one of those calls returns. Each attempt has a bound
(``ATTEMPT_SECS``): an actor that cannot be placed or started in time is killed and the attempt
made again, so one task that cannot be placed -- every task of a lost node dies at once --
never holds up the others. A task started while another restart was under way may have been
told a peer's old address: when it joins, it is told every address that changed meanwhile.

A task Ray cannot place for want of resources (taken, or a node an autoscaler is still
adding) is not stuck: while Ray reports its request as pending demand (``Placement.waiting``)
its attempt's bound is extended, not spent, so the actor waits in Ray's queue instead of being
killed and asked for again. Tasks that were still waiting so when the topology started are
handed over the same way (``adopt``): their start is completed like a restart's.

What the dead task held is lost: tuples queued in it, its pending trees, an acker's ledger.
Those trees fail by timeout at their spouts and are replayed -- the at-least-once promise needs
nothing more. A task that dies again soon after starting is restarted after a growing pause,
so a component that crashes its process at once cannot spin the machine; ``max_task_restarts``
bounds restarts per task (-1: always). A task given up on is given up on by its peers too
(``give_up``): they stop sending to it and redialing it.

What the peers are told (``replace``, ``give_up``) must reach them: a peer that misses a
``replace`` sends to the dead actor's address for good, and every tree through that task times
out and is replayed, forever. So each notice is watched like the other calls, and one that a
peer could not take because it was unavailable at that moment (partitioned, say) is sent again
every ``REASK_SECS`` while that peer's actor is still the task's, with the address current then.
A peer that died needs none: its successor is given every address at ``connect``.

The same thread carries to the driver what each task logs (``task_logs.py``): it holds a second
call per task, ``next_logs``, that returns only once the task has logged something.

The thread never starts or joins Ray by itself: its Ray calls are ``ray_calls``', which fail
once Ray is shut down, and the thread then ends. ``stop`` (the topology killed, the cluster
shut down) ends it first, and kills the actors of restarts under way.

The thread lives in the driver because the driver owns the actors: Ray ties an actor's life
to its owner's, so a supervisor elsewhere could not outlive the driver anyway.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ray.exceptions import ActorUnavailableError

from .._topology import ACKER_COMPONENT
from . import ray_calls
from .placement import Placement
from .streams import Address
from .task_logs import LogBatch, replay

__all__ = ["Supervisor"]

logger = logging.getLogger("rayflow")

WATCH_SECS = 0.5
"""The longest the watch loop waits before it looks again (stop requested, attempts overdue)."""
ATTEMPT_SECS = 30.0
"""The bound of one restart attempt: placing the new actor, starting its process and its
``listen`` and ``connect`` calls. Past it the actor is killed and the attempt made again."""
REASK_SECS = 0.5
"""How often the lifeline of an actor Ray calls unavailable is asked again."""
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


@dataclass
class Restart:
    """One dead task being started again. ``actor`` and ``call`` are the current attempt's new
    actor and its pending ``listen`` or ``connect`` call (``None``: waiting until ``due``)."""

    task: int
    cause: str
    due: float
    actor: Any = None
    call: Any = None
    phase: str = "waiting"
    """``waiting``, ``listening`` or ``connecting``."""
    deadline: float = 0.0
    started: float = 0.0
    node: str = ""
    address: Address | None = None
    told: dict[int, Address] = field(default_factory=dict)
    """The peers' addresses the new actor was given at ``connect``."""
    first: bool = False
    """The task's first start (``adopt``), not a restart."""
    waited: bool = False
    """Ray reported this attempt waiting for resources (said once in the log)."""


@dataclass
class Notice:
    """What a peer is told about ``task``: ``replace`` (send to its new address) or ``give_up``."""

    peer: int
    actor: Any
    """The peer's actor when told: once the peer has another, the notice is moot."""
    kind: str
    task: int
    due: float = 0.0
    """When to send it again (it met the peer unavailable)."""


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
        placement: Placement | None = None,
        chained: dict[int, str] | None = None,
    ) -> None:
        self.name = name
        self._layout = layout
        self.actors = actors
        self.nodes = nodes
        self.addresses = addresses
        self._make_actor = make_actor
        self._is_spout = is_spout
        self._max_restarts = max_restarts
        self.placement = placement
        """What each task asks of the cluster, and which wait for it (``None``: not known)."""
        self._chained = dict(chained or {})
        """Each task that runs others chained to it -> what they are, for the log lines: they die
        and come back with it (``rayflow/_chaining.py``)."""
        self.restarts = dict.fromkeys(layout, 0)
        self.dead: dict[int, str] = {}
        """Tasks dead now (restarting, or given up on), with the cause."""
        self.given_up: set[int] = set()
        self.unstarted: set[int] = set()
        """Tasks never started yet: Ray is still placing them (``adopt``)."""
        self.active = False
        self._started_at = dict.fromkeys(layout, time.monotonic())
        self._backoff = dict.fromkeys(layout, BACKOFF_SECS[0])
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._lifelines: dict[Any, int] = {}
        self._log_calls: dict[Any, tuple[int, Any]] = {}
        """Each task's pending ``next_logs`` call (see ``task_logs.py``), with the actor asked."""
        self._restarting: dict[int, Restart] = {}
        self._restart_calls: dict[Any, int] = {}
        """The pending ``listen``/``connect`` call of each restart attempt, to its task."""
        self._unavailable: dict[int, float] = {}
        """Tasks whose actor Ray called unavailable, with when to ask their lifeline again."""
        self._notices: dict[Any, Notice] = {}
        """Each ``replace``/``give_up`` call sent to a peer and not answered yet."""
        self._notices_due: list[Notice] = []
        """Notices a peer was unavailable for, to send again at their ``due``."""
        self._thread = threading.Thread(target=self._watch, name=f"rayflow-supervisor-{name}", daemon=True)

    def start(self) -> None:
        for task, actor in self.actors.items():
            self._lifelines[ray_calls.call(actor.lifeline)] = task
            self._ask_for_logs(task, actor)
        self._thread.start()

    def adopt(self, task: int, actor: Any, listen: Any) -> None:
        """Complete the start of ``task``, whose ``actor`` Ray is still placing for want of
        resources when the topology starts (``listen``: its pending call), as a restart's:
        connect it once it listens, then point its peers at it. Call before ``start``."""
        now = time.monotonic()
        cause = "not started yet: waiting for resources"
        self._restarting[task] = Restart(
            task, cause, now, actor, listen, "listening", now + ATTEMPT_SECS, now, first=True, waited=True
        )
        self._restart_calls[listen] = task
        with self._lock:
            self.dead[task] = cause
            self.unstarted.add(task)

    def task_states(self, answered: set[int]) -> dict[int, str]:
        """Each task's state for ``task_metrics`` (``answered``: the tasks that answered just now)."""
        with self._lock:
            given_up, unstarted, dead = set(self.given_up), set(self.unstarted), set(self.dead)
        starting = dead - given_up
        waiting = self.placement.waiting(starting) if self.placement is not None and starting else set()
        states = {}
        for task in self._layout:
            if task in given_up:
                states[task] = "given up"
            elif task in waiting:
                states[task] = "waiting for resources"
            elif task in dead:
                states[task] = "starting" if task in unstarted else "restarting"
            else:
                states[task] = "running" if task in answered else "not answering"
        return states

    def stop(self) -> None:
        """Restart nothing from now on (the topology is being killed, or Ray shut down); the
        restarts under way are abandoned and their new actors killed. Call it before
        ``ray.shutdown``."""
        self._stopping.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=STOP_JOIN_SECS)

    def describe(self, task: int) -> str:
        component = self._layout[task]
        kind = "acker" if component == ACKER_COMPONENT else ("spout" if self._is_spout(task) else "bolt")
        chained = f", with {self._chained[task]} chained to it" if task in self._chained else ""
        return f"task {task} ({kind} {component!r}{chained})"

    # -- what the tasks log --------------------------------------------------------------------
    def _ask_for_logs(self, task: int, actor: Any) -> None:
        self._log_calls[ray_calls.call(actor.next_logs)] = (task, actor)

    def _logs_came(self, ref: Any) -> None:
        """Log what a task logged, and ask it again (unless it is gone or being replaced)."""
        task, actor = self._log_calls.pop(ref)
        try:
            batch = ray_calls.get(ref)
        except ray_calls.RayGone:
            raise
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
        if not self._log_calls or self._thread.is_alive() or not ray_calls.connected():
            return
        with contextlib.suppress(ray_calls.RayGone):
            ready, _ = ray_calls.wait(list(self._log_calls), num_returns=len(self._log_calls), timeout=0)
            for ref in ready:
                self._logs_came(ref)

    # -- the watch loop -----------------------------------------------------------------------
    def _watch(self) -> None:
        try:
            while not self._stopping.is_set():
                self._watch_once()
        except ray_calls.RayGone:  # shut down under us: any further call would fail the same way
            self._stopping.set()
        except Exception:
            logger.exception("topology %r: the supervisor stopped; dead tasks are not restarted", self.name)
            self._stopping.set()
        finally:
            self._abandon_restarts()

    def _watch_once(self) -> None:
        refs = [*self._lifelines, *self._log_calls, *self._restart_calls, *self._notices]
        dues = [r.due for r in self._waiting()] + list(self._unavailable.values()) + [n.due for n in self._notices_due]
        timeout = max(0.0, min([WATCH_SECS] + [due - time.monotonic() for due in dues]))
        ready: list[Any] = []
        if refs:
            ready, rest = ray_calls.wait(refs, num_returns=1, timeout=timeout)
            if ready and rest:
                ready += ray_calls.wait(rest, num_returns=len(rest), timeout=0)[0]
        else:
            self._stopping.wait(timeout)
        for ref in ready:
            if self._stopping.is_set():
                return
            if ref in self._log_calls:
                self._logs_came(ref)
            elif ref in self._lifelines:
                self._died(self._lifelines.pop(ref), ref)
            elif ref in self._notices:
                self._answered(self._notices.pop(ref), ref)
            else:
                self._advance(self._restart_calls.pop(ref), ref)
        now = time.monotonic()
        for task, due in list(self._unavailable.items()):
            if due <= now:
                del self._unavailable[task]
                self._ask_again(task)
        if self._notices_due:
            due_now = [n for n in self._notices_due if n.due <= now]
            self._notices_due = [n for n in self._notices_due if n.due > now]
            for notice in due_now:
                self._send(notice)
        for restart in list(self._restarting.values()):
            if self._stopping.is_set():
                return
            if restart.phase == "waiting" and restart.due <= now:
                self._attempt(restart)
            elif restart.phase != "waiting" and restart.deadline <= now:
                self._overdue(restart, now)

    def _overdue(self, restart: Restart, now: float) -> None:
        """An attempt took longer than its bound: try again, unless Ray says the actor waits
        for resources -- a fresh actor would only queue behind it."""
        placement = self.placement
        if restart.phase == "listening" and placement is not None and placement.waiting([restart.task]):
            restart.deadline = now + ATTEMPT_SECS
            if not restart.waited:
                restart.waited = True
                logger.warning(
                    "topology %r: %s waits for resources (%s): Ray places it when a node has them",
                    self.name,
                    self.describe(restart.task),
                    ", ".join(f"{k} {v:g}" for k, v in sorted(placement.request(restart.task).items())),
                )
            return
        self._failed(restart, f"not started within {ATTEMPT_SECS:.0f} s ({restart.phase})")

    def _waiting(self) -> list[Restart]:
        return [r for r in self._restarting.values() if r.phase == "waiting"]

    def _died(self, task: int, lifeline: Any) -> None:
        try:
            ray_calls.get(lifeline)
            cause = "its lifeline returned"  # cannot happen: lifeline never returns
        except ray_calls.RayGone:
            raise
        except ActorUnavailableError as exc:
            if task not in self._unavailable:
                logger.debug("topology %r: %s does not answer: %s", self.name, self.describe(task), exc)
            self._unavailable[task] = time.monotonic() + REASK_SECS
            return
        except Exception as exc:
            cause = death_cause(exc)
        with self._lock:
            self.dead[task] = cause
        logger.warning("topology %r: %s died (%s); restarting it", self.name, self.describe(task), cause)
        self._schedule(Restart(task, cause, due=time.monotonic()))

    def _ask_again(self, task: int) -> None:
        """Hold the lifeline of an actor that did not answer again (and its logs, if none is asked)."""
        actor = self.actors[task]
        self._lifelines[ray_calls.call(actor.lifeline)] = task
        if not any(t == task for t, _ in self._log_calls.values()):
            self._ask_for_logs(task, actor)

    def _schedule(self, restart: Restart) -> None:
        """Make ``restart``'s next attempt, after a pause if the task died soon after it started
        (or give up once ``max_task_restarts`` is reached)."""
        task = restart.task
        if 0 <= self._max_restarts <= self.restarts[task]:
            self._restarting.pop(task, None)
            self._give_up(task, restart.cause)
            return
        now = time.monotonic()
        if now - self._started_at[task] < QUICK_DEATH_SECS:
            pause = self._backoff[task]
            self._backoff[task] = min(pause * 2, BACKOFF_SECS[1])
        else:
            pause, self._backoff[task] = 0.0, BACKOFF_SECS[0]
        restart.phase, restart.actor, restart.call = "waiting", None, None
        restart.due = max(restart.due, now + pause)
        self._restarting[task] = restart

    def _attempt(self, restart: Restart) -> None:
        task = restart.task
        now = time.monotonic()
        self.restarts[task] += 1
        self._started_at[task] = now
        restart.started, restart.deadline = now, now + ATTEMPT_SECS
        try:
            restart.actor = self._make_actor(task)
            restart.call = ray_calls.call(restart.actor.listen)
        except ray_calls.RayGone:
            raise
        except Exception as exc:  # could not even be submitted (e.g. a resource no node can have)
            self._failed(restart, str(exc)[:300])
            return
        restart.phase = "listening"
        self._restart_calls[restart.call] = task

    def _advance(self, task: int, ref: Any) -> None:
        """The pending call of ``task``'s attempt returned: on to the next step."""
        restart = self._restarting.get(task)
        if restart is None or restart.call is not ref:
            return
        try:
            answer = ray_calls.get(ref)
        except ray_calls.RayGone:
            raise
        except Exception as exc:  # the new actor died too, or could not be placed
            self._failed(restart, death_cause(exc))
            return
        if restart.phase == "listening":
            restart.node, restart.address = answer
            with self._lock:
                restart.told = {**self.addresses, task: answer[1]}
                nodes = {**self.nodes, task: answer[0]}
            restart.call = ray_calls.call(restart.actor.connect, restart.told, nodes, True)  # restarted
            restart.phase = "connecting"
            self._restart_calls[restart.call] = task
        else:
            self._joined(restart)

    def _failed(self, restart: Restart, cause: str) -> None:
        """This attempt did not work out: kill what it started, and try again."""
        logger.warning(
            "topology %r: restarting %s failed (%s); trying again", self.name, self.describe(restart.task), cause
        )
        if restart.call is not None:
            self._restart_calls.pop(restart.call, None)
        if restart.actor is not None:
            ray_calls.kill(restart.actor)  # half-started: do not leave it running beside the next attempt
        restart.cause = cause
        with self._lock:
            self.dead[restart.task] = cause
        self._schedule(restart)

    def _joined(self, restart: Restart) -> None:
        """The new actor listens and is connected: it is the task from now on."""
        task, actor = restart.task, restart.actor
        assert restart.address is not None
        with self._lock:
            self.actors[task] = actor
            self.nodes[task] = restart.node
            self.addresses[task] = restart.address
            self.dead.pop(task, None)
            self.unstarted.discard(task)
            moved = {t: a for t, a in self.addresses.items() if t != task and restart.told.get(t) != a}
            peers = [(t, p) for t, p in self.actors.items() if t != task and t not in self.dead]
        del self._restarting[task]
        self._lifelines[ray_calls.call(actor.lifeline)] = task
        self._ask_for_logs(task, actor)
        for other in moved:  # restarted while this one was starting
            self._send(Notice(task, actor, "replace", other))
        for peer, peer_actor in peers:  # a peer restarting now is told when it joins (``moved``)
            self._send(Notice(peer, peer_actor, "replace", task))
        for other in self.given_up:
            self._send(Notice(task, actor, "give_up", other))
        if self.active and self._is_spout(task):
            ray_calls.call(actor.activate)
        if restart.first and not self.restarts[task]:
            logger.warning(
                "topology %r: %s started on node %s, %.1f s after the rest of the topology",
                self.name,
                self.describe(task),
                restart.node[:8],
                time.monotonic() - restart.started,
            )
            return
        logger.warning(
            "topology %r: %s restarted on node %s in %.1f s (restart %d)",
            self.name,
            self.describe(task),
            restart.node[:8],
            time.monotonic() - restart.started,
            self.restarts[task],
        )

    def _give_up(self, task: int, cause: str) -> None:
        """``max_task_restarts`` reached: the task stays dead, and its peers stop sending to it."""
        logger.error(
            "topology %r: %s died (%s); not restarted: max_task_restarts=%d reached",
            self.name,
            self.describe(task),
            cause,
            self._max_restarts,
        )
        with self._lock:
            self.given_up.add(task)
            peers = [(t, p) for t, p in self.actors.items() if t not in self.dead and t != task]
        for peer, peer_actor in peers:
            self._send(Notice(peer, peer_actor, "give_up", task))

    # -- notices to peers ---------------------------------------------------------------------
    def _send(self, notice: Notice) -> None:
        """Tell ``notice.peer`` about ``notice.task`` (a ``replace`` with the task's address now),
        unless it is moot: the peer has another actor, or the task was given up on since."""
        if (
            notice.peer not in self.actors
            or self.actors[notice.peer] is not notice.actor
            or notice.peer in self.given_up
        ):
            return
        if notice.kind == "replace":
            if notice.task in self.given_up:  # a late replace must not undo a give_up
                return
            ref = ray_calls.call(notice.actor.replace, notice.task, self.addresses[notice.task])
        else:
            ref = ray_calls.call(notice.actor.give_up, notice.task)
        self._notices[ref] = notice

    def _answered(self, notice: Notice, ref: Any) -> None:
        try:
            ray_calls.get(ref)
        except ray_calls.RayGone:
            raise
        except ActorUnavailableError:
            notice.due = time.monotonic() + REASK_SECS
            self._notices_due.append(notice)
        except Exception:  # the peer died: its successor is given every address at ``connect``
            pass

    def _abandon_restarts(self) -> None:
        """The loop ended: kill the new actors of restarts under way (if Ray is still there)."""
        for restart in self._restarting.values():
            if restart.actor is not None:
                with contextlib.suppress(Exception):
                    ray_calls.kill(restart.actor)
        self._restarting.clear()
        self._restart_calls.clear()
        self._notices.clear()
        self._notices_due.clear()
