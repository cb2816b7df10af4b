"""``RabbitMQSpout``: a queue's messages as tracked tuples; the broker ack waits for the tree.

Storm's reliability model meets AMQP's: a message is delivered unacknowledged, emitted with a
``msg_id``, and acknowledged to the broker only when its tuple tree completes. A failed tree
(an explicit fail, or a timeout) is rejected with ``requeue=True``, so the broker puts the
message back on the queue; if the spout dies, the broker requeues everything it had not acked.
That is at-least-once from the queue to the end of the topology, with nothing kept in the spout.

How it stays off the event loop's back: pika's ``BlockingConnection`` is only ever asked to do
non-blocking work (``process_data_events(time_limit=0)``), which also keeps the heartbeats going.
The broker pushes up to ``prefetch`` unacked messages, they wait in a local buffer and
``next_tuple`` emits one per call.

Delivery tags are numbers of one channel. After a reconnect the broker has already requeued
what the old channel held, so the ``msg_id`` is ``(channel generation, delivery tag)`` and acks
or fails for an older generation are dropped (their messages come again, at-least-once).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.spec import Basic, BasicProperties

from .._collectors import SpoutOutputCollector
from .._components import OutputFieldsDeclarer, Spout
from .._context import TopologyContext
from .._errors import ConfigError
from ._outage import Outage
from ._wire import redact_url, scheme, text_or_bytes, url_scheme

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
CONNECT_TIMEOUT_SECS = 3.0
"""Socket timeout for a (re)connect: the longest a connect attempt can hold up the task."""

_Delivery = tuple[int, Basic.Deliver, BasicProperties, bytes]
_BROKEN = (pika.exceptions.AMQPError, OSError)


class RabbitMQSpout(Spout):
    """Consume ``queue``; one tuple per message, tracked by its delivery tag.

    - Storm ack -> ``basic_ack``; Storm fail (either reason) -> ``basic_nack(requeue=True)``.
    - A dead spout's unacked messages are redelivered by the broker (to any consumer).
    - ``fields`` names the output fields, each one of ``MESSAGE_FIELDS``.
    - ``prefetch`` bounds the unacked messages the broker pushes to one task; by default
      ``max_spout_pending`` and a quarter, at most 65,535.
    - A lost or refused connection is retried with backoff (0.1 s doubling to 5 s) and reported
      once per outage (``collector.report_error``); the queue must exist (a missing queue is
      reported the same way, and picked up once it is declared).
    - ``deactivate`` stops the deliveries and hands the not-yet-emitted messages back to the
      queue; the pending trees still get their acks.

    Example (the queue is declared beforehand, e.g. by the producer)::

        builder.set_spout("events", RabbitMQSpout("events", prefetch=500), parallelism=2)
    """

    def __init__(
        self,
        queue: str,
        *,
        url: str = "amqp://guest:guest@127.0.0.1:5672/%2F",
        fields: Sequence[str] = ("body",),
        prefetch: int | None = None,
    ) -> None:
        if not isinstance(queue, str) or not queue:
            raise ConfigError(f"RabbitMQSpout: queue must be a non-empty string, got {queue!r}")
        if scheme(url) not in ("amqp", "amqps"):
            raise ConfigError(f"RabbitMQSpout {queue!r}: url must be an amqp:// or amqps:// URL, got {url_scheme(url)}")
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

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(list(self.fields))

    # -- lifecycle ----------------------------------------------------------------------------
    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self._collector = collector
        self._prefetch = self.prefetch or _default_prefetch(conf.get("max_spout_pending"))
        self._connection: BlockingConnection | None = None
        self._channel: BlockingChannel | None = None
        self._consumer_tag: str | None = None
        self._generation = 0
        self._cancelled_by_broker = False
        self._buffer: deque[_Delivery] = deque()
        self._active = True
        self.stale_acks = 0
        """Acks and fails dropped because their channel is gone (the broker redelivered them)."""
        where = f"RabbitMQSpout {self.queue!r} task {context.this_task_id} ({redact_url(self.url)})"
        self._outage = Outage(where, collector.report_error)
        self._connect()

    def activate(self) -> None:
        self._active = True
        if self._channel is not None and self._consumer_tag is None:
            self._guard(self._consume)

    def deactivate(self) -> None:
        self._active = False
        if self._channel is not None and self._consumer_tag is not None:
            self._guard(self._stop_consuming)

    def close(self) -> None:
        """Close the connection: the broker requeues every message not acked yet."""
        connection, self._connection, self._channel = self._connection, None, None
        self._buffer.clear()
        if connection is not None and connection.is_open:
            try:
                connection.close()
            except _BROKEN as exc:
                logger.debug("%s: close: %s", self._outage.where, exc)

    # -- emitting -----------------------------------------------------------------------------
    def next_tuple(self) -> None:
        if self._connection is None:
            if self._outage.due():
                self._connect()
            return
        if not self._buffer:
            self._guard(self._connection.process_data_events, time_limit=0)
            if self._cancelled_by_broker:
                self._lost(ConnectionError(f"the broker cancelled the consumer of queue {self.queue!r} (deleted?)"))
                return
        if self._buffer:
            generation, method, properties, body = self._buffer.popleft()
            self._collector.emit(self._values(method, properties, body), msg_id=(generation, method.delivery_tag))

    def _values(self, method: Basic.Deliver, properties: BasicProperties, body: bytes) -> list[Any]:
        values: list[Any] = []
        for field in self.fields:
            if field == "body":
                values.append(text_or_bytes(body))
            elif field in ("routing_key", "exchange", "redelivered"):
                values.append(getattr(method, field))
            else:
                values.append(getattr(properties, field))
        return values

    # -- results ------------------------------------------------------------------------------
    def ack(self, msg_id: Any) -> None:
        generation, tag = msg_id
        if self._channel is not None and generation == self._generation:
            self._guard(self._channel.basic_ack, tag)
        else:
            self.stale_acks += 1

    def fail(self, msg_id: Any, reason: str = "failed") -> None:
        """Put the message back on the queue (whatever the reason: it is redelivered)."""
        generation, tag = msg_id
        if self._channel is not None and generation == self._generation:
            self._guard(self._channel.basic_nack, tag, requeue=True)
        else:
            self.stale_acks += 1

    # -- the connection -----------------------------------------------------------------------
    def _connect(self) -> None:
        try:
            self._connection = pika.BlockingConnection(_parameters(self.url))
            self._channel = self._connection.channel()
            self._channel.basic_qos(prefetch_count=self._prefetch)
            self._channel.add_on_cancel_callback(self._on_broker_cancel)
            self._generation += 1
            self._consumer_tag = None
            self._cancelled_by_broker = False
            if self._active:
                self._consume()
        except _BROKEN as exc:
            self._lost(exc)
            return
        self._outage.recovered()

    def _consume(self) -> None:
        generation = self._generation

        def deliver(_: BlockingChannel, method: Basic.Deliver, properties: BasicProperties, body: bytes) -> None:
            self._buffer.append((generation, method, properties, body))

        assert self._channel is not None
        self._consumer_tag = self._channel.basic_consume(self.queue, deliver, auto_ack=False)

    def _on_broker_cancel(self, _: object) -> None:
        """The queue was deleted (or the node holding it went away): start over, as after an outage."""
        self._cancelled_by_broker = True

    def _stop_consuming(self) -> None:
        assert self._channel is not None and self._consumer_tag is not None
        self._channel.basic_cancel(self._consumer_tag)
        self._consumer_tag = None
        while self._buffer:
            generation, method, _, _ = self._buffer.popleft()
            if generation == self._generation:
                self._channel.basic_nack(method.delivery_tag, requeue=True)

    def _guard(self, action: Callable[..., object], *args: Any, **kwargs: Any) -> None:
        """Run a broker call; a broken connection starts an outage instead of raising."""
        try:
            action(*args, **kwargs)
        except _BROKEN as exc:
            self._lost(exc)

    def _lost(self, exc: BaseException) -> None:
        """Forget the connection and what it delivered (the broker requeues those messages)."""
        self.close()
        self._consumer_tag = None
        self._outage.failed(exc)


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
