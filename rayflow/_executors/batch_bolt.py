"""``BatchBoltAdapter``: a ``BatchBolt`` seen as a ``Bolt``, its inputs held and executed in batches.

The executor calls ``execute`` of this object for every data tuple. It owns, for one task:

- the batch held: inputs in arrival order, executed by one ``execute_batch`` call as soon as
  there are ``batch_size`` of them;
- the clock that lets a partial batch go: a timer firing every ``batch_timeout_ms / steps``
  (``FLUSH_STEPS``, fewer for a timeout under ``FLUSH_STEPS`` ms), whose firings the adapter
  counts -- the in-process runner's simulated clock, real time on Ray. The batch held is
  executed at the last firing before its first tuple has waited ``batch_timeout_ms``: it waits
  between ``(steps - 1) / steps`` of the timeout and the whole of it (on Ray, plus however late
  the timer runs on a busy task). Counting firings, not reading a clock, keeps the same code
  exact on the simulated clock;
- the acks, per tuple: when ``execute_batch`` returns, every tuple of the batch that the user
  did not fail is acked; when it raises, every tuple not acked or failed yet is failed (a
  ``FailedException`` without reporting an error). Emits must name their anchors
  (``BatchOutputCollector``);
- checkpoints: the batch held is executed before an aligned checkpoint is passed on, so that a
  checkpoint comes after the outputs of every input that came before it;
- ticks: handed to ``execute_tick`` on their own, never put in a batch;
- metrics: the size of every batch (``TaskMetrics.size("batch_size")``), and the busy time of
  the batches its timer or a checkpoint executes (the executor measures those its ``receive``
  runs), so that ``capacity`` stays right when most batches leave on their timeout.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .._collectors import BatchOutputCollector, OutputCollector
from .._components import BatchBolt, OutputFieldsDeclarer
from .._context import TopologyContext
from .._errors import FailedException
from .._tuple import Tuple
from .base import Timer
from .bolt_kind import BoltKind

if TYPE_CHECKING:  # the executor builds its kind; the kind only calls back into it
    from .bolt import BoltExecutor

__all__ = ["FLUSH_STEPS", "BatchBoltAdapter"]

FLUSH_STEPS = 4
"""Timer firings per ``batch_timeout_ms``: a partial batch waits at least ``1 - 1/FLUSH_STEPS``
of the timeout. More would cost a task more timer wake-ups for little."""
MIN_STEP_MS = 1.0
"""The timer fires at most once a millisecond: a shorter timeout gets fewer steps."""


class BatchBoltAdapter(BoltKind):
    def __init__(self, user_component: BatchBolt, task: BoltExecutor) -> None:
        self.user_component = user_component
        self._task = task
        self.collector = BatchOutputCollector(task, task.component_id)
        self.batch_size: int = user_component.batch_size
        timeout_ms = float(user_component.batch_timeout_ms)
        self.steps = max(1, min(FLUSH_STEPS, int(timeout_ms // MIN_STEP_MS)))
        """Timer firings a partial batch waits for."""
        self.period = timeout_ms / self.steps / 1000.0
        """Seconds between two firings of the timer."""
        self.held: list[Tuple] = []
        self.clock = 0
        """Firings of the timer so far."""
        self.held_since = 0
        """``clock`` when the first tuple held arrived."""
        self._sizes = task.metrics.size("batch_size")

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.user_component.declare_output_fields(declarer)

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.user_component.prepare(conf, context)

    def cleanup(self) -> None:
        self.user_component.cleanup()

    # -- input ----------------------------------------------------------------------------------
    def execute(self, tup: Tuple) -> None:
        held = self.held
        if not held:
            self.held_since = self.clock
        held.append(tup)
        if len(held) >= self.batch_size:
            self._run()

    def tick(self, tup: Tuple) -> None:
        collector = self.collector
        collector._in_tick = True
        try:
            self.user_component.execute_tick(tup, collector)
        finally:
            collector._in_tick = False

    def timers(self) -> list[Timer]:
        return [(self.period, self.on_clock)]

    def on_clock(self) -> None:
        self.clock += 1
        if self.held and self.clock - self.held_since >= self.steps:
            self._run_measured()
            if self._task.flush_after_receive:
                self._task.outbox.flush_data()

    def checkpoint(self, action: str, txid: int) -> None:
        """Execute the batch held before the checkpoint is passed on (whatever its action):
        nothing that arrived before it may be executed after it."""
        if self.held:
            self._run_measured()

    def flush(self) -> None:
        """A checkpoint waits for the batch held (exactly-once): execute it now."""
        if self.held:
            self._run_measured()

    # -- batches --------------------------------------------------------------------------------
    def _run_measured(self) -> None:
        """``_run`` outside the executor's ``receive``, its time added to the task's busy time."""
        started = time.perf_counter()
        self._run()
        self._task.metrics.busy_secs += time.perf_counter() - started

    def _run(self) -> None:
        """Execute the batch held; ack what returns, fail all of it if ``execute_batch`` raised."""
        tuples, self.held = self.held, []
        task = self._task
        self._sizes.add(len(tuples))
        try:
            self.user_component.execute_batch(tuples, self.collector)
        except Exception as exc:
            if not isinstance(exc, FailedException):
                task.report_error(exc, f"execute_batch raised on a batch of {len(tuples)} tuple(s)")
            for tup in tuples:
                task.fail(tup)
            return
        task.ack_each(tuples)
