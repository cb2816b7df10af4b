"""The unit of data: a list of values with named fields and its place in the tuple trees."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["DEFAULT_STREAM", "SYSTEM_COMPONENT", "TICK_STREAM", "Tuple", "TupleSource"]

DEFAULT_STREAM = "default"
"""The stream ``declare``, ``emit`` and the groupings use when none is named."""
SYSTEM_COMPONENT = "__system"
TICK_STREAM = "__tick"


class TupleSource:
    """What every tuple of one stream from one task shares: built once per (task, stream) by
    the receiving bolt, so that a tuple itself carries only its values and its tree."""

    __slots__ = ("component", "stream", "task", "fields", "index")

    def __init__(self, component: str, stream: str, task: int, fields: Sequence[str]) -> None:
        self.component = component
        self.stream = stream
        self.task = task
        self.fields = list(fields)
        self.index = {name: i for i, name in enumerate(fields)}


class Tuple:
    """A tuple delivered to a bolt.

    Besides the values, a tuple carries what the acker needs, in two slots kept small because
    a bolt makes one tuple per input:

    - ``_tree``: ``0`` when it belongs to no tree (untracked); the root id when it belongs to
      one tree; ``{root: edge id}`` when it belongs to several; ``None`` once acked or failed.
    - ``_val``: what its ack tells the acker. With one root, its edge id XOR the edge ids of the
      tuples emitted anchored to it, so the ack is ``(root, _val)``; with several roots, only
      the anchored edge ids, and the ack is ``(root, edge ^ _val)`` per root.
    """

    __slots__ = ("values", "_source", "_tree", "_val")

    def __init__(self, values: list[Any], source: TupleSource, tree: int | dict[int, int] = 0, val: int = 0) -> None:
        self.values = values
        self._source = source
        self._tree: int | dict[int, int] | None = tree
        self._val = val

    @property
    def fields(self) -> list[str]:
        return self._source.fields

    @property
    def source_component(self) -> str:
        return self._source.component

    @property
    def source_stream(self) -> str:
        return self._source.stream

    @property
    def source_task(self) -> int:
        return self._source.task

    def __getitem__(self, key: int | str) -> Any:
        """A value by position (``tup[0]``) or by field name (``tup["word"]``). Where the C
        kernel runs, its subscript does this for an int or a str key and calls this method for
        any other key and for every error (``rayflow/_speedups.c``): this is its contract."""
        if type(key) is str:
            try:
                return self.values[self._source.index[key]]
            except KeyError:
                raise KeyError(
                    f"tuple from {self.source_component!r} stream {self.source_stream!r} "
                    f"has no field {key!r}; its fields are {self.fields}"
                ) from None
        return self.values[key]  # type: ignore[index]

    def get(self, field: str, default: Any = None) -> Any:
        i = self._source.index.get(field)
        return default if i is None else self.values[i]

    def __len__(self) -> int:
        return len(self.values)

    def is_tick(self) -> bool:
        return self._source.stream == TICK_STREAM and self._source.component == SYSTEM_COMPONENT

    def __repr__(self) -> str:
        return (
            f"Tuple({self.values!r}, source={self.source_component}:{self.source_task}, stream={self.source_stream!r})"
        )
