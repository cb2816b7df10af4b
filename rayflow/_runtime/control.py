"""``TopologyControl``: how a running topology is found and steered from outside the process that
submitted it, as Storm's Nimbus lets ``storm list``, ``activate``, ``deactivate`` and ``kill``
act on any topology of the cluster.

Who owns what. The task actors belong to the driver that submitted the topology (Ray ties an
actor's life to its owner's, see ``supervisor.py``), and only that driver can restart them or
stop them cleanly. So the control is a mailbox, not a remote hand:

* ``submit_topology`` creates one small actor per topology (``reserve``), named after the
  topology in the ``rayflow`` namespace -- ``rayflow:<name>`` below -- and owned by the
  submitting driver. Ray refuses a second actor of one name, so a second topology of that name
  on one cluster is refused (``TopologyNameTaken``) before any of its tasks starts, as Storm
  refuses it. The actor dies with its driver: every name found belongs to a running driver.
* The driver holds a thread (``ControlLink``) that long-polls the actor for requests
  (``status``, ``activate``, ``deactivate``, ``kill``), carries each out on its
  ``TopologyHandle`` and answers. A request whose asker stopped waiting is dropped unexecuted.
* Any other process connected to the cluster (the ``rayflow`` commands) finds the actors
  (``running_topologies``, ``find``), reads what each topology is (``describe``: name, tasks,
  start time, Ray job, message timeout) and asks it to act (``ask``), for a bounded time.

A kill asked from outside ends the topology the way its driver would end it itself. A driver
whose SIGTERM handler is rayflow's own (``rayflow run``, also when ``rayflow submit`` runs it as
a Ray job) is sent SIGTERM: it stops as after Ctrl-C -- deactivate, drain, kill, summary, exit
code. Any other driver (a script, a notebook) has its handle killed in place and keeps running,
with ``handle.killed`` true. Either way the name is released last (``ControlLink.close``, from
``TopologyHandle.kill``), once every task actor is gone, so a new topology of the same name
never runs beside the old one's tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import ray

from .._errors import RayflowError
from . import ray_calls

__all__ = [
    "ACTIONS",
    "NAMESPACE",
    "ControlLink",
    "Steered",
    "TopologyControl",
    "TopologyNameTaken",
    "ask",
    "find",
    "name_taken",
    "release",
    "reserve",
    "running_topologies",
]

logger = logging.getLogger("rayflow")

NAMESPACE = "rayflow"
"""The Ray namespace of the control actors: ``ray list actors`` shows them as ``TopologyControl``."""
ACTIONS = ("status", "activate", "deactivate", "kill")
POLL_SECS = 5.0
"""How long one long poll of the driver waits for a request before it asks again."""
CLOSE_JOIN_SECS = 5.0
RELEASE_SECS = 5.0
"""How long ``release`` waits for Ray to free the name of the actor it killed."""


class TopologyNameTaken(RayflowError):
    """A topology of this name already runs on the cluster (Storm's ``AlreadyAliveException``)."""


class TopologyControl:
    """The mailbox of one running topology (a Ray actor, named after it). ``describe`` answers
    from what the driver said at submit; ``ask`` queues a request for the driver and waits for
    its answer; ``next_request`` and ``answer`` are the driver's side."""

    def __init__(self, info: dict[str, Any]) -> None:
        self._info = info
        self._requests: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._next_id = 0

    def describe(self) -> dict[str, Any]:
        return dict(self._info)

    async def ask(self, action: str, timeout: float) -> dict[str, Any]:
        """The driver's answer to ``action``, or ``{"error": ...}`` when it did not answer in time."""
        ident, self._next_id = self._next_id, self._next_id + 1
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[ident] = answer
        await self._requests.put((ident, action))
        try:
            return await asyncio.wait_for(answer, timeout)
        except asyncio.TimeoutError:
            return {"error": f"its driver did not answer {action!r} within {timeout:g}s (is it busy or stuck?)"}
        finally:
            self._waiting.pop(ident, None)

    async def next_request(self, wait: float) -> tuple[int, str] | None:
        """The oldest request someone still waits for, or ``None`` after ``wait`` seconds."""
        deadline = time.monotonic() + wait
        while (left := deadline - time.monotonic()) > 0:
            try:
                ident, action = await asyncio.wait_for(self._requests.get(), left)
            except asyncio.TimeoutError:
                return None
            if ident in self._waiting:
                return ident, action
        return None

    def answer(self, ident: int, outcome: dict[str, Any]) -> None:
        waiting = self._waiting.get(ident)
        if waiting is not None and not waiting.done():
            waiting.set_result(outcome)


_RemoteControl = ray.remote(num_cpus=0, max_restarts=0)(TopologyControl)


def reserve(name: str, tasks: int, message_timeout_secs: float) -> Any:
    """Create ``rayflow:<name>``, owned by this driver; ``TopologyNameTaken`` when the cluster
    already runs a topology of that name."""
    info = {
        "name": name,
        "tasks": tasks,
        "started": time.time(),
        "job": _this_job(),
        "driver": f"pid {os.getpid()} on {socket.gethostname()}",
        "message_timeout_secs": message_timeout_secs,
    }
    try:
        return _RemoteControl.options(name=name, namespace=NAMESPACE).remote(info)
    except ValueError:  # ray.exceptions.ActorAlreadyExistsError
        raise name_taken(name) from None


def name_taken(name: str) -> TopologyNameTaken:
    """The refusal of a second topology called ``name``, saying which one runs."""
    holder = _describe_quietly(find(name))
    where = f" (Ray job {holder['job']}, driver {holder['driver']})" if holder else ""
    return TopologyNameTaken(
        f"a topology named {name!r} already runs on this Ray cluster{where}: kill it first "
        f"(`rayflow kill {name}`), or submit this one under another name"
    )


def release(control: Any, name: str) -> None:
    """Free the name: kill ``rayflow:<name>`` and wait (at most ``RELEASE_SECS``) until Ray no
    longer finds it, so that a topology submitted next under that name is not refused."""
    try:
        ray_calls.kill(control)
    except ray_calls.RayGone:  # Ray was shut down, and the actor with it: nothing holds the name
        return
    deadline = time.monotonic() + RELEASE_SECS
    while find(name) is not None and time.monotonic() < deadline:
        time.sleep(0.01)


def _this_job() -> str:
    """The Ray Jobs submission id when this driver runs as a Ray job (``rayflow submit``), else
    Ray's id of this driver's job (``ray list jobs`` shows it)."""
    config = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")
    submission = (config.get("metadata") or {}).get("job_submission_id")
    return str(submission) if submission else ray.get_runtime_context().get_job_id()


def running_topologies() -> dict[str, Any]:
    """Every topology running on the cluster this process is connected to: name -> its control."""
    names = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == NAMESPACE)
    found = {name: find(name) for name in names}
    return {name: control for name, control in found.items() if control is not None}


def find(name: str) -> Any | None:
    """``rayflow:<name>``, or ``None`` when no topology of that name runs. The namespace holds
    other named actors of rayflow's too (the Spark sink's shared Spark and batch-id counter):
    only a topology's control answers ``ask`` and ``describe``."""
    try:
        handle = ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None
    return handle if hasattr(handle, "ask") and hasattr(handle, "describe") else None


def _describe_quietly(control: Any | None) -> dict[str, Any] | None:
    if control is None:
        return None
    try:
        info: dict[str, Any] = ray.get(control.describe.remote(), timeout=POLL_SECS)
        return info
    except Exception:
        return None


def ask(control: Any, action: str, timeout: float) -> dict[str, Any]:
    """Ask the driver of ``control``'s topology to carry out ``action``; its answer, or
    ``{"error": ...}`` when it did not answer within ``timeout`` or the topology ended."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}: one of {', '.join(ACTIONS)}")
    try:
        answer: dict[str, Any] = ray.get(control.ask.remote(action, timeout), timeout=timeout + POLL_SECS)
        return answer
    except ray.exceptions.GetTimeoutError:
        return {"error": f"its control actor did not answer within {timeout + POLL_SECS:g}s"}
    except ray.exceptions.RayActorError:
        return {"error": "the topology ended meanwhile"}


class Steered(Protocol):
    """What a ``ControlLink`` steers: a running topology's handle (``TopologyHandle``, which
    holds its link: said here, not imported, so that neither module needs the other)."""

    name: str

    def kill(self) -> None: ...

    def activate(self) -> None: ...

    def deactivate(self) -> None: ...

    def metrics(self) -> dict[str, dict[str, Any]]: ...


class ControlLink:
    """The driver's side: a thread that carries out what ``rayflow:<name>`` is asked."""

    def __init__(self, control: Any, handle: Steered, spouts: list[str], is_active: Callable[[], bool]) -> None:
        self.control = control
        self._handle = handle
        self._spouts = spouts
        self._is_active = is_active
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"rayflow-control-{handle.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop serving and release the name (``TopologyHandle.kill`` calls it last)."""
        self._closed.set()
        release(self.control, self._handle.name)
        if threading.current_thread() is not self._thread:
            self._thread.join(CLOSE_JOIN_SECS)

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                request = self._next_request()
            except ray_calls.RayGone:  # the driver shut Ray down: the topology went with it
                return
            except Exception as exc:
                if not self._closed.is_set():
                    logger.warning(
                        "topology %r: its control actor is gone (%s): `rayflow list` no longer shows it",
                        self._handle.name,
                        exc,
                    )
                return
            if request is None:
                continue
            ident, action = request
            try:
                self._carry_out(ident, action)
            except ray_calls.RayGone:
                return
            except Exception as exc:
                logger.warning("topology %r: %s from outside failed: %s", self._handle.name, action, exc)
                with contextlib.suppress(ray_calls.RayGone):
                    ray_calls.call(self.control.answer, ident, {"error": f"{type(exc).__name__}: {exc}"})

    def _next_request(self) -> tuple[int, str] | None:
        """One long poll of the actor; waits on as long as the actor lives (a busy machine may
        answer late) and the link is open. Its Ray calls are ``ray_calls``': this thread never
        starts Ray again after the driver shut it down."""
        pending = ray_calls.call(self.control.next_request, POLL_SECS)
        while True:
            try:
                request: tuple[int, str] | None = ray_calls.get(pending, timeout=POLL_SECS)
                return request
            except ray.exceptions.GetTimeoutError:
                if self._closed.is_set():
                    return None

    def _carry_out(self, ident: int, action: str) -> None:
        handle = self._handle
        if action == "kill":
            by_signal = _stops_on_sigterm()
            how = "its driver stops it as on Ctrl-C" if by_signal else "killed by its driver"
            ray_calls.get(ray_calls.call(self.control.answer, ident, {"killing": how}))  # before the name goes
            logger.warning("topology %r: killed from outside (`rayflow kill`)", handle.name)
            if by_signal:
                os.kill(os.getpid(), signal.SIGTERM)
            else:
                handle.kill()
            return
        if action == "activate":
            handle.activate()
        elif action == "deactivate":
            handle.deactivate()
        ray_calls.call(self.control.answer, ident, self.status())

    def status(self) -> dict[str, Any]:
        """What ``rayflow list`` shows: active or not, and the spouts' trees so far."""
        metrics = self._handle.metrics()
        spouts = [metrics[s] for s in self._spouts]
        return {
            "active": self._is_active(),
            "alive": all(m.get("alive", True) for m in metrics.values()),
            **{key: sum(int(m.get(key, 0)) for m in spouts) for key in ("emitted", "acked", "failed", "pending")},
        }


def _stops_on_sigterm() -> bool:
    """Is this process's SIGTERM handler rayflow's own clean stop (``rayflow run``'s monitor)?"""
    handler = signal.getsignal(signal.SIGTERM)
    return callable(handler) and str(getattr(handler, "__module__", "")).startswith("rayflow.")
