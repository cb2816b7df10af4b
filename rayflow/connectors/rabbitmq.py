"""``RabbitMQSpout``: a queue's messages as tracked tuples; the broker ack waits for the tree.

Storm's reliability model meets AMQP's: a message is delivered unacknowledged, emitted with a
``msg_id``, and acknowledged to the broker only when its tuple tree completes; if the spout
dies, the broker requeues everything it had not acked. That is at-least-once from the queue to
the end of the topology.

A failed tree (an explicit fail, or a timeout) is replayed, at most ``max_replays`` times per
message, and then dead-lettered: ``basic_reject(requeue=False)``, which hands the message to
the queue's dead-letter exchange (``x-dead-letter-exchange``; without one the broker drops it).
Who counts the replays:

- the broker, when it says how often it delivered a message (a quorum queue's
  ``x-delivery-count`` header): a failed message goes back to the queue
  (``basic_nack(requeue=True)``), and its count survives restarts;
- else (a classic queue) the spout: it keeps the delivery, unsettled, and emits it again
  itself, counting. A message the broker redelivers (``redelivered``: its consumer died, or
  it was handed back) starts at one replay; what the spout counted before is forgotten.

Which of the two a queue is shows on the first message that comes back from the broker (with
the header or without it); until then a fail hands the message back, which is exact either way
(the redelivery carries the header, or it is a redelivery: one replay).

How it stays off the event loop's back: the connection is a ``QueueConsumer`` (``_amqp``), which
reads deliveries straight off a non-blocking socket and writes acks without waiting (pika still
reads the URL, so a URL means what it means to pika). Every use of the connection happens on the
task's one thread (``next_tuple``, ``ack``, ``fail``, ``upkeep`` and the lifecycle calls). Connecting is not
quick (a TCP connect, the AMQP handshake, opening the channel: seconds against a broker that does
not answer), so the spout connects on a thread of its own, the first time (``open`` starts it and
returns) as after an outage, and ``next_tuple`` and ``upkeep`` only look whether that is done;
the connection is the task thread's alone from then on. ``deactivate`` cancels the consumer
without waiting for the broker's ``cancel-ok`` (what arrives for the cancelled consumer is
handed back as ``upkeep`` reads it). Only ``close`` waits, at most ``CLOSE_WAIT_SECS``, for
the broker's ``close-ok``, so that the last acks arrive and are counted; a connection found
lost is closed without waiting. The broker pushes up to ``prefetch`` unacked
messages, they wait in a local buffer and ``next_tuple`` emits them, up to ``EMIT_BURST`` per
call. ``upkeep`` (``_upkeep``), every ``UPKEEP_SECS`` whether or not ``next_tuple`` is called
(the pending budget spent, the spout deactivated), writes the heartbeats, flushes the acks that
waited their linger, reads what arrived and takes a new connection once it is made: a bolt
slower than the broker's heartbeat timeout does not cost the connection.

Broker acks go out in batches, since one ``basic_ack`` per message costs a socket write each:

- a Storm ack only marks the delivery tag done; the done tags go to the broker once
  ``ack_batch`` of them wait, or ``ACK_LINGER_SECS`` after the previous flush (checked on every
  ack and ``next_tuple``), and at ``deactivate`` and ``close``;
- trees complete out of order, and ``basic_ack(tag, multiple=True)`` settles *every* delivery up
  to ``tag``: which acks may go is the bookkeeping of ``AckWatermark`` (``_amqp.ack_watermark``),
  one ``multiple=True`` ack below the lowest tag still open, a done tag above it on its own
  once it waited ``ACK_HOLD_SECS`` or too many wait;
- a failed tag replayed by the spout stays open; a failed tag handed back or dead-lettered is
  settled (``basic_nack`` or ``basic_reject``) at once, so before any ``multiple=True`` ack
  passes it. No tag is settled twice, none before its tree completes.

Delivery tags are numbers of one channel. After a reconnect the broker has already requeued
what the old channel held, so the ``msg_id`` is ``(channel generation, delivery tag)`` and acks
or fails for an older generation are dropped (their messages come again, at-least-once).

Exactly-once (``processing_guarantee="exactly_once"``). A queue cannot rewind, but a message the
broker has not heard an ack for is still the spout's to give back: ``ack`` comes only when the
checkpoint covering the message commits, so every message emitted since the last commit is
unacked, and a rollback (``seek``) hands those back to the queue (``basic.nack``, requeue) to be
delivered again, to this task or another. The ``msg_id`` is then a number of the spout's own
(the same message may arrive on a later channel). What a rollback cannot undo is an ack the
broker never got: a task killed between a commit and its acks' write, or a connection lost
with acks on it, and the broker delivers those messages again although they were counted. So
the position taken at each checkpoint holds the AMQP ``message_id`` of every message the
checkpoint covers whose ack the broker may not have, and a message redelivered (``redelivered``
set) with one of those ids is acked at once, not emitted. An id leaves that set once the broker
has confirmed the ack (``QueueConsumer.sync``: its reply means every ack written before it was
handled), or ``RECOGNISE_SECS`` after its ack's channel was lost (the broker redelivers what a
lost channel held at once). A message without a ``message_id`` cannot be recognised: after a
lost ack it is counted again (the spout says so in its log). A connection lost while messages
of the coming checkpoint were unacked on it (the broker has requeued them, and will deliver
them again) makes the next ``position()`` raise, which fails that checkpoint and takes the
topology back to the last one: nothing emitted on the lost channel is committed.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pika

from .._collectors import SpoutOutputCollector
from .._components import OutputFieldsDeclarer, Spout
from .._context import TopologyContext
from .._errors import ConfigError
from ._amqp.ack_watermark import AckWatermark
from ._amqp.codec import Delivery
from ._amqp.consumer import QueueConsumer
from ._amqp.errors import AmqpError, ConsumerCancelled
from ._connecting import Connecting
from ._dead_letters import DEFAULT_MAX_REPLAYS, replay_bound
from ._errors import BrokerError
from ._outage import Outage
from ._upkeep import Upkeep
from ._wire import CUT_USER_INFO, cut_user_info, redact_url, scheme, text_or_bytes, url_scheme

__all__ = ["MESSAGE_FIELDS", "RabbitMQSpout"]

logger = logging.getLogger("rayflow.connectors")

MESSAGE_FIELDS = (
    "body",
    "routing_key",
    "exchange",
    "redelivered",
    "headers",
    "message_id",
    "correlation_id",
    "content_type",
    "timestamp",
)
"""What a ``fields`` entry may name: the body (``str`` when UTF-8, else ``bytes``), the
delivery's routing key, exchange and redelivered flag, or one of the message properties."""

MAX_PREFETCH = 65_535
"""AMQP's ``prefetch_count`` is a 16-bit number."""
PREFETCH_SLACK = 1.25
"""Default prefetch: ``max_spout_pending`` and a quarter more, so that messages are waiting
locally while the acks of the pending trees travel back to the broker."""
EMIT_BURST = 64
"""Messages ``next_tuple`` emits per call at most, and at most a 64th of the prefetch: the
executor checks the pending budget between calls, so a task may hold up to one burst of trees
over ``max_spout_pending`` (under 2% of it with the default prefetch; none with a prefetch
under 128)."""
ACK_BATCH = 500
ACK_LINGER_SECS = 0.05
"""Broker acks go out when this many Storm acks wait (fewer with a small prefetch: a quarter of
it), or this long after the previous flush."""
ACK_HOLD_SECS = 0.5
"""How long a done tag above the watermark (``AckWatermark``) waits for a ``multiple=True`` ack
before it is acked on its own."""
UPKEEP_SECS = 0.1
"""How often ``upkeep`` runs: a small fraction of any heartbeat interval (1 s at the least),
and about twice the ack linger."""
CONNECT_TIMEOUT_SECS = 3.0
"""Socket timeout for a (re)connect, which runs on the spout's connecting thread."""
CLOSE_WAIT_SECS = 0.5
"""How long ``close`` waits for the broker's ``close-ok`` on the task's thread: a live broker
answers in milliseconds (it first handles the acks written before), a silent one must not hold
the task for the connect timeout. Without the ``close-ok`` the last acks are not counted as
``broker_acked``; the broker requeues what it did not get."""
RECOGNISE_SECS = 60.0
"""Exactly-once: how long a committed message whose ack may be lost (its channel is gone, or
the task restarted) is recognised when it is delivered again. The broker requeues what a lost
channel held at once, so it comes back within a checkpoint or two."""

DELIVERY_COUNT_HEADER = "x-delivery-count"
"""Set by quorum queues: how often the broker delivered the message before (nacked back, or
unacked when its consumer went away)."""

_BROKEN = (OSError, AmqpError)
"""What a lost or refused connection raises: the socket's errors, and ``QueueConsumer``'s own
(lost, closed by the broker, consumer cancelled)."""


class RabbitMQSpout(Spout):
    """Consume ``queue``; one tuple per message, tracked by its delivery tag.

    - Storm ack -> ``basic_ack``, batched (``multiple=True`` up to the lowest open delivery tag,
      within ``ACK_LINGER_SECS``); Storm fail (either reason) -> the message is replayed, at
      most ``max_replays`` times (default 10; ``None`` or -1: no bound), then rejected without
      requeue, to the queue's dead-letter exchange (declare the queue with
      ``x-dead-letter-exchange``, or the broker drops it). A quorum queue counts the replays
      itself (``x-delivery-count``: each fail requeues the message, and the count survives
      restarts); on a classic queue the spout keeps the message and emits it again, counting
      within its life (a message redelivered after a restart starts at one replay). Each dead
      letter is counted in the metrics (``dead_lettered``) and logged with the message's id
      and the last fail's reason. The ``redelivered`` field is the broker's flag: unchanged
      on the spout's own replays.
    - A dead spout's unacked messages are redelivered by the broker (to any consumer).
    - ``fields`` names the output fields, each one of ``MESSAGE_FIELDS``.
    - ``prefetch`` bounds the unacked messages the broker pushes to one task; by default
      ``max_spout_pending`` and a quarter, at most 65,535.
    - A lost or refused connection is retried with backoff (0.1 s doubling to 5 s) and reported
      once per outage (``collector.report_error``); the queue must exist (a missing queue is
      reported the same way, and picked up once it is declared), unless ``declare=True``: then
      the spout declares it, durable, on every connect (a queue that exists with other
      arguments is refused by the broker, and reported as above).
    - ``deactivate`` stops the deliveries, hands the not-yet-emitted messages back to the queue
      and sends the acks waiting; the pending trees still get their acks. ``close`` sends the
      acks waiting, then closes: the broker requeues what is still unacked.
    - Exactly-once: a message is acked once its checkpoint commits and handed back to the queue
      on a rollback; one delivered again after a commit whose ack was lost is recognised by its
      ``message_id`` (publish one per message) and acked, not emitted (the module docstring).

    Example (the queue is declared beforehand, e.g. by the producer)::

        builder.set_spout("events", RabbitMQSpout("events", prefetch=500), parallelism=2)
    """

    acks_to_broker = True
    """Its broker keeps each message until the spout acks it: with ``ackers=0`` that ack comes at
    emit (at-most-once), and submitting warns of it (``_run_checks``)."""

    def __init__(
        self,
        queue: str,
        *,
        url: str = "amqp://guest:guest@127.0.0.1:5672/%2F",
        fields: Sequence[str] = ("body",),
        prefetch: int | None = None,
        declare: bool = False,
        max_replays: int | None = DEFAULT_MAX_REPLAYS,
    ) -> None:
        if not isinstance(queue, str) or not queue:
            raise ConfigError(f"RabbitMQSpout: queue must be a non-empty string, got {queue!r}")
        if scheme(url) not in ("amqp", "amqps"):
            raise ConfigError(f"RabbitMQSpout {queue!r}: url must be an amqp:// or amqps:// URL, got {url_scheme(url)}")
        if cut_user_info(url):
            raise ConfigError(f"RabbitMQSpout {queue!r}: url {CUT_USER_INFO}")
        if isinstance(fields, str) or not fields:
            raise ConfigError(f"RabbitMQSpout {queue!r}: fields must be a non-empty list of names, got {fields!r}")
        unknown = [f for f in fields if f not in MESSAGE_FIELDS]
        if unknown:
            raise ConfigError(
                f"RabbitMQSpout {queue!r}: unknown field(s) {unknown}; a field is one of {list(MESSAGE_FIELDS)}"
            )
        if prefetch is not None and (
            isinstance(prefetch, bool) or not isinstance(prefetch, int) or not 1 <= prefetch <= MAX_PREFETCH
        ):
            raise ConfigError(
                f"RabbitMQSpout {queue!r}: prefetch must be an int from 1 to {MAX_PREFETCH}, got {prefetch!r}"
            )
        self.queue = queue
        self.url = url
        self.fields = tuple(fields)
        self.prefetch = prefetch
        self.declare = bool(declare)
        self.max_replays = replay_bound(f"RabbitMQSpout {queue!r}", max_replays)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(list(self.fields))

    # -- lifecycle ----------------------------------------------------------------------------
    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self._collector = collector
        self._prefetch = self.prefetch or _default_prefetch(conf.get("max_spout_pending"))
        self._connection: QueueConsumer | None = None
        self._generation = 0
        self._buffer: deque[Delivery] = deque()
        self._burst = max(1, min(EMIT_BURST, self._prefetch // 64))
        self._ack_batch = max(1, min(ACK_BATCH, self._prefetch // 4))
        self._acks = AckWatermark(hold_cap=max(1, self._prefetch // 8), hold_secs=ACK_HOLD_SECS)
        """The delivery tags of the channel: open (pending trees, the buffer), done, settled."""
        self._held: dict[int, Delivery] = {}
        """The emitted deliveries whose trees are pending, by tag: what a replay emits again."""
        self._replays: dict[int, int] = {}
        """Replays the spout made itself of its open tags (a classic queue)."""
        self._broker_counts: bool | None = None
        """Does the queue count deliveries (``x-delivery-count``)? Unknown until a message
        comes back from the broker."""
        collector.count("dead_lettered", 0)
        collector.count("broker_acked", 0)
        self._acks_to_confirm: deque[tuple[int, int]] = deque()
        """(sync, messages) of the acks written on the live channel: counted as ``broker_acked``
        once the broker's reply to that sync says it handled them (``_receive``), or at a close
        the broker confirmed; forgotten with a lost channel (they may not have arrived)."""
        self._flushed_at = time.monotonic()
        self._active = True
        self.stale_acks = 0
        """Acks and fails dropped because their channel is gone (the broker redelivered them)."""
        where = f"RabbitMQSpout {self.queue!r} task {context.this_task_id} ({redact_url(self.url)})"
        self._outage = Outage(where, collector.report_error)
        self._connecting = Connecting(
            self._open_channel, QueueConsumer.close, "rayflow-rabbitmq-connect", due=self._outage.due
        )
        """The connection being made on a thread of its own after an outage."""
        self._plain_body = self.fields == ("body",)
        self._exactly_once = conf.get("processing_guarantee") == "exactly_once"
        self._serials = itertools.count(1)
        self._emitted: dict[int, tuple[int, int, str | None]] = {}
        """Exactly-once: the messages emitted and not committed, by ``msg_id``: (channel
        generation, delivery tag, ``message_id``)."""
        self._committed: dict[str, float] = {}
        """Exactly-once: the ``message_id``s of committed messages whose ack the broker may not
        have, and until when to recognise each (infinity while its ack waits for the broker's
        confirmation on the live channel)."""
        self._unwritten: dict[int, str] = {}
        """Exactly-once: delivery tag -> ``message_id`` of the committed messages whose ack is
        not written yet."""
        self._confirming: deque[tuple[int, list[str]]] = deque()
        """Exactly-once: (sync, ``message_id``s) of acks written, waiting for that sync."""
        self._roll_back_why: str | None = None
        """Exactly-once: why the next checkpoint must fail (``position`` raises)."""
        self._sought = False
        self._warned_anonymous = False
        self.recognised = 0
        """Exactly-once: messages delivered again after their checkpoint committed, acked and
        not emitted."""
        self._upkeep = Upkeep(self.upkeep, UPKEEP_SECS, collector.report_error)
        self._connecting.start()
        self._upkeep.start()

    def activate(self) -> None:
        self._active = True
        if self._connection is not None and not self._connection.consuming:
            self._call_or_outage(self._connection.consume, self.queue)

    def deactivate(self) -> None:
        self._active = False
        if self._connection is not None and self._connection.consuming:
            self._call_or_outage(self._stop_consuming)
        self._call_or_outage(self._flush_acks, True)

    def close(self) -> None:
        """Send the acks waiting and close the connection: the broker requeues every message
        not acked yet."""
        try:
            self._flush_acks(everything=True)
        except _BROKEN as exc:
            logger.debug("%s: acks at close: %s", self._outage.where, exc)
        self._upkeep.stop()
        self._disconnect(CLOSE_WAIT_SECS)
        self._connecting.close()

    def _disconnect(self, wait_secs: float = 0.0) -> None:
        """Forget the connection and what it delivered; close it, waiting ``wait_secs`` at most
        for the broker's ``close-ok`` (which counts the acks written as ``broker_acked``)."""
        connection, self._connection = self._connection, None
        if self._exactly_once:
            self._channel_lost()
        self._buffer.clear()
        self._held.clear()
        self._replays.clear()
        self.stale_acks += self._acks.clear()
        if connection is not None and connection.close(wait_secs):  # close-ok: every ack written was handled
            self._count_acks()
        self._acks_to_confirm.clear()

    def _count_acks(self, synced: float = float("inf")) -> None:
        """Count as ``broker_acked`` the acks the broker said it handled: those written before
        sync ``synced``."""
        confirmed = 0
        while self._acks_to_confirm and self._acks_to_confirm[0][0] <= synced:
            confirmed += self._acks_to_confirm.popleft()[1]
        self._collector.count("broker_acked", confirmed)

    # -- emitting -----------------------------------------------------------------------------
    def next_tuple(self) -> None:
        if self._connection is None:
            self._reconnect()
            return
        if self._acks.waiting and time.monotonic() - self._flushed_at >= ACK_LINGER_SECS:
            self._call_or_outage(self._flush_acks)
        buffer = self._buffer
        if not buffer and self._connection is not None:
            self._receive(self._connection)
        if self._exactly_once:
            self._emit_exactly_once(buffer)
            return
        emit, held, generation = self._collector.emit, self._held, self._generation
        for _ in range(min(len(buffer), self._burst)):
            delivery = buffer.popleft()
            held[delivery.tag] = delivery
            values = [text_or_bytes(delivery.body)] if self._plain_body else self._values(delivery)
            emit(values, msg_id=(generation, delivery.tag))

    def upkeep(self) -> None:
        """What keeps the connection alive and the broker informed, whether or not
        ``next_tuple`` is called (``_upkeep``); never waits: the heartbeat when due (in
        ``poll``, which also reads what arrived into the buffer: the prefetch bounds it), the
        acks that waited their linger, a new connection once made."""
        if self._connection is None:
            self._reconnect()
            return
        if self._acks.waiting and time.monotonic() - self._flushed_at >= ACK_LINGER_SECS:
            self._call_or_outage(self._flush_acks)
        if self._connection is not None:
            self._receive(self._connection)

    def _receive(self, connection: QueueConsumer) -> None:
        """Take what the broker delivered into the buffer (never waits)."""
        try:
            deliveries = connection.poll()
        except ConsumerCancelled as exc:
            self._lost(ConsumerCancelled(f"{exc} (queue {self.queue!r}; the spout consumes again once it exists)"))
            return
        except _BROKEN as exc:
            self._lost(exc)
            return
        if self._acks_to_confirm and self._acks_to_confirm[0][0] <= connection.synced:
            self._count_acks(connection.synced)
        if self._confirming:
            self._confirmed(connection.synced)
        if not deliveries:
            return
        if self._broker_counts is None:
            for delivery in deliveries:
                if delivery.redelivered:
                    self._broker_counts = _delivery_count(delivery.properties) is not None
                    break
        self._acks.delivered([delivery.tag for delivery in deliveries])
        self._buffer.extend(self._without_committed_redeliveries(deliveries) if self._committed else deliveries)

    def _values(self, delivery: Delivery) -> list[Any]:
        values: list[Any] = []
        for field in self.fields:
            if field == "body":
                values.append(text_or_bytes(delivery.body))
            elif field in ("routing_key", "exchange", "redelivered"):
                values.append(getattr(delivery, field))
            else:
                values.append(getattr(delivery.properties, field))
        return values

    # -- results ------------------------------------------------------------------------------
    def ack(self, msg_id: Any) -> None:
        """Mark the delivery done; the broker hears of it with the next flush of acks."""
        if self._exactly_once:
            tag = self._committed_tag(msg_id)
            if tag is None:
                return
        else:
            generation, tag = msg_id
            if generation != self._generation or tag not in self._acks:
                self.stale_acks += 1
                return
            self._held.pop(tag, None)
            if self._replays:
                self._replays.pop(tag, None)
        self._acks.done(tag)
        if not self._active:  # no ``next_tuple`` to flush on the linger: no waiting
            self._call_or_outage(self._flush_acks, True)
        elif self._acks.waiting >= self._ack_batch or time.monotonic() - self._flushed_at >= ACK_LINGER_SECS:
            self._call_or_outage(self._flush_acks)

    def fail(self, msg_id: Any, reason: str = "failed") -> None:
        """Replay the message (whatever the reason), or dead-letter it after ``max_replays``."""
        generation, tag = msg_id
        if self._connection is None or generation != self._generation or tag not in self._acks:
            self.stale_acks += 1
            return
        delivery = self._held.pop(tag, None)
        if delivery is None:  # not emitted (a replay waiting in the buffer): nothing pending
            self.stale_acks += 1
            return
        counted = _delivery_count(delivery.properties)
        replays = (int(delivery.redelivered) if counted is None else counted) + self._replays.get(tag, 0)
        if self.max_replays is not None and replays >= self.max_replays:
            self._dead_letter(delivery, replays, reason)
        elif self._broker_counts is False:
            self._replays[tag] = self._replays.get(tag, 0) + 1
            self._buffer.appendleft(delivery)
        else:  # the broker counts, or may: give it back
            self._acks.settled(tag)
            self._call_or_outage(self._connection.nack, tag, requeue=True)

    def _dead_letter(self, delivery: Delivery, replays: int, reason: str) -> None:
        tag, properties = delivery.tag, delivery.properties
        self._acks.settled(tag)
        self._replays.pop(tag, None)
        assert self._connection is not None
        if not self._call_or_outage(self._connection.reject, tag, requeue=False):
            return  # the connection is gone: the broker requeues the message
        self._collector.count("dead_lettered")
        logger.warning(
            "%s: message %s (delivery tag %d) failed after %d replays (last: %s); rejected to the "
            "queue's dead-letter exchange",
            self._outage.where,
            repr(properties.message_id) if properties.message_id else "without a message_id",
            tag,
            replays,
            reason,
        )

    def _flush_acks(self, everything: bool = False) -> None:
        """Send the acks the watermark allows (``everything``: deactivating or closing)."""
        connection = self._connection
        if connection is None or not self._acks.waiting:
            return
        self._flushed_at = time.monotonic()
        waiting = self._acks.waiting
        acks = self._acks.acks(everything)
        for tag, multiple in acks:
            connection.ack(tag, multiple=multiple)
        if acks:
            self._acks_to_confirm.append((connection.sync(), waiting - self._acks.waiting))
        if self._unwritten:
            self._acks_written(connection, acks)

    # -- exactly-once -------------------------------------------------------------------------
    def _emit_exactly_once(self, buffer: deque[Delivery]) -> None:
        """``next_tuple``'s emits under exactly-once: each message under a number of the
        spout's own, kept (unacked) until its checkpoint commits or is rolled back."""
        emit, emitted, generation, serials = self._collector.emit, self._emitted, self._generation, self._serials
        self._sought = True  # a task that emitted is past its first seek
        for _ in range(min(len(buffer), self._burst)):
            delivery = buffer.popleft()
            key = delivery.properties.message_id
            if key is None and not self._warned_anonymous:
                self._warned_anonymous = True
                logger.warning(
                    "%s: a message without a message_id under exactly-once: if its ack is lost (a task killed "
                    "right after a checkpoint, a connection lost), the broker delivers it again and it is counted "
                    "again; publish every message with a unique message_id to have it recognised",
                    self._outage.where,
                )
            serial = next(serials)
            emitted[serial] = (generation, delivery.tag, key)
            values = [text_or_bytes(delivery.body)] if self._plain_body else self._values(delivery)
            emit(values, msg_id=serial)

    def _committed_tag(self, serial: int) -> int | None:
        """``ack`` under exactly-once (a commit): the delivery tag to ack, if its channel is the
        live one; else ``None``, and the message is to be recognised when it comes back."""
        entry = self._emitted.pop(serial, None)
        if entry is None:
            self.stale_acks += 1
            return None
        generation, tag, key = entry
        if generation == self._generation and tag in self._acks:
            if key is not None:
                self._committed[key] = float("inf")
                self._unwritten[tag] = key
            return tag
        self.stale_acks += 1
        if key is not None:
            self._committed[key] = time.monotonic() + RECOGNISE_SECS
        else:
            logger.warning(
                "%s: a committed message without a message_id was delivered on a channel since lost: the broker "
                "delivers it again, and it is counted again",
                self._outage.where,
            )
        self._roll_back_why = "a checkpoint committed messages whose channel was lost (they may be emitted again)"
        return None

    def _acks_written(self, connection: QueueConsumer, acks: list[tuple[int, bool]]) -> None:
        """Acks of committed messages were written: their ``message_id``s are forgotten once
        the broker confirms it has them (``_confirmed``)."""
        top = max((tag for tag, multiple in acks if multiple), default=0)
        alone = {tag for tag, multiple in acks if not multiple}
        keys = [self._unwritten.pop(tag) for tag in list(self._unwritten) if tag <= top or tag in alone]
        if keys:
            self._confirming.append((connection.sync(), keys))

    def _confirmed(self, synced: int) -> None:
        while self._confirming and self._confirming[0][0] <= synced:
            for key in self._confirming.popleft()[1]:
                self._committed.pop(key, None)

    def _without_committed_redeliveries(self, deliveries: list[Delivery]) -> list[Delivery]:
        """The deliveries to emit: a message delivered again whose checkpoint committed (its
        ack lost) is acked instead."""
        fresh = []
        for delivery in deliveries:
            key = delivery.properties.message_id
            if delivery.redelivered and key is not None and key in self._committed:
                self.recognised += 1
                self._committed[key] = float("inf")
                self._unwritten[delivery.tag] = key
                self._acks.done(delivery.tag)
            else:
                fresh.append(delivery)
        return fresh

    def _channel_lost(self) -> None:
        """The channel is gone with every ack not handled yet: each committed message it held
        unacked is recognised for ``RECOGNISE_SECS``; messages emitted on it for the coming
        checkpoint come again, so that checkpoint must not commit."""
        deadline = time.monotonic() + RECOGNISE_SECS
        for key, until in self._committed.items():
            self._committed[key] = min(until, deadline)
        self._unwritten.clear()
        self._confirming.clear()
        if any(generation == self._generation for generation, _, _ in self._emitted.values()):
            self._roll_back_why = "the connection was lost with messages of the coming checkpoint unacked on it"

    def position(self) -> list[str]:
        """The ``message_id``s of the messages emitted so far whose ack the broker may not
        have: those the coming checkpoint covers, and committed ones not confirmed yet. Raises
        ``BrokerError`` when the coming checkpoint must not commit (its messages' channel was
        lost)."""
        if self._roll_back_why is not None:
            raise BrokerError(f"{self._outage.where}: {self._roll_back_why}: back to the last checkpoint")
        now = time.monotonic()
        for key in [key for key, until in self._committed.items() if until < now]:
            del self._committed[key]
        return [key for _, _, key in self._emitted.values() if key is not None] + list(self._committed)

    def seek(self, position: list[str]) -> None:
        """A rollback: every message emitted and not committed goes back to the queue
        (``basic.nack``, requeue). A restarted task's first seek also recognises the messages
        of ``position`` if the broker delivers them again: their checkpoint committed."""
        live = [tag for generation, tag, _ in self._emitted.values() if generation == self._generation]
        self._emitted.clear()
        self._roll_back_why = None
        if not self._sought:
            self._sought = True
            deadline = time.monotonic() + RECOGNISE_SECS
            for key in position:
                self._committed.setdefault(key, deadline)
        for tag in live:
            if self._connection is None:
                break  # the broker requeues the rest
            if tag in self._acks:
                self._acks.settled(tag)
                self._call_or_outage(self._connection.nack, tag, requeue=True)

    def seek_peers(self, positions: list[list[str]]) -> None:
        """After a ``seek``: the other tasks' positions in the committed cut. The broker gives
        what a peer held unacked to any consumer of the queue, this task too: a message a peer
        committed whose ack died with it (or with its channel) is recognised here as well, for
        ``RECOGNISE_SECS``."""
        deadline = time.monotonic() + RECOGNISE_SECS
        for position in positions:
            for key in position:
                self._committed.setdefault(key, deadline)

    # -- the connection -----------------------------------------------------------------------
    def _reconnect(self) -> None:
        """Start connecting on a thread of its own once the outage's pause is over; take the
        connection once it is made. Never waits."""
        try:
            connection = self._connecting.take()
        except _BROKEN as exc:
            self._lost(exc)
            return
        if connection is not None:
            self._connected(connection)

    def _open_channel(self) -> QueueConsumer:
        """Connect, open the channel, set its prefetch, declare the queue if asked: everything
        that waits for the broker (on the ``Connecting`` thread, never the task's)."""
        return QueueConsumer.connect(_parameters(self.url), self.queue, self._prefetch, declare=self.declare)

    def _connected(self, connection: QueueConsumer) -> None:
        """Make a new connection the spout's (on the task's thread): a new channel generation,
        consuming if the spout is active."""
        self._connection = connection
        self._generation += 1
        if self._active and not self._call_or_outage(connection.consume, self.queue):
            return
        self._outage.recovered()

    def _stop_consuming(self) -> None:
        """Stop the deliveries and hand the buffered messages back to the queue."""
        assert self._connection is not None
        self._connection.cancel()
        while self._buffer:
            tag = self._buffer.popleft().tag
            self._acks.settled(tag)
            self._replays.pop(tag, None)
            self._connection.nack(tag, requeue=True)

    def _call_or_outage(self, action: Callable[..., object], *args: Any, **kwargs: Any) -> bool:
        """Run a broker call; a broken connection starts an outage instead of raising (and
        gives ``False``)."""
        try:
            action(*args, **kwargs)
        except _BROKEN as exc:
            self._lost(exc)
            return False
        return True

    def _lost(self, exc: BaseException) -> None:
        """Forget the connection and what it delivered (the broker requeues those messages)."""
        self._disconnect()
        self._outage.failed(exc)


def _delivery_count(properties: Any) -> int | None:
    """The broker's count of earlier deliveries of a message (``None``: it keeps none)."""
    headers = properties.headers
    count = headers.get(DELIVERY_COUNT_HEADER) if headers else None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def _default_prefetch(max_spout_pending: int | None) -> int:
    if max_spout_pending is None:
        return MAX_PREFETCH
    return max(1, min(MAX_PREFETCH, int(max_spout_pending * PREFETCH_SLACK)))


def _parameters(url: str) -> pika.URLParameters:
    """The URL's parameters, with short connect timeouts and a single attempt unless the URL
    sets them: retrying is the spout's business (with backoff), not a loop inside pika."""
    params = pika.URLParameters(url)
    given = parse_qs(urlsplit(url).query)
    if "connection_attempts" not in given:
        params.connection_attempts = 1
    if "socket_timeout" not in given:
        params.socket_timeout = CONNECT_TIMEOUT_SECS
    if "stack_timeout" not in given:
        params.stack_timeout = 2 * CONNECT_TIMEOUT_SECS
    return params
