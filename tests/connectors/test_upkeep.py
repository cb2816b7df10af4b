"""``Upkeep``: a spout's duties called on the event loop that opened it, on time, until stopped;
what they raise reported, not propagated; nothing scheduled where no loop runs. No broker."""

from __future__ import annotations

import asyncio

from rayflow.connectors._upkeep import Upkeep


class TestUpkeep:
    def test_runs_every_period_on_the_loop_until_stopped_for_good(self) -> None:
        calls: list[float] = []

        async def run() -> None:
            loop = asyncio.get_running_loop()
            upkeep = Upkeep(lambda: calls.append(loop.time()), 0.01, lambda exc: None)
            upkeep.start()
            assert upkeep.scheduled
            while len(calls) < 5:
                await asyncio.sleep(0.005)
            upkeep.stop()
            upkeep.start()  # stopped for good: a spout closed stays closed
            count = len(calls)
            await asyncio.sleep(0.05)
            assert len(calls) == count and not upkeep.scheduled

        asyncio.run(run())

    def test_what_a_duty_raises_is_reported_and_the_calls_go_on(self) -> None:
        reported: list[BaseException] = []
        calls = 0

        def duty() -> None:
            nonlocal calls
            calls += 1
            raise RuntimeError(f"call {calls}")

        async def run() -> None:
            upkeep = Upkeep(duty, 0.01, reported.append)
            upkeep.start()
            while calls < 3:
                await asyncio.sleep(0.005)
            upkeep.stop()

        asyncio.run(run())
        assert [str(exc) for exc in reported[:3]] == ["call 1", "call 2", "call 3"]

    def test_without_an_event_loop_nothing_is_scheduled(self) -> None:
        """The in-process runner, a test calling next_tuple itself: the spout's own calls do it."""
        upkeep = Upkeep(lambda: None, 0.01, lambda exc: None)
        upkeep.start()
        assert not upkeep.scheduled
        upkeep.stop()
