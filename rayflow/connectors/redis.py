"""``RedisStreamSpout``: a Redis stream read through a consumer group, ``XACK`` when the tree completes.

A consumer group keeps, per consumer, the list of entries delivered and not acknowledged (the
PEL). That list is the spout's memory, so nothing is lost when a spout dies:

- each task reads as its own consumer, named after the component and the task id, so a
  restarted task is the same consumer: at ``open`` it first reads its own pending list
  (``XREADGROUP`` from id ``0``) and emits those entries again;
- new entries are read with ``XREADGROUP ... >``, as many as the pending budget has room for
  (at most ``MAX_READ``), and emitted up to ``EMIT_BURST`` per ``next_tuple``;
- a completed tree is ``XACK``-ed (in batches); a failed one is emitted again from the data the
  spout kept while the entry was pending, after an ``XCLAIM`` that resets its idle time, adds
  one to its delivery count and tells whether someone else acknowledged it meanwhile. The
  failed entries are claimed in batches (an ``XPENDING`` each for its count so far, then one
  ``XCLAIM`` of them all, sent together and answered like a read), so a wave of timeouts costs
  a round trip per ``FAIL_BATCH``, not one per entry on the task's thread;
- every delivery of an entry (a read, a replay's ``XCLAIM``, a restarted task's read of its
  pending list, an ``XAUTOCLAIM``) adds one to its delivery count in the group, so the count
  survives restarts: a failed entry already delivered ``max_replays + 1`` times is not emitted
  again but dead-lettered, atomically (``MULTI``): ``XADD`` of its fields, plus where it came
  from, why and how often it was delivered, to the dead-letter stream, and ``XACK``;
- entries left pending by a consumer that is gone for good (a task of a smaller topology, a
  crashed process elsewhere) are taken over with ``XAUTOCLAIM`` once idle for ``claim_idle_ms``.

How it stays off the event loop's back: reads and acks go over a connection of their own that
the task never waits on. A read (and the acks waiting, ahead of it) is *sent* while the buffer
still holds entries to emit, and its reply is taken only once all of it arrived, so Redis
prepares the next entries while the task emits the last ones; an ``XACK`` is sent and its reply
collected later the same way. The replies are read from the socket without waiting and parsed
by ``_resp.Replies`` (``hiredis.Reader`` fed from this socket: redis-py's own pure-Python
parser costs several method calls per element; over TLS, redis-py's ``can_read`` and
``read_response`` do it). Only the rare calls (a dead letter, the
``XAUTOCLAIM`` scan, creating the group) wait for their answer, bounded by
``SOCKET_TIMEOUT_SECS``. When the connection breaks, what its unanswered ``XACK``s carried is
sent again (``XACK`` is idempotent), failed entries whose claim went unanswered are emitted
again, and the next read starts with the task's own pending list, so an entry whose read reply
was lost is emitted, not stranded. That connection never runs redis-py's health check (a URL's
``health_check_interval``): its ``PING`` would read the reply of a command still under way.
``upkeep`` (``_upkeep``), every ``UPKEEP_SECS`` whether or not ``next_tuple`` is called, takes
the replies that arrived, sends the acks that waited their linger and the claims of failed
entries.

The group is created (with ``MKSTREAM``) at id ``0`` when missing, so entries added before the
topology first started are read too. A lost connection is retried with backoff and reported once
per outage; acks that could not be sent wait and go out once Redis answers again.

Exactly-once (``processing_guarantee="exactly_once"``): the consumer's pending list is the
spout's rewindable input. ``ack`` comes only when the checkpoint covering the entry commits, so
an entry stays pending until then, and the spout emits its own entries in id order (its pending
list from the cursor, then new ones, which are above every id it has): ``position()`` is the id
of the last entry emitted, and everything of this consumer's pending at or below it was emitted
before the cut, everything above it was not. ``seek(position)`` therefore drops what the task
held (nothing of it was committed), reads its own pending list again from just after
``position`` (``XREADGROUP`` with an explicit id) before reading new entries, and ``XACK``s
what is still pending at or below ``position``: those were committed, and their ``XACK`` was
lost (a task killed between the commit and the ack's write). That ``XPENDING`` and its
``XACK``s go over the connection of reads and acks like a read, 1,000 entries a round, never
waited for on the task's thread. Nothing is claimed under
exactly-once: an entry pending with another task of the spout was emitted by it, and a claim
would emit it twice if that task's cut committed it; each task's entries are read again by it
alone (a restarted task keeps its consumer name, and so does the topology submitted again under
the same name). Entries pending with a consumer no task of the topology is (a spout made
smaller, a program of another kind) stay where they are: see ``docs/brokers.md``.
"""

from __future__ import annotations

import functools
import itertools
import logging
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis
import redis.exceptions
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError
from redis.retry import Retry

from .._collectors import SpoutOutputCollector
from .._components import OutputFieldsDeclarer, Spout
from .._context import TopologyContext
from .._errors import ConfigError
from ._dead_letters import DEFAULT_MAX_REPLAYS, replay_bound
from ._errors import BrokerError
from ._outage import Outage
from ._resp import RedisStreamError, Replies
from ._upkeep import Upkeep
from ._wire import CUT_USER_INFO, cut_user_info, redact_url, scheme, text_or_bytes, url_scheme

__all__ = ["RedisStreamSpout"]

logger = logging.getLogger("rayflow.connectors")

DEAD_LETTER_FIELDS = ("rayflow.stream", "rayflow.group", "rayflow.id", "rayflow.reason", "rayflow.deliveries")
"""Added to a dead letter's fields: its stream, group and entry id, the last fail's reason
(``"failed"`` or ``"timeout"``), and its delivery count."""
MAX_READ = 1000
"""Entries asked for per ``XREADGROUP``/``XAUTOCLAIM`` (fewer when ``max_spout_pending`` is lower,
or when the entries held leave less room: ``HOLD_SLACK``). The next read is sent once the
buffer is down to half of one, so its reply is there before the buffer runs dry."""
HOLD_SLACK = 1.25
"""A task holds (pending trees plus entries read and not emitted yet) at most
``max_spout_pending`` and a quarter: entries read far ahead would idle in the group's pending
list, where another consumer's claim scan could take them."""
EMIT_BURST = 64
"""Entries ``next_tuple`` emits per call at most, and at most a 64th of ``max_spout_pending``:
the executor checks the pending budget between calls, so a task may hold up to one burst of
trees over it (under 2%)."""
ACK_BATCH = 500
ACK_LINGER_SECS = 0.05
"""Acks go out as one ``XACK`` per this many ids, or this long after the previous one."""
FAIL_BATCH = 500
"""Failed entries claimed back together (see the module docstring)."""
UPKEEP_SECS = 0.1
"""How often ``upkeep`` runs: twice an ack linger."""
IDLE_POLL_SECS = 0.01
"""After a read found nothing new, ask Redis again only this much later."""
SOCKET_TIMEOUT_SECS = 3.0
"""The longest one Redis call can hold up the task while Redis does not answer."""

Entry = tuple[str, dict[str | bytes, Any]]
_T = TypeVar("_T")
_BROKEN = (redis.exceptions.RedisError, OSError, BrokerError)
"""What a Redis call can fail with: redis-py's errors, the socket's, and a reply that is not RESP
(``RedisStreamError``). The outage reports them as ``RedisStreamError``s that say what to check
(``_explained``)."""


class RedisStreamSpout(Spout):
    """Read ``stream`` as consumer group ``group``; one tuple per entry, tracked by its id.

    - Storm ack -> ``XACK``; Storm fail (either reason) -> the entry is emitted again, at most
      ``max_replays`` times (default 10; ``None`` or -1: no bound), after which it is
      dead-lettered: added to ``dead_letter_stream`` (default ``<stream>:dead``) with its
      fields plus ``DEAD_LETTER_FIELDS``, and acknowledged, in one ``MULTI``. Replays are
      counted by Redis (the entry's delivery count in the group), so a restart does not reset
      them (the restarted task's first read counts as one: the tree was lost). Each dead
      letter is counted in the metrics (``dead_lettered``) and logged with its id and reason.
    - ``fields`` names the output fields: ``"id"`` (the entry id, a ``str``), ``"data"`` (the
      entry's field mapping, keys and values ``str`` when UTF-8, else ``bytes``), ``"stream"``
      (the stream's name), or the name of one of the entry's fields (its value, ``None`` when
      the entry lacks it).
    - ``claim_idle_ms``: entries pending this long with another consumer are taken over.
      Keep it above the time a tree takes (and above ``message_timeout_secs``), or entries that
      are still being processed are emitted a second time.
    - The consumer name is ``<topology name>/<component>-<task id>`` (the name from
      ``conf["topology.name"]``, which ``submit_topology`` sets; without one, no prefix): two
      topologies reading one group need different topology names or component ids. A restarted
      task keeps its name, so it reads its own pending entries first.
    - Exactly-once: ``position()`` is the id of the last entry emitted, ``seek`` reads the
      consumer's pending entries again from after it and ``XACK``s those at or below it; no
      entry is claimed from another consumer (the module docstring says why).

    Example::

        builder.set_spout("orders", RedisStreamSpout("orders", "rayflow", fields=("id", "amount")))
    """

    acks_to_broker = True
    """Its broker keeps each message until the spout acks it: with ``ackers=0`` that ack comes at
    emit (at-most-once), and submitting warns of it (``_run_checks``)."""

    def __init__(
        self,
        stream: str,
        group: str,
        *,
        url: str = "redis://127.0.0.1:6379/0",
        fields: Sequence[str] = ("id", "data"),
        claim_idle_ms: int = 30_000,
        max_replays: int | None = DEFAULT_MAX_REPLAYS,
        dead_letter_stream: str | None = None,
    ) -> None:
        for name, value in (("stream", stream), ("group", group)):
            if not isinstance(value, str) or not value:
                raise ConfigError(f"RedisStreamSpout: {name} must be a non-empty string, got {value!r}")
        if scheme(url) not in ("redis", "rediss", "unix"):
            raise ConfigError(
                f"RedisStreamSpout {stream!r}: url must be a redis://, rediss:// or unix:// URL, got {url_scheme(url)}"
            )
        if cut_user_info(url):
            raise ConfigError(f"RedisStreamSpout {stream!r}: url {CUT_USER_INFO}")
        if isinstance(fields, str) or not fields or not all(isinstance(f, str) and f for f in fields):
            raise ConfigError(f"RedisStreamSpout {stream!r}: fields must be a non-empty list of names, got {fields!r}")
        if isinstance(claim_idle_ms, bool) or not isinstance(claim_idle_ms, int) or claim_idle_ms < 1:
            raise ConfigError(
                f"RedisStreamSpout {stream!r}: claim_idle_ms must be a positive int (ms), got {claim_idle_ms!r}"
            )
        if dead_letter_stream is not None and (not isinstance(dead_letter_stream, str) or not dead_letter_stream):
            raise ConfigError(
                f"RedisStreamSpout {stream!r}: dead_letter_stream must be a non-empty string, "
                f"got {dead_letter_stream!r}"
            )
        if dead_letter_stream == stream:
            raise ConfigError(f"RedisStreamSpout {stream!r}: dead_letter_stream must be another stream than {stream!r}")
        self.max_replays = replay_bound(f"RedisStreamSpout {stream!r}", max_replays)
        self.dead_letter_stream = dead_letter_stream or f"{stream}:dead"
        self.stream = stream
        self.group = group
        self.url = url
        self.fields = tuple(fields)
        self.claim_idle_ms = claim_idle_ms

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(list(self.fields))

    # -- lifecycle ----------------------------------------------------------------------------
    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        prefix = f"{conf['topology.name']}/" if conf.get("topology.name") else ""
        self.consumer = f"{prefix}{context.this_component_id}-{context.this_task_id}"
        pending_cap = conf.get("max_spout_pending")
        self._hold_cap = int(pending_cap * HOLD_SLACK) if pending_cap else None
        self._max_read = min(MAX_READ, pending_cap) if pending_cap else MAX_READ
        self._burst = max(1, min(EMIT_BURST, pending_cap // 64)) if pending_cap else EMIT_BURST
        self._low = max(self._burst, self._max_read // 2)
        self._client = redis.Redis.from_url(
            self.url,
            socket_timeout=SOCKET_TIMEOUT_SECS,
            socket_connect_timeout=SOCKET_TIMEOUT_SECS,
            retry=Retry(NoBackoff(), 0),
        )
        self._client.set_response_callback("XAUTOCLAIM", _raw_reply)  # redis-py drops the cursor of a JUSTID reply
        self._conn: Any = None
        """The connection of reads and acks (``_send``/``_receive``); ``None`` until first used."""
        self._sent: deque[tuple[str, list[str] | None]] = deque()
        """Commands sent on ``_conn`` whose reply was not taken yet: ``("ack", ids)``,
        ``("read", None)``, ``("pending", [id])`` or ``("claim", ids)``."""
        self._failed: dict[str, str] = {}
        """Entries whose trees failed, to be claimed back, and the reason of each fail."""
        self._claiming: dict[str, str] = {}
        """The failed entries whose claim was sent and not answered yet."""
        self._counts: dict[str, int] = {}
        """Their delivery counts before the claim, as ``XPENDING`` answered."""
        self._replies: Replies | None = None
        """Reads the replies on ``_conn`` (a plain socket's); ``None``: redis-py's parser does."""
        self._reading = False
        self._collector = collector
        self._buffer: deque[Entry] = deque()
        self._held: dict[str, dict[str | bytes, Any]] = {}
        """Entries this task holds, by id: read and not emitted yet (in the buffer), or emitted
        and their tree pending. Their data is what a replay emits again."""
        self._to_ack: list[str] = []
        self._acked_at = time.monotonic()
        self._group_ready = False
        self._backlog: str | None = "0"  # own pending list first (a restarted task's), then ">"
        self._claim_cursor = "0-0"
        self._claim_at = 0.0
        self._claim_every = self.claim_idle_ms / 2000.0
        self._read_at = 0.0
        self._values = _value_maker(self.fields, self.stream)
        self._exactly_once = conf.get("processing_guarantee") == "exactly_once"
        self._last = "0-0"
        """Exactly-once: the id of the last entry emitted (``position``)."""
        self._read_high = "0-0"
        """The highest id read into the buffer: a read whose reply a broken connection lost is
        read again from its own pending list after it (exactly-once; at-least-once reads the
        whole list again, and skips what it holds)."""
        self._settle_below: str | None = None
        """Exactly-once, after a ``seek``: ``XACK`` what is still pending at or below this id."""
        self._settling = False
        """An ``XPENDING`` for the entries at or below ``_settle_below`` is sent and unanswered."""
        self._settled = 0
        """Entries ``XACK``-ed since the ``seek`` because their checkpoint committed."""
        self.replayed = 0
        """Entries emitted again after a fail."""
        self.claimed = 0
        """Entries taken over from other consumers."""
        collector.count("dead_lettered", 0)
        collector.count("broker_acked", 0)
        where = (
            f"RedisStreamSpout {self.stream!r} group {self.group!r} consumer {self.consumer!r} ({redact_url(self.url)})"
        )
        self._outage = Outage(where, collector.report_error)
        self._upkeep = Upkeep(self.upkeep, UPKEEP_SECS, collector.report_error)
        self._call(self._ensure_group)
        self._upkeep.start()

    def deactivate(self) -> None:
        self._flush_acks()

    def close(self) -> None:
        """Send the acks waiting and wait (``SOCKET_TIMEOUT_SECS`` at most) until Redis took
        them; entries read and not acked stay pending with this consumer."""
        self._upkeep.stop()
        self._flush_acks()
        if self._conn is not None:
            try:
                while self._sent:
                    kind, _ = self._sent.popleft()
                    reply = self._replies.take(wait=True)[1] if self._replies else self._conn.read_response()
                    if kind == "read":
                        self._take_read_reply(reply)  # nothing is lost: they stay pending, as the buffer's
            except _BROKEN as exc:
                logger.debug("%s: acks at close: %s", self._outage.where, exc)
            self._conn.disconnect()
        self._client.close()

    # -- emitting -----------------------------------------------------------------------------
    def next_tuple(self) -> None:
        if not self._group_ready and not self._call(self._ensure_group):
            return
        self._serve_connection()
        buffer = self._buffer
        if len(buffer) <= self._low:
            self._ask_for_more()
        emit, values = self._collector.emit, self._values
        burst = min(len(buffer), self._burst)
        for _ in range(burst):
            entry_id, data = buffer.popleft()
            emit(values(entry_id, data), msg_id=entry_id)
        if burst and self._exactly_once:
            self._last = entry_id

    def upkeep(self) -> None:
        """What keeps Redis informed whether or not ``next_tuple`` is called (``_upkeep``);
        never waits: the replies that arrived taken, the acks that waited their linger sent,
        the failed entries' claims sent."""
        if self._group_ready:
            self._serve_connection()

    def _serve_connection(self) -> None:
        """The connection's duties that are due, from ``next_tuple`` and ``upkeep`` alike: the
        replies that arrived taken, the acks that waited their linger sent, the failed entries'
        claims sent. Never waits."""
        if self._sent:
            self._receive()
        if self._to_ack and time.monotonic() - self._acked_at >= ACK_LINGER_SECS:
            self._flush_acks()
        if self._failed and not self._claiming:
            self._claim_failed()

    def _ask_for_more(self) -> None:
        """Ask for more entries, ahead of need: a claim scan when due, else a read (sent, its
        reply taken by a later ``next_tuple``)."""
        now = time.monotonic()
        if self._exactly_once:
            if self._settle_below is not None and not self._settling:
                self._ask_committed_pending()
        elif now >= self._claim_at:
            self._call(self._claim)
        if self._reading or now < self._read_at or (self._outage.down and not self._outage.due()):
            return
        count = self._max_read
        if self._hold_cap is not None:
            count = min(count, self._hold_cap - len(self._held))
            if count < self._burst:  # the budget is full: read when trees complete
                return
        if self._to_ack:
            self._flush_acks()  # ahead of the read, on the same connection: one trip for both
        cursor = self._backlog or ">"
        command = ("XREADGROUP", "GROUP", self.group, self.consumer, "COUNT", count, "STREAMS", self.stream, cursor)
        if self._send(command, ("read", None)):
            self._reading = True

    def _take_read_reply(self, reply: Any) -> int:
        """Take the entries of an ``XREADGROUP`` reply into the buffer; how many there were."""
        if not reply:
            entries: Any = []
        elif isinstance(reply, dict):  # RESP3, and redis-py's RESP2 parser for this command
            entries = next(iter(reply.values()))
        else:
            entries = reply[0][1]
        if entries:
            self._read_high = _text(entries[-1][0])
        if self._backlog is not None:
            self._backlog = _text(entries[-1][0]) if entries else None
            if entries:
                logger.info("%s: %d entries pending from before, emitting them again", self._outage.where, len(entries))
        held, buffer, take = self._held, self._buffer, self._take
        for entry_id, fields in entries:
            entry_id = _text(entry_id)
            if entry_id in held or fields is None or fields.__class__ is not list:
                take(entry_id, _pairs(fields))
                continue
            it = iter(fields)
            entry = {text_or_bytes(k): text_or_bytes(v) for k, v in zip(it, it, strict=False)}
            held[entry_id] = entry
            buffer.append((entry_id, entry))
        return len(entries)

    def _claim(self) -> None:
        """One step of the ``XAUTOCLAIM`` scan over the group's pending list. ``JUSTID``: the
        scan also meets this task's own entries idle that long (a long tree, or entries waiting
        in the buffer), and must not count a delivery for them (it resets their idle time, which
        keeps other tasks off them); the others' are then taken with an ``XCLAIM``, which
        counts the delivery and brings their data."""
        reply: Any = self._client.xautoclaim(
            self.stream,
            self.group,
            self.consumer,
            self.claim_idle_ms,
            self._claim_cursor,
            count=self._max_read,
            justid=True,
        )
        cursor, ids = _text(reply[0]), reply[1]  # the raw reply: ``open`` sets ``_raw_reply`` for it
        self._claim_cursor = cursor
        self._claim_at = time.monotonic() + (self._claim_every if cursor == "0-0" else 0.0)
        acking = self._acking()
        others: list[Any] = [i for i in map(_text, ids) if i not in self._held and i not in acking]
        if others:
            entries: Any = self._client.xclaim(self.stream, self.group, self.consumer, 0, others)
            for entry_id, data in entries:
                self.claimed += 1
                self._take(_text(entry_id), data)

    def _take(self, entry_id: str, data: dict[bytes, bytes] | None) -> None:
        if entry_id in self._held:
            return
        if not data:  # deleted from the stream (XDEL, trimming) while pending: nothing to process
            self._to_ack.append(entry_id)
            return
        entry = {text_or_bytes(k): text_or_bytes(v) for k, v in data.items()}
        self._held[entry_id] = entry
        self._buffer.append((entry_id, entry))

    # -- exactly-once --------------------------------------------------------------------------
    def position(self) -> str:
        """The id of the last entry emitted (``"0-0"``: none yet). Every entry of this consumer's
        pending list at or below it was emitted before it was taken, every one above was not."""
        return self._last

    def seek(self, position: str) -> None:
        """Go back to ``position`` (a rollback, or a restarted task): what the task holds is
        dropped (none of it was committed), its pending entries after ``position`` are read
        again before new ones, and those at or below it, committed, are ``XACK``-ed. Never waits:
        the reads and the ``XACK`` go with the next ``next_tuple``."""
        self._buffer.clear()
        self._held.clear()
        self._failed.clear()
        self._claiming = {}
        self._counts.clear()
        self._sent = deque(("stale", ids) if kind in ("read", "settle") else (kind, ids) for kind, ids in self._sent)
        self._reading = self._settling = False
        self._settled = 0
        self._read_at = 0.0
        self._last = self._read_high = self._backlog = position
        self._settle_below = None if position == "0-0" else position

    def _ask_committed_pending(self) -> None:
        """Ask (without waiting) which entries this consumer still has pending at or below the
        position it sought: those entries' checkpoint committed, and their ``XACK`` was lost.
        ``_settle_committed`` acks what the reply lists."""
        assert self._settle_below is not None
        command = ("XPENDING", self.stream, self.group, "-", self._settle_below, MAX_READ, self.consumer)
        self._settling = self._send(command, ("settle", None))

    def _settle_committed(self, rows: Any) -> None:
        """``XACK`` the entries of an ``XPENDING`` reply (counted as ``broker_acked`` when its
        reply comes); a full reply asks for the next ones, behind that ``XACK`` on the same
        connection, so Redis answers it with the entries still pending after it."""
        self._settling = False
        ids = [_text(row[0]) for row in rows or ()]
        if ids:
            self._send(("XACK", self.stream, self.group, *ids), ("ack", ids))
            self._settled += len(ids)
        if len(ids) == MAX_READ:
            self._ask_committed_pending()
            return
        if self._settled:
            logger.info(
                "%s: %d entries committed by the last checkpoint were still pending (their XACK was lost): acked",
                self._outage.where,
                self._settled,
            )
        self._settle_below, self._settled = None, 0

    # -- results ------------------------------------------------------------------------------
    def ack(self, msg_id: Any) -> None:
        if self._held.pop(msg_id, None) is None:
            return  # not held (acked twice, or from before a restart): nothing to settle here
        self._to_ack.append(msg_id)
        if len(self._to_ack) >= ACK_BATCH or time.monotonic() - self._acked_at >= ACK_LINGER_SECS:
            self._flush_acks()

    def fail(self, msg_id: Any, reason: str = "failed") -> None:
        """Claim the entry back to emit it again, in a batch with the other failed ones
        (``_claim_failed``); never waits."""
        if msg_id in self._held:
            self._failed[msg_id] = reason
            if len(self._failed) >= FAIL_BATCH and not self._claiming:
                self._claim_failed()

    def _claim_failed(self) -> None:
        """Send the claims of up to ``FAIL_BATCH`` failed entries: an ``XPENDING`` each (how
        often it was delivered so far), then one ``XCLAIM`` of them all (not ``JUSTID``: that
        would not count the replay to come), which tells which are still pending here. The
        replies are taken as they arrive (``_take_claim_reply``). While Redis does not answer, the
        entries are emitted again without a claim."""
        batch = dict(itertools.islice(self._failed.items(), FAIL_BATCH))
        for entry_id in batch:
            del self._failed[entry_id]
        ids = list(batch)
        commands: list[tuple[Any, ...]] = [("XPENDING", self.stream, self.group, i, i, 1) for i in ids]
        commands.append(("XCLAIM", self.stream, self.group, self.consumer, 0, *ids))
        sent: list[tuple[str, list[str] | None]] = [("pending", [i]) for i in ids]
        sent.append(("claim", ids))
        if self._send_all(commands, sent):
            self._claiming = batch
        else:
            self._emit_again(ids)

    def _take_claim_reply(self, reply: Any) -> None:
        """The ``XCLAIM`` of the failed entries was answered: emit each again, unless it is no
        longer pending (acknowledged by another consumer that claimed it while its tree here
        ran), or dead-letter it once it was replayed ``max_replays`` times."""
        batch, self._claiming = self._claiming, {}
        still_pending = {_text(entry[0]) for entry in reply or () if entry}
        again = []
        for entry_id, reason in batch.items():
            deliveries = self._counts.pop(entry_id, 0)
            data = self._held.get(entry_id)
            if data is None:
                continue
            if entry_id not in still_pending:
                del self._held[entry_id]
            elif self.max_replays is not None and deliveries > self.max_replays:
                if self._call(functools.partial(self._dead_letter, entry_id, data, reason, deliveries)) is not None:
                    del self._held[entry_id]
                else:
                    again.append(entry_id)
            else:
                again.append(entry_id)
        self._emit_again(again)

    def _emit_again(self, ids: list[str]) -> None:
        for entry_id in reversed(ids):
            data = self._held.get(entry_id)
            if data is not None:
                self.replayed += 1
                self._buffer.appendleft((entry_id, data))

    def _dead_letter(self, entry_id: str, data: dict[str | bytes, Any], reason: str, deliveries: int) -> bool:
        fields: dict[str | bytes, Any] = dict(data)
        fields.update(zip(DEAD_LETTER_FIELDS, (self.stream, self.group, entry_id, reason, deliveries), strict=True))
        pipe = self._client.pipeline(transaction=True)
        pipe.xadd(self.dead_letter_stream, fields)  # type: ignore[arg-type]
        pipe.xack(self.stream, self.group, entry_id)
        pipe.execute()
        self._collector.count("dead_lettered")
        logger.warning(
            "%s: entry %s failed after %d replays (last: %s); dead-lettered to stream %r",
            self._outage.where,
            entry_id,
            deliveries - 1,
            reason,
            self.dead_letter_stream,
        )
        return True

    def _flush_acks(self) -> None:
        """Send one ``XACK`` for the ids waiting (its reply is taken later, by ``_receive``)."""
        if not self._to_ack:
            return
        ids = self._to_ack
        if self._send(("XACK", self.stream, self.group, *ids), ("ack", ids)):
            self._to_ack = []
            self._acked_at = time.monotonic()

    def _acking(self) -> set[str]:
        """Ids acked by their trees whose ``XACK`` Redis may not have yet."""
        acking = set(self._to_ack)
        for kind, ids in self._sent:
            if kind == "ack" and ids:
                acking.update(ids)
        return acking

    # -- the connection -----------------------------------------------------------------------
    def _send(self, command: tuple[Any, ...], sent: tuple[str, list[str] | None]) -> bool:
        """Send ``command`` on the connection of reads and acks, without waiting for its reply."""
        return self._send_all([command], [sent])

    def _send_all(self, commands: list[tuple[Any, ...]], sent: list[tuple[str, list[str] | None]]) -> bool:
        """Send ``commands`` together (one write) on the connection of reads and acks, without
        waiting for their replies. Never redis-py's health check: its ``PING`` would read the
        reply of a command under way."""
        if self._outage.down and not self._outage.due():
            return False
        try:
            if self._conn is None:
                self._conn = self._client.connection_pool.make_connection()
            packed = self._conn.pack_commands(commands)
            self._conn.send_packed_command(packed, check_health=False)  # connects (and authenticates) if need be
            sock = getattr(self._conn, "_sock", None)  # redis-py's own: absent, its parser reads
            if self._replies is None and type(sock) is socket.socket:  # not TLS
                self._replies = Replies(sock)
        except _BROKEN as exc:
            self._broken(exc)
            return False
        self._sent.extend(sent)
        return True

    def _receive(self) -> None:
        """Take the replies that arrived (in the order their commands were sent), never waiting
        for one that did not."""
        conn, sent, replies = self._conn, self._sent, self._replies
        try:
            while sent:
                if replies is not None:
                    arrived, reply = replies.take()
                    if not arrived:
                        break
                    if isinstance(reply, ResponseError):
                        raise reply
                elif conn.can_read(timeout=0):
                    reply = conn.read_response()
                else:
                    break
                kind, ids = sent.popleft()
                if kind == "read":
                    self._reading = False
                    if not self._take_read_reply(reply):
                        self._read_at = time.monotonic() + IDLE_POLL_SECS
                elif kind == "pending":
                    assert ids is not None
                    self._counts[ids[0]] = int(reply[0][3]) if reply else 0
                elif kind == "claim":
                    self._take_claim_reply(reply)
                elif kind == "settle":
                    self._settle_committed(reply)
                elif kind == "ack":  # entries Redis took off the pending list (0 for one acked before)
                    self._collector.count("broker_acked", int(reply))
                # "stale": a read or a settle sent before a ``seek``; what it brought is read again after it
        except _BROKEN as exc:
            self._broken(exc)
            return
        if self._outage.down:
            self._outage.recovered()

    def _broken(self, exc: BaseException) -> None:
        """The connection of reads and acks failed: what its unanswered ``XACK``s carried waits
        to be sent again, and the next read starts with this consumer's pending list (a read
        whose reply was lost may have delivered entries to it)."""
        if "NOGROUP" in str(exc):  # the stream or group was deleted (or Redis lost its data)
            self._group_ready = False
        for kind, ids in self._sent:
            if kind == "ack" and ids:
                self._to_ack.extend(ids)
        self._sent.clear()
        self._settling = False  # asked again on the next connection
        claiming, self._claiming = list(self._claiming), {}
        self._counts.clear()
        self._emit_again(claiming)  # their claim may be lost: emitted again without one
        self._replies = None
        self._reading = False
        self._backlog = self._read_high if self._exactly_once else "0"
        if self._conn is not None:
            self._conn.disconnect()
        self._outage.failed(self._explained(exc))

    def _ensure_group(self) -> bool:
        try:
            self._client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True
        return True

    def _call(self, action: Callable[[], _T]) -> _T | None:
        """Run a Redis call and wait for its answer; a failure starts (or continues) an outage
        and gives ``None``. While an outage waits for its next attempt, nothing is tried
        (``None`` too)."""
        if self._outage.down and not self._outage.due():
            return None
        try:
            result = action()
        except _BROKEN as exc:
            if "NOGROUP" in str(exc):  # the stream or group was deleted (or Redis lost its data)
                self._group_ready = False
            self._outage.failed(self._explained(exc))
            return None
        self._outage.recovered()
        return result

    def _explained(self, exc: BaseException) -> BaseException:
        """redis-py's error as a ``RedisStreamError`` that says what to check (``exc`` its
        cause); the socket's errors and rayflow's own as they are (the outage explains those)."""
        if not isinstance(exc, redis.exceptions.RedisError):
            return exc
        text = str(exc)
        hint = ""
        if isinstance(exc, redis.exceptions.AuthenticationError) or text.startswith(("WRONGPASS", "NOAUTH")):
            hint = "check the URL's user and password"
        elif text.startswith("NOPERM"):
            hint = (
                "the URL's user lacks a permission the spout needs: XGROUP CREATE, XREADGROUP, XACK, XPENDING, "
                "XCLAIM, XAUTOCLAIM, and MULTI and XADD on the dead-letter stream"
            )
        elif text.startswith("WRONGTYPE"):
            hint = f"key {self.stream!r} holds something that is not a stream"
        elif text.startswith("NOGROUP"):
            hint = "the stream or its group was deleted (or Redis lost its data); the spout creates them again"
        elif text.startswith("READONLY"):
            hint = "the URL names a read-only replica: name the primary"
        elif isinstance(exc, redis.exceptions.TimeoutError):
            hint = "Redis did not answer in time: is it overloaded, or the host unreachable?"
        elif isinstance(exc, redis.exceptions.ConnectionError):
            hint = "is Redis running, and are the URL's host and port right?"
        explained = RedisStreamError(f"{type(exc).__name__}: {text}" + (f" ({hint})" if hint else ""))
        explained.__cause__ = exc
        return explained


def _value_maker(fields: tuple[str, ...], stream: str) -> Callable[[str, dict[str | bytes, Any]], list[Any]]:
    """The function that makes an entry's tuple values, chosen once: it runs once per entry."""
    if not {"id", "data", "stream"} & set(fields):
        if len(fields) == 1:
            name = fields[0]
            return lambda entry_id, data: [data.get(name)]
        return lambda entry_id, data: [data.get(field) for field in fields]

    def values(entry_id: str, data: dict[str | bytes, Any]) -> list[Any]:
        out: list[Any] = []
        for field in fields:
            if field == "id":
                out.append(entry_id)
            elif field == "data":
                out.append(dict(data))
            elif field == "stream":
                out.append(stream)
            else:
                out.append(data.get(field))
        return out

    return values


def _pairs(fields: Any) -> dict[bytes, bytes] | None:
    """An entry's fields from a raw reply (a flat list of names and values, or ``None`` for an
    entry deleted while pending) as a mapping."""
    if fields is None or isinstance(fields, dict):
        return fields
    it = iter(fields)
    return dict(zip(it, it, strict=False))


def _raw_reply(response: Any, **options: Any) -> Any:
    return response


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
