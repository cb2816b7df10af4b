"""``WindowedBoltAdapter``: a ``WindowedBolt`` seen as a ``Bolt``, as Storm's ``WindowedBoltExecutor``.

The executor calls ``execute`` of this object for every data tuple. It owns, for one task:

- the windows (``_windows/manager.py``) and the bolt's clock: milliseconds that its timers
  advance (the in-process runner's simulated clock, real time on Ray). A processing-time
  tuple is stamped with the clock when it arrives, so a duration is measured in steps of the
  timer: the slide when the slide is a duration, else a tenth of the length;
- on event time, the watermark (``_windows/watermark.py``), recomputed every watermark
  interval (with every upstream task idle, moved past every window held), and the late
  tuples: older than the watermark, they go to the late tuple stream
  (anchored to themselves) or to the log, and are acked at once. A tuple without a numeric
  timestamp is failed, with an error that names the field;
- the acks: a window's emits are anchored to every tuple in it (the collector's default);
  after its ``execute`` returns, the tuples no later window can hold are acked (all of a
  tumbling window's). An exception from ``execute`` fails every tuple of the window instead.
  The user's own ``ack`` is a no-op: the windows decide.
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any

from .._collectors import AnchorRuleCollector, OutputCollector
from .._components import OutputFieldsDeclarer
from .._context import TopologyContext
from .._errors import FailedException, RayflowError
from .._state.checkpoint import CHECKPOINT_STREAM
from .._tuple import Tuple
from .._windows.bolt import WindowedBolt
from .._windows.lengths import Duration, Length
from .._windows.manager import CountWindows, Manager, SessionWindows, Step, make_manager
from .._windows.watermark import WatermarkTracker
from .._windows.window import TupleWindow
from .base import Timer, logger
from .bolt_kind import BoltKind

if TYPE_CHECKING:  # the executor builds its kind; the kind only calls back into it
    from .bolt import BoltExecutor

__all__ = ["WindowedBoltAdapter", "WindowedCollector"]

LATE_LOG_EVERY = 1000
"""Without a late tuple stream, the first late tuple is logged, then one in this many."""


class WindowedCollector(AnchorRuleCollector):
    """The collector a ``WindowedBolt`` gets: emits default to the window's tuples as anchors."""

    def __init__(self, task: BoltExecutor, adapter: WindowedBoltAdapter) -> None:
        super().__init__(task)
        self._adapter = adapter

    def anchored(self, anchors: Tuple | list[Tuple] | None, stream: str) -> Tuple | list[Tuple] | None:
        return self._adapter.anchors if anchors is None else anchors

    def ack(self, tup: Tuple) -> None:
        """A no-op: a windowed bolt's inputs are acked when their last window has fired."""


class WindowedBoltAdapter(BoltKind):
    def __init__(self, user_component: WindowedBolt, task: BoltExecutor) -> None:
        settings = user_component.window_settings
        if settings is None:  # ``create_topology`` refuses it: a topology built by hand
            raise RayflowError(f"windowed bolt {task.component_id!r} has no window set")
        self.user_component = user_component
        self.settings = settings
        self._task = task
        self.collector = WindowedCollector(task, self)
        self.anchors: list[Tuple] = []
        """The tuples of the window being executed: what an emit is anchored to by default."""
        self.windows: Manager[Tuple]
        key = settings.session_key
        if key is not None and isinstance(settings.length, Duration):
            self.windows = SessionWindows(settings.length, lambda tup: tup[key])
        else:
            self.windows = make_manager(settings.length, settings.slide, settings.event_time)
        self.clock = 0.0
        """The bolt's clock, ms: advanced by its timers."""
        self.late = 0
        self.period = _clock_period(settings.slide, settings.length)
        """Processing time: how often the clock moves (s), ``None`` for a count-only window."""
        self.tracker: WatermarkTracker | None = None
        if settings.event_time:
            spec = task.topology.components[task.component_id]
            inputs = [
                (source_task, sub.stream)
                for sub in spec.inputs
                if sub.stream != CHECKPOINT_STREAM
                for source_task in task.context.get_component_tasks(sub.component)
            ]
            idle = settings.idle_timeout.ms if settings.idle_timeout is not None else None
            self.tracker = WatermarkTracker(inputs, settings.lag_ms, idle)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.user_component.declare_output_fields(declarer)

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.user_component.prepare(conf, context, self.collector)

    def cleanup(self) -> None:
        self.user_component.cleanup()

    def timers(self) -> list[Timer]:
        """The watermark timer (event time), or the clock that fires duration slides and
        evicts by duration (processing time); none for a count-only window."""
        if self.tracker is not None:
            return [(self.settings.watermark_interval.seconds, self.on_watermark)]
        return [(self.period, self.on_clock)] if self.period else []

    # -- input ----------------------------------------------------------------------------------
    def execute(self, tup: Tuple) -> None:
        if tup.is_tick():
            return
        tracker = self.tracker
        if tracker is None:
            self._run(self.windows.add(self.clock, tup))
            return
        field = self.settings.timestamp_field
        value = tup.get(field)  # type: ignore[arg-type]
        if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value):
            self._task.report_error(
                RayflowError(
                    f"timestamp field {field!r} must hold a number (ms since the epoch); tuple from "
                    f"{tup.source_component!r} stream {tup.source_stream!r} has {value!r} "
                    f"(its fields: {tup.fields}): failing it"
                ),
                "windowed bolt input",
            )
            self._task.fail(tup)
            return
        ts = float(value)
        if ts < tracker.watermark:
            self._late(tup, ts)
            return
        tracker.observe((tup.source_task, tup.source_stream), ts, self.clock)
        self.windows.add(ts, tup)

    def _late(self, tup: Tuple, ts: float) -> None:
        self.late += 1
        stream = self.settings.late_stream
        task = self._task
        if stream is not None:
            task.emit(stream, [tup.values], tup, None)
        elif self.late == 1 or self.late % LATE_LOG_EVERY == 0:
            logger.warning(
                "windowed bolt %r task %d: late tuple (timestamp %r, watermark %r), dropped: %r "
                "(%d late so far; declare a late tuple stream to keep them)",
                task.component_id,
                task.task_id,
                ts,
                self.tracker.watermark if self.tracker is not None else None,
                tup,
                self.late,
            )
        task.ack(tup)

    # -- timers ---------------------------------------------------------------------------------
    def on_clock(self) -> None:
        assert self.period is not None
        self.clock += self.period * 1000.0
        self._run(self.windows.advance(self.clock))
        self._flush()

    def on_watermark(self) -> None:
        tracker, windows = self.tracker, self.windows
        assert tracker is not None and not isinstance(windows, CountWindows)
        self.clock += self.settings.watermark_interval.ms
        watermark = tracker.update(self.clock)
        if tracker.all_idle(self.clock):  # nobody is sending: let every window held fire
            watermark = tracker.advance_to(windows.horizon())
        self._run(windows.advance(watermark))
        self._flush()

    def _flush(self) -> None:
        if self._task.flush_after_receive:
            self._task.outbox.flush_data()

    # -- windows --------------------------------------------------------------------------------
    def _run(self, step: Step[Tuple]) -> None:
        task = self._task
        for tup in step.evicted:
            task.ack(tup)
        for activation in step.activations:
            window = TupleWindow(
                activation.items, activation.new, activation.expired, activation.start_ts, activation.end_ts
            )
            self.anchors = activation.items
            try:
                self.user_component.execute(window)
            except Exception as exc:
                if not isinstance(exc, FailedException):
                    task.report_error(exc, f"execute raised on a window of {len(window)} tuple(s)")
                for tup in activation.items:
                    task.fail(tup)
            finally:
                self.anchors = []
            for tup in activation.done:
                task.ack(tup)


def _clock_period(slide: Length, length: Length) -> float | None:
    if isinstance(slide, Duration):
        return slide.seconds
    if isinstance(length, Duration):
        return length.seconds / 10
    return None
