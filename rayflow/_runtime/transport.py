"""``StreamTransport``: a task's ``Link`` on Ray. Payloads become frames on direct streams to
the destination tasks (``streams.py``); the work queued toward each destination is bounded in
tuples.

Each payload is pickled by the sender (protocol 5). A stream per destination and channel is
opened on the first send (frames sent meanwhile wait for it) and kept. A frame is written in one
piece, length and payload together: on a TLS stream every write becomes records of its own.

``wait_for_room`` is the backpressure: while a destination holds more than ``max_tuples``
unprocessed tuples from this task (or more than ``max_frames`` unfinished frames), the sender
waits for credits. Counting tuples rather than frames matters when frames are small: a stuck
task then stops its producer only after a sizeable backlog, not after a handful of one-tuple
frames. ``backlog(dest)`` exposes that count to load-aware groupings, and says which
destinations cannot be reached now (``UNREACHABLE``), which a shuffle then leaves out. And
while more than ``WRITE_BUFFER_BYTES`` wait in a stream's buffer (the peer or the network reads
slower than the task writes: large tuples fill the socket long before the tuple bound), the
sender waits for the stream to drain to a quarter of that: what a task holds toward one
destination beyond what its socket took is at most ``WRITE_BUFFER_BYTES`` and one frame.

Acker traffic travels on its own streams, so it is never stuck behind data.

A destination that cannot be reached -- its task died, its node is gone -- loses what was
sent to it: its trees time out and are replayed, as in Storm. The transport reports that once
per outage, drops what is sent meanwhile, and tries the address again after ``RETRY_SECS``;
``replace`` points it at a task's restarted actor at once. A task the supervisor gave up on
(``give_up``) is never dialled again: what is sent to it is dropped and counted, and its old
address -- which anything may bind now -- is forgotten.

A destination proves it is the task meant before it is sent anything (``streams.Dialer``). An
authenticated destination may still break the protocol: a credit for more frames than are
outstanding closes the stream (logged), as does a frame over ``max_frame_bytes`` refused on
this side before it is written. A destination that withholds credits is not timed out: that
is backpressure from a busy task, and only a task of the topology can do it; its stream
closing (it died, it was replaced or given up on) wakes the senders waiting on it.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import time
from collections import deque
from typing import Any

from .._config import DEFAULT_HANDSHAKE_SECS, DEFAULT_MAX_FRAME_BYTES
from .._groupings import UNREACHABLE
from .stream_keys import TaskKeys
from .streams import CONTROL, CREDIT, DATA, FRAME, Address, Dialer, RefusalLog, StreamViolation

__all__ = ["StreamTransport"]

logger = logging.getLogger("rayflow")

CONNECT_SECS = 5.0
"""How long opening a stream may take beyond the handshake's own deadline
(``rayflow.stream.handshake.secs``) before the destination counts as unreachable."""
RETRY_SECS = 1.0
"""After a destination was found unreachable, sends to it are dropped for this long."""
WRITE_BUFFER_BYTES = 4 * 1024 * 1024
"""Bytes a stream may hold unwritten (its TLS and socket buffers taken) before ``wait_for_room`` waits
for it to drain to a quarter of that: larger than a batch of ordinary tuples, so a stream that
keeps up never waits, and a small part of a task's memory."""

_CONNECTING, _OPEN, _DOWN = range(3)


class _Lane:
    """One stream toward one destination on one channel, and the frames it has not had
    credit for yet (oldest first, as tuple counts)."""

    __slots__ = (
        "address",
        "credits_to_skip",
        "frames",
        "progress",
        "retry_at",
        "state",
        "task",
        "tuples",
        "waiting",
        "writer",
    )

    def __init__(self, address: Address) -> None:
        self.address = address
        self.state = _CONNECTING
        self.writer: asyncio.StreamWriter | None = None
        self.task: asyncio.Task[None] | None = None
        """Opening the stream, then reading its credits (held here: the loop keeps only weak
        references to tasks)."""
        self.waiting: list[bytes] = []
        """Frames sent while the stream is being opened."""
        self.frames: deque[int] = deque()
        self.tuples = 0
        self.credits_to_skip = 0
        """Frames no longer counted against the bound (a task sending to itself, see
        ``wait_for_room``): they were taken off ``frames`` already, so their credits, when
        they come, finish nothing."""
        self.progress = asyncio.Event()
        self.retry_at = 0.0

    def close(self) -> None:
        """Forget every frame (waking whoever waits for credits) and end the stream."""
        self.frames.clear()
        self.waiting.clear()
        self.tuples = 0
        self.credits_to_skip = 0
        self.progress.set()
        if self.task is not None:
            self.task.cancel()
        if self.writer is not None:
            self.writer.close()


class StreamTransport:
    def __init__(
        self,
        addresses: dict[int, Address],
        keys: TaskKeys,
        max_tuples: int,
        max_frames: int,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        handshake_secs: float = DEFAULT_HANDSHAKE_SECS,
    ) -> None:
        self._addresses = dict(addresses)
        self._own_task = keys.task
        self._dialer = Dialer(keys)
        self._max_tuples = max_tuples
        self._max_frames = max_frames
        self._max_frame_bytes = max_frame_bytes
        self._handshake_secs = handshake_secs
        self._lanes: dict[tuple[int, int], _Lane] = {}
        self._given_up: set[int] = set()
        self.refusals = RefusalLog()
        self.calls = 0
        """Frames sent (the ``calls_out`` metric)."""
        self.dropped = 0
        """Frames dropped: their destination was unreachable or given up on, or they were too large."""
        self.quiet = False
        """The topology is being killed: peers close in any order, and frames lost to one that
        closed first are expected, not worth a warning."""

    def replace(self, task: int, address: Address) -> None:
        """Send to ``address`` for ``task`` from now on (its actor was restarted). Frames still
        unfinished at the old actor are forgotten: their trees time out."""
        self._addresses[task] = address
        self._given_up.discard(task)
        self._forget(task)

    def give_up(self, task: int) -> None:
        """The supervisor will not restart ``task``: drop what is sent to it from now on and
        never dial it again (its old address may be anyone's now)."""
        self._given_up.add(task)
        self._addresses.pop(task, None)
        self._forget(task)

    def _forget(self, task: int) -> None:
        for channel in (DATA, CONTROL):
            lane = self._lanes.pop((task, channel), None)
            if lane is not None:
                lane.close()

    def close(self) -> None:
        for lane in self._lanes.values():
            lane.close()
        self._lanes.clear()

    # -- sending --------------------------------------------------------------------------------
    def send_data(self, dest: int, payload: Any) -> None:
        self._send(dest, DATA, pickle.dumps(payload, protocol=5), len(payload[1]))

    def send_control(self, dest: int, payload: Any) -> None:
        self._send(dest, CONTROL, pickle.dumps(payload, protocol=5), 0)

    def _send(self, dest: int, channel: int, frame: bytes, tuples: int) -> None:
        key = (dest, channel)
        lane = self._lanes.get(key)
        if lane is None:
            if dest in self._given_up:
                self.dropped += 1
                return
            lane = self._lanes[key] = _Lane(self._addresses[dest])
            self._open(key, lane)
        elif lane.state != _OPEN or lane.writer.is_closing():  # type: ignore[union-attr]
            if lane.state == _OPEN:  # the stream broke; its credit reader is about to say so
                self.dropped += 1
                return
            if lane.state == _DOWN:
                if time.monotonic() < lane.retry_at:
                    self.dropped += 1
                    return
                lane.state = _CONNECTING
                self._open(key, lane)
        if len(frame) > self._max_frame_bytes:
            self.dropped += 1
            self.refusals.warn(
                "frame size",
                f"task {self._own_task}: dropped a frame of {len(frame)} bytes for task {dest}, over "
                f"rayflow.stream.max.frame.bytes ({self._max_frame_bytes}); its trees fail by timeout. "
                "Emit smaller tuples, lower rayflow.batch.size, or raise the setting",
            )
            return
        self.calls += 1
        lane.frames.append(tuples)
        lane.tuples += tuples
        if lane.state == _OPEN:
            lane.writer.write(FRAME.pack(len(frame)) + frame)  # type: ignore[union-attr]
        else:
            lane.waiting.append(frame)

    def _open(self, key: tuple[int, int], lane: _Lane) -> None:
        lane.task = asyncio.get_running_loop().create_task(self._connect(key, lane))

    async def _connect(self, key: tuple[int, int], lane: _Lane) -> None:
        try:
            reader, writer = await asyncio.wait_for(
                self._dialer.open(lane.address, key[0], key[1], self._handshake_secs),
                CONNECT_SECS + self._handshake_secs,
            )
        except Exception as exc:
            self._down(key, lane, exc)
            return
        if self._lanes.get(key) is not lane:  # replaced while connecting
            writer.close()
            return
        writer.transport.set_write_buffer_limits(high=WRITE_BUFFER_BYTES, low=WRITE_BUFFER_BYTES // 4)
        lane.writer, lane.state = writer, _OPEN
        for frame in lane.waiting:
            writer.write(FRAME.pack(len(frame)) + frame)
        lane.waiting.clear()
        lane.task = asyncio.get_running_loop().create_task(self._credits(key, lane, reader))

    async def _credits(self, key: tuple[int, int], lane: _Lane, reader: asyncio.StreamReader) -> None:
        """Read the destination's credits: each finishes the oldest frame not yet finished."""
        frames, read, unpack = lane.frames, reader.readexactly, CREDIT.unpack
        try:
            while True:
                (n,) = unpack(await read(CREDIT.size))
                if not 0 < n <= len(frames) + lane.credits_to_skip:
                    raise StreamViolation(
                        f"task {key[0]} at {lane.address[0]}:{lane.address[1]} credited {n} frame(s) "
                        f"with {len(frames) + lane.credits_to_skip} outstanding"
                    )
                for _ in range(n):
                    if lane.credits_to_skip:
                        lane.credits_to_skip -= 1
                    elif frames:
                        lane.tuples -= frames.popleft()
                lane.progress.set()
        except asyncio.CancelledError:
            raise
        except StreamViolation as exc:
            self.refusals.warn("violation", f"task {self._own_task} closed its stream to task {key[0]}: {exc}")
            self._down(key, lane, exc)
        except Exception as exc:
            self._down(key, lane, exc if not isinstance(exc, asyncio.IncompleteReadError) else None)

    def _down(self, key: tuple[int, int], lane: _Lane, exc: BaseException | None) -> None:
        if self._lanes.get(key) is not lane:
            return  # replaced meanwhile: nothing to report
        lost = len(lane.frames)
        kind = "acker traffic" if key[1] == CONTROL else "data"
        why = f"{type(exc).__name__}: {exc}" if exc is not None else "the stream closed"
        if lost:
            logger.log(
                logging.DEBUG if self.quiet else logging.WARNING,
                "task %d: %d frame(s) of %s sent to it were lost (their trees time out and replay): %s",
                key[0],
                lost,
                kind,
                why,
            )
        lane.state = _DOWN
        lane.retry_at = time.monotonic() + RETRY_SECS
        lane.task = None  # called from the lane's own task, which ends by itself
        lane.close()
        lane.writer = None

    # -- bounds ---------------------------------------------------------------------------------
    def backlog(self, dest: int) -> int:
        """Tuples sent to ``dest`` that it has not finished processing; ``UNREACHABLE`` while
        its stream is down (it died: until it is replaced, or ``RETRY_SECS`` have passed and a
        send may try it again) or it was given up on, so that a shuffle sends it nothing
        meanwhile."""
        if dest in self._given_up:
            return UNREACHABLE
        lane = self._lanes.get((dest, DATA))
        if lane is None:
            return 0
        if lane.state == _DOWN and time.monotonic() < lane.retry_at:
            return UNREACHABLE
        return lane.tuples

    def unwritten(self, dest: int) -> int:
        """Bytes sent to ``dest`` that its stream has not handed to the socket yet."""
        lane = self._lanes.get((dest, DATA))
        writer = None if lane is None else lane.writer
        return 0 if writer is None else writer.transport.get_write_buffer_size()

    async def wait_for_room(self) -> None:
        """Wait until no destination is over its bound: in unfinished tuples and frames, and
        in bytes not written yet (``WRITE_BUFFER_BYTES``). The task calls it after each frame
        it handled, so a slow destination slows its producers instead of growing their queues.

        Several coroutines of one actor may wait at once and a send may add a lane while
        another waits, so lanes are looked up afresh after every wait."""
        for key in list(self._lanes):
            while True:
                lane = self._lanes.get(key)
                if lane is None:
                    break
                outstanding = len(lane.frames)
                if not outstanding or (lane.tuples <= self._max_tuples and outstanding <= self._max_frames):
                    writer = lane.writer
                    if writer is None or writer.is_closing():
                        break
                    if writer.transport.get_write_buffer_size() <= WRITE_BUFFER_BYTES:
                        break
                    try:
                        await writer.drain()  # until the buffer is down to a quarter
                    except ConnectionError:
                        break  # the credit reader says the stream is down
                    continue
                if key[0] == self._own_task:
                    # A bolt fed by its own stream: waiting on itself would deadlock, so stop
                    # counting the oldest frame (it still runs; only the bound is lifted) and
                    # skip its credit when it comes.
                    lane.tuples -= lane.frames.popleft()
                    lane.credits_to_skip += 1
                    continue
                lane.progress.clear()
                await lane.progress.wait()
