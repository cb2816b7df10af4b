"""The spout task: calls ``next_tuple`` while the tree budget allows, starts trees at the
acker, and turns the acker's results and timeouts into ``ack``/``fail`` calls."""

from __future__ import annotations

import time
from typing import Any

from ..anchoring import new_id
from ..collectors import SpoutOutputCollector
from ..components import Spout
from ..rotating_map import RotatingMap
from ..router import Router
from .base import Executor, Timer, logger

__all__ = ["SpoutExecutor"]

SPOUT_BUCKETS = 2


class SpoutExecutor(Executor):
    """Lifecycle: ``activate`` (opens the spout the first time), then the runtime calls
    ``run_burst`` in a loop, ``receive_control`` with acker results and ``rotate`` every
    message timeout. Acks and fails are delivered between ``next_tuple`` calls, never inside."""

    kind = "spout"
    is_source = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spout: Spout = self.topology.components[self.component_id].component  # type: ignore[assignment]
        self.router = Router(self.topology, self.context)
        self.collector = SpoutOutputCollector(self)
        self.tracking = bool(self.acker_tasks)
        # root id -> (msg_id, emit time); the oldest cohort fails on rotation: the tree timed out.
        self.pending: RotatingMap[int, tuple[Any, float]] = RotatingMap(SPOUT_BUCKETS, self._timed_out)
        self.max_pending = self.conf.max_spout_pending
        self.active = False
        self.opened = False
        self.exhausted = False
        self._poll_after_fail = False
        self._acked_at_emit: list[Any] = []
        self._complete = self.metrics.latency("complete_latency_ms")

    # -- lifecycle ----------------------------------------------------------------------------
    def _call(self, method: str, *args: Any) -> None:
        try:
            getattr(self.spout, method)(*args)
        except Exception as exc:
            self.report_error(exc, f"{method} raised")

    def activate(self) -> None:
        if not self.opened:
            self.opened = True
            self._call("open", self.conf.to_conf(), self.context, self.collector)
        self.active = True
        self._call("activate")

    def deactivate(self) -> None:
        if self.active:
            self.active = False
            self._call("deactivate")

    def close(self) -> None:
        self.deactivate()
        if self.opened:
            self._call("close")
        self.outbox.flush()

    def timers(self) -> list[Timer]:
        if self.tracking and self.conf.enable_message_timeouts:
            return [(self.conf.message_timeout_secs, self.rotate)]
        return []

    def mark_exhausted(self) -> None:
        self.exhausted = True

    # -- emitting -----------------------------------------------------------------------------
    def wants_next_tuple(self) -> bool:
        if not self.active or (self.exhausted and not self._poll_after_fail):
            return False
        return self.max_pending is None or len(self.pending) < self.max_pending

    def run_burst(self, max_calls: int) -> int:
        """Call ``next_tuple`` up to ``max_calls`` times, stopping early when a call emits
        nothing or the pending budget is spent. Returns how many tuples were emitted."""
        emitted_before = self.metrics.emitted
        for _ in range(max_calls):
            if not self.wants_next_tuple():
                break
            self._poll_after_fail = False
            before = self.metrics.emitted
            self._call("next_tuple")
            if self._acked_at_emit:
                self._deliver_acked_at_emit()
            if self.metrics.emitted == before:
                break
        return self.metrics.emitted - emitted_before

    def emit(self, stream: str, values: list[Any], msg_id: Any, direct_task: int | None) -> list[int]:
        router = self.router
        if direct_task is None:
            targets = router.targets(stream, values)
        else:
            targets = router.direct_target(direct_task, stream, values)
        self.exhausted = False
        self.metrics.emitted += 1
        self.metrics.transferred += len(targets)
        if self.observer is not None:
            self.observer.emitted(self.component_id, stream, values)
        if self.debug:
            logger.info(
                "%s:%d emit %s %r msg_id=%r -> %s", self.component_id, self.task_id, stream, values, msg_id, targets
            )
        outbox = self.outbox
        if msg_id is None:
            for task in targets:
                outbox.tuple(task, stream, values, None)
        elif not self.tracking:
            for task in targets:
                outbox.tuple(task, stream, values, None)
            self._acked_at_emit.append(msg_id)
        else:
            root = new_id()
            val = 0
            for task in targets:
                edge = new_id()
                val ^= edge
                outbox.tuple(task, stream, values, {root: edge})
            outbox.acker(self.acker_for(root)).inits.append((root, val, self.task_id))
            self.pending.put(root, (msg_id, time.perf_counter()))
        return list(targets)

    def _deliver_acked_at_emit(self) -> None:
        """With ``ackers=0`` a tracked emit is acked as soon as ``next_tuple`` returns."""
        acked, self._acked_at_emit = self._acked_at_emit, []
        for msg_id in acked:
            self._ack(msg_id)

    # -- results ------------------------------------------------------------------------------
    def receive_control(self, payload: tuple[str, Any]) -> None:
        _, (acked, failed, resets) = payload
        pending = self.pending
        now = time.perf_counter()
        for root in acked:
            entry = pending.pop(root)
            if entry is not None:  # None: it timed out already and was failed
                self._complete.add(now - entry[1])
                self._ack(entry[0])
        for root in failed:
            entry = pending.pop(root)
            if entry is not None:
                self._fail(entry[0])
        for root in resets:
            entry = pending.get(root)
            if entry is not None:
                pending.put(root, entry)

    def _ack(self, msg_id: Any) -> None:
        self.metrics.acked += 1
        if self.observer is not None:
            self.observer.acked(self.component_id, msg_id)
        self._call("ack", msg_id)

    def _fail(self, msg_id: Any) -> None:
        self.metrics.failed += 1
        self._poll_after_fail = True
        if self.observer is not None:
            self.observer.failed(self.component_id, msg_id)
        self._call("fail", msg_id)

    def _timed_out(self, root: int, entry: tuple[Any, float]) -> None:
        self._fail(entry[0])

    def rotate(self) -> None:
        """Advance the message timeout by one cohort (called every ``message_timeout_secs``)."""
        self.pending.rotate()

    @property
    def finished(self) -> bool:
        """Exhausted, with no tree pending and no replay due: what ``TopologyHandle.wait`` waits for."""
        return self.exhausted and not self._poll_after_fail and not len(self.pending) and not self._acked_at_emit

    def snapshot(self) -> dict[str, Any]:
        return self.metrics.snapshot(pending=len(self.pending), exhausted=self.exhausted, finished=self.finished)
