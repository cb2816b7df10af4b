"""``AckWatermark``: which delivery tags of one channel may be acked, and with which acks.

RabbitMQ numbers the deliveries of a channel 1, 2, 3, ... and ``basic.ack(tag, multiple=True)``
settles every delivery up to ``tag`` that is not settled yet: one frame for hundreds of
messages. But trees complete out of order, and a message must not be acked before its tree
completes. So the spout keeps each tag in one of three states:

    open      delivered, its tree pending (or the message waiting to be emitted)
    done      its tree completed: to be acked, not acked yet
    settled   acked, or nacked/rejected by the spout (which tells ``settled`` when it sends that)

The *watermark* is the lowest open tag. Every tag below it is done or settled, so one
``multiple=True`` ack up to the highest done tag below it settles exactly the done ones (the
broker no longer counts the settled ones). A done tag above the watermark waits for the
watermark to pass it; it is acked on its own once it waited ``hold_secs``, or once
``hold_cap`` of them wait (they hold the broker's prefetch window), or when ``acks`` is asked
for everything (deactivating, closing).

So a tag is settled once, never before its tree completes, and ``multiple=True`` goes only
below the lowest open tag (``tests/connectors/test_ack_watermark.py`` checks it against a
model of the broker). No I/O here: the spout sends what ``acks`` returns.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable

__all__ = ["AckWatermark"]


class AckWatermark:
    """The tags of one channel (see the module docstring); a new channel needs a new one."""

    def __init__(self, hold_cap: int, hold_secs: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._hold_cap = hold_cap
        self._hold_secs = hold_secs
        self._clock = clock
        self._open: set[int] = set()
        self._order: deque[int] = deque()
        """The open tags in delivery order, and some no longer open: its head, once those are
        dropped, is the watermark."""
        self._done: list[int] = []
        """Done tags, not acked yet."""
        self._held_since: float | None = None
        """Since when done tags above the watermark wait (``None``: none wait)."""

    def delivered(self, tags: Iterable[int]) -> None:
        """``tags`` were delivered (in the order the broker numbered them): open."""
        tags = list(tags)
        self._open.update(tags)
        self._order.extend(tags)

    def __contains__(self, tag: object) -> bool:
        """Is ``tag`` open?"""
        return tag in self._open

    @property
    def waiting(self) -> int:
        """Done tags not acked yet."""
        return len(self._done)

    @property
    def watermark(self) -> int | None:
        """The lowest open tag (``None``: none is open)."""
        return self._order[0] if self._order else None

    def done(self, tag: int) -> None:
        """The tree of open tag ``tag`` completed: ack it (``acks``)."""
        self._close(tag)
        self._done.append(tag)

    def settled(self, tag: int) -> None:
        """Open tag ``tag`` is being nacked or rejected: never ack it."""
        self._close(tag)

    def acks(self, everything: bool = False) -> list[tuple[int, bool]]:
        """The acks to send now, as ``(tag, multiple)``, and the tags they settle forgotten:
        one ``multiple=True`` ack for the done tags below the watermark, and each done tag
        above it alone when they waited long enough, or too many wait, or ``everything``."""
        if not self._done:
            return []
        watermark = self.watermark
        if watermark is None:
            below, above = self._done, []
        else:
            below = [tag for tag in self._done if tag < watermark]
            above = [tag for tag in self._done if tag > watermark] if len(below) < len(self._done) else []
        acks = [(max(below), True)] if below else []
        now = self._clock()
        if above:
            since = self._held_since if self._held_since is not None else now
            if everything or len(above) >= self._hold_cap or now - since >= self._hold_secs:
                acks += [(tag, False) for tag in above]
                above = []
            else:
                self._held_since = since
        self._done = above
        if not above:
            self._held_since = None
        return acks

    def clear(self) -> int:
        """Forget every tag (the channel is gone: the broker requeues what it had not heard
        an ack for); how many done tags were never acked."""
        lost = len(self._done)
        self._open.clear()
        self._order.clear()
        self._done = []
        self._held_since = None
        return lost

    def _close(self, tag: int) -> None:
        is_open, order = self._open, self._order
        is_open.discard(tag)
        while order and order[0] not in is_open:
            order.popleft()
