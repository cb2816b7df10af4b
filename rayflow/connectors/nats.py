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
  ``in_progress`` once it is held for a quarter to half of the consumer's ``ack_wait``, and
  again every quarter of it; so is a message waiting in the buffer;
- the consumer is created when missing (explicit acks, every message of the stream or of
  ``subject``, ``ack_wait`` the topology's message timeout and a quarter, ``max_ack_pending``
  ``max_spout_pending`` and a quarter). One that exists is checked (``_checked_consumer``):
  a push consumer, or one whose ``ack_policy`` is not ``explicit`` (``all`` would settle the
  messages before a pending tree, ``none`` every message on delivery: both lose messages when
  a task dies), is refused with an error that says so; its ``ack_wait`` is what the in-progress
  acks keep to. The stream must exist.

Liveness does not wait for ``next_tuple``: ``upkeep`` (``_upkeep``), every ``UPKEEP_SECS``
while the pending budget is spent or the spout deactivated too, writes the acks waiting, sends
the in-progress acks when due, answers the server's ``PING``s, sends its own every
``PING_INTERVAL_SECS`` (a connection whose ``PING``s go unanswered ``MAX_PINGS_OUT`` times is
half-open: it is dropped and made again), and takes a new connection once made.

How it stays off the event loop's back and cheap per message: the spout speaks NATS's protocol
itself (``_nats.wire``, ``_nats.connection``) on the task's own thread, over a socket it reads
without waiting; no client library, no event loop, no thread per message. While the buffer
runs low it sends a pull request for ``batch`` messages (JetStream's ``CONSUMER.MSG.NEXT``,
answered to the connection's inbox; a status message ends it), ``next_tuple`` takes what
arrived and emits from the buffer (up to ``EMIT_BURST`` per call). A message is a tuple of its
subject, reply subject and bytes; its reply subject is the ``msg_id``, and says how often it
was delivered and its stream sequence. Acks, naks, terms and ``in_progress`` are ``PUB``s to
that subject, written together in one ``send`` (``ACK_BATCH`` of them, or every
``ACK_LINGER_SECS``); what the socket does not take at once waits for the next write, so a
server that reads acks slower than they come does not stall the task (one that reads nothing
at all is taken for gone once megabytes wait, after ``SOCKET_TIMEOUT_SECS``).

Connecting waits for the server (TCP, TLS, ``CONNECT``, the consumer's info or its creation),
so it runs on a thread of its own, the first time and after an outage, and ``next_tuple`` only
looks whether it is done; the connection is the task thread's alone from then on. A lost
connection, a refused connect, a missing stream are retried with backoff (``_outage``) and
reported once per outage (``collector.report_error``), as is a ``-ERR`` (a permissions
violation, say: the error says which right is missing); a pull request unanswered long after
its ``expires`` has the consumer looked up, and a server that answers neither is taken for
gone. A pull request ended by a 409 is one of three things (``_pull_conflict``): the consumer busy
(too many acks pending or pulls waiting, a leader changing: the spout pulls again shortly), a
pull larger than the consumer allows (``max_batch``: reported once, and the spout pulls that
many from then on), or a consumer the spout cannot pull from (deleted, push based: an outage,
reported). Acks not written yet when a connection is lost go out on the next one (a JetStream
ack may come from any connection); those the lost socket had taken are lost with it, and their
messages come again after ``ack_wait`` (at-least-once). Messages in the buffer stay there.

Exactly-once (``processing_guarantee="exactly_once"``). A consumer cannot rewind either, but
what it has not heard an ack for is still the spout's to give back: ``ack`` comes only when the
checkpoint covering the message commits, so every message emitted since is unacked (and kept
from redelivery by the in-progress acks), and a rollback (``seek``) ``nak``s them all: JetStream
delivers them again at once, to this task or another. What a rollback cannot undo is an ack the
server never read (a task killed between a commit and its acks' write, a connection lost with
acks in it): that message comes again after ``ack_wait`` although it was counted. So the
position taken at each checkpoint holds the stream sequences of the messages it covers whose
ack the server may not have read (as ranges, with one ack subject to make the others from),
and an ack leaves that set once a ``PING`` written after it is answered (``Connection.probe``:
the server has read it). A restarted task's first ``seek`` acks every sequence of its position
at once, and any task recognises a message delivered again with a sequence of its set: acked,
not emitted. A connection lost while messages of the coming checkpoint were held makes the next
``position()`` raise, which fails that checkpoint and takes the topology back to the last one
(the in-progress acks may have lapsed, and the server may deliver those messages again).

URLs: ``nats://`` or ``tls://`` (always TLS: ``ssl.create_default_context()``, the host name
checked, ``SSL_CERT_FILE`` for a private CA; a ``nats://`` server that requires TLS gets it
too), with ``user:password@`` or a token as ``token@``. One server: the cluster's other
servers that ``INFO`` lists are not tried.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from .._collectors import SpoutOutputCollector
from .._components import OutputFieldsDeclarer, Spout
from .._context import TopologyContext
from .._errors import ConfigError
from ._connecting import Connecting
from ._dead_letters import DEFAULT_MAX_REPLAYS, replay_bound
from ._errors import BrokerError
from ._nats.connection import API_SID, PULL_SID, Connection, api_answer, connect
from ._nats.wire import (
    PONG,
    Err,
    Message,
    NatsError,
    ack_metadata,
    header_fields,
    pub,
    refusal,
    status,
    with_sequence,
)
from ._outage import Outage
from ._upkeep import Upkeep
from ._wire import CUT_USER_INFO, cut_user_info, redact_url, scheme, text_or_bytes, url_scheme

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
"""Acks are written when this many wait, or this long after the previous write (checked on
every ack and ``next_tuple``)."""
FETCH_WAIT_SECS = 1.0
"""How long one pull request waits for messages when the stream has too few (its ``expires``)."""
REQUEST_SLACK_SECS = 1.0
"""A pull request that has not ended this long after its ``expires`` is taken for lost, and the
consumer is looked up; a lookup unanswered this long means the server is gone."""
CONFLICT_PAUSE_SECS = 0.01
"""After a pull request ended in a conflict (409: too many acks pending, say), the next one waits
this long: asking again at once would only get the same answer."""
OVER = (404, 408, 409)
"""Statuses that end a pull request: no messages (404), ``expires`` reached (408), a conflict
(409: ``_pull_conflict`` tells the harmless from the stalls)."""
BUSY = ("exceeded maxackpending", "exceeded maxwaiting", "leadership change", "server shutdown", "batch completed")
"""How the 409s start that only say the consumer is busy now (acks pending up to its
``max_ack_pending``, too many pulls waiting, a new leader, a server going): pulling again
shortly is right."""
TOO_LARGE = "exceeded maxrequestbatch"
"""A 409 that says a pull asks for more messages than the consumer's ``max_batch``: the same
request would stall for ever."""
HEARTBEAT = 100
ACK_WAIT_SLACK = 1.25
"""The ``ack_wait`` of a consumer the spout creates: the topology's message timeout times this,
so a tree times out in rayflow before JetStream redelivers its message."""
PENDING_SLACK = 1.25
UNBOUNDED_ACK_PENDING = 20_000
"""A created consumer's ``max_ack_pending``: ``max_spout_pending`` and a quarter, or this."""
SOCKET_TIMEOUT_SECS = 3.0
"""The longest connecting, one API call or one write waits for the server."""
CLOSE_TIMEOUT_SECS = 5.0
"""The longest ``close`` waits for the server to take what the spout sends last."""
UPKEEP_SECS = 0.1
"""How often ``upkeep`` runs: ten times an ack linger, and well inside a quarter of any
``ack_wait`` the spout accepts (``MIN_ACK_WAIT_SECS``)."""
MIN_ACK_WAIT_SECS = 1.0
"""The shortest ``ack_wait`` of an existing consumer the spout accepts: in-progress acks go out
every quarter of it."""
PING_INTERVAL_SECS = 5.0
MAX_PINGS_OUT = 2
"""The spout ``PING``s the server every ``PING_INTERVAL_SECS``; with this many unanswered the
connection is taken for half-open (noticed 10 to 15 s after it went), dropped and made again."""
CONSUMER_NOT_FOUND = 10014
_BROKEN = (OSError, BrokerError, ValueError)
"""What a connection can fail with: the socket's errors, the server's refusals, and JSON that
does not parse."""


class NatsJetStreamSpout(Spout):
    """Read ``stream`` through durable pull consumer ``durable``; one tuple per message.

    - Storm ack -> ``ack``; Storm fail (either reason) -> ``nak``: the server delivers the
      message again, at most ``max_replays`` times (default 10; ``None`` or -1: no bound),
      after which it is ``term``-ed (a dead letter: the stream keeps it, JetStream publishes a
      ``MSG_TERMINATED`` advisory). Each dead letter is counted in the metrics
      (``dead_lettered``) and logged with the message's stream sequence and the last fail's
      reason. The count is the server's (``num_delivered``): it survives restarts (a message
      a dead task held counts one delivery more, as its tree was lost).
    - ``url``: ``nats://`` or ``tls://``, with ``user:password@`` or ``token@``.
    - ``subject`` filters the stream (a consumer created by the spout only).
    - ``fields`` names the output fields, each one of ``MESSAGE_FIELDS``.
    - ``batch``: messages per pull request.
    - A tree pending for half the consumer's ``ack_wait`` is kept alive with ``in_progress``.
    - Exactly-once: a message is acked once its checkpoint commits and ``nak``-ed on a rollback;
      one delivered again after a commit whose ack was lost is recognised by its stream
      sequence and acked, not emitted (the module docstring).

    Example (the stream exists, e.g. ``nats stream add ORDERS --subjects 'orders.>'``)::

        builder.set_spout("orders", NatsJetStreamSpout("ORDERS", "rayflow"), parallelism=2)
    """

    acks_to_broker = True
    """Its broker keeps each message until the spout acks it: with ``ackers=0`` that ack comes at
    emit (at-most-once), and submitting warns of it (``_run_checks``)."""

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
        if scheme(url) not in ("nats", "tls"):
            raise ConfigError(
                f"{where}: url must be a nats:// or tls:// URL (the spout speaks NATS over TCP; no websockets), "
                f"got {url_scheme(url)}"
            )
        if cut_user_info(url):
            raise ConfigError(f"{where}: url {CUT_USER_INFO}")
        if subject is not None and (not isinstance(subject, str) or not subject or " " in subject):
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

    # -- lifecycle ----------------------------------------------------------------------------
    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self._collector = collector
        pending_cap = conf.get("max_spout_pending")
        self._fetch = min(self.batch, max(1, pending_cap // 2)) if pending_cap else self.batch
        self._burst = max(1, min(EMIT_BURST, pending_cap // 64)) if pending_cap else EMIT_BURST
        self._ack_wait = ACK_WAIT_SLACK * float(conf.get("message_timeout_secs") or 30.0)
        self._max_ack_pending = int(pending_cap * PENDING_SLACK) if pending_cap else UNBOUNDED_ACK_PENDING
        self._values = _value_maker(self.fields, self.stream)
        self._conn: Connection | None = None
        self._pull = b""
        """The pull request of the current connection (its inbox is the connection's)."""
        self._requested = 0
        """Messages the pull request under way may still bring (0: none under way)."""
        self._requested_at = 0.0
        self._pull_at = 0.0
        self._looked_up_at: float | None = None
        """When the consumer was looked up after a pull request went unanswered."""
        self._buffer: deque[Message] = deque()
        """Arrived, not emitted yet."""
        self._emitted_this_round: dict[str, str] = {}
        self._emitted_before: dict[str, str] = {}
        """Emitted messages whose trees are pending, reply subject (the ``msg_id``) to subject:
        those emitted since the last round of in-progress acks, and those held since before it,
        which get one at the next round (``_keep_in_progress``)."""
        self._out: list[str] = []
        """Acks, naks, terms and ``in_progress`` not written yet."""
        self._written_at = time.monotonic()
        self._round_every = self._ack_wait / 4.0
        """Every quarter of the consumer's ``ack_wait`` (the one the spout would create, until
        the server says which it has)."""
        self._round_at = time.monotonic() + self._round_every
        self._ping_at = time.monotonic() + PING_INTERVAL_SECS
        self._active = True
        self.replayed = 0
        """Messages failed and handed back for redelivery (``nak``)."""
        self._exactly_once = conf.get("processing_guarantee") == "exactly_once"
        self._unconfirmed: dict[int, str] = {}
        """Exactly-once: stream sequence -> ack subject of the committed messages whose ack the
        server may not have read."""
        self._to_confirm: list[int] = []
        """Exactly-once: their sequences whose ack waits to be written (``_write``)."""
        self._confirming: deque[tuple[int, list[int]]] = deque()
        """Exactly-once: (probe, sequences) of acks written, waiting for that probe's ``PONG``."""
        self._roll_back_why: str | None = None
        """Exactly-once: why the next checkpoint must fail (``position`` raises)."""
        self._sought = False
        self.recognised = 0
        """Exactly-once: messages delivered again after their checkpoint committed, acked and
        not emitted."""
        collector.count("dead_lettered", 0)
        collector.count("broker_acked", 0)
        self._unwritten_acks = 0
        """Messages acked (``ack``, or recognised) whose ``+ACK`` is not written yet."""
        self._acks_to_confirm: deque[tuple[int, int]] = deque()
        """(probe, messages) of the ``+ACK``s written: counted as ``broker_acked`` once that
        probe's ``PONG`` says the server read them; forgotten with a lost connection (they may
        not have arrived: JetStream delivers those messages again after ``ack_wait``)."""
        self._outage = Outage(
            f"NatsJetStreamSpout {self.stream!r} consumer {self.durable!r} task {context.this_task_id} "
            f"({redact_url(self.url)})",
            collector.report_error,
        )
        self._connecting = Connecting(
            self._connect, Connection.close, f"rayflow-nats-{self.stream}", due=self._outage.due
        )
        """The connection being made on a thread of its own (the first one too)."""
        self._upkeep = Upkeep(self.upkeep, UPKEEP_SECS, collector.report_error)
        self._reconnect()
        self._upkeep.start()

    def activate(self) -> None:
        self._active = True

    def deactivate(self) -> None:
        """Stop pulling; what was pulled waits for ``activate``. The acks waiting go out."""
        self._active = False
        self._write()

    def close(self) -> None:
        """Send what waits (buffered messages are ``nak``-ed, to come again at once), wait until
        the server has it (``CLOSE_TIMEOUT_SECS`` at most), then disconnect; the server
        redelivers the pending trees' messages after ``ack_wait``."""
        self._active = False
        self._upkeep.stop()
        if self._exactly_once:  # emitted and not committed: void, to be delivered again at once
            self._out += [_nak(reply) for reply in (*self._emitted_before, *self._emitted_this_round)]
        self._out += [_nak(msg.reply) for msg in self._buffer if msg.reply]
        self._buffer.clear()
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                self._drain(conn)
            except _BROKEN as exc:
                logger.warning("%s: close: %s: %s", self._outage.where, type(exc).__name__, exc)
            conn.close()
        self._connecting.close()

    def _drain(self, conn: Connection) -> None:
        """``close``'s last words. The pull request under way is let end first (``expires`` at
        most), its messages joining the ``nak``s: the server would redeliver a message
        ``nak``-ed while the request is open to that very request, that is to no one. Then the
        pull inbox is dropped, and what waits is written with a ``PING``, whose ``PONG`` says
        the server has it all."""
        deadline = time.monotonic() + CLOSE_TIMEOUT_SECS

        def request_over(frame: Any) -> bool:
            if frame.__class__ is Message and frame.sid == PULL_SID:
                code = status(frame.headers)[0]
                if code == 0 and frame.reply:
                    self._out.append(_nak(frame.reply))
                    self._requested -= 1
                elif code in OVER:
                    self._requested = 0
            return self._requested <= 0

        if self._requested > 0:
            try:
                conn.wait_for(request_over, FETCH_WAIT_SECS + REQUEST_SLACK_SECS)
            except TimeoutError:
                logger.debug("%s: the last pull request did not end before close", self._outage.where)
        out, self._out = self._out, []
        conn.send(f"UNSUB {PULL_SID}\r\n".encode() + "".join(out).encode())
        last = conn.probe()
        if self._unwritten_acks:
            self._acks_to_confirm.append((last, self._unwritten_acks))
            self._unwritten_acks = 0
        conn.wait_for(lambda frame: frame == PONG and conn.pongs >= last, max(0.0, deadline - time.monotonic()))
        self._count_acks(conn.pongs)

    # -- emitting -----------------------------------------------------------------------------
    def next_tuple(self) -> None:
        if self._conn is None:
            self._reconnect()
        else:
            self._serve_connection(receive=len(self._buffer) < self._fetch)
        buffer = self._buffer
        if not buffer:
            return
        emit, emitted, values = self._collector.emit, self._emitted_this_round, self._values
        for _ in range(min(len(buffer), self._burst)):
            msg = buffer.popleft()
            reply = msg.reply
            emitted[reply] = msg.subject  # type: ignore[index]
            emit(values(msg), msg_id=reply)

    def upkeep(self) -> None:
        """What keeps the messages held and the connection alive, whether or not ``next_tuple``
        is called (``_upkeep``); never waits: the acks waiting, the in-progress acks when due,
        the server's ``PING``s answered and the spout's own sent, pulls while the buffer runs
        low, a new connection once made."""
        if self._conn is None:
            self._reconnect()
        else:
            self._serve_connection(receive=True)

    def _serve_connection(self, receive: bool) -> None:
        """The connection's duties that are due, from ``next_tuple`` and ``upkeep`` alike: acks
        written once they waited their linger, in-progress acks, the client ``PING``, and (with
        ``receive``) what arrived. Never waits."""
        conn = self._conn
        assert conn is not None
        now = time.monotonic()
        if (self._out or conn.unsent) and now - self._written_at >= ACK_LINGER_SECS:
            self._write()
        if now >= self._round_at:
            self._keep_in_progress(now)
        if now >= self._ping_at and self._conn is not None:
            self._ping(self._conn, now)
        if receive and self._conn is not None:
            self._receive(now)

    def _ping(self, conn: Connection, now: float) -> None:
        self._ping_at = now + PING_INTERVAL_SECS
        if conn.pings_out >= MAX_PINGS_OUT:
            waited = PING_INTERVAL_SECS * MAX_PINGS_OUT
            self._broken(TimeoutError(f"no PONG from the NATS server in {waited:g} s: the connection is half-open"))
            return
        try:
            conn.ping()
        except _BROKEN as exc:
            self._broken(exc)

    def _receive(self, now: float) -> None:
        """Take the frames that arrived: messages into the buffer, the pull request's end; send
        the next pull request when the buffer runs low."""
        conn = self._conn
        assert conn is not None
        try:
            for frame in conn.receive():
                if frame.__class__ is Message:
                    if frame.sid == PULL_SID:
                        if frame.headers is None:
                            if not self._unconfirmed or not self._is_committed_redelivery(frame):
                                self._buffer.append(frame)
                            self._requested -= 1
                        else:
                            self._status(frame, now)
                    elif frame.sid == API_SID:
                        api_answer("the consumer's lookup", frame)
                        self._looked_up_at = None
                        self._requested = 0  # it exists: the request was lost, ask again
                elif isinstance(frame, Err):
                    raise NatsError(f"the NATS server refused what the spout asked: {refusal(frame.text)}")
            if self._requested > 0:
                if now - self._requested_at > FETCH_WAIT_SECS + REQUEST_SLACK_SECS:
                    self._ask_for_consumer_info(conn, now)
            elif self._active and len(self._buffer) < self._fetch and now >= self._pull_at:
                conn.send(self._pull)
                self._requested, self._requested_at = self._fetch, now
        except _BROKEN as exc:
            self._broken(exc)
            return
        if self._acks_to_confirm:
            self._count_acks(conn.pongs)
        if self._confirming:
            self._confirmed(conn.pongs)

    def _count_acks(self, pongs: int) -> None:
        """Count as ``broker_acked`` the acks the server has read: those written before probe
        ``pongs``."""
        confirmed = 0
        while self._acks_to_confirm and self._acks_to_confirm[0][0] <= pongs:
            confirmed += self._acks_to_confirm.popleft()[1]
        self._collector.count("broker_acked", confirmed)

    def _status(self, msg: Message, now: float) -> None:
        code, description = status(msg.headers)
        if code == 0:  # a message with headers of its own
            if not self._unconfirmed or not self._is_committed_redelivery(msg):
                self._buffer.append(msg)
            self._requested -= 1
        elif code == 409:
            self._requested = 0
            self._pull_conflict(description, now)
        elif code in OVER:
            self._requested = 0
        elif code != HEARTBEAT:
            raise NatsError(f"a pull request ended with status {code} {description}", code)

    def _pull_conflict(self, description: str, now: float) -> None:
        """A pull request ended in a 409: busy (pull again shortly), too large (pull less,
        and say so once), or a consumer that cannot serve this spout (raised: an outage)."""
        said = description.lower()
        if said.startswith(BUSY):
            self._pull_at = now + CONFLICT_PAUSE_SECS
        elif said.startswith(TOO_LARGE) and description.split()[-1].isdigit() and self._conn is not None:
            allowed = max(1, int(description.split()[-1]))
            self._fetch = min(self._fetch, allowed)
            self._pull = self._pull_request(self._conn)
            self._pull_at = now + CONFLICT_PAUSE_SECS
            self._collector.report_error(
                BrokerError(
                    f"{self._outage.where}: consumer {self.durable!r} allows pulls of at most {allowed} messages "
                    f"(its max_batch; the server said {description!r}): the spout pulls {self._fetch} at a time "
                    "from now on. Raise the consumer's max_batch, or lower the spout's batch"
                )
            )
        else:
            raise NatsError(
                f"consumer {self.durable!r} of stream {self.stream!r} cannot be pulled from: 409 {description} "
                "(a deleted consumer is made again; a push consumer must be replaced by a pull consumer, or "
                "the spout given another durable name)",
                409,
            )

    def _ask_for_consumer_info(self, conn: Connection, now: float) -> None:
        """The pull request is long overdue: is the consumer there (its answer: ``_receive``)?
        Unanswered too, the server is gone."""
        if self._looked_up_at is None:
            self._looked_up_at = now
            conn.send(pub(f"$JS.API.CONSUMER.INFO.{self.stream}.{self.durable}", b"", conn.api_inbox))
        elif now - self._looked_up_at > REQUEST_SLACK_SECS:
            raise TimeoutError(f"no answer from the NATS server in {FETCH_WAIT_SECS + 2 * REQUEST_SLACK_SECS:g} s")

    def _keep_in_progress(self, now: float) -> None:
        """A round of in-progress acks: messages held since the previous round (at least
        ``ack_wait / 4`` ago, at most half of it) get ``in_progress``, so JetStream does not
        redeliver a tree still pending; so do the messages waiting in the buffer (while the
        pending budget is spent)."""
        self._round_at = now + self._round_every
        self._out += [f"PUB {reply} 4\r\n+WPI\r\n" for reply in self._emitted_before]
        self._out += [f"PUB {msg.reply} 4\r\n+WPI\r\n" for msg in self._buffer if msg.reply]
        self._emitted_before.update(self._emitted_this_round)
        self._emitted_this_round = {}
        self._write()

    # -- results ------------------------------------------------------------------------------
    def ack(self, msg_id: Any) -> None:
        if self._emitted_this_round.pop(msg_id, None) is None and self._emitted_before.pop(msg_id, None) is None:
            return
        if self._exactly_once:  # a commit: the message is recognised until the server read the ack
            sequence = ack_metadata(msg_id)[1]
            self._unconfirmed[sequence] = msg_id
            self._to_confirm.append(sequence)
        out = self._out
        out.append(f"PUB {msg_id} 4\r\n+ACK\r\n")
        self._unwritten_acks += 1
        if len(out) >= ACK_BATCH or time.monotonic() - self._written_at >= ACK_LINGER_SECS:
            self._write()

    def fail(self, msg_id: Any, reason: str = "failed") -> None:
        """``nak`` the message, or ``term`` it once it was replayed ``max_replays`` times."""
        subject = self._emitted_this_round.pop(msg_id, None) or self._emitted_before.pop(msg_id, None)
        if subject is None:
            return
        delivered, sequence = ack_metadata(msg_id)
        replays = delivered - 1
        if self.max_replays is not None and replays >= self.max_replays:
            self._out.append(f"PUB {msg_id} 5\r\n+TERM\r\n")
            self._collector.count("dead_lettered")
            logger.warning(
                "%s: message %d (subject %r) failed after %d replays (last: %s); terminated (dead-lettered)",
                self._outage.where,
                sequence,
                subject,
                replays,
                reason,
            )
        else:
            self._out.append(_nak(msg_id))
            self.replayed += 1
        self._write()

    def _write(self) -> None:
        """Write the acks (and the rest) waiting; without a connection they wait for the next."""
        self._written_at = time.monotonic()
        conn = self._conn
        if conn is None or not (self._out or conn.unsent):
            return
        out, self._out = self._out, []
        try:
            conn.send("".join(out).encode())
            if self._unwritten_acks or self._to_confirm:
                probe = conn.probe()  # its PONG: the server has read everything before it
                if self._unwritten_acks:
                    self._acks_to_confirm.append((probe, self._unwritten_acks))
                    self._unwritten_acks = 0
                if self._to_confirm:
                    self._confirming.append((probe, self._to_confirm))
                    self._to_confirm = []
        except _BROKEN as exc:
            self._out = out + self._out  # written again on the next connection: acks are idempotent
            self._broken(exc)

    # -- exactly-once -------------------------------------------------------------------------
    def position(self) -> tuple[str, list[tuple[int, int]]]:
        """The stream sequences of the messages emitted so far whose ack the server may not
        have read (those the coming checkpoint covers, and committed ones not confirmed yet),
        as ranges, with one of their ack subjects to make the others' from (``("", [])``:
        none). Raises ``BrokerError`` when the coming checkpoint must not commit (its
        messages were held on a connection since lost)."""
        if self._roll_back_why is not None:
            raise BrokerError(f"{self._outage.where}: {self._roll_back_why}: back to the last checkpoint")
        replies = [*self._emitted_before, *self._emitted_this_round]
        sequences = sorted({ack_metadata(reply)[1] for reply in replies} | set(self._unconfirmed))
        if not sequences:
            return "", []
        template = replies[0] if replies else next(iter(self._unconfirmed.values()))
        return template, _ranges(sequences)

    def seek(self, position: tuple[str, list[tuple[int, int]]]) -> None:
        """A rollback: every message emitted and not committed is ``nak``-ed, to be delivered
        again at once. A restarted task's first seek also acks every message of ``position``
        (their checkpoint committed; the acks may have died with the task before it), and
        recognises them until the server has read those acks."""
        self._out += [_nak(reply) for reply in (*self._emitted_before, *self._emitted_this_round)]
        self._emitted_before, self._emitted_this_round = {}, {}
        self._roll_back_why = None
        template, ranges = position
        if not self._sought and template:
            for first, last in ranges:
                for sequence in range(first, last + 1):
                    reply = with_sequence(template, sequence)
                    self._unconfirmed[sequence] = reply
                    self._to_confirm.append(sequence)
                    self._out.append(f"PUB {reply} 4\r\n+ACK\r\n")
            self._buffer = deque(msg for msg in self._buffer if not self._is_committed_redelivery(msg))
        self._sought = True
        self._write()

    def _is_committed_redelivery(self, msg: Message) -> bool:
        """Is ``msg`` a message whose checkpoint committed, delivered again (its ack lost)? It
        is then acked, not emitted."""
        if not msg.reply or ack_metadata(msg.reply)[1] not in self._unconfirmed:
            return False
        self.recognised += 1
        self._to_confirm.append(ack_metadata(msg.reply)[1])
        self._out.append(f"PUB {msg.reply} 4\r\n+ACK\r\n")
        self._unwritten_acks += 1
        return True

    def _confirmed(self, pongs: int) -> None:
        while self._confirming and self._confirming[0][0] <= pongs:
            for sequence in self._confirming.popleft()[1]:
                self._unconfirmed.pop(sequence, None)

    # -- the connection -----------------------------------------------------------------------
    def _reconnect(self) -> None:
        """Start connecting on a thread of its own once the outage's pause is over; take the
        connection once it is made. Never waits."""
        try:
            conn = self._connecting.take()
        except _BROKEN as exc:
            self._outage.failed(exc)
            return
        if conn is None:
            return
        self._conn = conn
        self._pull = self._pull_request(conn)
        ack_wait = float(conn.consumer.get("ack_wait") or 0) / 1e9
        if ack_wait:
            now = time.monotonic()
            self._round_every = ack_wait / 4.0
            self._round_at = min(self._round_at, now + self._round_every)
        self._requested = 0
        self._looked_up_at = None
        self._ping_at = time.monotonic() + PING_INTERVAL_SECS
        self._outage.recovered()
        self._write()

    def _pull_request(self, conn: Connection) -> bytes:
        request = {"batch": self._fetch, "expires": int(FETCH_WAIT_SECS * 1e9)}
        return pub(
            f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self.durable}", json.dumps(request).encode(), conn.pull_inbox
        )

    def _connect(self) -> Connection:
        """Connect and make sure the consumer exists (on the connector's thread: it waits)."""
        conn = connect(self.url, SOCKET_TIMEOUT_SECS)
        try:
            try:
                info = conn.request(f"$JS.API.CONSUMER.INFO.{self.stream}.{self.durable}")
            except NatsError as exc:
                if exc.code != CONSUMER_NOT_FOUND:
                    raise
                config: dict[str, Any] = {
                    "durable_name": self.durable,
                    "ack_policy": "explicit",
                    "deliver_policy": "all",
                    "ack_wait": int(self._ack_wait * 1e9),
                    "max_ack_pending": self._max_ack_pending,
                    "max_deliver": -1,
                }
                if self.subject is not None:
                    config["filter_subject"] = self.subject
                info = conn.request(
                    f"$JS.API.CONSUMER.DURABLE.CREATE.{self.stream}.{self.durable}",
                    {"stream_name": self.stream, "config": config},
                )
            conn.consumer = self._checked_consumer(info.get("config") or {})
        except BaseException:
            conn.close()
            raise
        return conn

    def _checked_consumer(self, config: dict[str, Any]) -> dict[str, Any]:
        """The consumer's config, if the spout can keep at-least-once with it; else a
        ``NatsError`` that says what is wrong and what to do."""
        name = f"consumer {self.durable!r} of stream {self.stream!r}"
        fix = "Delete it (nats consumer rm) for the spout to create one with explicit acks, or name another durable"
        policy = config.get("ack_policy", "explicit")
        if policy != "explicit":
            raise NatsError(
                f"{name} has ack_policy {policy!r}: the spout acks each message when its tree completes, "
                f"which needs 'explicit' ('all' settles every earlier message with it, 'none' each one on "
                f"delivery: both lose messages when a task dies). {fix}"
            )
        if config.get("deliver_subject"):
            raise NatsError(f"{name} is a push consumer (deliver_subject set): the spout pulls. {fix}")
        ack_wait = float(config.get("ack_wait") or 0) / 1e9
        if ack_wait and ack_wait < MIN_ACK_WAIT_SECS:
            raise NatsError(
                f"{name} has an ack_wait of {ack_wait:g} s, under the {MIN_ACK_WAIT_SECS:g} s the spout needs to "
                f"keep a pending tree's message from redelivery: raise it (nats consumer edit). {fix}"
            )
        return config

    def _broken(self, exc: BaseException) -> None:
        """The connection failed: drop it and connect again (after the outage's pause). The
        pull request under way is gone with it; the buffer and the acks waiting stay."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._requested = 0
        self._acks_to_confirm.clear()  # read by the server or not: never confirmed
        if self._exactly_once:  # what the lost socket had taken may be lost: acked again on the next
            self._confirming.clear()
            self._to_confirm = list(self._unconfirmed)
            self._out += [f"PUB {reply} 4\r\n+ACK\r\n" for reply in self._unconfirmed.values()]
            if self._emitted_before or self._emitted_this_round:
                self._roll_back_why = "the connection was lost while messages of the coming checkpoint were held"
        self._outage.failed(exc)


def _nak(reply: str) -> str:
    return f"PUB {reply} 4\r\n-NAK\r\n"


def _ranges(sequences: list[int]) -> list[tuple[int, int]]:
    """Sorted ``sequences`` as ``(first, last)`` runs: a task's messages come in runs of its
    pulls, so a checkpoint's position stays small."""
    ranges: list[tuple[int, int]] = []
    for sequence in sequences:
        if ranges and sequence == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], sequence)
        else:
            ranges.append((sequence, sequence))
    return ranges


def _value_maker(fields: tuple[str, ...], stream: str) -> Callable[[Message], list[Any]]:
    """The function that makes a message's tuple values, chosen once: it runs once per message."""
    if fields == ("data",):
        return lambda msg: [text_or_bytes(msg.payload)]
    if fields == ("subject", "data"):
        return lambda msg: [msg.subject, text_or_bytes(msg.payload)]

    def values(msg: Message) -> list[Any]:
        out: list[Any] = []
        for field in fields:
            if field == "data":
                out.append(text_or_bytes(msg.payload))
            elif field == "subject":
                out.append(msg.subject)
            elif field == "headers":
                out.append(header_fields(msg.headers))
            elif field == "sequence":
                out.append(ack_metadata(msg.reply or "")[1])
            elif field == "num_delivered":
                out.append(ack_metadata(msg.reply or "")[0])
            else:
                out.append(stream)
        return out

    return values
