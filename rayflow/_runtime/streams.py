"""Direct streams between task actors: how data and acker traffic travel on Ray.

Ray places, connects and supervises the task actors, but tuples do not travel as actor calls:
an actor call costs far more CPU on each side than a frame on a socket (``benchmarks/actor_cpu.py``
measures it; ``docs/performance.md`` has the figures), which made Ray's call machinery, not the
executors, most of what a word cost. Instead every
task listens on a TCP port of its node, and a sender keeps one stream per destination and
channel (data, or acker traffic).

The protocol of a stream, sender -> listener:

1. *Authenticate.* The listener sends a random 16-byte challenge; the sender answers with
   HMAC-SHA256(topology secret, challenge), its task id and the channel; the listener answers
   one byte, OK, or closes the stream. Frames are pickles and unpickling runs code, so only a
   task of the same topology -- holding its secret, which travels only through Ray -- may send.
2. *Frames*: an 8-byte little-endian length, then the payload's pickle.
3. *Credits*, listener -> sender: a 4-byte count of frames the listener has finished, in the
   order they came. Finishing a data frame means executing it and getting its output within
   the listener's own bounds, so credits carry backpressure upstream (``StreamTransport``).
   A credit costs the sender a wake-up, so credits travel in groups: data frames in groups of
   up to ``data_credits`` (what the senders' bounds allow, see ``data_credit_group``), a
   partial group at most ``CREDIT_DELAY_SECS`` late; acker traffic in groups of
   ``CONTROL_CREDITS``, as its bound only guards against a stuck acker.

Frames of one stream are delivered in the order they were sent. Nothing here knows Ray: the
tests drive listeners and transports in one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import os
import struct
from collections.abc import Callable

from .._errors import RayflowError

__all__ = ["CONTROL", "DATA", "Address", "Deliver", "Listener", "StreamRefused", "data_credit_group", "open_stream"]

logger = logging.getLogger("rayflow")

DATA = 0
CONTROL = 1

Address = tuple[str, int]
"""Where a task listens: host and port."""

Deliver = Callable[[int, int, bytes, Callable[[], None]], None]
"""``deliver(channel, sender_task, frame, finished)``: a frame arrived; call ``finished()`` once
it is done with (that sends the sender its credit)."""

FRAME = struct.Struct("<Q")
CREDIT = struct.Struct("<I")
_HELLO = struct.Struct("<qB")
_CHALLENGE_BYTES = 16
_DIGEST_BYTES = hashlib.sha256().digest_size
_OK = b"\x01"
CONTROL_CREDITS = 16
"""Acker-traffic frames credited together (well under ``rayflow.max.inflight.batches``)."""
DATA_CREDITS = 4
"""At most this many data frames are credited together: fewer credit frames, so fewer wake-ups
of the sender, for the CPU a word costs (measured in ``docs/performance.md``, *Design figures*)."""
CREDIT_DELAY_SECS = 0.02
"""A partial group of data credits is sent at most this late."""
HANDSHAKE_SECS = 10.0
"""A stream that has not authenticated within this long is closed."""


class StreamRefused(RayflowError, ConnectionError):
    """The listener closed the stream during the handshake (a wrong secret, or it is closing).

    A ``ConnectionError`` too, so the code that redials on a lost connection redials on this."""


def data_credit_group(max_tuples: int, max_frames: int, batch_size: int) -> int:
    """How many data frames a listener may credit together, given the senders' bounds
    (``rayflow.max.inflight.tuples`` / ``.batches``) and the batch size. The frames of a group
    but the last are credited late, which makes a sender's view of its destination's backlog
    too high by as much; holding back at most half of either bound means a sender never waits
    on late credits alone (1 -- every frame at once -- when the bounds are that tight)."""
    return 1 + min(DATA_CREDITS - 1, max_tuples // (2 * batch_size), max_frames // 2)


def _answer(secret: bytes, challenge: bytes) -> bytes:
    return hmac.new(secret, challenge, hashlib.sha256).digest()


async def open_stream(
    address: Address, secret: bytes, sender: int, channel: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to a task's listener and authenticate as task ``sender`` on ``channel``."""
    reader, writer = await asyncio.open_connection(*address)
    try:
        challenge = await reader.readexactly(_CHALLENGE_BYTES)
        writer.write(_answer(secret, challenge) + _HELLO.pack(sender, channel))
        if await reader.readexactly(1) != _OK:
            raise StreamRefused(f"task listening at {address[0]}:{address[1]} refused the stream")
    except asyncio.IncompleteReadError:
        writer.close()
        raise StreamRefused(f"task listening at {address[0]}:{address[1]} closed the stream") from None
    except BaseException:
        writer.close()
        raise
    return reader, writer


class Listener:
    """Accepts authenticated streams from the topology's tasks and hands every frame to
    ``deliver`` as it arrives. Runs in the event loop it was started in."""

    def __init__(self, secret: bytes, deliver: Deliver, data_credits: int = 1) -> None:
        self._secret = secret
        self._deliver = deliver
        self._data_credits = data_credits
        """Data frames credited together (``data_credit_group``)."""
        self._server: asyncio.base_events.Server | None = None
        self._streams: set[asyncio.StreamWriter] = set()

    async def start(self, host: str, port: int = 0) -> Address:
        """Listen on ``host`` (port 0: any free one); returns the address senders connect to."""
        self._server = await asyncio.start_server(self._serve, host, port)
        bound = self._server.sockets[0].getsockname()
        return (host, int(bound[1]))

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._streams):
            writer.close()

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> tuple[int, int]:
        challenge = os.urandom(_CHALLENGE_BYTES)
        writer.write(challenge)
        digest = await reader.readexactly(_DIGEST_BYTES)
        sender, channel = _HELLO.unpack(await reader.readexactly(_HELLO.size))
        if not hmac.compare_digest(digest, _answer(self._secret, challenge)) or channel not in (DATA, CONTROL):
            raise StreamRefused("a stream failed authentication")
        writer.write(_OK)
        return sender, channel

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            sender, channel = await asyncio.wait_for(self._authenticate(reader, writer), HANDSHAKE_SECS)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError) as exc:
            peer = writer.get_extra_info("peername")
            logger.warning("refused a stream from %s: %s", peer, exc or type(exc).__name__)
            writer.close()
            return
        self._streams.add(writer)
        group, data_group = CREDIT.pack(CONTROL_CREDITS), self._data_credits
        uncredited = 0
        late: asyncio.TimerHandle | None = None

        def credit_data() -> None:
            nonlocal uncredited, late
            late = None
            if uncredited and not writer.is_closing():
                writer.write(CREDIT.pack(uncredited))
            uncredited = 0

        def finished_data() -> None:
            nonlocal uncredited, late
            uncredited += 1
            if uncredited >= data_group:
                if late is not None:
                    late.cancel()
                credit_data()
            elif late is None:
                late = asyncio.get_running_loop().call_later(CREDIT_DELAY_SECS, credit_data)

        def finished_control() -> None:
            nonlocal uncredited
            uncredited += 1
            if uncredited == CONTROL_CREDITS:
                uncredited = 0
                if not writer.is_closing():
                    writer.write(group)

        finished = finished_control if channel == CONTROL else finished_data
        deliver, read = self._deliver, reader.readexactly
        try:
            while True:
                (size,) = FRAME.unpack(await read(FRAME.size))
                deliver(channel, sender, await read(size), finished)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the sender closed the stream or died
        finally:
            if late is not None:
                late.cancel()
            self._streams.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()
