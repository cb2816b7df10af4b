"""Direct streams between task actors: how data and acker traffic travel on Ray.

Ray places, connects and supervises the task actors, but tuples do not travel as actor calls:
an actor call costs far more CPU on each side than a frame on a socket (``benchmarks/actor_cpu.py``
measures it; ``docs/performance.md`` has the figures), which made Ray's call machinery, not the
executors, most of what a word cost. Instead every
task listens on a TCP port of its node, and a sender keeps one stream per destination and
channel (data, or acker traffic).

The protocol of a stream, sender -> listener:

1. *Authenticate, both ways* (TLS 1.3, ``stream_keys.py``). The sender is the TLS client, the
   listener the server, and each presents its task's certificate, issued by the topology's
   own authority, which each side's context trusts alone. The sender checks that the
   listener's certificate names the task it meant to reach and sends nothing otherwise; it
   then says who it is and on which channel (an 8-byte task id, a 1-byte channel); the
   listener checks that its certificate names that task and that the channel exists, and
   answers one byte, OK, or closes the stream. A handshake must end within ``handshake_secs``;
   while ``max_handshakes`` are in progress, a new connection evicts the oldest of them.
2. *Frames*: an 8-byte little-endian length -- at most ``max_frame_bytes``, checked before the
   payload is read, or the stream is closed -- then the payload's pickle.
3. *Credits*, listener -> sender: a 4-byte count of frames the listener has finished, in the
   order they came. Finishing a data frame means executing it and getting its output within
   the listener's own bounds, so credits carry backpressure upstream (``StreamTransport``).
   A credit costs the sender a wake-up, so credits travel in groups: data frames in groups of
   up to ``data_credits`` (what the senders' bounds allow, see ``data_credit_group``), a
   partial group at most ``CREDIT_DELAY_SECS`` late; acker traffic in groups of
   ``CONTROL_CREDITS``, as its bound only guards against a stuck acker. A credit for more
   frames than are outstanding is a protocol violation: the sender closes the stream.

Why this is as strong as it must be. Frames are pickles and unpickling runs code, so a frame
may come only from a task of this topology, and a tuple may go only to one. Mutual TLS gives
both: a peer without a key certified by this topology's authority fails the handshake, before
a byte of a frame is read or written. A stream is bound to the topology (one authority per
topology), to the sender and the listener (each certificate names one task, checked against
the task claimed or meant), and to its direction (its TLS roles: a listener never receives
frames on a stream it opened). A relay at a dead task's address has no key: it can neither
finish a handshake as that task nor read or alter what an honest pair says through it. After
the handshake every byte -- frames and credits -- travels in TLS records, encrypted and
authenticated in sequence: an altered, dropped, reordered or replayed record fails the
stream, and nothing of it is delivered. The key material is made in the driver and reaches
each actor through Ray, whose own authentication guards it (``docs/security.md``).

Refusals -- a failed or slow handshake, an oversized frame, a forged credit -- are logged with
the peer and what was wrong, at most one line per kind of refusal per ``REFUSAL_LOG_SECS``
(``RefusalLog``). Frames of one stream are delivered in the order they were sent. Nothing here
knows Ray: the tests drive listeners and transports in one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
import time
import traceback
from collections.abc import Callable
from typing import Any

from .._config import DEFAULT_HANDSHAKE_SECS, DEFAULT_MAX_FRAME_BYTES, DEFAULT_MAX_HANDSHAKES
from .._errors import RayflowError
from .stream_keys import TaskKeys, peer_task

__all__ = [
    "CONTROL",
    "DATA",
    "Address",
    "Deliver",
    "Dialer",
    "Listener",
    "ListenError",
    "RefusalLog",
    "StreamRefused",
    "StreamViolation",
    "data_credit_group",
]

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
_OK = b"\x01"
CONTROL_CREDITS = 16
"""Acker-traffic frames credited together (well under ``rayflow.max.inflight.batches``)."""
DATA_CREDITS = 4
"""At most this many data frames are credited together: fewer credit frames, so fewer wake-ups
of the sender, for the CPU a word costs (measured in ``docs/performance.md``, *Design figures*)."""
CREDIT_DELAY_SECS = 0.02
"""A partial group of data credits is sent at most this late."""
REFUSAL_LOG_SECS = 10.0
"""At most one warning per kind of refusal per this long; the rest are counted in the next."""


class StreamRefused(RayflowError, ConnectionError):
    """A stream could not be opened: the other end did not prove itself the task meant, or
    refused this one (or it is closing).

    A ``ConnectionError`` too, so the code that redials on a lost connection redials on this."""


class StreamViolation(RayflowError, ConnectionError):
    """An authenticated peer broke the protocol (e.g. credited frames it was never sent): the
    stream is closed."""


class ListenError(RayflowError, OSError):
    """A task cannot listen on the address it was given (the message names it and the setting)."""


class RefusalLog:
    """Warnings about what peers did wrong, at most one line per kind of refusal per ``every``
    seconds: a scanner or a flood costs a count, not a line per connection. The count of the
    lines held back comes with the next line of their kind."""

    def __init__(self, every: float = REFUSAL_LOG_SECS) -> None:
        self._every = every
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warn(self, kind: str, message: str) -> None:
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self._every:
            self._held[kind] = self._held.get(kind, 0) + 1
            return
        self._last[kind] = now
        held = self._held.pop(kind, 0)
        if held:
            message += f" ({held} more like it since the last such line)"
        logger.warning("%s", message)


def data_credit_group(max_tuples: int, max_frames: int, batch_size: int) -> int:
    """How many data frames a listener may credit together, given the senders' bounds
    (``rayflow.max.inflight.tuples`` / ``.batches``) and the batch size. The frames of a group
    but the last are credited late, which makes a sender's view of its destination's backlog
    too high by as much; holding back at most half of either bound means a sender never waits
    on late credits alone (1 -- every frame at once -- when the bounds are that tight)."""
    return 1 + min(DATA_CREDITS - 1, max_tuples // (2 * batch_size), max_frames // 2)


_Accepted = tuple[int, int, asyncio.StreamReader, asyncio.StreamWriter]
"""A stream that proved itself: the sender's task, the channel, the TLS stream's two ends."""


class _TlsStreamProtocol(asyncio.StreamReaderProtocol):
    """The reading end of a stream upgraded to TLS by the listener. A sender may close it in
    the data that ends the handshake, before the protocol is told it runs over TLS: the end
    of the stream is never a half-close then either."""

    def eof_received(self) -> bool:
        super().eof_received()
        return False


def _peer(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "an unknown peer"


def _drop_traceback_frames(exc: BaseException) -> None:
    """Let what a failed handshake held go at once, not at the next full cycle collection.

    ``loop.start_tls`` ends a failed or cancelled handshake by raising out of ``await waiter``:
    the exception's traceback holds ``start_tls``'s finished frame, whose locals hold the
    waiter (which holds the exception: a cycle) and the TLS protocol with its 256 KiB read
    buffer and ``SSLObject``. Clearing the finished frames of the traceback (and of the
    exceptions it chains) breaks the cycle, so a refused connection costs nothing once it is
    refused: the handshake cap then bounds the memory half-handshakes can hold. A sender's
    failed dial (``Dialer.open``, tried again every second toward a dead task's address) is
    released alike."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]


def _tls_reason(exc: ssl.SSLError) -> str:
    return str(exc.reason or exc.strerror or exc).lower().replace("_", " ")


class Dialer:
    """Opens a task's streams: proves it is ``keys.task`` and checks whom it reaches."""

    def __init__(self, keys: TaskKeys) -> None:
        self.task = keys.task
        self._topology = keys.topology_id
        self._context = keys.client_context()

    async def open(
        self, address: Address, dest: int, channel: int, handshake_secs: float = DEFAULT_HANDSHAKE_SECS
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A stream to task ``dest`` listening at ``address``, on ``channel``; ``StreamRefused``
        when the listener is not that task of this topology or does not accept this one."""
        where = f"{address[0]}:{address[1]}"
        try:
            reader, writer = await asyncio.open_connection(
                *address, ssl=self._context, server_hostname="", ssl_handshake_timeout=handshake_secs
            )
        except ssl.SSLError as exc:
            _drop_traceback_frames(exc)
            why = _tls_reason(exc)
            raise StreamRefused(f"the listener at {where} did not prove it is task {dest}: {why}") from None
        except BaseException as exc:  # refused, unreachable, or given up on (cancelled)
            _drop_traceback_frames(exc)
            raise
        try:
            found = peer_task(writer.get_extra_info("ssl_object"), self._topology)
            if found != dest:
                raise StreamRefused(
                    f"the listener at {where} is task {found} of this topology, not task {dest}"
                    if found is not None
                    else f"the listener at {where} has no task identity of this topology"
                )
            writer.write(_HELLO.pack(self.task, channel))
            if await asyncio.wait_for(reader.readexactly(1), handshake_secs) != _OK:
                raise StreamRefused(f"task {dest} at {where} refused the stream")
        except StreamRefused:
            writer.close()
            raise
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError):
            writer.close()
            raise StreamRefused(f"task {dest} at {where} closed the stream during the handshake") from None
        except ssl.SSLError as exc:
            writer.close()
            raise StreamRefused(f"task {dest} at {where} refused this task's certificate: {_tls_reason(exc)}") from None
        except BaseException:
            writer.close()
            raise
        return reader, writer


class Listener:
    """Accepts authenticated streams from the topology's tasks and hands every frame to
    ``deliver`` as it arrives. Runs in the event loop it was started in."""

    def __init__(
        self,
        keys: TaskKeys,
        deliver: Deliver,
        data_credits: int = 1,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_handshakes: int = DEFAULT_MAX_HANDSHAKES,
        handshake_secs: float = DEFAULT_HANDSHAKE_SECS,
    ) -> None:
        self._task = keys.task
        self._topology = keys.topology_id
        self._context = keys.server_context()
        self._deliver = deliver
        self._data_credits = data_credits
        """Data frames credited together (``data_credit_group``)."""
        self._max_frame_bytes = max_frame_bytes
        self._max_handshakes = max(1, max_handshakes)
        self._handshake_secs = handshake_secs
        self._server: asyncio.base_events.Server | None = None
        self._handshakes: dict[asyncio.Task[Any], None] = {}
        """Connections in their handshake, oldest first."""
        self._cancelled_why: dict[asyncio.Task[Any], str] = {}
        """Handshakes cancelled by the listener, and why (``busy``, ``slow``, ``closing``)."""
        self._streams: set[asyncio.StreamWriter] = set()
        self.refusals = RefusalLog()

    async def start(self, host: str, port: int = 0) -> Address:
        """Listen on ``host`` (port 0: any free one); returns the address senders connect to.
        An ``OSError`` when the address cannot be bound."""
        self._server = await asyncio.start_server(self._serve, host, port)
        bound = self._server.sockets[0].getsockname()
        return (host, int(bound[1]))

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for handshake in list(self._handshakes):
            self._cancel_handshake(handshake, "closing")
        for writer in list(self._streams):
            writer.close()

    @property
    def handshakes(self) -> int:
        """Connections in their handshake now."""
        return len(self._handshakes)

    def _refuse(self, kind: str, peer: str, why: str) -> None:
        self.refusals.warn(kind, f"task {self._task} refused a stream from {peer}: {why}")

    async def _authenticate(self, raw: asyncio.StreamWriter) -> _Accepted:
        """TLS on the accepted connection (started before anything is read from it: the
        sender's first bytes are its TLS hello), then the sender's claim, checked."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        protocol = _TlsStreamProtocol(reader)
        tls = await loop.start_tls(raw.transport, protocol, self._context, server_side=True)
        if tls is None:
            raise ConnectionResetError("the connection closed during the TLS handshake")
        protocol.connection_made(tls)
        writer = asyncio.StreamWriter(tls, protocol, reader, loop)
        try:
            certified = peer_task(writer.get_extra_info("ssl_object"), self._topology)
            sender, channel = _HELLO.unpack(await reader.readexactly(_HELLO.size))
            if certified is None:
                raise StreamRefused("its certificate names no task of this topology")
            if sender != certified:
                raise StreamRefused(f"it claims to be task {sender} but its certificate names task {certified}")
            if channel not in (DATA, CONTROL):
                raise StreamRefused(f"task {sender} asked for channel {channel}, which does not exist")
        except BaseException:
            writer.close()
            raise
        writer.write(_OK)
        return sender, channel, reader, writer

    async def _handshake(self, raw: asyncio.StreamWriter, peer: str) -> _Accepted | None:
        """The sender, channel and TLS stream of a connection that proved itself; ``None``
        (logged, closed) for one that did not within the deadline or was evicted."""
        me = asyncio.current_task()
        assert me is not None
        self._handshakes[me] = None
        if len(self._handshakes) > self._max_handshakes:
            self._cancel_handshake(next(iter(self._handshakes)), "busy")
        deadline = asyncio.get_running_loop().call_later(self._handshake_secs, self._cancel_handshake, me, "slow")
        try:
            try:
                return await self._authenticate(raw)
            except BaseException as exc:
                _drop_traceback_frames(exc)
                raise
        except asyncio.CancelledError:
            # Not re-raised: this is the stream's own task, and Python 3.11 logs one that ends
            # cancelled as an error.
            why = self._cancelled_why.get(me, "closing")
            if why == "closing":  # the listener or the loop is closing
                pass
            elif why == "busy":
                self._refuse(why, peer, f"{self._max_handshakes} handshakes in progress: the oldest, this, made way")
            else:
                self._refuse(why, peer, f"no handshake within {self._handshake_secs:g} s")
        except ssl.SSLError as exc:
            self._refuse("tls", peer, f"TLS handshake failed: {_tls_reason(exc)}")
        except StreamRefused as exc:
            self._refuse("identity", peer, str(exc))
        except (asyncio.IncompleteReadError, OSError):
            self._refuse("closed", peer, "it closed the connection during the handshake")
        finally:
            deadline.cancel()
            self._handshakes.pop(me, None)
            self._cancelled_why.pop(me, None)
        raw.close()
        return None

    def _cancel_handshake(self, handshake: asyncio.Task[Any], why: str) -> None:
        """Cancel ``handshake`` (still under way) and note ``why`` for its own task to log."""
        if self._handshakes.pop(handshake, False) is None:
            self._cancelled_why[handshake] = why
            handshake.cancel()

    async def _serve(self, _: asyncio.StreamReader, raw: asyncio.StreamWriter) -> None:
        peer = _peer(raw)
        accepted = await self._handshake(raw, peer)
        if accepted is None:
            return
        sender, channel, reader, writer = accepted
        self._streams.add(writer)
        control_credit, data_group = CREDIT.pack(CONTROL_CREDITS), self._data_credits
        uncredited = 0
        credit_timer: asyncio.TimerHandle | None = None

        def credit_data() -> None:
            nonlocal uncredited, credit_timer
            credit_timer = None
            if uncredited and not writer.is_closing():
                writer.write(CREDIT.pack(uncredited))
            uncredited = 0

        def finished_data() -> None:
            nonlocal uncredited, credit_timer
            uncredited += 1
            if uncredited >= data_group:
                if credit_timer is not None:
                    credit_timer.cancel()
                credit_data()
            elif credit_timer is None:
                credit_timer = asyncio.get_running_loop().call_later(CREDIT_DELAY_SECS, credit_data)

        def finished_control() -> None:
            nonlocal uncredited
            uncredited += 1
            if uncredited == CONTROL_CREDITS:
                uncredited = 0
                if not writer.is_closing():
                    writer.write(control_credit)

        finished = finished_control if channel == CONTROL else finished_data
        deliver, read, largest = self._deliver, reader.readexactly, self._max_frame_bytes
        try:
            while True:
                (size,) = FRAME.unpack(await read(FRAME.size))
                if size > largest:
                    self.refusals.warn(
                        "frame size",
                        f"task {self._task} closed the stream from task {sender} at {peer}: a frame of "
                        f"{size} bytes is over rayflow.stream.max.frame.bytes ({largest})",
                    )
                    break
                deliver(channel, sender, await read(size), finished)
        except ssl.SSLError as exc:  # a record altered, replayed or out of place: nothing of it was read
            self.refusals.warn(
                "tls", f"task {self._task} closed the stream from task {sender} at {peer}: {_tls_reason(exc)}"
            )
        except (asyncio.IncompleteReadError, OSError):
            pass  # the sender closed the stream or died
        except asyncio.CancelledError:
            pass  # the loop is closing (not re-raised: see _handshake)
        finally:
            if credit_timer is not None:
                credit_timer.cancel()
            self._streams.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()
