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

Under ``processing_guarantee="exactly_once"`` (``rayflow/_exactly_once``) the windows are part
of the checkpoint's cut instead of holding trees open:

- each input is acked when the task takes it into its windows (or drops it as late; a tuple
  with a bad timestamp is still failed, which rolls the topology back). Holding it until its
  last window fired would keep every PREPARE waiting -- a PREPARE passes a task only once it has
  settled what came before -- and a rollback, not a replay, is what recovers it;
- the contents (``_windows/contents.py``: the tuples, timestamps, clock, watermark) are staged
  at PREPARE under the task's namespace, committed at COMMIT, and put back at a ROLLBACK and at
  the first INITSTATE (a restarted task, a topology resumed under its name). Until that first
  INITSTATE the task holds its inputs and its timers do nothing, as a stateful task does;
- a window's emits are anchored to nothing by default: the window's tuples were acked on
  arrival, so there is no tree left to join (anchoring to them would be a no-op that reads as a
  promise). An emit lost or failed downstream is recovered like everything else: the task that
  fails it refuses the next PREPARE, a lost one keeps the PREPARE from settling, and either way
  the topology rolls back to a cut that holds the window unfired. Late tuples still go to the
  late stream anchored to themselves (they are acked after that emit, as before);
- an exception from the user's ``execute`` cannot fail tuples acked already, so the task
  refuses the next PREPARE (``CheckpointDeferred``) and the rollback fires the window again. A
  window that raises every time is fired again after every rollback, as a tuple that fails
  every time is replayed for ever under at-least-once.

The at-least-once path is unchanged: none of this runs unless the guarantee is asked for.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import TYPE_CHECKING, Any

from .._collectors import AnchorRuleCollector, OutputCollector
from .._components import OutputFieldsDeclarer
from .._context import TopologyContext
from .._errors import FailedException, RayflowError, StateError
from .._state.checkpoint import CHECKPOINT_STREAM, COMMIT, INITSTATE, PREPARE, ROLLBACK
from .._state.provider import StateProvider, task_provider, topology_name
from .._tuple import Tuple
from .._windows.bolt import WindowedBolt
from .._windows.contents import KEY, WindowContents, dump, load, namespace
from .._windows.lengths import Duration, Length
from .._windows.manager import CountWindows, Manager, SessionWindows, Step, make_manager
from .._windows.watermark import WatermarkTracker
from .._windows.window import TupleWindow
from .base import Timer, logger
from .bolt_kind import BoltKind, CheckpointDeferred

if TYPE_CHECKING:  # the executor builds its kind; the kind only calls back into it
    from .bolt import BoltExecutor

__all__ = ["WindowedBoltAdapter", "WindowedCollector"]

LATE_LOG_EVERY = 1000
"""Without a late tuple stream, the first late tuple is logged, then one in this many."""


class WindowedCollector(AnchorRuleCollector):
    """The collector a ``WindowedBolt`` gets: emits default to the window's tuples as anchors
    (at-least-once; to none under exactly-once, where they were acked on arrival)."""

    def __init__(self, task: BoltExecutor, adapter: WindowedBoltAdapter) -> None:
        super().__init__(task)
        self._adapter = adapter

    def anchored(self, anchors: Tuple | list[Tuple] | None, stream: str) -> Tuple | list[Tuple] | None:
        return self._adapter.anchors if anchors is None else anchors

    def ack(self, tup: Tuple) -> None:
        """A no-op: the task acks a windowed bolt's inputs (when their last window has fired, or
        on arrival under exactly-once)."""


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
        self.windows = self._new_windows()
        self.clock = 0.0
        """The bolt's clock, ms: advanced by its timers."""
        self.late = 0
        self.period = _clock_period(settings.slide, settings.length)
        """Processing time: how often the clock moves (s), ``None`` for a count-only window."""
        self.tracker = self._new_tracker()
        # -- exactly-once (set in ``prepare``; see the module doc) --
        self.exactly_once = False
        self.initialized = True
        """Are the windows those of the cut? Under exactly-once, not before the first INITSTATE."""
        self.waiting: list[Tuple] = []
        """Inputs that arrived before the first INITSTATE, taken in once the windows are restored."""
        self.broken = ""
        """Why the next PREPARE must fail (a window's ``execute`` raised since the last rollback)."""
        self.provider: StateProvider | None = None
        self.namespace = ""
        self.parallelism = 1
        self.checkpoints = 0
        self.rollbacks = 0

    def _new_windows(self) -> Manager[Tuple]:
        settings = self.settings
        key = settings.session_key
        if key is not None and isinstance(settings.length, Duration):
            return SessionWindows(settings.length, operator.itemgetter(key))
        return make_manager(settings.length, settings.slide, settings.event_time)

    def _new_tracker(self) -> WatermarkTracker | None:
        settings, task = self.settings, self._task
        if not settings.event_time:
            return None
        spec = task.topology.components[task.component_id]
        inputs = [
            (source_task, sub.stream)
            for sub in spec.inputs
            if sub.stream != CHECKPOINT_STREAM
            for source_task in task.context.get_component_tasks(sub.component)
        ]
        idle = settings.idle_timeout.ms if settings.idle_timeout is not None else None
        return WatermarkTracker(inputs, settings.lag_ms, idle)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.user_component.declare_output_fields(declarer)

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        if conf.get("processing_guarantee") == "exactly_once":
            self.exactly_once = True
            self.initialized = False
            self.execute = self._wait  # type: ignore[method-assign]
            self.parallelism = len(context.get_component_tasks(context.this_component_id))
            self.namespace = namespace(topology_name(conf), context.this_component_id, context.this_task_index)
            self.provider = task_provider(conf)
        self.user_component.prepare(conf, context, self.collector)

    def cleanup(self) -> None:
        try:
            self.user_component.cleanup()
        finally:
            if self.provider is not None:
                self.provider.close()

    def snapshot(self) -> dict[str, Any]:
        return {"checkpoints": self.checkpoints, "rollbacks": self.rollbacks} if self.exactly_once else {}

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

    def _wait(self, tup: Tuple) -> None:
        """``execute`` under exactly-once until the windows are restored (the first INITSTATE)."""
        if not tup.is_tick():
            self.waiting.append(tup)

    def _take(self, tup: Tuple) -> None:
        """``execute`` under exactly-once: into the windows, then acked (unless that failed it)."""
        WindowedBoltAdapter.execute(self, tup)
        self._task.ack(tup)

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
        if not self.initialized:  # exactly-once: the clock of the cut is not restored yet
            return
        self.clock += self.period * 1000.0
        self._run(self.windows.advance(self.clock))
        self._flush()

    def on_watermark(self) -> None:
        tracker, windows = self.tracker, self.windows
        assert tracker is not None and not isinstance(windows, CountWindows)
        if not self.initialized:
            return
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
        anchored = not self.exactly_once  # exactly-once: the tuples were acked on arrival
        for tup in step.evicted:
            task.ack(tup)
        for activation in step.activations:
            window = TupleWindow(
                activation.items, activation.new, activation.expired, activation.start_ts, activation.end_ts
            )
            if anchored:
                self.anchors = activation.items
            try:
                self.user_component.execute(window)
            except Exception as exc:
                if not isinstance(exc, FailedException):
                    task.report_error(exc, f"execute raised on a window of {len(window)} tuple(s)")
                if not anchored:
                    self.broken = (
                        f"execute raised on a window of {len(window)} tuple(s) since the last checkpoint: "
                        "rolling back to fire it again"
                    )
                for tup in activation.items:
                    task.fail(tup)
            finally:
                self.anchors = []
            for tup in activation.done:
                task.ack(tup)

    # -- exactly-once: the windows in the cut -----------------------------------------------------
    def checkpoint(self, action: str, txid: int) -> None:
        """Stage, commit or restore the windows (module doc); nothing under at-least-once."""
        if not self.exactly_once:
            return
        provider = self.provider
        if provider is None:
            raise StateError("the state provider did not open (see the prepare error)")
        if action == INITSTATE:
            if not self.initialized:
                self._initialize(provider)
        elif action == PREPARE:
            if not self.initialized:
                raise CheckpointDeferred(f"task {self._task.task_id} has not restored its windows yet")
            if self.broken:
                raise CheckpointDeferred(self.broken)
            provider.stage_many(txid, {self.namespace: {KEY: dump(self._contents())}})
        elif action == COMMIT:
            provider.commit_many([self.namespace], txid)
            if self.initialized:
                self.checkpoints += 1
        elif action == ROLLBACK:
            provider.rollback_many([self.namespace])
            if not self.initialized:
                self.waiting = []  # sent before the cut the spouts go back to: sent again after it
                self._initialize(provider)
            else:
                held = len(self.windows)
                self._restore(provider)
                self.rollbacks += 1
                logger.warning(
                    "windowed bolt %r task %d: rolled back: %d tuple(s) in its windows, %d before",
                    self._task.component_id,
                    self._task.task_id,
                    len(self.windows),
                    held,
                )

    def _contents(self) -> WindowContents:
        tracker = self.tracker
        if tracker is None:
            return WindowContents(self.settings, self.parallelism, self.windows, self.clock)
        return WindowContents(
            self.settings, self.parallelism, self.windows, self.clock, tracker.watermark, tracker.latest, tracker.heard
        )

    def _initialize(self, provider: StateProvider) -> None:
        provider.rollback_many([self.namespace])  # what an unfinished transaction staged is void
        self._restore(provider)
        self.initialized = True
        self.execute = self._take  # type: ignore[method-assign]
        waiting, self.waiting = self.waiting, []
        self._task.execute_each(waiting)

    def _restore(self, provider: StateProvider) -> None:
        """The windows as last committed; empty (a new clock, no watermark) before any commit."""
        data, _ = provider.load_many([self.namespace])[self.namespace]
        blob = data.get(KEY)
        self.broken = ""
        self.tracker = self._new_tracker()
        if blob is None:
            self.windows, self.clock = self._new_windows(), 0.0
            return
        task = self._task
        contents = load(
            blob, self.settings, self.parallelism, f"windowed bolt {task.component_id!r} task {task.task_id}"
        )
        self.windows, self.clock = contents.windows, contents.clock
        tracker = self.tracker
        if tracker is not None and contents.watermark is not None:
            # The inputs are this run's (a resumed topology may have other upstream tasks).
            tracker.watermark = contents.watermark
            tracker.latest = {i: ts for i, ts in contents.latest.items() if i in tracker.heard}
        if tracker is not None:
            # The time a recovery takes is not idleness: every input gets a whole idle timeout
            # from the cut's clock to send again, or a stall caused by the rollback would move
            # the watermark past what the spouts replay, and make it late.
            tracker.heard = dict.fromkeys(tracker.heard, self.clock)


def _clock_period(slide: Length, length: Length) -> float | None:
    if isinstance(slide, Duration):
        return slide.seconds
    if isinstance(length, Duration):
        return length.seconds / 10
    return None
