"""``KeyValueState``: the state a ``StatefulBolt`` reads and writes.

The bolt works on a plain in-memory mapping; every write is also noted in ``changes`` (a
deletion as ``DELETED``), so a checkpoint stages only what changed since the last one, not the
whole state: a checkpoint costs in proportion to the keys touched in its interval."""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView
from typing import Any

__all__ = ["DELETED", "KeyValueState"]


class _Deleted:
    """The marker of a deleted key among staged changes (one object, also after unpickling)."""

    def __repr__(self) -> str:
        return "DELETED"

    def __reduce__(self) -> str:
        return "DELETED"


DELETED: Any = _Deleted()
"""Importable by name, so ``__reduce__`` brings back this very object."""


class KeyValueState:
    """A mapping that survives restarts. Keys must be hashable and picklable, values picklable.

    Writes take effect at once for the bolt that makes them; they become durable when the
    checkpoint after them commits, and a rollback returns the mapping to its last committed
    contents (the object stays the same, so a bolt may keep a reference to it)."""

    def __init__(self, committed: dict[Any, Any] | None = None) -> None:
        self._data: dict[Any, Any] = dict(committed or {})
        self.changes: dict[Any, Any] = {}
        """Key -> new value (or ``DELETED``) since the last checkpoint staged them."""

    def get(self, key: Any, default: Any = None) -> Any:
        return self._data.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        self._data[key] = value
        self.changes[key] = value

    def delete(self, key: Any) -> None:
        """Remove ``key`` (a missing key is not an error)."""
        if self._data.pop(key, DELETED) is not DELETED:
            self.changes[key] = DELETED

    def keys(self) -> KeysView[Any]:
        return self._data.keys()

    def items(self) -> ItemsView[Any, Any]:
        return self._data.items()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __repr__(self) -> str:
        return f"KeyValueState({len(self._data)} keys, {len(self.changes)} changed since the last checkpoint)"

    def take_changes(self) -> dict[Any, Any]:
        """The changes since the last call, handed over to be staged."""
        changes, self.changes = self.changes, {}
        return changes

    def reset(self, committed: dict[Any, Any]) -> None:
        """Back to ``committed`` (a rollback), in place."""
        self._data.clear()
        self._data.update(committed)
        self.changes = {}
