"""``WindowedBolt``: a bolt whose ``execute`` gets windows of tuples (Storm's ``BaseWindowedBolt``).

The settings (``with_window`` and friends) are kept on the instance as one ``WindowSettings``
and checked at ``create_topology`` (``validation.py``); the executor side is
``_executors/windowed_bolt.py``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._components import _Component
from .._errors import ConfigError
from .lengths import Count, Duration, Length

if TYPE_CHECKING:
    from .._collectors import OutputCollector
    from .._context import TopologyContext
    from .window import TupleWindow

__all__ = ["LATE_TUPLE_FIELD", "WindowSettings", "WindowedBolt"]

ONE_TUPLE = Count(1)
"""The default slide: a window activated on every tuple."""
LATE_TUPLE_FIELD = "late_tuple"
"""The one field of the late tuple stream: the late tuple's values (a list)."""


@dataclass(frozen=True)
class WindowSettings:
    """Everything ``with_*`` set on a ``WindowedBolt``."""

    length: Length
    slide: Length
    timestamp_field: str | None = None
    lag: Duration | None = None
    watermark_interval: Duration = Duration(1)
    late_stream: str | None = None
    idle_timeout: Duration | None = None
    session_key: str | None = None
    """Session windows: the field whose value a session is kept per (the length is the gap)."""

    @property
    def event_time(self) -> bool:
        return self.timestamp_field is not None

    @property
    def lag_ms(self) -> float:
        return self.lag.ms if self.lag is not None else 0.0


def _length(value: object, what: str) -> Length:
    if not isinstance(value, (Count, Duration)):
        raise ConfigError(f"{what} must be a Count(n) or a Duration(seconds), got {value!r}")
    return value


def _duration(value: object, what: str) -> Duration:
    if not isinstance(value, Duration):
        raise ConfigError(f"{what} must be a Duration(seconds), got {value!r}")
    return value


class WindowedBolt(_Component):
    """A bolt that processes windows of tuples: count or duration windows, sliding or
    tumbling, on processing time or on event time.

    ``execute(window)`` runs once per window that holds a tuple. Emits through the collector
    handed to ``prepare`` are anchored to every tuple of the window (unless ``anchors`` is
    given); the bolt acks each input itself once the last window that can hold it has fired,
    so do not ack them. An exception from ``execute`` fails the window's tuples (their spouts
    may replay them); the task goes on.

    Example::

        class Counts(WindowedBolt):
            outputs = ["count"]

            def prepare(self, conf, context, collector):
                self.collector = collector

            def execute(self, window):
                self.collector.emit([len(window.get())])

        builder.set_bolt("counts", Counts().with_tumbling_window(Duration(10))).shuffle_grouping("words")

    A window holds its tuples until they leave it, so the spouts' pending budget
    (``max_spout_pending``) must cover a window's worth of tuple trees, and a duration window
    (length plus slide) must fit in ``message_timeout_secs``: both are checked before the
    topology runs.

    Under ``processing_guarantee="exactly_once"`` the bolt runs unchanged, but its inputs are
    acked as they enter the windows, the windows go into every checkpoint and come back on a
    rollback, and a window's emits start no tree; neither check above applies then
    (``_executors/windowed_bolt.py``; ``docs/concepts/windows.md``).
    """

    window_settings: WindowSettings | None = None

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        pass

    def execute(self, window: TupleWindow) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement execute(window)")

    def cleanup(self) -> None:
        pass

    # -- settings (each returns self, to chain) ------------------------------------------------
    def with_window(self, length: Length, slide: Length = ONE_TUPLE) -> WindowedBolt:
        """A sliding window ``length`` long, activated every ``slide`` (counts or durations,
        mixed at will).

        Raises:
            ConfigError: ``length`` or ``slide`` is neither a ``Count`` nor a ``Duration``.
        """
        return self._set(length=_length(length, "window length"), slide=_length(slide, "window slide"))

    def with_tumbling_window(self, length: Length) -> WindowedBolt:
        """Back-to-back windows ``length`` long: each tuple is in exactly one."""
        length = _length(length, "window length")
        return self._set(length=length, slide=length)

    def with_session_window(self, gap: Duration, key_field: str) -> WindowedBolt:
        """Session windows (beyond Storm): per value of ``key_field``, a window holds tuples
        less than ``gap`` apart and closes once the watermark is ``gap`` past its last tuple.
        Event time only (set a timestamp field). The same tuples give the same sessions in
        whatever order they arrive, as long as none is late. A session holds its tuples until it
        closes, so one that goes on longer than the message timeout times its trees out.
        """
        if not isinstance(key_field, str) or not key_field:
            raise ConfigError(f"the session key field must be a field name, got {key_field!r}")
        gap = _duration(gap, "the session gap")
        return self._set(length=gap, slide=gap, session_key=key_field)

    def with_timestamp_field(self, field: str) -> WindowedBolt:
        """Event time: a tuple's time is this field (ms since the epoch, a number). Durations
        then measure timestamps and windows fire as the watermark passes their end."""
        if not isinstance(field, str) or not field:
            raise ConfigError(f"the timestamp field must be a field name, got {field!r}")
        return self._set(timestamp_field=field)

    def with_lag(self, lag: Duration) -> WindowedBolt:
        """How far behind the latest timestamp a tuple may still arrive (the watermark trails by this)."""
        return self._set(lag=_duration(lag, "the lag"))

    def with_watermark_interval(self, interval: Duration) -> WindowedBolt:
        """How often the watermark is recomputed (default: every second of the bolt's clock)."""
        return self._set(watermark_interval=_duration(interval, "the watermark interval"))

    def with_late_tuple_stream(self, stream: str) -> WindowedBolt:
        """Send late tuples (older than the watermark) on ``stream`` (field ``late_tuple``: the
        late tuple's values) instead of only logging them. Declared for you."""
        if not isinstance(stream, str) or not stream:
            raise ConfigError(f"the late tuple stream must be a stream id, got {stream!r}")
        return self._set(late_stream=stream)

    def with_idle_timeout(self, timeout: Duration) -> WindowedBolt:
        """Leave an upstream task out of the watermark once it has sent nothing for
        ``timeout``, so that an idle task does not stop every window (``watermark.py``)."""
        return self._set(idle_timeout=_duration(timeout, "the idle timeout"))

    def _set(self, **changes: Any) -> WindowedBolt:
        settings = self.window_settings
        if settings is None:
            length = changes.pop("length", None) or Count(1)
            settings = WindowSettings(length, changes.pop("slide", None) or length)
        self.window_settings = dataclasses.replace(settings, **changes)
        return self
