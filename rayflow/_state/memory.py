"""``MemoryStateProvider``: state in the task's own memory -- for tests, lost with the task."""

from __future__ import annotations

from typing import Any

from .key_value import DELETED
from .provider import StateProvider

__all__ = ["MemoryStateProvider"]


class MemoryStateProvider(StateProvider):
    """Committed and staged state in dicts of this provider object. Each task builds its own, so
    a restarted task starts empty: use it where losing state with a task is acceptable."""

    def __init__(self, config: dict[str, Any], topology_name: str) -> None:
        super().__init__(config, topology_name)
        self._committed: dict[str, tuple[dict[Any, Any], int]] = {}
        self._staged: dict[str, dict[Any, Any]] = {}

    def load(self, namespace: str) -> tuple[dict[Any, Any], int]:
        data, txid = self._committed.get(namespace, ({}, 0))
        return dict(data), txid

    def stage(self, namespace: str, txid: int, changes: dict[Any, Any]) -> None:
        self._staged.setdefault(namespace, {}).update(changes)

    def commit(self, namespace: str, txid: int) -> None:
        data, _ = self._committed.get(namespace, ({}, 0))
        for key, value in self._staged.pop(namespace, {}).items():
            if value is DELETED:
                data.pop(key, None)
            else:
                data[key] = value
        self._committed[namespace] = (data, txid)

    def namespaces(self, prefix: str) -> list[str]:
        return sorted(ns for ns in self._committed if ns.startswith(prefix))

    def rollback(self, namespace: str) -> None:
        self._staged.pop(namespace, None)

    def describe(self) -> str:
        return "memory (lost with its task)"
