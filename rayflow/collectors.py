"""The collectors components emit through. Each is a thin facade over its executor, which owns
routing, edge ids and batching."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .executors.bolt import BoltExecutor
    from .executors.spout import SpoutExecutor
    from .tuple import Tuple

__all__ = ["BasicOutputCollector", "OutputCollector", "SpoutOutputCollector"]

DEFAULT_STREAM = "default"


class SpoutOutputCollector:
    def __init__(self, executor: SpoutExecutor) -> None:
        self._executor = executor

    def emit(self, values: list[Any], msg_id: Any = None, stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit a tuple; with a ``msg_id`` its tree is tracked and ``ack``/``fail`` report on it.
        Returns the ids of the tasks it was sent to."""
        return self._executor.emit(stream, values, msg_id, None)

    def emit_direct(self, task_id: int, values: list[Any], msg_id: Any = None, stream: str = DEFAULT_STREAM) -> None:
        self._executor.emit(stream, values, msg_id, task_id)

    def exhausted(self) -> None:
        """This bounded spout has nothing more to emit (until a ``fail`` makes it replay)."""
        self._executor.exhausted = True

    def report_error(self, exc: BaseException) -> None:
        self._executor.report_error(exc, "reported by the spout")


def _anchor_list(anchors: Tuple | list[Tuple] | None) -> list[Tuple]:
    if anchors is None:
        return []
    if isinstance(anchors, (list, tuple)):
        return list(anchors)
    return [anchors]


class OutputCollector:
    def __init__(self, executor: BoltExecutor) -> None:
        self._executor = executor

    def emit(
        self, values: list[Any], anchors: Tuple | list[Tuple] | None = None, stream: str = DEFAULT_STREAM
    ) -> list[int]:
        """Emit a tuple, anchored to ``anchors`` (joining their trees) or unanchored."""
        return self._executor.emit(stream, values, _anchor_list(anchors), None)

    def emit_direct(
        self,
        task_id: int,
        values: list[Any],
        anchors: Tuple | list[Tuple] | None = None,
        stream: str = DEFAULT_STREAM,
    ) -> None:
        self._executor.emit(stream, values, _anchor_list(anchors), task_id)

    def ack(self, tup: Tuple) -> None:
        self._executor.ack(tup)

    def fail(self, tup: Tuple) -> None:
        self._executor.fail(tup)

    def reset_timeout(self, tup: Tuple) -> None:
        """Tell the acker that ``tup``'s trees are still being worked on: restart their timeout."""
        self._executor.reset_timeout(tup)

    def report_error(self, exc: BaseException) -> None:
        self._executor.report_error(exc, "reported by the bolt")


class BasicOutputCollector:
    """Emits anchored to the input tuple being executed."""

    def __init__(self, executor: BoltExecutor) -> None:
        self._executor = executor
        self.input: Tuple | None = None

    def emit(self, values: list[Any], stream: str = DEFAULT_STREAM) -> list[int]:
        return self._executor.emit(stream, values, [self.input] if self.input is not None else [], None)

    def emit_direct(self, task_id: int, values: list[Any], stream: str = DEFAULT_STREAM) -> None:
        self._executor.emit(stream, values, [self.input] if self.input is not None else [], task_id)

    def reset_timeout(self, tup: Tuple) -> None:
        self._executor.reset_timeout(tup)

    def report_error(self, exc: BaseException) -> None:
        self._executor.report_error(exc, "reported by the bolt")
