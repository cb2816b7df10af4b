"""The windows of one task: which items each activation holds, when it fires, and which items
no later window can hold.

Two managers, one interface (``add``, ``advance``), both generic over the item (a ``Tuple`` in
the bolt, anything in a test):

- ``TimeWindows``: length and slide are both durations. Windows are aligned on multiples of
  the slide: the window ending at ``end`` holds the items with ``end - length <= ts < end`` and
  fires once the time (the watermark on event time, the bolt's clock on processing time) reaches
  ``end``. Aligned windows make event-time results independent of arrival order: the same items
  give the same windows however they came in, as long as none is late.
- ``CountWindows``: the length or the slide (or both) is a count, on processing time (the
  clock a tuple arrives at is its time). A count slide fires on the arrival that completes it,
  a duration slide on the clock.
- ``SessionWindows``: per key, the items less than a gap apart, on event time. A session fires
  once the watermark is a gap past its last item: no tuple that is not late can join it then,
  so the sessions depend on the items only, never on their arrival order.
- ``InTimestampOrder``: count windows on event time. Items wait, sorted, until the watermark passes
  them, then go to a ``CountWindows`` in timestamp order with their timestamps as its clock; a
  duration slide fires at each multiple of the slide the watermark passes that has new items.

An ``Activation`` is one window to execute, and ``done``: the items that no later window can
hold, to be acked *after* the execute (whose emits are anchored to them). ``evicted`` items
(``CountWindows`` only) left every window without an activation after their last one -- a count
length pushes its oldest item out on arrival -- and are acked at once.

Neither manager acks late: an item leaves at the first moment no later window can hold it
(Storm waits for its next expiry scan).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from .lengths import Count, Duration, Length

__all__ = [
    "Activation",
    "CountWindows",
    "InTimestampOrder",
    "Manager",
    "SessionWindows",
    "Step",
    "TimeWindows",
    "make_manager",
]

T = TypeVar("T")


@dataclass
class Activation(Generic[T]):
    """One window to execute; ``done`` are acked after it."""

    items: list[T]
    new: list[T]
    expired: list[T]
    done: list[T]
    start_ts: float | None = None
    end_ts: float | None = None


@dataclass
class Step(Generic[T]):
    """What an ``add`` or ``advance`` produced: windows to execute, in order, and items to ack now."""

    activations: list[Activation[T]] = field(default_factory=list)
    evicted: list[T] = field(default_factory=list)

    def extend(self, other: Step[T]) -> None:
        self.activations += other.activations
        self.evicted += other.evicted


class TimeWindows(Generic[T]):
    """Duration length, duration slide; items kept sorted by timestamp (ms)."""

    def __init__(self, length: Duration, slide: Duration) -> None:
        self.length = length.ms
        self.slide = slide.ms
        self._ts: list[float] = []
        self._items: list[tuple[int, T]] = []
        self._seq = 0
        """The sequence number of the next item (a plain int, so the windows pickle: ``contents.py``)."""
        self._next_end = -math.inf
        self._previous: set[int] = set()
        self._expired: list[T] = []

    def __len__(self) -> int:
        return len(self._items)

    def horizon(self) -> float:
        """The end of the last window that holds an item (``-inf`` when empty): advancing to it
        fires every window held."""
        if not self._ts:
            return -math.inf
        return math.floor((self._ts[-1] + self.length) / self.slide) * self.slide

    def add(self, ts: float, item: T) -> Step[T]:
        """Hold ``item`` (timestamp ``ts`` ms) until its last window has fired."""
        i = bisect.bisect_right(self._ts, ts)
        self._ts.insert(i, ts)
        self._items.insert(i, (self._seq, item))
        self._seq += 1
        return Step()

    def advance(self, now: float) -> Step[T]:
        """Fire every window that ends at or before ``now`` (ms) and holds an item."""
        step: Step[T] = Step()
        ts, items, length, slide = self._ts, self._items, self.length, self.slide
        while ts:
            # The next window that can hold anything: skip the empty ones in one go.
            end = max(self._next_end, (math.floor(ts[0] / slide) + 1) * slide)
            if end > now:
                break
            start = end - length
            lo, hi = bisect.bisect_left(ts, start), bisect.bisect_left(ts, end)
            window = items[lo:hi]
            n_done = bisect.bisect_left(ts, end + slide - length)
            done = [item for _, item in items[:n_done]]
            del ts[:n_done], items[:n_done]
            self._next_end = end + slide
            if window:
                previous = self._previous
                step.activations.append(
                    Activation(
                        [item for _, item in window],
                        [item for seq, item in window if seq not in previous],
                        self._expired,
                        done,
                        start,
                        end,
                    )
                )
                self._previous = {seq for seq, _ in window}
                self._expired = done
            else:  # nothing was in it, so nothing leaves with it
                self._expired = self._expired + done
        return step


class CountWindows(Generic[T]):
    """A count length or a count slide, on processing time (``now`` is the bolt's clock, ms)."""

    def __init__(self, length: Length, slide: Length) -> None:
        self.length = length
        self.slide = slide
        self._items: deque[tuple[float, int, T]] = deque()
        self._seq = 0
        self._arrived = 0
        self._delivered = -1
        self._expired: list[T] = []

    def __len__(self) -> int:
        return len(self._items)

    def add(self, now: float, item: T) -> Step[T]:
        step: Step[T] = Step()
        items = self._items
        items.append((now, self._seq, item))
        self._seq += 1
        length = self.length
        if isinstance(length, Count) and len(items) > length.n:
            self._evict(step)
        self._arrived += 1
        if isinstance(self.slide, Count) and self._arrived >= self.slide.n:
            self._arrived = 0
            self._evict_older(now, step)
            self._fire(now, step)
        return step

    def advance(self, now: float) -> Step[T]:
        """The clock reached ``now``: a duration length evicts, a duration slide fires."""
        step: Step[T] = Step()
        self._evict_older(now, step)
        if isinstance(self.slide, Duration):
            self._fire(now, step)
        return step

    def _evict(self, step: Step[T]) -> None:
        item = self._items.popleft()[2]
        step.evicted.append(item)
        self._expired.append(item)

    def _evict_older(self, now: float, step: Step[T]) -> None:
        if isinstance(self.length, Duration):
            items, bound = self._items, now - self.length.ms
            while items and items[0][0] < bound:
                self._evict(step)

    def _fire(self, now: float, step: Step[T]) -> None:
        items = self._items
        if not items:
            return
        window = [item for _, _, item in items]
        new = [item for _, seq, item in items if seq > self._delivered]
        self._delivered = items[-1][1]
        done: list[T] = []
        length, slide = self.length, self.slide
        if isinstance(length, Count) and isinstance(slide, Count):
            # The next window is the newest ``length`` after ``slide`` more arrivals.
            while len(items) > length.n - slide.n:
                done.append(items.popleft()[2])
        start = now - length.ms if isinstance(length, Duration) else None
        step.activations.append(Activation(window, new, self._expired, done, start, now if start is not None else None))
        self._expired = done


class InTimestampOrder(Generic[T]):
    """Count windows on event time: ``CountWindows`` fed in timestamp order as the watermark passes."""

    def __init__(self, length: Length, slide: Length) -> None:
        self.windows: CountWindows[T] = CountWindows(length, slide)
        self._ts: list[float] = []
        self._items: list[T] = []
        self._next_end = -math.inf

    def __len__(self) -> int:
        return len(self._items) + len(self.windows)

    def horizon(self) -> float:
        """Where the watermark must go for every item held to be handed on (``-inf``: none held)."""
        if not self._ts:
            return -math.inf
        slide = self.windows.slide
        if isinstance(slide, Duration):
            return (math.floor(self._ts[-1] / slide.ms) + 1) * slide.ms
        return self._ts[-1] + 1

    def add(self, ts: float, item: T) -> Step[T]:
        i = bisect.bisect_right(self._ts, ts)
        self._ts.insert(i, ts)
        self._items.insert(i, item)
        return Step()

    def advance(self, watermark: float) -> Step[T]:
        step: Step[T] = Step()
        windows, slide = self.windows, self.windows.slide
        if isinstance(slide, Duration):
            while self._ts:
                end = max(self._next_end, (math.floor(self._ts[0] / slide.ms) + 1) * slide.ms)
                if end > watermark:
                    break
                self._release(end, step)
                step.extend(windows.advance(end))
                self._next_end = end + slide.ms
        else:
            self._release(watermark, step)
            step.extend(windows.advance(watermark))  # a duration length evicts
        return step

    def _release(self, bound: float, step: Step[T]) -> None:
        n = bisect.bisect_left(self._ts, bound)
        for ts, item in zip(self._ts[:n], self._items[:n], strict=True):
            step.extend(self.windows.add(ts, item))
        del self._ts[:n], self._items[:n]


class SessionWindows(Generic[T]):
    """Per ``key(item)``, sessions of items less than ``gap`` apart, on event time."""

    def __init__(self, gap: Duration, key: Callable[[T], Hashable]) -> None:
        self.gap = gap.ms
        self.key = key
        self._sessions: dict[Hashable, tuple[list[float], list[T]]] = {}

    def __len__(self) -> int:
        return sum(len(items) for _, items in self._sessions.values())

    def horizon(self) -> float:
        """Where the watermark must go for every session held to close (``-inf``: none held)."""
        return max((ts[-1] + self.gap for ts, _ in self._sessions.values()), default=-math.inf)

    def add(self, ts: float, item: T) -> Step[T]:
        stamps, items = self._sessions.setdefault(self.key(item), ([], []))
        i = bisect.bisect_right(stamps, ts)
        stamps.insert(i, ts)
        items.insert(i, item)
        return Step()

    def advance(self, watermark: float) -> Step[T]:
        """Fire every session whose last item is a gap or more behind ``watermark``; by end
        time, then start time, then key (as text), so the order does not depend on arrivals."""
        closed: list[tuple[float, float, str, list[T]]] = []
        gap = self.gap
        for key in list(self._sessions):
            stamps, items = self._sessions[key]
            start = taken = 0
            for i in range(1, len(stamps) + 1):
                if i < len(stamps) and stamps[i] - stamps[i - 1] < gap:
                    continue
                if stamps[i - 1] + gap > watermark:
                    break  # open: so is every later session of the key
                closed.append((stamps[i - 1] + gap, stamps[start], repr(key), items[start:i]))
                start = taken = i
            del stamps[:taken], items[:taken]
            if not stamps:
                del self._sessions[key]
        closed.sort(key=lambda c: c[:3])
        return Step([Activation(items, items, [], items, start, end) for end, start, _, items in closed])


Manager = TimeWindows[T] | CountWindows[T] | InTimestampOrder[T] | SessionWindows[T]


def make_manager(length: Length, slide: Length, event_time: bool) -> Manager[T]:
    """The manager for a length and a slide (``validation.py`` has checked the pair)."""
    if isinstance(length, Duration) and isinstance(slide, Duration):
        return TimeWindows(length, slide)
    return InTimestampOrder(length, slide) if event_time else CountWindows(length, slide)
