"""``TopologyHandle``: the driver's grip on a running topology.

It keeps answering while tasks die and come back: a task that does not answer in time is
reported with its last known counters and ``alive: False``, and ``wait`` keeps waiting.

What watches a topology (the web page, ``rayflow run``'s table) takes a handle and reads it;
the handle knows none of them, so the runtime does not depend on its viewers.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import ray

from .._metrics import TaskMetrics, merge_by_component
from .._topology import ACKER_COMPONENT
from . import ray_calls
from .supervisor import Supervisor

if TYPE_CHECKING:
    from .control import ControlLink

__all__ = ["TopologyHandle", "component_metrics"]

logger = logging.getLogger("rayflow")

SHUTDOWN_TIMEOUT_SECS = 10.0
ANSWER_TIMEOUT_SECS = 2.0
"""How long ``metrics``/``wait`` wait for a task before taking it as dead for this call."""


class TopologyHandle:
    def __init__(
        self,
        name: str,
        supervisor: Supervisor,
        layout: dict[int, str],
        spout_ids: set[str],
        hosts: dict[int, int] | None = None,
    ) -> None:
        self.name = name
        self._supervisor = supervisor
        self._layout = layout
        self._hosts = dict(hosts or {})
        """Each chained task -> the task whose actor runs it (``rayflow/_chaining.py``); the
        supervisor keeps that actor, so what it knows of a chained task is its host's."""
        self._spout_tasks = [t for t, c in layout.items() if c in spout_ids]
        self._last: dict[int, dict[str, Any]] = {}
        self.killed = False
        self._killing = threading.Lock()
        self.control: ControlLink | None = None
        """How processes other than this one find and steer the topology (``control.py``)."""

    def __repr__(self) -> str:
        return f"TopologyHandle({self.name!r}, tasks={len(self._layout)}, killed={self.killed})"

    def _ask(self, tasks: list[int], method: str, *, per_task: bool = False) -> dict[int, Any]:
        """Call ``method`` on each task's actor (``per_task``: with the task's id, which a
        chained task's host needs); the answers of those that answered in time."""
        actors = self._supervisor.actors  # a task Ray is still placing has none yet
        refs = {}
        for task in tasks:
            host = self._hosts.get(task, task)
            if host in actors:
                call = getattr(actors[host], method)
                refs[call.remote(task) if per_task else call.remote()] = task
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=ANSWER_TIMEOUT_SECS)
        answers: dict[int, Any] = {}
        for ref in ready:
            try:
                answers[refs[ref]] = ray.get(ref)
            except Exception as exc:  # died meanwhile: the supervisor restarts it
                logger.debug("task %d did not answer %s: %s", refs[ref], method, exc)
        return answers

    @property
    def active(self) -> bool:
        """Are the spouts being asked for tuples (``activate``), or not (``deactivate``)?"""
        return self._supervisor.active

    def activate(self) -> None:
        """Open the spouts (the first time) and let them emit."""
        self._supervisor.active = True
        self._ask(self._spout_tasks, "activate")

    def deactivate(self) -> None:
        """Stop calling ``next_tuple``; acks and fails of pending trees still arrive."""
        self._supervisor.active = False
        self._ask(self._spout_tasks, "deactivate")

    def kill(self) -> None:
        """Deactivate and close the spouts, clean up the bolts, then stop every actor. A second
        call (the web page's Kill, then the end of ``rayflow run``) returns once the first is done."""
        with self._killing:
            self._kill()

    def _kill(self) -> None:
        if self.killed:
            return
        self.killed = True
        supervisor = self._supervisor
        supervisor.stop()
        if not ray_calls.connected():  # Ray was shut down and took the actors with it; a call would start it again
            return
        actors = dict(supervisor.actors)
        try:
            quiet = [actor.quiesce.remote() for actor in actors.values()]
            ray.wait(quiet, num_returns=len(quiet), timeout=SHUTDOWN_TIMEOUT_SECS)
            shutdowns = {actor.shutdown.remote(): task for task, actor in actors.items()}
            done, _ = ray.wait(list(shutdowns), num_returns=len(shutdowns), timeout=SHUTDOWN_TIMEOUT_SECS)
            supervisor.flush_logs()
            for ref in done:  # what each task logged while it closed
                with contextlib.suppress(Exception):  # a task that died meanwhile has nothing to say
                    supervisor.forward_logs(shutdowns[ref], ray.get(ref))
        except Exception as exc:  # a stuck or dead task must not keep the others alive
            logger.warning("topology %r: not every task shut down cleanly: %s", self.name, exc)
        for actor in actors.values():
            ray.kill(actor)
        if self.control is not None:  # last: the name stays taken until every task is gone
            self.control.close()

    def task_metrics(self) -> dict[int, dict[str, Any]]:
        """Each task's counters, keyed by task id, with ``component``, ``kind``, ``pid`` and
        ``node_id`` of the process it runs in now, ``restarts``, and ``alive`` (``False``: it
        did not answer, and its last known counters are shown).

        Where it runs and what it holds: ``node_ip`` (the address it listens on, its node's),
        ``resources`` (what it takes from its node, in Ray's names: ``{"CPU": 0.01, "GPU": 1}``),
        ``gpu_ids`` (``ray.get_gpu_ids()`` in its process), ``core`` (the core its process is
        pinned to, ``rayflow.worker.cpu.pinning``; else ``None``), and ``state``: ``running``,
        ``not answering``, ``starting`` or ``restarting`` (its actor is being started),
        ``waiting for resources`` (being started, and Ray reports it cannot place it for want
        of them: taken by others, or a node an autoscaler is adding) or ``given up``.

        ``host``: the task whose actor runs it, itself unless it is chained to another
        (``rayflow/_chaining.py``); a chained task shares its host's process, node, restarts
        and state, and its frames in and out are counted on its host."""
        answers = self._ask(list(self._layout), "metrics", per_task=True)
        supervisor = self._supervisor
        states = supervisor.task_states({self._hosts.get(task, task) for task in answers})
        out: dict[int, dict[str, Any]] = {}
        for task, component in self._layout.items():
            snap = answers.get(task)
            host = self._hosts.get(task, task)
            alive = snap is not None and host not in supervisor.dead
            if snap is not None:
                self._last[task] = snap
            else:
                snap = self._last.get(task) or self._never_heard_from(task)
            out[task] = {
                **snap,
                "component": component,
                "alive": alive,
                "restarts": supervisor.restarts[host],
                "node_id": supervisor.nodes.get(host, snap.get("node_id")),
                "node_ip": address[0] if (address := supervisor.addresses.get(host)) else None,
                "resources": supervisor.placement.request(host) if supervisor.placement else {},
                "gpu_ids": snap.get("gpu_ids", []),
                "core": snap.get("core"),
                "state": states[host],
                "host": host,
            }
        return out

    def _never_heard_from(self, task: int) -> dict[str, Any]:
        component = self._layout[task]
        kind = "acker" if component == ACKER_COMPONENT else ("spout" if task in self._spout_tasks else "bolt")
        extra: dict[str, Any] = {"pending": 0}
        if kind == "spout":
            extra.update(exhausted=False, finished=False)
        return TaskMetrics(component, kind).snapshot(pid=None, node_id=None, **extra)

    def metrics(self) -> dict[str, dict[str, Any]]:
        """Counters and latencies per component (``"__acker"`` included), summed over its
        tasks, with ``restarts`` (summed) and ``alive`` (every task answered)."""
        return component_metrics(self.task_metrics())

    def wait(self, timeout: float | None = None, poll_secs: float = 0.05) -> bool:
        """Block until every spout task is exhausted with no tree pending (``True``), or until
        ``timeout`` seconds pass (``False``). A dead or restarting spout task is not finished:
        the wait goes on."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            answers = self._ask(self._spout_tasks, "finished")
            if len(answers) == len(self._spout_tasks) and all(answers.values()):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(poll_secs)


def component_metrics(tasks: dict[int, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``task_metrics()`` summed per component: what ``TopologyHandle.metrics`` returns."""
    merged = merge_by_component({task: m["component"] for task, m in tasks.items()}, tasks)
    for component, summary in merged.items():
        mine = [t for t in tasks.values() if t["component"] == component]
        summary["restarts"] = sum(t["restarts"] for t in mine)
        summary["alive"] = all(t["alive"] for t in mine)
    return merged
