"""Ray calls for rayflow's background threads: they fail once Ray is shut down, never start it.

Ray's public calls (``ray.get``, ``ray.wait``, ``ray.kill``, ``actor.method.remote()``, creating
an actor) first run ``ray.init()`` when this process is not connected. From the supervisor's
thread, after the driver's ``ray.shutdown()``, that would connect to (or start) a Ray nobody
asked for, from a thread that is not the main one -- which took a driver down. Checking
``ray.is_initialized()`` first is racy: the driver may shut Ray down between the check and the
call. The calls here are Ray's own, without that first step: when Ray is not connected they
raise ``RayGone`` and the thread stops.

They reach past Ray's public API (``ray._private.worker``, and the ``__wrapped__`` function
under Ray's auto-init wrapper, as of Ray 2.60); ``tests/test_node_loss.py`` shuts Ray down
under a restarting supervisor and checks that nothing connects again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ray
import ray._private.worker as ray_worker
from ray._common.ray_option_utils import update_options
from ray.actor import ActorClass, ActorMethod

from .._errors import RayflowError

__all__ = ["Creating", "RayGone", "call", "connected", "create", "get", "kill", "wait"]

_submit: Any = getattr(ActorMethod._remote, "__wrapped__", ActorMethod._remote)
"""``actor.method.remote()`` without its automatic ``ray.init`` (Ray wraps it with ``functools.wraps``)."""
_create: Any = getattr(ActorClass._remote, "__wrapped__", ActorClass._remote)


class RayGone(RayflowError):
    """This process is no longer connected to Ray (``ray.shutdown`` ran)."""


def connected() -> bool:
    return bool(ray_worker.global_worker.connected)


def _gone_or(exc: Exception) -> Exception:
    return RayGone(str(exc)) if not connected() else exc


def get(ref: Any, timeout: float | None = None) -> Any:
    try:
        return ray_worker.get(ref, timeout=timeout)
    except ray.exceptions.RaySystemError as exc:
        raise _gone_or(exc) from None


def wait(refs: Sequence[Any], num_returns: int, timeout: float) -> tuple[list[Any], list[Any]]:
    try:
        ready, rest = ray_worker.wait(list(refs), num_returns=num_returns, timeout=timeout)
    except ray.exceptions.RaySystemError as exc:
        raise _gone_or(exc) from None
    return ready, rest


def kill(actor: Any) -> None:
    """Stop ``actor`` (no restart); nothing if it is gone already."""
    try:
        ray_worker.kill(actor)
    except ray.exceptions.RaySystemError as exc:
        raise _gone_or(exc) from None
    except ValueError:  # not an actor handle Ray knows (anymore)
        pass


def call(method: Any, *args: Any) -> Any:
    """``method.remote(*args)`` for an actor's method; its object ref."""
    if not connected():
        raise RayGone("Ray was shut down")
    try:
        return _submit(method, args=args, kwargs={})
    except AttributeError as exc:  # the core worker went away under the call
        raise _gone_or(exc) from None


def create(actor_class: Any, options: dict[str, Any], *args: Any) -> Any:
    """``actor_class.options(**options).remote(*args)``; the new actor's handle."""
    if not connected():
        raise RayGone("Ray was shut down")
    try:
        merged = update_options(actor_class._default_options, options)  # as ``options()`` merges them
        return _create(actor_class, args=list(args), kwargs={}, **merged)
    except AttributeError as exc:
        raise _gone_or(exc) from None


class Creating:
    """An actor class whose ``options(...).remote(...)`` is ``create``'s: a background thread may
    start actors with it and never start Ray by doing so."""

    def __init__(self, actor_class: Any) -> None:
        self.actor_class = actor_class

    def options(self, **options: Any) -> _Creation:
        return _Creation(self.actor_class, options)


class _Creation:
    def __init__(self, actor_class: Any, options: dict[str, Any]) -> None:
        self.actor_class = actor_class
        self.given = options

    def remote(self, *args: Any) -> Any:
        return create(self.actor_class, self.given, *args)
