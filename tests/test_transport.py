"""``RayTransport`` without Ray: fake actor handles whose calls finish when the test says so.

The transport bounds the work queued toward each destination in tuples (and calls), waits for
the oldest call when a destination is over its bound, and must stay consistent while several
coroutines of one actor send and wait at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from rayflow.runtime.transport import RayTransport


class _Ref:
    def __init__(self, future: concurrent.futures.Future[Any]) -> None:
        self._future = future

    def future(self) -> concurrent.futures.Future[Any]:
        return self._future


class _Method:
    def __init__(self) -> None:
        self.calls: list[concurrent.futures.Future[Any]] = []

    def remote(self, payload: bytes) -> _Ref:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.calls.append(future)
        return _Ref(future)


class _Actor:
    """A task actor as the transport sees it: ``push`` and ``push_control``."""

    def __init__(self) -> None:
        self.push = _Method()
        self.push_control = _Method()

    def finish(self, n: int | None = None, error: Exception | None = None) -> None:
        for future in self.push.calls[:n]:
            if not future.done():
                future.set_exception(error) if error else future.set_result(None)


def batch(n: int) -> tuple[int, list[Any]]:
    return (1, [("default", [i], None) for i in range(n)])


def transport(actors: dict[int, _Actor], max_tuples: int = 10, max_calls: int = 100) -> RayTransport:
    return RayTransport(actors, own_task=1, max_tuples=max_tuples, max_calls=max_calls)


class TestBound:
    def test_backlog_counts_tuples_not_yet_processed(self):
        """backlog(dest) is the tuples sent to dest whose calls have not finished."""
        actors = {2: _Actor()}
        link = transport(actors)
        link.send_data(2, batch(3))
        link.send_data(2, batch(4))
        assert link.backlog(2) == 7
        actors[2].finish(1)
        assert link.backlog(2) == 4
        assert link.backlog(3) == 0

    def test_many_small_batches_do_not_block_below_the_tuple_bound(self):
        """Twenty one-tuple batches toward a stuck task stay within a bound of 50 tuples: the
        producer is not held back after a handful of tiny batches."""
        actors = {2: _Actor()}
        link = transport(actors, max_tuples=50)
        for _ in range(20):
            link.send_data(2, batch(1))
        asyncio.run(asyncio.wait_for(link.relieve(), 1.0))  # returns at once: nothing to wait for

    def test_over_the_bound_waits_for_the_oldest_call(self):
        """Over the bound, relieve waits until enough of the oldest calls have finished."""
        actors = {2: _Actor()}
        link = transport(actors, max_tuples=5)

        async def scenario() -> bool:
            link.send_data(2, batch(4))
            link.send_data(2, batch(4))
            waiting = asyncio.ensure_future(link.relieve())
            await asyncio.sleep(0.01)
            blocked = not waiting.done()
            actors[2].finish(1)
            await asyncio.wait_for(waiting, 1.0)
            return blocked

        assert asyncio.run(scenario())
        assert link.backlog(2) == 4

    def test_a_dead_destination_does_not_block_and_is_forgotten_on_replace(self):
        """Calls to a task that died fail; relieve carries on; replace() starts the lane afresh."""
        actors = {2: _Actor()}
        link = transport(actors, max_tuples=1)
        link.send_data(2, batch(3))
        actors[2].finish(error=RuntimeError("actor died"))
        asyncio.run(asyncio.wait_for(link.relieve(), 1.0))
        link.send_data(2, batch(3))
        link.replace(2, _Actor())
        assert link.backlog(2) == 0


class TestConcurrency:
    def test_a_send_to_a_new_destination_while_another_coroutine_waits(self):
        """One coroutine waits in relieve for task 2; meanwhile another sends to task 3 for the
        first time. Once task 2 catches up, relieve goes on without "dictionary changed size
        during iteration", and task 3's lane is bounded too."""
        actors = {2: _Actor(), 3: _Actor()}
        link = transport(actors, max_tuples=2)

        async def scenario() -> None:
            link.send_data(2, batch(5))
            waiting = asyncio.ensure_future(link.relieve())
            await asyncio.sleep(0.01)
            link.send_data(3, batch(5))  # a new lane appears while relieve is parked on task 2
            actors[2].finish()
            actors[3].finish()
            await asyncio.wait_for(waiting, 1.0)
            await asyncio.wait_for(link.relieve(), 1.0)

        asyncio.run(scenario())
        assert link.backlog(2) == link.backlog(3) == 0
