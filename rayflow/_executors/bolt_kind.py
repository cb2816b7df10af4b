"""``BoltKind``: the one seam through which a kind of bolt plugs into ``BoltExecutor``.

Storm runs a basic, stateful or windowed bolt by wrapping it (``BasicBoltExecutor``,
``StatefulBoltExecutor``, ``WindowedBoltExecutor``) and handing the wrapper to one bolt executor.
rayflow does the same: each kind is a ``BoltKind`` -- a ``Bolt`` that wraps the user's component
-- and the executor knows the kinds only through what this class declares. ``kinds.py`` says
which component class gets which kind; a new kind is a subclass here plus a row there, and
``BoltExecutor`` does not change.

What a kind may override, each with a default that suits a plain bolt:

- ``prepare``/``execute``/``cleanup``: the ``Bolt`` calls the executor makes;
- ``inline``/``run_inline``: a kind that runs a whole stream segment itself and acks each input
  that returns (a ``BasicBolt``: one call per tuple through an adapter would cost more than the
  bookkeeping), instead of ``execute`` per tuple;
- ``tick``: a tick tuple (a system tuple: never acked, never counted);
- ``timers``: periodic actions the driver calls (a window's clock);
- ``checkpoint``: act on a checkpoint once it is aligned (raise to fail it; ``CheckpointDeferred``
  fails it without reporting an error);
- ``flush``: settle what the kind holds (a partial batch) because a checkpoint waits for it
  (exactly-once: a PREPARE passes a task only once it has acked or failed what came before it);
- ``snapshot``: counters the kind adds to the task's metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .._components import Bolt
from .._errors import RayflowError
from .._tuple import Tuple, TupleSource
from .base import Timer

__all__ = ["BoltKind", "CheckpointDeferred", "KindFactory"]


class CheckpointDeferred(RayflowError):
    """A kind cannot act on this checkpoint yet (a restarted stateful task has not loaded its
    state): the checkpoint fails, which makes the checkpoint spout recover, and no error is
    reported, because nothing is wrong."""


class BoltKind(Bolt):
    """Subclassed by each kind; its constructor takes ``(user_component, task)``."""

    inline = False
    """Does this kind run stream segments itself (``run_inline``) rather than ``execute`` each?"""

    user_component: Any
    """The component the user wrote."""

    def run_inline(self, column: list[Any], trees: Iterator[int], source: TupleSource, joined: list[Any]) -> int:
        """Run one stream segment of a batch (``BoltExecutor.receive``), acking each input that
        returns; returns how many inputs failed. Only called when ``inline`` is true. ``column``
        holds each input's values as the wire carries them (``DataPayload``): a list, or, when
        ``source`` has one field, the value itself."""
        raise NotImplementedError

    def tick(self, tup: Tuple) -> None:
        self.execute(tup)

    def timers(self) -> list[Timer]:
        return []

    def checkpoint(self, action: str, txid: int) -> None:
        """Nothing to store by default: a stateless kind passes every checkpoint on."""

    def flush(self) -> None:
        """Nothing held by default: inputs are acked or failed as they are executed."""

    def snapshot(self) -> dict[str, Any]:
        return {}


KindFactory = Callable[..., BoltKind]
"""Builds a task's kind from ``(user_component, task)``: a ``BoltKind`` subclass (``kinds.py``)."""
