"""``NatsJetStreamSpout``: a JetStream stream read through a durable pull consumer; the message
is acked when its tree completes.

JetStream keeps, per consumer, every message delivered and not acknowledged, and redelivers
one once ``ack_wait`` passes without an ack (or at once after a ``nak``). That is the spout's
memory, so nothing is lost when a spout dies:

- Storm ack -> ``ack``; Storm fail -> ``nak`` (JetStream redelivers it, to any task of the
  spout: several tasks share one durable consumer), or ``term`` once the message was replayed
  ``max_replays`` times (a dead letter: JetStream stops redelivering it and publishes an
  advisory on ``$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.<stream>.<durable>``). Replays are
  counted by the server (``num_delivered``), so a restart does not reset them;
- a tree still pending (a long one, or one whose timeout a bolt reset with
  ``reset_timeout``: rayflow does not tell a spout of that) is kept from redelivery with
  ``in_progress`` once it is held for half the consumer's ``ack_wait``;
- the consumer is created when missing (explicit acks, every message of the stream or of
  ``subject``, ``ack_wait`` the topology's message timeout and a quarter, ``max_ack_pending``
  ``max_spout_pending`` and a quarter); one that exists is used as it is. The stream must exist.

How it stays off the event loop's back: nats-py is asyncio, and ``next_tuple`` is a plain call
on the task's own loop, which must never wait for the broker. So the client runs on an event
loop of its own, in a thread the spout starts at ``open`` (the same on Ray, in the in-process
runner and in a test): while the buffer runs low it sends a pull request for ``batch``
messages (JetStream's ``CONSUMER.MSG.NEXT``, answered to an inbox whose callback fills the
buffer), ``next_tuple`` emits from the buffer (up to ``EMIT_BURST`` per call), and acks, naks,
terms and ``in_progress`` are handed to the client's loop in batches, so a message costs the
task a list append, and a batch one wake-up of the client thread. A lost connection is
retried by nats-py; a refused first connect, a missing stream or consumer is retried with
backoff; either is reported once per outage (``collector.report_error``, from the task).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, Header, StatusCode
from nats.js.client import JetStreamContext

from .._collectors import SpoutOutputCollector
from .._components import OutputFieldsDeclarer, Spout
from .._context import TopologyContext
from .._errors import ConfigError
from ._dead_letters import DEFAULT_MAX_REPLAYS, replay_bound
from ._outage import Outage
from ._wire import redact_url, scheme, text_or_bytes, url_scheme

__all__ = ["MESSAGE_FIELDS", "NatsJetStreamSpout"]

logger = logging.getLogger("rayflow.connectors")

MESSAGE_FIELDS = ("subject", "data", "headers", "sequence", "num_delivered", "stream")
"""What a ``fields`` entry may name: the message's subject, its payload (``str`` when UTF-8,
else ``bytes``), its headers (a dict, or ``None``), its sequence in the stream, how often it
was delivered (1 the first time), or the stream's name."""

DEFAULT_BATCH = 500
"""Messages asked for per pull (fewer when ``max_spout_pending`` is lower)."""
EMIT_BURST = 64
"""Messages ``next_tuple`` emits per call at most, and at most a 64th of ``max_spout_pending``:
the executor checks the pending budget between calls."""
ACK_BATCH = 500
ACK_LINGER_SECS = 0.01
"""Acks are handed to the client thread when this many wait, or this long after the previous
hand-over (checked on every ack and ``next_tuple``)."""
FETCH_WAIT_SECS = 1.0
"""How long one pull request waits for messages when the stream has too few (its ``expires``)."""
REQUEST_SLACK_SECS = 1.0
"""A pull request that has not ended this long after its ``expires`` is taken for lost."""
STATUS_HEADER = Header.STATUS
DESCRIPTION_HEADER = Header.DESCRIPTION
HEARTBEAT_STATUS = StatusCode.CONTROL_MESSAGE
REQUEST_OVER_STATUSES = (StatusCode.NO_MESSAGES, StatusCode.REQUEST_TIMEOUT, StatusCode.CONFLICT)
"""Status messages that end a pull request and are no fault: no messages (404), ``expires``
reached (408), and the conflicts (409) a request can meet, such as too many acks pending."""
ACK_WAIT_SLACK = 1.25
"""The ``ack_wait`` of a consumer the spout creates: the topology's message timeout times this,
so a tree times out in rayflow before JetStream redelivers its message."""
PENDING_SLACK = 1.25
UNBOUNDED_ACK_PENDING = 20_000
"""A created consumer's ``max_ack_pending``: ``max_spout_pending`` and a quarter, or this."""
CONNECT_TIMEOUT_SECS = 3.0
CLOSE_TIMEOUT_SECS = 5.0
"""The longest ``close`` waits for the client to send what waits and disconnect."""

_Op = tuple[str, Msg]
"""A settlement for the client thread: ``("ack" | "nak" | "term" | "in_progress", message)``."""


class NatsJetStreamSpout(Spout):
    """Read ``stream`` through durable pull consumer ``durable``; one tuple per message.

    - Storm ack -> ``ack``; Storm fail (either reason) -> ``nak``: the server delivers the
      message again, at most ``max_replays`` times (default 10; ``None`` or -1: no bound),
      after which it is ``term``-ed (a dead letter: the stream keeps it, JetStream publishes a
      ``MSG_TERMINATED`` advisory). Each dead letter is counted in the metrics
      (``dead_lettered``) and logged with the message's stream sequence and the last fail's
      reason. The count is the server's (``num_delivered``): it survives restarts (a message
      a dead task held counts one delivery more, as its tree was lost).
    - ``subject`` filters the stream (a consumer created by the spout only).
    - ``fields`` names the output fields, each one of ``MESSAGE_FIELDS``.
    - ``batch``: messages per pull request.
    - A tree pending for half the consumer's ``ack_wait`` is kept alive with ``in_progress``.

    Example (the stream exists, e.g. ``nats stream add ORDERS --subjects 'orders.>'``)::

        builder.set_spout("orders", NatsJetStreamSpout("ORDERS", "rayflow"), parallelism=2)
    """

    def __init__(
        self,
        stream: str,
        durable: str,
        *,
        url: str = "nats://127.0.0.1:4222",
        subject: str | None = None,
        fields: Sequence[str] = ("subject", "data"),
        batch: int = DEFAULT_BATCH,
        max_replays: int | None = DEFAULT_MAX_REPLAYS,
    ) -> None:
        for name, value in (("stream", stream), ("durable", durable)):
            if not isinstance(value, str) or not value or any(c in value for c in " .*>"):
                raise ConfigError(
                    f"NatsJetStreamSpout: {name} must be a non-empty name without spaces, '.', '*' or '>', "
                    f"got {value!r}"
                )
        where = f"NatsJetStreamSpout {stream!r}"
        if scheme(url) not in ("nats", "tls", "ws", "wss"):
            raise ConfigError(f"{where}: url must be a nats://, tls://, ws:// or wss:// URL, got {url_scheme(url)}")
        if subject is not None and (not isinstance(subject, str) or not subject):
            raise ConfigError(f"{where}: subject must be a non-empty subject (or None for all), got {subject!r}")
        if isinstance(fields, str) or not fields:
            raise ConfigError(f"{where}: fields must be a non-empty list of names, got {fields!r}")
        unknown = [f for f in fields if f not in MESSAGE_FIELDS]
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {unknown}; a field is one of {list(MESSAGE_FIELDS)}")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ConfigError(f"{where}: batch must be a positive int (messages per pull), got {batch!r}")
        self.stream = stream
        self.durable = durable
        self.url = url
        self.subject = subject
        self.fields = tuple(fields)
        self.batch = batch
        self.max_replays = replay_bound(where, max_replays)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(list(self.fields))

    # -- lifecycle (the task's thread) --------------------------------------------------------
    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self._collector = collector
        pending_cap = conf.get("max_spout_pending")
        self._fetch = min(self.batch, max(1, pending_cap // 2)) if pending_cap else self.batch
        self._burst = max(1, min(EMIT_BURST, pending_cap // 64)) if pending_cap else EMIT_BURST
        self._ack_wait = ACK_WAIT_SLACK * float(conf.get("message_timeout_secs") or 30.0)
        self._max_ack_pending = int(pending_cap * PENDING_SLACK) if pending_cap else UNBOUNDED_ACK_PENDING
        self._buffer: deque[Msg] = deque()
        """Fetched by the client thread, not emitted yet."""
        self._young: dict[str, Msg] = {}
        self._old: dict[str, Msg] = {}
        """Emitted messages whose trees are pending, by reply subject (the ``msg_id``): those
        emitted since the last sweep, and those held since before it (``_sweep``)."""
        self._ops: list[_Op] = []
        self._handed_at = time.monotonic()
        self._sweep_every = self._ack_wait / 4.0
        self._sweep_at = time.monotonic() + self._sweep_every
        self._errors: deque[BaseException] = deque()
        self._active = True
        self._stopping = False
        self.replayed = 0
        """Messages failed and handed back for redelivery (``nak``)."""
        collector.count("dead_lettered", 0)
        self._outage = Outage(
            f"NatsJetStreamSpout {self.stream!r} consumer {self.durable!r} task {context.this_task_id} "
            f"({redact_url(self.url)})",
            self._errors.append,
        )
        self._loop = asyncio.new_event_loop()
        self._room = asyncio.Event()
        self._room_asked = False
        self._requested = 0
        """Messages the pull request under way may still bring (the client thread's)."""
        self._shut = asyncio.Event()
        self._client: Client | None = None
        self._thread = threading.Thread(target=self._run_client, name=f"nats-{self.stream}", daemon=True)
        self._thread.start()

    def activate(self) -> None:
        self._active = True
        self._ask_for_room()

    def deactivate(self) -> None:
        """Stop pulling; what was pulled waits for ``activate``. The acks waiting go out."""
        self._active = False
        self._hand_over()

    def close(self) -> None:
        """Send what waits (buffered messages are ``nak``-ed, to come again at once), then
        disconnect; the server redelivers the pending trees' messages after ``ack_wait``."""
        self._stopping = True
        self._ops += [("nak", msg) for msg in self._buffer]
        self._buffer.clear()
        ops, self._ops = self._ops, []
        if not self._loop.is_closed():
            future = asyncio.run_coroutine_threadsafe(self._shutdown(ops), self._loop)
            try:
                future.result(timeout=CLOSE_TIMEOUT_SECS)
            except Exception as exc:  # closing must finish whatever the client says
                logger.warning("%s: close: %s: %s", self._outage.where, type(exc).__name__, exc)
        self._thread.join(timeout=CLOSE_TIMEOUT_SECS)

    # -- emitting -----------------------------------------------------------------------------
    def next_tuple(self) -> None:
        while self._errors:
            self._collector.report_error(self._errors.popleft())
        now = time.monotonic()
        if self._ops and now - self._handed_at >= ACK_LINGER_SECS:
            self._hand_over()
        if now >= self._sweep_at:
            self._sweep(now)
        buffer = self._buffer
        if not buffer:
            self._ask_for_room()
            return
        emit, young = self._collector.emit, self._young
        for _ in range(min(len(buffer), self._burst)):
            msg = buffer.popleft()
            young[msg.reply] = msg
            emit(self._values(msg), msg_id=msg.reply)
        if len(buffer) < self._fetch:
            self._ask_for_room()

    def _values(self, msg: Msg) -> list[Any]:
        values: list[Any] = []
        for field in self.fields:
            if field == "data":
                values.append(text_or_bytes(msg.data))
            elif field == "subject":
                values.append(msg.subject)
            elif field == "headers":
                values.append(dict(msg.headers) if msg.headers else None)
            elif field == "sequence":
                values.append(msg.metadata.sequence.stream)
            elif field == "num_delivered":
                values.append(msg.metadata.num_delivered)
            else:
                values.append(self.stream)
        return values

    def _sweep(self, now: float) -> None:
        """Messages held since the previous sweep (at least ``ack_wait / 4`` ago, at most half
        of it) get ``in_progress``, so JetStream does not redeliver a tree still pending; so do
        the messages waiting in the buffer (while the pending budget is spent)."""
        self._sweep_at = now + self._sweep_every
        self._ops += [("in_progress", msg) for msg in self._old.values()]
        self._ops += [("in_progress", msg) for msg in list(self._buffer)]  # one C call: safe from the client thread
        self._old.update(self._young)
        self._young = {}
        if self._ops:
            self._hand_over()

    # -- results ------------------------------------------------------------------------------
    def _pop(self, msg_id: Any) -> Msg | None:
        return self._young.pop(msg_id, None) or self._old.pop(msg_id, None)

    def ack(self, msg_id: Any) -> None:
        msg = self._pop(msg_id)
        if msg is None:
            return
        self._ops.append(("ack", msg))
        if len(self._ops) >= ACK_BATCH or time.monotonic() - self._handed_at >= ACK_LINGER_SECS:
            self._hand_over()

    def fail(self, msg_id: Any, reason: str = "failed") -> None:
        """``nak`` the message, or ``term`` it once it was replayed ``max_replays`` times."""
        msg = self._pop(msg_id)
        if msg is None:
            return
        metadata = msg.metadata
        replays = metadata.num_delivered - 1
        if self.max_replays is not None and replays >= self.max_replays:
            self._ops.append(("term", msg))
            self._collector.count("dead_lettered")
            logger.warning(
                "%s: message %d (subject %r) failed after %d replays (last: %s); terminated (dead-lettered)",
                self._outage.where,
                metadata.sequence.stream,
                msg.subject,
                replays,
                reason,
            )
        else:
            self._ops.append(("nak", msg))
            self.replayed += 1
        self._hand_over()

    # -- handing work to the client thread ----------------------------------------------------
    def _hand_over(self) -> None:
        self._handed_at = time.monotonic()
        if not self._ops:
            return
        ops, self._ops = self._ops, []
        self._call_soon(self._spawn, self._settle(ops))

    def _ask_for_room(self) -> None:
        if not self._room_asked and self._active and not self._stopping:
            self._room_asked = True
            self._call_soon(self._room.set)

    def _call_soon(self, action: Callable[..., object], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(action, *args)
        except RuntimeError:  # the client's loop is closed (the spout is closing)
            for arg in args:
                if isinstance(arg, Coroutine):
                    arg.close()

    # -- the client thread --------------------------------------------------------------------
    def _run_client(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        """Pull until ``close`` says it is over (``_shutdown``), then stop pulling."""
        pull = asyncio.create_task(self._pull())
        await self._shut.wait()
        pull.cancel()
        try:
            await pull
        except asyncio.CancelledError:
            pass

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self._loop.create_task(work)

    async def _settle(self, ops: list[_Op]) -> None:
        for op, msg in ops:
            try:
                await getattr(msg, op)()
            except (nats.errors.Error, OSError) as exc:  # redelivered after ack_wait: at-least-once
                logger.debug("%s: %s of %s: %s", self._outage.where, op, msg.reply, exc)

    async def _pull(self) -> None:
        """Connect, bind the consumer, pull while the buffer runs low; start over with backoff
        after a failure (a refused connect, a missing stream)."""
        while not self._stopping:
            try:
                if self._client is None or self._client.is_closed:
                    self._client = await nats.connect(
                        self.url,
                        connect_timeout=CONNECT_TIMEOUT_SECS,
                        max_reconnect_attempts=-1,
                        allow_reconnect=True,
                        disconnected_cb=self._disconnected,
                        reconnected_cb=self._reconnected,
                        error_cb=self._client_error,
                    )
                js = self._client.jetstream()
                await self._ensure_consumer(js)
                self._outage.recovered()
                await self._pull_from(self._client, js)
            except (nats.errors.Error, OSError, asyncio.TimeoutError) as exc:
                if self._stopping:
                    return
                self._outage.failed(exc)
                await self._back_off()

    async def _ensure_consumer(self, js: JetStreamContext) -> None:
        try:
            await js.consumer_info(self.stream, self.durable)
        except nats.js.errors.NotFoundError:
            config = ConsumerConfig(
                durable_name=self.durable,
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.ALL,
                ack_wait=self._ack_wait,
                max_ack_pending=self._max_ack_pending,
                max_deliver=-1,
                filter_subject=self.subject,
            )
            await js.add_consumer(self.stream, config)

    async def _pull_from(self, client: Client, js: JetStreamContext) -> None:
        """Pull requests, one at a time, each for up to ``_fetch`` messages, sent while the
        buffer runs low. The messages (and the request's end: a status message) come to an
        inbox subscription whose callback puts them in the buffer: nats-py's ``fetch`` waits
        for each message with a timer of its own, which costs several times the CPU."""
        buffer = self._buffer
        request_over = asyncio.Event()
        failure: list[BaseException] = []

        async def on_message(msg: Msg) -> None:
            status = msg.headers.get(STATUS_HEADER) if msg.headers else None
            if status is None:
                buffer.append(msg)
                self._requested -= 1
                if self._requested <= 0:
                    request_over.set()
            elif status != HEARTBEAT_STATUS:
                if status not in REQUEST_OVER_STATUSES:
                    description = msg.headers.get(DESCRIPTION_HEADER, "") if msg.headers else ""
                    failure.append(nats.js.errors.APIError(code=int(status), description=description))
                request_over.set()

        inbox = client.new_inbox()
        subscription = await client.subscribe(inbox, cb=on_message)
        request = json.dumps({"batch": self._fetch, "expires": int(FETCH_WAIT_SECS * 1e9)}).encode()
        subject = f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self.durable}"
        try:
            while not self._stopping:
                if not self._active or len(buffer) >= self._fetch:
                    self._room.clear()
                    self._room_asked = False
                    if not self._active or len(buffer) >= self._fetch:
                        await self._room.wait()
                    continue
                request_over.clear()
                self._requested = self._fetch
                await client.publish(subject, request, reply=inbox)
                try:
                    await asyncio.wait_for(request_over.wait(), FETCH_WAIT_SECS + REQUEST_SLACK_SECS)
                except asyncio.TimeoutError:  # the request was lost (a reconnect?): is the consumer there?
                    await js.consumer_info(self.stream, self.durable)
                if failure:
                    raise failure.pop()
        finally:
            try:
                await subscription.unsubscribe()
            except nats.errors.Error as exc:
                logger.debug("%s: unsubscribe: %s", self._outage.where, exc)

    async def _back_off(self) -> None:
        """Sleep until the outage's next attempt is due (``close`` wakes it)."""
        while not self._stopping and not self._outage.due():
            await asyncio.sleep(0.05)

    async def _disconnected(self) -> None:
        if not self._stopping:
            self._outage.failed(ConnectionError("disconnected; nats-py reconnects"))

    async def _reconnected(self) -> None:
        self._outage.recovered()

    async def _client_error(self, exc: Exception) -> None:
        """nats-py's errors; while it is not connected (a first connect it keeps retrying), an
        outage."""
        if self._client is None and not self._stopping:
            self._outage.failed(exc)
        else:
            logger.debug("%s: %s: %s", self._outage.where, type(exc).__name__, exc)

    async def _shutdown(self, ops: list[_Op]) -> None:
        """``close``: settle what waits, flush it, disconnect, and end ``_main``."""
        try:
            await self._settle(ops)
            client = self._client
            if client is not None and not client.is_closed:
                try:
                    await client.flush(timeout=2)
                except (nats.errors.Error, OSError, asyncio.TimeoutError) as exc:
                    logger.debug("%s: flush at close: %s", self._outage.where, exc)
                await client.close()
        finally:
            self._shut.set()
