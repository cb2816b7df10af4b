"""The collectors components emit through.

Each is a thin facade over the task that runs the component. The collectors know that task only
through the small protocols below (``SpoutTask``, ``BoltTask``), so they do not depend on the
executors, and they never write the task's state: a spout saying it is exhausted is a call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ._errors import EmitError
from ._tuple import DEFAULT_STREAM, Tuple

__all__ = [
    "AnchorRuleCollector",
    "BasicOutputCollector",
    "BatchOutputCollector",
    "BoltTask",
    "OutputCollector",
    "SpoutOutputCollector",
    "SpoutTask",
]


class SpoutTask(Protocol):
    """What a spout's collector needs from the task running the spout."""

    def emit(self, stream: str, values: list[Any], msg_id: Any, direct_task: int | None) -> list[int]: ...

    def mark_exhausted(self) -> None: ...

    def report_error(self, exc: BaseException, where: str) -> None: ...

    def count(self, name: str, amount: int) -> None: ...


class BoltTask(Protocol):
    """What a bolt's collector needs from the task running the bolt."""

    def emit(
        self, stream: str, values: list[Any], anchors: Tuple | Sequence[Tuple] | None, direct_task: int | None
    ) -> list[int]: ...

    def ack(self, tup: Tuple) -> None: ...

    def fail(self, tup: Tuple) -> None: ...

    def reset_timeout(self, tup: Tuple) -> None: ...

    def report_error(self, exc: BaseException, where: str) -> None: ...


class SpoutOutputCollector:
    """Handed to ``Spout.open``. Example::

    def next_tuple(self):
        line = self.source.poll()
        if line is None:
            return
        self.collector.emit([line], msg_id=line.offset)   # tracked: ack/fail report on it
    """

    def __init__(self, task: SpoutTask) -> None:
        self._task = task

    # Where the C kernel runs, the spout executor replaces ``emit`` on its collector by the
    # kernel's copy of ``SpoutExecutor.emit``, which takes the same arguments and falls back to
    # this method for anything off its fast path (``SpoutExecutor._wire_kernel_emit``).
    def emit(self, values: list[Any], msg_id: Any = None, stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit a tuple; with a ``msg_id`` its tree is tracked and ``ack``/``fail`` report on it,
        without one it is never acked or failed. Returns the ids of the tasks it was sent to."""
        return self._task.emit(stream, values, msg_id, None)

    def emit_direct(self, task_id: int, values: list[Any], msg_id: Any = None, stream: str = DEFAULT_STREAM) -> None:
        """Emit to one task of a bolt subscribed with a direct grouping to a direct stream."""
        self._task.emit(stream, values, msg_id, task_id)

    def exhausted(self) -> None:
        """This bounded spout has nothing more to emit (until a ``fail`` makes it replay).
        ``TopologyHandle.wait`` returns once every spout task is exhausted with nothing pending."""
        self._task.mark_exhausted()

    def report_error(self, exc: BaseException) -> None:
        """Count and log an error without failing anything (``metrics()[id]["errors"]``)."""
        self._task.report_error(exc, "reported by the spout")

    def count(self, name: str, amount: int = 1) -> None:
        """Add ``amount`` to this task's own counter ``name`` (an identifier that is not a
        built-in metric's name; it starts at 0, so ``count(name, 0)`` makes it show before
        anything happened). It shows in ``task_metrics()[task][name]`` and, summed over the
        component's tasks, in ``metrics()[component][name]``; e.g. the broker spouts'
        ``dead_lettered``."""
        self._task.count(name, amount)


class OutputCollector:
    """Handed to ``Bolt.prepare``. Every input must be acked or failed, now or later::

    def execute(self, tup):
        for word in tup["sentence"].split():
            self.collector.emit([word], anchors=tup)   # joins tup's trees
        self.collector.ack(tup)
    """

    def __init__(self, task: BoltTask) -> None:
        self._task = task

    def emit(
        self, values: list[Any], anchors: Tuple | list[Tuple] | None = None, stream: str = DEFAULT_STREAM
    ) -> list[int]:
        """Emit a tuple, anchored to ``anchors`` (joining their trees: failing it fails every
        root) or unanchored (its fate affects no spout tuple). Returns the receiving task ids."""
        return self._task.emit(stream, values, anchors, None)

    def emit_direct(
        self,
        task_id: int,
        values: list[Any],
        anchors: Tuple | list[Tuple] | None = None,
        stream: str = DEFAULT_STREAM,
    ) -> None:
        """Emit to one task of a bolt subscribed with a direct grouping to a direct stream."""
        self._task.emit(stream, values, anchors, task_id)

    def ack(self, tup: Tuple) -> None:
        """``tup`` is processed; once every tuple of a tree is acked, its spout's ``ack`` runs."""
        self._task.ack(tup)

    def fail(self, tup: Tuple) -> None:
        """Fail ``tup``'s trees at once: their spouts' ``fail`` runs (and they may replay)."""
        self._task.fail(tup)

    def reset_timeout(self, tup: Tuple) -> None:
        """Tell the acker that ``tup``'s trees are still being worked on: restart their timeout."""
        self._task.reset_timeout(tup)

    def report_error(self, exc: BaseException) -> None:
        """Count and log an error without failing anything (``metrics()[id]["errors"]``)."""
        self._task.report_error(exc, "reported by the bolt")


class AnchorRuleCollector(OutputCollector):
    """An ``OutputCollector`` whose emits pass their anchors through a rule first: a stateful
    bolt's must be anchored, a windowed bolt's default to its window. A class of its own so
    that a plain bolt's emit pays no extra call."""

    def anchored(self, anchors: Tuple | list[Tuple] | None, stream: str) -> Tuple | list[Tuple] | None:
        """The anchors an emit on ``stream`` gets (or raise ``EmitError`` to refuse it)."""
        return anchors

    def emit(
        self, values: list[Any], anchors: Tuple | list[Tuple] | None = None, stream: str = DEFAULT_STREAM
    ) -> list[int]:
        return self._task.emit(stream, values, self.anchored(anchors, stream), None)

    def emit_direct(
        self,
        task_id: int,
        values: list[Any],
        anchors: Tuple | list[Tuple] | None = None,
        stream: str = DEFAULT_STREAM,
    ) -> None:
        self._task.emit(stream, values, self.anchored(anchors, stream), task_id)


class BatchOutputCollector:
    """Handed to ``BatchBolt.execute_batch``: every emit names its anchors, tuples of the batch::

    def execute_batch(self, tuples, collector):
        scores = self.model(np.stack([t["features"] for t in tuples]))
        for tup, score in zip(tuples, scores):
            collector.emit([tup["id"], float(score)], anchors=tup)   # one result per input
        collector.emit([len(tuples)], anchors=tuples, stream="sizes")  # one for the whole batch

    What is not failed is acked when ``execute_batch`` returns."""

    def __init__(self, task: BoltTask, component_id: str) -> None:
        self._task = task
        self._component_id = component_id
        self._in_tick = False
        """Set while ``execute_tick`` runs: a tick's emits may go without anchors."""

    def emit(
        self, values: list[Any], anchors: Tuple | list[Tuple] | None = None, stream: str = DEFAULT_STREAM
    ) -> list[int]:
        """Emit a tuple anchored to ``anchors`` (required: one or more tuples of the batch);
        failing it downstream fails their trees. Returns the receiving task ids."""
        if not self._in_tick and _none(anchors):
            raise self._unanchored(stream)
        return self._task.emit(stream, values, anchors, None)

    def emit_direct(
        self,
        task_id: int,
        values: list[Any],
        anchors: Tuple | list[Tuple] | None = None,
        stream: str = DEFAULT_STREAM,
    ) -> None:
        """Emit to one task of a bolt subscribed with a direct grouping, anchored as ``emit``."""
        if not self._in_tick and _none(anchors):
            raise self._unanchored(stream)
        self._task.emit(stream, values, anchors, task_id)

    def fail(self, tup: Tuple) -> None:
        """Fail ``tup``'s trees at once (its spout may replay it); it is not acked on return."""
        self._task.fail(tup)

    def reset_timeout(self, tup: Tuple) -> None:
        """Tell the acker that ``tup``'s trees are still being worked on: restart their timeout."""
        self._task.reset_timeout(tup)

    def report_error(self, exc: BaseException) -> None:
        """Count and log an error without failing anything (``metrics()[id]["errors"]``)."""
        self._task.report_error(exc, "reported by the bolt")

    def _unanchored(self, stream: str) -> EmitError:
        return EmitError(
            f"batch bolt {self._component_id!r}: emit on stream {stream!r} without anchors; name the "
            "tuples of the batch it comes from (anchors=tup, or anchors=tuples for the whole batch), "
            "so that a failure downstream replays them"
        )


def _none(anchors: Tuple | list[Tuple] | None) -> bool:
    """No anchors: ``None`` or an empty list (a ``Tuple`` of no fields is one anchor)."""
    return anchors is None or (anchors.__class__ is not Tuple and not anchors)


class BasicOutputCollector:
    """Handed to ``BasicBolt.execute``: every emit is anchored to the input being executed.

    The bolt executor replaces ``emit`` on its collector by an emit built for the component's
    default (or only) stream, with the same signature and behaviour
    (``BoltExecutor.wire_input_emits``): it saves a Python call per emitted tuple, and the
    stream's route is bound in it.

    ``input`` is a slot, read on every emit and written per input: the C kernel reads and writes
    it at its offset (a dict lookup otherwise). The instance keeps a ``__dict__`` for the
    ``emit`` the executor binds on it."""

    __slots__ = ("_task", "input", "__dict__")

    def __init__(self, task: BoltTask) -> None:
        self._task = task
        self.input: Tuple | None = None
        """The tuple being executed; set by whatever runs the ``BasicBolt``."""

    def emit(self, values: list[Any], stream: str = DEFAULT_STREAM) -> list[int]:
        return self._task.emit(stream, values, self.input, None)

    def emit_direct(self, task_id: int, values: list[Any], stream: str = DEFAULT_STREAM) -> None:
        self._task.emit(stream, values, self.input, task_id)

    def reset_timeout(self, tup: Tuple) -> None:
        self._task.reset_timeout(tup)

    def report_error(self, exc: BaseException) -> None:
        self._task.report_error(exc, "reported by the bolt")
