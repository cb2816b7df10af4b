"""``StreamTransport`` and ``Listener`` without Ray: real streams on 127.0.0.1, in one event loop,
to receivers that finish frames when the test says so.

The transport delivers each payload in order per destination and channel, only to the listener
of the task it meant, of its own topology (``test_stream_security.py`` attacks that); it bounds
the work queued toward each destination in tuples (and frames), waits for credits when a
destination is over its bound, survives a destination that dies or is given up on, and stays
consistent while several coroutines of one task send and wait at once.
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from rayflow._groupings import UNREACHABLE
from rayflow._runtime import transport as transport_module
from rayflow._runtime.stream_keys import TaskKeys, TopologyKeys
from rayflow._runtime.streams import (
    CONTROL,
    CONTROL_CREDITS,
    CREDIT_DELAY_SECS,
    DATA,
    Address,
    Dialer,
    Listener,
    StreamRefused,
    data_credit_group,
)
from rayflow._runtime.transport import StreamTransport

KEYS = TopologyKeys()
"""One topology's authority for the module: the senders and receivers below are its tasks."""


class Receiver:
    """A task as the transport sees it: a listener that keeps what arrives, unfinished."""

    def __init__(
        self, task: int = 2, data_credits: int = 1, keys: TaskKeys | None = None, **listener_options: Any
    ) -> None:
        self.frames: list[tuple[int, int, Any]] = []
        self.unfinished: list[Callable[[], None]] = []
        keys = keys or KEYS.issue(task)
        self.task = keys.task
        self.listener = Listener(keys, self._deliver, data_credits, **listener_options)
        self.address: Address = ("", 0)

    async def start(self) -> Receiver:
        self.address = await self.listener.start("127.0.0.1")
        return self

    def _deliver(self, channel: int, sender: int, frame: bytes, finished: Callable[[], None]) -> None:
        self.frames.append((channel, sender, pickle.loads(frame)))
        self.unfinished.append(finished)

    def finish(self, n: int | None = None) -> None:
        done, self.unfinished = self.unfinished[:n], self.unfinished[len(self.unfinished[:n]) :]
        for finished in done:
            finished()

    def payloads(self, channel: int = DATA) -> list[Any]:
        return [p for c, _, p in self.frames if c == channel]


def batch(n: int, tag: int = 0) -> tuple[int, list[Any]]:
    """A data payload as the transport sees it: ``len(payload[1])`` tuples."""
    return (tag, list(range(n)))


async def until(condition: Callable[[], bool], secs: float = 5.0) -> None:
    """Wait for ``condition`` with a deadline (frames cross a real socket)."""
    deadline = asyncio.get_running_loop().time() + secs
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 30))


def transport(receivers: dict[int, Receiver], max_tuples: int = 10, max_frames: int = 100) -> StreamTransport:
    addresses = {task: r.address for task, r in receivers.items()}
    return StreamTransport(addresses, KEYS.issue(1), max_tuples=max_tuples, max_frames=max_frames)


class TestDelivery:
    def test_payloads_arrive_in_order_with_their_sender_and_channel(self):
        async def scenario() -> None:
            task2 = await Receiver().start()
            link = transport({2: task2})
            for i in range(5):
                link.send_data(2, batch(1, tag=i))
            link.send_control(2, ("acks", 7))
            await until(lambda: len(task2.frames) == 6)
            assert [p[0] for p in task2.payloads(DATA)] == [0, 1, 2, 3, 4]
            assert task2.payloads(CONTROL) == [("acks", 7)]
            assert {sender for _, sender, _ in task2.frames} == {1}
            assert link.calls == 6

        run(scenario)

    def test_a_task_of_another_topology_is_refused(self):
        """Frames are pickles: a sender certified by another topology gets nothing delivered."""

        async def scenario() -> None:
            task2 = await Receiver().start()
            other = TopologyKeys()
            with pytest.raises(StreamRefused):
                await Dialer(other.issue(1)).open(task2.address, 2, DATA)
            stranger = StreamTransport({2: task2.address}, other.issue(1), max_tuples=10, max_frames=10)
            stranger.send_data(2, batch(1))
            await asyncio.sleep(0.2)
            assert task2.frames == []
            await asyncio.wait_for(stranger.wait_for_room(), 5)  # the refusal frees the sender

        run(scenario)


class TestBound:
    def test_backlog_counts_tuples_not_yet_finished(self):
        async def scenario() -> None:
            task2 = await Receiver().start()
            link = transport({2: task2})
            link.send_data(2, batch(3))
            link.send_data(2, batch(4))
            assert link.backlog(2) == 7
            await until(lambda: len(task2.unfinished) == 2)
            task2.finish(1)
            await until(lambda: link.backlog(2) == 4)
            assert link.backlog(3) == 0

        run(scenario)

    def test_a_destination_that_stops_reading_holds_its_sender_at_the_byte_bound(self):
        """Frames of 256 KiB each, far below the tuple and frame bounds, toward a task whose
        streams stop reading: the sender waits in ``wait_for_room`` once ``WRITE_BUFFER_BYTES`` are
        unwritten, holding at most that and one frame (not the 64 MiB it was given), and goes on
        once the destination reads again; every frame arrives, in order."""
        frames, blob = 256, b"x" * (256 * 1024)

        async def scenario() -> None:
            task2 = await Receiver().start()
            link = transport({2: task2}, max_tuples=10**6, max_frames=10**6)
            link.send_data(2, (-1, [b""]))
            await until(lambda: len(task2.frames) == 1)  # the stream is open
            for stream in task2.listener._streams:
                stream.transport.pause_reading()  # the task stops reading
            sent, waiting, most = 0, False, 0

            async def sender() -> None:
                nonlocal sent, waiting, most
                for i in range(frames):
                    link.send_data(2, (i, [blob]))
                    sent += 1
                    most = max(most, link.unwritten(2))
                    waiting = True
                    await link.wait_for_room()
                    waiting = False

            sending = asyncio.get_running_loop().create_task(sender())
            await until(lambda: waiting)  # only a wait_for_room that waits lets this test run meanwhile
            assert sent < frames
            assert most <= transport_module.WRITE_BUFFER_BYTES + len(blob) + 1024
            for stream in task2.listener._streams:
                stream.transport.resume_reading()
            await until(lambda: sending.done() and len(task2.frames) == frames + 1, secs=20)
            assert [tag for tag, _ in task2.payloads()] == [-1, *range(frames)]

        run(scenario)

    def test_many_small_batches_do_not_block_below_the_tuple_bound(self):
        """Twenty one-tuple batches toward a stuck task stay within a bound of 50 tuples."""

        async def scenario() -> None:
            task2 = await Receiver().start()
            link = transport({2: task2}, max_tuples=50)
            for _ in range(20):
                link.send_data(2, batch(1))
            await asyncio.wait_for(link.wait_for_room(), 1.0)

        run(scenario)

    def test_over_the_bound_waits_for_the_oldest_frame(self):
        async def scenario() -> None:
            task2 = await Receiver().start()
            link = transport({2: task2}, max_tuples=5)
            link.send_data(2, batch(4))
            link.send_data(2, batch(4))
            waiting = asyncio.ensure_future(link.wait_for_room())
            await until(lambda: len(task2.unfinished) == 2)
            assert not waiting.done()
            task2.finish(1)
            await asyncio.wait_for(waiting, 5.0)
            assert link.backlog(2) == 4

        run(scenario)

    def test_acker_traffic_is_credited_in_groups_and_bounded_in_frames(self):
        """Seventeen control frames over a bound of ten: wait_for_room waits until the acker has
        finished a group of sixteen (one credit), then one frame is outstanding."""

        async def scenario() -> None:
            acker = await Receiver(task=2).start()
            link = transport({2: acker}, max_frames=10)
            for i in range(CONTROL_CREDITS + 1):
                link.send_control(2, ("acks", i))
            waiting = asyncio.ensure_future(link.wait_for_room())
            await until(lambda: len(acker.unfinished) == CONTROL_CREDITS + 1)
            acker.finish(CONTROL_CREDITS - 1)
            await asyncio.sleep(0.1)
            assert not waiting.done()  # fifteen finished: no credit yet
            acker.finish()
            await asyncio.wait_for(waiting, 5.0)

        run(scenario)

    def test_data_credits_travel_in_groups_and_a_partial_group_comes_late(self):
        """A listener crediting data frames by four: finishing three frees nothing at once; the
        fourth sends all four credits; the fifth and sixth, finished, come within the delay."""

        async def scenario() -> None:
            task2 = await Receiver(data_credits=4).start()
            link = transport({2: task2}, max_tuples=100)
            for _ in range(6):
                link.send_data(2, batch(1))
            await until(lambda: len(task2.unfinished) == 6)
            task2.finish(3)
            await asyncio.sleep(CREDIT_DELAY_SECS / 4)
            assert link.backlog(2) in (6, 3)  # (3 only if this machine stalled past the delay)
            task2.finish(1)
            await until(lambda: link.backlog(2) == 2)
            task2.finish()
            await until(lambda: link.backlog(2) == 0, secs=CREDIT_DELAY_SECS + 5.0)

        run(scenario)

    def test_credit_groups_hold_back_at_most_half_of_a_bound(self):
        """Defaults (20,000 tuples, 64 frames, batches of 2,000): groups of four. Bounds too
        tight to hold any credit back: every frame is credited at once."""
        assert data_credit_group(20_000, 64, 2_000) == 4
        assert data_credit_group(5_000, 64, 2_000) == 2
        assert data_credit_group(100, 64, 2_000) == 1
        assert data_credit_group(20_000, 1, 2_000) == 1

    def test_a_task_sending_to_itself_is_not_held_back_by_its_own_backlog(self):
        """A bolt subscribed to its own stream: waiting on itself would deadlock."""

        async def scenario() -> None:
            itself = await Receiver(task=1).start()
            link = StreamTransport({1: itself.address}, KEYS.issue(1), max_tuples=2, max_frames=10)
            for _ in range(3):
                link.send_data(1, batch(2))
            await asyncio.wait_for(link.wait_for_room(), 1.0)
            await until(lambda: len(itself.unfinished) == 3)
            itself.finish()  # the credits of frames no longer waited for are skipped
            link.send_data(1, batch(2))
            await asyncio.sleep(0.1)
            assert link.backlog(1) == 2

        run(scenario)


class TestFailures:
    def test_a_dead_destination_does_not_block_and_is_forgotten_on_replace(self):
        """Frames to a task that died are lost; wait_for_room carries on; sends meanwhile are dropped;
        replace() points the transport at the restarted task."""

        async def scenario() -> None:
            task2 = await Receiver().start()
            link = transport({2: task2}, max_tuples=1)
            link.send_data(2, batch(3))
            await until(lambda: len(task2.unfinished) == 1)
            task2.listener.close()  # the task dies: its streams close
            await asyncio.wait_for(link.wait_for_room(), 5.0)
            assert link.backlog(2) == UNREACHABLE  # a shuffle sends it nothing meanwhile
            link.send_data(2, batch(3))
            assert link.dropped == 1
            restarted = await Receiver().start()
            link.replace(2, restarted.address)
            assert link.backlog(2) == 0
            link.send_data(2, batch(2, tag=9))
            await until(lambda: len(restarted.frames) == 1)
            assert restarted.payloads() == [(9, [0, 1])]

        run(scenario)

    def test_an_unreachable_destination_drops_and_does_not_block(self):
        async def scenario() -> None:
            gone = await Receiver().start()
            gone.listener.close()
            await asyncio.sleep(0.05)
            link = transport({2: gone}, max_tuples=1)
            link.send_data(2, batch(5))
            await asyncio.wait_for(link.wait_for_room(), 5.0)
            assert link.backlog(2) == UNREACHABLE

        run(scenario)

    def test_a_dead_destination_is_unreachable_until_it_may_be_tried_again(self, monkeypatch):
        """Its backlog reads ``UNREACHABLE`` for ``RETRY_SECS``, then 0: a shuffle sends to it
        again, and the first send tries its address once more (it may have come back)."""
        monkeypatch.setattr(transport_module, "RETRY_SECS", 0.2)

        async def scenario() -> None:
            gone = await Receiver().start()
            gone.listener.close()
            link = transport({2: gone})
            link.send_data(2, batch(1))
            await until(lambda: link.backlog(2) == UNREACHABLE)
            await until(lambda: link.backlog(2) == 0)

        run(scenario)

    def test_a_task_given_up_on_is_never_dialled_again(self):
        """The supervisor gave up on task 2: what is sent to it is dropped and counted, and no
        connection is made to its old address, whoever listens there now."""

        async def scenario() -> None:
            task2 = await Receiver().start()
            link = transport({2: task2})
            link.send_data(2, batch(1, tag=1))
            await until(lambda: len(task2.frames) == 1)
            link.give_up(2)
            task2.listener.close()
            await asyncio.sleep(0.05)
            dialled: list[object] = []
            squatter = await asyncio.start_server(lambda r, w: dialled.append(w), *task2.address)
            for i in range(3):
                link.send_data(2, batch(1, tag=i))
            await asyncio.wait_for(link.wait_for_room(), 1.0)
            await asyncio.sleep(0.2)  # time a dial would have taken on the loopback
            assert link.backlog(2) == UNREACHABLE
            assert link.dropped == 3
            assert dialled == [] and len(task2.frames) == 1
            squatter.close()

        run(scenario)

    def test_a_frame_over_the_size_limit_is_dropped_by_the_sender(self):
        """The receiver would close the stream on it: the sender drops it (counted, logged) and
        the stream carries on."""

        async def scenario() -> None:
            task2 = await Receiver(max_frame_bytes=4096).start()
            link = StreamTransport(
                {2: task2.address}, KEYS.issue(1), max_tuples=10_000, max_frames=10, max_frame_bytes=4096
            )
            link.send_data(2, batch(5_000, tag=1))
            link.send_data(2, batch(2, tag=2))
            await until(lambda: len(task2.frames) == 1)
            assert task2.payloads() == [(2, [0, 1])]
            assert link.dropped == 1

        run(scenario)


class TestConcurrency:
    def test_a_send_to_a_new_destination_while_another_coroutine_waits(self):
        """One coroutine waits in wait_for_room for task 2; meanwhile another sends to task 3 for the
        first time. Once both catch up, wait_for_room goes on, and task 3's lane is bounded too."""

        async def scenario() -> None:
            task2, task3 = await Receiver(task=2).start(), await Receiver(task=3).start()
            link = transport({2: task2, 3: task3}, max_tuples=2)
            link.send_data(2, batch(5))
            waiting = asyncio.ensure_future(link.wait_for_room())
            await until(lambda: len(task2.unfinished) == 1)
            link.send_data(3, batch(5))  # a new lane appears while wait_for_room is parked on task 2
            await until(lambda: len(task3.unfinished) == 1)
            task2.finish()
            task3.finish()
            await asyncio.wait_for(waiting, 5.0)
            await asyncio.wait_for(link.wait_for_room(), 5.0)
            assert link.backlog(2) == link.backlog(3) == 0

        run(scenario)
