"""``RotatingMap``: a dict whose entries expire in cohorts, without per-entry timers.

The map holds ``buckets`` dicts. ``put`` places a key in the newest bucket (removing it from
any other, which resets its clock); ``rotate`` drops the oldest bucket, hands its entries to
the expiry callback and opens a new empty one. Rotating every T seconds, an entry that is not
touched again expires after between ``(buckets - 1) * T`` and ``buckets * T``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from itertools import repeat
from typing import Generic, TypeVar

__all__ = ["RotatingMap"]

K = TypeVar("K")
V = TypeVar("V")

_MISSING = object()


class RotatingMap(Generic[K, V]):
    def __init__(self, buckets: int, on_expire: Callable[[K, V], None] | None = None) -> None:
        if buckets < 2:
            raise ValueError("a RotatingMap needs at least 2 buckets")
        # buckets[0] is the newest (the nursery), buckets[-1] the oldest (death row).
        self._buckets: deque[dict[K, V]] = deque({} for _ in range(buckets))
        self._on_expire = on_expire
        self.newest = self._buckets[0]
        """The newest bucket, where ``add`` and ``put`` go (a new dict after each ``rotate``)."""

    def put(self, key: K, value: V) -> None:
        """Insert or replace ``key``; its expiry clock starts again."""
        buckets = self._buckets
        head = buckets[0]
        if key not in head:
            for bucket in buckets:
                if bucket is not head:
                    bucket.pop(key, None)
        head[key] = value

    def add(self, key: K, value: V) -> None:
        """Insert ``key``, known to be absent (a fresh random id): ``put`` without the search."""
        self._buckets[0][key] = value

    def touch(self, key: K, factory: Callable[[], V]) -> V:
        """The value of ``key``, created by ``factory`` if absent, moved to the newest bucket.

        Values must not be ``None``. This is ``get`` + ``put`` in one pass, for hot paths."""
        buckets = self._buckets
        head = buckets[0]
        value = head.get(key)
        if value is None:
            for bucket in buckets:
                if bucket is not head:
                    value = bucket.pop(key, None)
                    if value is not None:
                        break
            else:
                value = factory()
            head[key] = value
        return value

    def get(self, key: K, default: V | None = None) -> V | None:
        for bucket in self._buckets:
            value = bucket.get(key, _MISSING)
            if value is not _MISSING:
                return value  # type: ignore[return-value]
        return default

    def pop(self, key: K, default: V | None = None) -> V | None:
        for bucket in self._buckets:
            value = bucket.pop(key, _MISSING)
            if value is not _MISSING:
                return value  # type: ignore[return-value]
        return default

    def pop_each(self, keys: Sequence[K]) -> list[V | None]:
        """``[pop(key) for key in keys]``, for hot paths: the keys found in the newest bucket
        (usually most of them) are popped at C speed. Values must not be ``None``."""
        newest = self._buckets[0]
        size = len(newest)
        values: list[V | None] = list(map(newest.pop, keys, repeat(None)))
        if size - len(newest) < len(keys):  # some were not in the newest bucket
            for i, value in enumerate(values):
                if value is None:
                    values[i] = self.pop(keys[i])
        return values

    def __contains__(self, key: object) -> bool:
        return any(key in bucket for bucket in self._buckets)

    def __len__(self) -> int:
        return sum(map(len, self._buckets))

    def __iter__(self) -> Iterator[K]:
        for bucket in self._buckets:
            yield from bucket

    def rotate(self) -> dict[K, V]:
        """Expire the oldest cohort: call ``on_expire`` for each entry and return them all."""
        expired = self._buckets.pop()
        self._buckets.appendleft({})
        self.newest = self._buckets[0]
        if self._on_expire is not None:
            for key, value in expired.items():
                self._on_expire(key, value)
        return expired
