"""``RedisStreamSpout``: a Redis stream read through a consumer group, ``XACK`` when the tree completes.

A consumer group keeps, per consumer, the list of entries delivered and not acknowledged (the
PEL). That list is the spout's memory, so nothing is lost when a spout dies:

- each task reads as its own consumer, named after the component and the task id, so a
  restarted task is the same consumer: at ``open`` it first reads its own pending list
  (``XREADGROUP`` from id ``0``) and emits those entries again;
- new entries are read with ``XREADGROUP ... >`` (never ``BLOCK``: it runs on the task's event
  loop), many per call, and emitted up to ``EMIT_BURST`` per ``next_tuple``;
- a completed tree is ``XACK``-ed (in batches); a failed one is emitted again from the data the
  spout kept while the entry was pending, after an ``XCLAIM`` that resets its idle time, adds
  one to its delivery count and tells whether someone else acknowledged it meanwhile;
- every delivery of an entry (a read, a replay's ``XCLAIM``, a restarted task's read of its
  pending list, an ``XAUTOCLAIM``) adds one to its delivery count in the group, so the count
  survives restarts: a failed entry already delivered ``max_replays + 1`` times is not emitted
  again but dead-lettered, atomically (``MULTI``): ``XADD`` of its fields, plus where it came
  from, why and how often it was delivered, to the dead-letter stream, and ``XACK``;
- entries left pending by a consumer that is gone for good (a task of a smaller topology, a
  crashed process elsewhere) are taken over with ``XAUTOCLAIM`` once idle for ``claim_idle_ms``.

The group is created (with ``MKSTREAM``) at id ``0`` when missing, so entries added before the
topology first started are read too. A lost connection is retried with backoff and reported once
per outage; acks that could not be sent wait and go out once Redis answers again.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from .._collectors import SpoutOutputCollector
from .._components import OutputFieldsDeclarer, Spout
from .._context import TopologyContext
from .._errors import ConfigError
from ._dead_letters import DEFAULT_MAX_REPLAYS, replay_bound
from ._outage import Outage
from ._wire import redact_url, scheme, text_or_bytes, url_scheme

__all__ = ["RedisStreamSpout"]

logger = logging.getLogger("rayflow.connectors")

DEAD_LETTER_FIELDS = ("rayflow.stream", "rayflow.group", "rayflow.id", "rayflow.reason", "rayflow.deliveries")
"""Added to a dead letter's fields: its stream, group and entry id, the last fail's reason
(``"failed"`` or ``"timeout"``), and its delivery count."""
MAX_READ = 1000
"""Entries asked for per ``XREADGROUP``/``XAUTOCLAIM`` (fewer when ``max_spout_pending`` is lower)."""
EMIT_BURST = 64
"""Entries ``next_tuple`` emits per call at most, and at most a 64th of ``max_spout_pending``:
the executor checks the pending budget between calls, so a task may hold up to one burst of
trees over it (under 2%)."""
ACK_BATCH = 500
ACK_LINGER_SECS = 0.05
"""Acks go out as one ``XACK`` per this many ids, or this long after the previous one."""
IDLE_POLL_SECS = 0.01
"""After a read found nothing new, ask Redis again only this much later."""
SOCKET_TIMEOUT_SECS = 3.0
"""The longest one Redis call can hold up the task while Redis does not answer."""

Entry = tuple[str, dict[str | bytes, Any]]
_T = TypeVar("_T")
_BROKEN = (redis.exceptions.RedisError, OSError)


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

    Example::

        builder.set_spout("orders", RedisStreamSpout("orders", "rayflow", fields=("id", "amount")))
    """

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
        self._read_count = min(MAX_READ, pending_cap) if pending_cap else MAX_READ
        self._burst = max(1, min(EMIT_BURST, pending_cap // 64)) if pending_cap else EMIT_BURST
        self._client = redis.Redis.from_url(
            self.url,
            socket_timeout=SOCKET_TIMEOUT_SECS,
            socket_connect_timeout=SOCKET_TIMEOUT_SECS,
            retry=Retry(NoBackoff(), 0),
        )
        self._client.set_response_callback("XAUTOCLAIM", _raw_reply)  # redis-py drops the cursor of a JUSTID reply
        self._collector = collector
        self._buffer: deque[Entry] = deque()
        self._queued: set[str] = set()
        self._inflight: dict[str, dict[str | bytes, Any]] = {}
        self._to_ack: list[str] = []
        self._acked_at = time.monotonic()
        self._group_ready = False
        self._backlog: str | None = "0"  # own pending list first (a restarted task's), then ">"
        self._claim_cursor = "0-0"
        self._claim_at = 0.0
        self._claim_every = self.claim_idle_ms / 2000.0
        self._read_at = 0.0
        self.replayed = 0
        """Entries emitted again after a fail."""
        self.claimed = 0
        """Entries taken over from other consumers."""
        collector.count("dead_lettered", 0)
        where = (
            f"RedisStreamSpout {self.stream!r} group {self.group!r} consumer {self.consumer!r} ({redact_url(self.url)})"
        )
        self._outage = Outage(where, collector.report_error)
        self._call(self._ensure_group)

    def deactivate(self) -> None:
        self._flush_acks()

    def close(self) -> None:
        self._flush_acks()
        self._client.close()

    # -- emitting -----------------------------------------------------------------------------
    def next_tuple(self) -> None:
        if not self._group_ready and not self._call(self._ensure_group):
            return
        if self._to_ack:
            self._flush_acks()
        if not self._buffer:
            self._fill()
        buffer, emit = self._buffer, self._collector.emit
        for _ in range(min(len(buffer), self._burst)):
            entry_id, data = buffer.popleft()
            self._queued.discard(entry_id)
            self._inflight[entry_id] = data
            emit(self._values(entry_id, data), msg_id=entry_id)

    def _values(self, entry_id: str, data: dict[str | bytes, Any]) -> list[Any]:
        values: list[Any] = []
        for field in self.fields:
            if field == "id":
                values.append(entry_id)
            elif field == "data":
                values.append(dict(data))
            elif field == "stream":
                values.append(self.stream)
            else:
                values.append(data.get(field))
        return values

    def _fill(self) -> None:
        now = time.monotonic()
        if now >= self._claim_at:
            self._call(self._claim)
        if not self._buffer and now >= self._read_at and self._call(self._read) == 0:
            self._read_at = now + IDLE_POLL_SECS

    def _read(self) -> int:
        """Read the own pending list (while ``_backlog`` is set), else new entries."""
        cursor = self._backlog or ">"
        reply: Any = self._client.xreadgroup(self.group, self.consumer, {self.stream: cursor}, count=self._read_count)
        entries = reply[0][1] if reply else []
        if self._backlog is not None:
            self._backlog = _text(entries[-1][0]) if entries else None
            if entries:
                logger.info("%s: %d entries pending from before, emitting them again", self._outage.where, len(entries))
        for entry_id, data in entries:
            self._take(_text(entry_id), data)
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
            count=self._read_count,
            justid=True,
        )
        cursor, ids = _text(reply[0]), reply[1]  # the raw reply: ``open`` sets ``_raw_reply`` for it
        self._claim_cursor = cursor
        self._claim_at = time.monotonic() + (self._claim_every if cursor == "0-0" else 0.0)
        others: list[Any] = [i for i in map(_text, ids) if i not in self._inflight and i not in self._queued]
        if others:
            entries: Any = self._client.xclaim(self.stream, self.group, self.consumer, 0, others)
            for entry_id, data in entries:
                self.claimed += 1
                self._take(_text(entry_id), data)

    def _take(self, entry_id: str, data: dict[bytes, bytes] | None) -> None:
        if entry_id in self._inflight or entry_id in self._queued:
            return
        if not data:  # deleted from the stream (XDEL, trimming) while pending: nothing to process
            self._to_ack.append(entry_id)
            return
        self._queued.add(entry_id)
        self._buffer.append((entry_id, {text_or_bytes(k): text_or_bytes(v) for k, v in data.items()}))

    # -- results ------------------------------------------------------------------------------
    def ack(self, msg_id: Any) -> None:
        self._inflight.pop(msg_id, None)
        self._to_ack.append(msg_id)
        if len(self._to_ack) >= ACK_BATCH or time.monotonic() - self._acked_at >= ACK_LINGER_SECS:
            self._flush_acks()

    def fail(self, msg_id: Any, reason: str = "failed") -> None:
        """Emit the entry again, unless it is no longer pending (acknowledged by another consumer
        that claimed it while its tree here was running), or dead-letter it once it was replayed
        ``max_replays`` times. While Redis does not answer, the entry is emitted again."""
        data = self._inflight.pop(msg_id, None)
        if data is None:
            return
        reply = self._call(lambda: self._reclaim(msg_id))
        if reply is not None:
            deliveries, still_pending = reply
            if not still_pending:
                return
            if self.max_replays is not None and deliveries > self.max_replays:
                if self._call(lambda: self._dead_letter(msg_id, data, reason, deliveries)) is not None:
                    return
        self.replayed += 1
        self._queued.add(msg_id)
        self._buffer.appendleft((msg_id, data))

    def _reclaim(self, entry_id: str) -> tuple[int, bool]:
        """How often the entry was delivered so far, and whether it is still pending here: its
        count is read, then an ``XCLAIM`` (not ``JUSTID``: that would not count) takes it back,
        counting the replay to come."""
        pipe = self._client.pipeline(transaction=False)
        pipe.xpending_range(self.stream, self.group, min=entry_id, max=entry_id, count=1)
        pipe.xclaim(self.stream, self.group, self.consumer, 0, [entry_id])
        pending, claimed = pipe.execute()
        return (int(pending[0]["times_delivered"]) if pending else 0), bool(claimed)

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
        if not self._to_ack:
            return
        ids = self._to_ack
        if self._call(lambda: self._client.xack(self.stream, self.group, *ids)) is not None:
            self._to_ack = []
            self._acked_at = time.monotonic()

    # -- the connection -----------------------------------------------------------------------
    def _ensure_group(self) -> bool:
        try:
            self._client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True
        return True

    def _call(self, action: Callable[[], _T]) -> _T | None:
        """Run a Redis call; a failure starts (or continues) an outage and gives ``None``. While
        an outage waits for its next attempt, nothing is tried (``None`` too)."""
        if self._outage.down and not self._outage.due():
            return None
        try:
            result = action()
        except _BROKEN as exc:
            if "NOGROUP" in str(exc):  # the stream or group was deleted (or Redis lost its data)
                self._group_ready = False
            self._outage.failed(exc)
            return None
        self._outage.recovered()
        return result


def _raw_reply(response: Any, **options: Any) -> Any:
    return response


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
