"""The unit of data: a list of values with named fields and its place in the tuple trees."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_STREAM", "SYSTEM_COMPONENT", "TICK_STREAM", "Tuple"]

DEFAULT_STREAM = "default"
"""The stream ``declare``, ``emit`` and the groupings use when none is named."""
SYSTEM_COMPONENT = "__system"
TICK_STREAM = "__tick"


class Tuple:
    """A tuple delivered to a bolt.

    Besides the values, a tuple carries what the acker needs: for every spout tuple whose tree it
    belongs to (its *root*), the edge id it was emitted under. ``ack_val`` accumulates the edge
    ids of the tuples emitted anchored to it, so that its ack is a single message per root.
    """

    __slots__ = (
        "values",
        "fields",
        "source_component",
        "source_stream",
        "source_task",
        "edges",
        "ack_val",
        "started",
        "done",
        "_index",
    )

    def __init__(
        self,
        values: list[Any],
        fields: list[str],
        index: Mapping[str, int],
        source_component: str,
        source_stream: str,
        source_task: int,
        edges: dict[int, int] | None,
    ) -> None:
        self.values = values
        self.fields = fields
        self._index = index
        self.source_component = source_component
        self.source_stream = source_stream
        self.source_task = source_task
        self.edges = edges
        self.ack_val = 0
        self.started = 0.0
        self.done = False

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            try:
                return self.values[self._index[key]]
            except KeyError:
                raise KeyError(
                    f"tuple from {self.source_component!r} stream {self.source_stream!r} "
                    f"has no field {key!r}; its fields are {self.fields}"
                ) from None
        return self.values[key]

    def get(self, field: str, default: Any = None) -> Any:
        i = self._index.get(field)
        return default if i is None else self.values[i]

    def __len__(self) -> int:
        return len(self.values)

    def is_tick(self) -> bool:
        return self.source_stream == TICK_STREAM and self.source_component == SYSTEM_COMPONENT

    def __repr__(self) -> str:
        return (
            f"Tuple({self.values!r}, source={self.source_component}:{self.source_task}, stream={self.source_stream!r})"
        )
