"""Event time: the watermark of a windowed bolt over its inputs (Storm's
``WaterMarkEventGenerator``, per upstream task as well as per stream).

An *input* is one upstream task's stream. The watermark is the smallest, over the inputs, of
the largest timestamp each has sent, minus the lag; it never goes back. Taking the minimum
means a slow upstream task holds the windows back rather than making the others' tuples late
for it.

It also means an input that sends nothing holds the watermark where it is -- before its first
tuple, not at all: no window fires. That is what users trip on (an upstream task with no data,
a partition that went quiet). The way out is an idle timeout: an input that has sent nothing
for that long (on the bolt's clock) is left out of the minimum until it sends again. Its later
tuples may then be late, which is the price of not waiting. With every input idle nobody is
sending, and the bolt (``_executors/windowed_bolt.py``) moves the watermark past every window it
holds (``advance_to``), so the windows of a stream that stopped -- the last minutes of a finite
source -- fire too; a tuple that comes after them is late.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable

__all__ = ["WatermarkTracker"]


class WatermarkTracker:
    """The watermark over ``inputs``; ``lag_ms`` and ``idle_timeout_ms`` as above (``None``:
    an input is never taken for idle)."""

    def __init__(self, inputs: Iterable[Hashable], lag_ms: float, idle_timeout_ms: float | None) -> None:
        self.inputs = list(dict.fromkeys(inputs))
        self.lag_ms = lag_ms
        self.idle_timeout_ms = idle_timeout_ms
        self.latest: dict[Hashable, float] = {}
        """Input -> the largest timestamp it has sent."""
        self.heard: dict[Hashable, float] = dict.fromkeys(self.inputs, 0.0)
        """Input -> when (the bolt's clock, ms) it last sent anything."""
        self.watermark = -math.inf

    def observe(self, source: Hashable, ts: float, now: float) -> None:
        """``source`` sent a tuple stamped ``ts`` (ms), at ``now`` on the bolt's clock."""
        if ts > self.latest.get(source, -math.inf):
            self.latest[source] = ts
        self.heard[source] = now

    def idle(self, now: float) -> list[Hashable]:
        """The inputs left out of the minimum at ``now``."""
        timeout = self.idle_timeout_ms
        if timeout is None:
            return []
        return [i for i in self.inputs if now - self.heard.get(i, 0.0) >= timeout]

    def update(self, now: float) -> float:
        """Recompute the watermark at ``now`` (ms, the bolt's clock) and return it."""
        idle = set(self.idle(now))
        active = [i for i in self.inputs if i not in idle]
        latest = self.latest
        if active and all(i in latest for i in active):
            self.watermark = max(self.watermark, min(latest[i] for i in active) - self.lag_ms)
        return self.watermark

    def all_idle(self, now: float) -> bool:
        """Every input has been quiet for the idle timeout (never, without one)."""
        return len(self.idle(now)) == len(self.inputs)

    def advance_to(self, watermark: float) -> float:
        """Move the watermark to ``watermark`` unless it is there already; return it."""
        self.watermark = max(self.watermark, watermark)
        return self.watermark
