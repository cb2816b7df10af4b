"""``Upkeep``: a broker spout's liveness duties, done on time whether or not ``next_tuple`` is
called.

A spout's task calls ``next_tuple`` only while the topology is active and the pending budget
has room. A broker does not wait for that: RabbitMQ drops a connection that wrote nothing for
two heartbeat intervals (and requeues what it held), JetStream redelivers a message neither
acked nor marked in progress within the consumer's ``ack_wait``, a NATS server closes a
connection that leaves its ``PING``s unanswered. With a bolt slower than that, a spout whose
duties ride on ``next_tuple`` gets the same messages again and again while its budget is full.

So each broker spout has an ``upkeep()`` that does them (heartbeats, in-progress acks, acks
waiting for their linger, PINGs, taking a new connection once made), never waits and costs a
system call or two when nothing is due; ``next_tuple`` does them as well. ``Upkeep`` calls it
every ``period`` seconds on the event loop of the thread that opened the spout: a task actor
runs its spout on its asyncio event loop, so ``upkeep`` runs on the spout's one thread, between
the task's other calls, like ``ack`` and ``fail``; no lock is needed. Where no event loop runs
(the in-process runner, a test that calls ``next_tuple`` itself) nothing is scheduled, and the
spout's own calls are all there is.

(This belongs in the spout executor: a timer among its ``timers()`` calling ``upkeep`` on a
spout that has one. Until the executor offers that, the spout schedules itself here.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["Upkeep"]


class Upkeep:
    """Calls ``duty`` every ``period`` seconds once ``start``ed, until ``stop`` (for good); what
    it raises goes to ``report`` (the collector's ``report_error``) and the calls go on."""

    def __init__(self, duty: Callable[[], None], period: float, report: Callable[[BaseException], None]) -> None:
        self._duty = duty
        self._period = period
        self._report = report
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._timer: asyncio.TimerHandle | None = None
        self._stopped = False

    @property
    def scheduled(self) -> bool:
        """Is ``duty`` called on a timer (an event loop runs in this thread)?"""
        return self._timer is not None

    def start(self) -> None:
        if self._loop is not None and self._timer is None and not self._stopped and not self._loop.is_closed():
            self._timer = self._loop.call_later(self._period, self._run)

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _run(self) -> None:
        self._timer = None
        try:
            self._duty()
        except Exception as exc:
            self._report(exc)
        self.start()
