"""``input_emits``: what a ``BasicBolt``'s ``collector.emit`` runs, one function per stream.

A ``BasicBolt`` emits once per output tuple, anchored to the input being executed: for a word
count's split, once per word, and the emit is the largest share of what a word costs. What an
emit must decide -- the stream's route, whether it is declared with this many values, who reads
it, its key and the tasks each key went to, the batch size -- does not change while the task
runs, so each stream gets a function with those facts bound in its closure, built when the
collector is wired (``BoltExecutor.wire_input_emits``) and again when an observer comes or goes.
It reads no attribute of the executor per emit and takes no branch that cannot apply to its
stream: an unread stream's function only counts the emit.

Each function handles its own stream, the input in one tree (or untracked), and hands anything
else to ``fallback`` (another stream: ``BoltExecutor.emit_input``) or to ``BoltExecutor.emit``
(the wrong number of values, an input in several trees, acked already, or no input at all),
which checks the emit and raises the errors a user acts on. What it sends is what
``BoltExecutor.emit`` would send, tuple for tuple and edge for edge (``tests/test_emit_paths.py``
holds the copies together)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .._acking.anchoring import getrandbits, new_id
from .._collectors import BasicOutputCollector
from .._metrics import TaskMetrics
from .._outbox import DataBatch, Outbox
from .._router import Route
from .._tuple import DEFAULT_STREAM, Tuple

__all__ = ["AnchoringTask", "InputEmit", "input_emits"]

InputEmit = Callable[..., list[int]]
"""``emit(values, stream=DEFAULT_STREAM) -> target task ids``: ``BasicOutputCollector.emit``."""

Observe = Callable[[str, list[Any], list[int]], None]
"""What an emit owes the observer and the debug log: ``(stream, values, targets)``."""


class AnchoringTask(Protocol):
    """What the emits read of the bolt task they emit for (``BoltExecutor``), once, when built."""

    task_id: int
    routes: dict[str, Route]
    metrics: TaskMetrics
    outbox: Outbox
    input_collector: BasicOutputCollector | None

    def emit(
        self, stream: str, values: list[Any], anchors: Tuple | Sequence[Tuple] | None, direct_task: int | None
    ) -> list[int]: ...


def input_emits(
    task: AnchoringTask, batches: dict[int, DataBatch], observe: Observe | None, fallback: InputEmit
) -> dict[str, InputEmit]:
    """One emit per regular (not direct) stream ``task`` declares, anchored to
    ``task.input_collector.input``: each adds to ``batches`` (the task's batch per target task),
    tells ``observe`` of every emit when given, and hands another stream's emit to ``fallback``."""
    return {
        stream: _emit_on(task, route, batches, observe, fallback)
        for stream, route in task.routes.items()
        if not route.direct
    }


def _emit_on(
    task: AnchoringTask, route: Route, batches: dict[int, DataBatch], observe: Observe | None, fallback: InputEmit
) -> InputEmit:
    own = route.stream
    arity = route.arity
    collector = task.input_collector
    assert collector is not None, "wired by an inline kind, which sets the input collector first"
    metrics = task.metrics
    emit_any = task.emit

    if not route.subscribed:

        def emit_unread(values: list[Any], stream: str = DEFAULT_STREAM) -> list[int]:
            """Nobody reads the stream: nothing to send, no tree to join."""
            if stream is not own and stream != own:
                return fallback(values, stream)
            if len(values) != arity:
                return emit_any(own, values, collector.input, None)  # raises, naming the stream
            metrics.python_emits += 1
            if observe is not None:
                observe(own, values, [])
            return []

        return emit_unread

    fixed = route.fixed
    key = route.key
    known = route.known
    choose = route.choose
    remember = route.remember
    task_id = task.task_id
    single = route.single
    size = task.outbox.batch_size
    send_batch = task.outbox.send_batch

    def emit_read(values: list[Any], stream: str = DEFAULT_STREAM) -> list[int]:
        """Route by the key's remembered targets (a string key) or the grouping, then add the
        tuple to each target's batch as one more edge of the input's tree."""
        if stream is not own and stream != own:
            return fallback(values, stream)
        tup = collector.input
        if len(values) != arity:
            return emit_any(own, values, tup, None)  # raises, naming the stream
        if tup is None:
            return emit_any(own, values, tup, None)
        root = tup._tree
        if root.__class__ is not int:  # in several trees (or acked already): the general path
            return emit_any(own, values, tup, None)
        if fixed is not None:
            targets = fixed
        elif key < 0:
            targets = choose(task_id, values)
        else:
            value = values[key]
            if value.__class__ is str:
                targets = known.get(value) or remember(value, choose(task_id, values))
            else:
                targets = choose(task_id, values)
        metrics.python_emits += 1
        if observe is not None:
            observe(own, values, targets)
        item = values[0] if single else values
        for target in targets:  # as in ``BoltExecutor.emit``
            batch = batches[target]
            if batch.stream is not own:
                batch.switch(own)
            if root:
                edge = getrandbits(64) or new_id()
                tup._val ^= edge
                batch.trees += (root, edge)
            else:
                batch.trees += (0, 0)
            batch.values.append(item)
            if len(batch.values) >= size:
                send_batch(target)
        return targets.copy()

    return emit_read
