"""The spout task: calls ``next_tuple`` while the tree budget allows, starts trees at the
acker, and turns the acker's results and timeouts into ``ack``/``fail`` calls."""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from types import MethodType, ModuleType
from typing import Any

from .._acking.anchoring import getrandbits, new_id
from .._collectors import SpoutOutputCollector
from .._components import Spout
from .._exactly_once.barrier import ROLLBACK_REQUEST, Barrier
from .._exactly_once.spout_cut import SpoutCut
from .._exactly_once.wiring import exactly_once
from .._outbox import SpoutPayload
from .._rotating_map import RotatingMap
from .._state.checkpoint import (
    CHECKPOINT_COMPONENT,
    CHECKPOINT_REQUEST,
    CHECKPOINT_STREAM,
    COMMIT,
    INITSTATE,
    PREPARE,
    ROLLBACK,
)
from .._tuple import DEFAULT_STREAM
from . import kernel
from .base import Emitter, Timer, logger

__all__ = ["SpoutExecutor"]

SPOUT_BUCKETS = 5
"""The spout's pending map rotates every ``message_timeout_secs / (SPOUT_BUCKETS - 1)``, so a tree
fails between T and 1.25 T after it was emitted (T and 2 T with Storm's two buckets): after a
task dies, its lost trees are replayed within one timeout plus a quarter."""
LATENCY_SAMPLE_MASK = 7
"""Complete latency is measured on the trees whose root has these bits all zero: one in eight,
picked at random (roots are random), so that most emits and acks skip the clock."""


class SpoutExecutor(Emitter):
    """Lifecycle: ``activate`` (opens the spout the first time), then the runtime calls
    ``run_burst`` in a loop, ``receive_control`` with acker results and ``rotate`` every
    message timeout. Acks and fails are delivered between ``next_tuple`` calls, never inside.

    A spout whose ``open`` raised is reported and not driven (``next_tuple`` is not called)
    until ``activate`` opens it successfully. ``fail(msg_id, reason)`` is told ``"timeout"``
    or ``"failed"`` when the spout's ``fail`` takes a second argument."""

    kind = "spout"
    is_source = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spout: Spout = self.topology.components[self.component_id].component  # type: ignore[assignment]
        self.collector = SpoutOutputCollector(self)
        self.tracking = bool(self.acker_tasks)
        self.root_bits = getrandbits
        """Draws the root ids (``root_bits(64)``); the in-process runner gives each spout task a
        seeded generator, since roots pick the acker of a tree and the trees sampled for latency."""
        # root id -> msg_id; the oldest cohort fails on rotation: the tree timed out.
        self.pending: RotatingMap[int, Any] = RotatingMap(SPOUT_BUCKETS, self._timed_out)
        self._started: dict[int, float] = {}
        """Emit time of the pending trees sampled for complete latency (``LATENCY_SAMPLE_MASK``)."""
        self.max_pending = self.conf.max_spout_pending
        self.active = False
        self.opened = False
        self.exhausted = False
        self._poll_after_fail = False
        self.timed_out = 0
        """Of ``metrics.failed``, the trees that timed out rather than being failed by a bolt."""
        self._acked_at_emit: list[Any] = []
        self._complete = self.metrics.latency("complete_latency_ms")
        self._fail_with_reason = False
        coordinator = self.context.get_component_tasks(CHECKPOINT_COMPONENT)
        self._coordinator = coordinator[0] if coordinator else None
        """The checkpoint spout's task, if the topology checkpoints."""
        self._cut: SpoutCut | None = None
        """Exactly-once: this task's share of each checkpoint (``_exactly_once``)."""
        if exactly_once(self.conf) and self.component_id != CHECKPOINT_COMPONENT:
            context = self.context
            tasks = len(context.get_component_tasks(self.component_id))
            self._cut = SpoutCut(self.spout, self.conf.to_conf(), self.component_id, context.this_task_index, tasks)
        stateful = self.topology.stateful and self._cut is None
        self._checkpointer = self._coordinator if stateful and self.max_pending else None
        """The checkpoint spout's task, asked for a checkpoint when half the pending budget is
        spent: trees through a stateful bolt complete only at a commit (at-least-once state;
        exactly-once frees the budget as trees complete)."""
        self._asked = False
        self._kernel_emit = kernel.KERNEL is not None and type(self).emit is SpoutExecutor.emit
        """Is the collector's ``emit`` the C kernel's (``_wire_kernel_emit``)?"""
        if self._kernel_emit and kernel.KERNEL is not None:
            self._wire_kernel_emit(kernel.KERNEL)

    def _wire_kernel_emit(self, kernel_module: ModuleType) -> None:
        """Where the C kernel runs (``kernel.py``), the collector's ``emit`` is its ``SpoutEmit``:
        ``emit`` below in C, one C call per spout tuple instead of two Python ones. It hands
        what is off its fast path (an undeclared or direct stream, a wrong arity, values that
        are not a list, a call ``emit`` does not take) to the collector's own ``emit``, and so to
        ``emit`` below, before doing anything. Built last: it keeps the objects ``emit`` reads
        that are never rebound (routes, batches, outbox, metrics, pending)."""
        collector = self.collector
        if self.metrics.kernel_emits is None:  # kept when the emit is built again: one count per task
            self.metrics.kernel_emits = kernel_module.EmitCount()
        collector.emit = kernel_module.SpoutEmit(  # type: ignore[method-assign]
            self, MethodType(SpoutOutputCollector.emit, collector), DEFAULT_STREAM
        )

    def _watch_changed(self) -> None:
        """The C emit knows whether anyone watches from when it was built: build it again."""
        if self._kernel_emit and kernel.KERNEL is not None:
            self._wire_kernel_emit(kernel.KERNEL)

    # -- lifecycle ----------------------------------------------------------------------------
    def _call(self, method: str, *args: Any) -> bool:
        """Call the spout; a user error is reported, and ``False`` returned."""
        try:
            getattr(self.spout, method)(*args)
        except Exception as exc:
            self.report_error(exc, f"{method} raised")
            return False
        return True

    def activate(self) -> None:
        if not self.opened:
            self._fail_with_reason = _takes_reason(self.spout.fail)
            self.opened = self._call("open", self.conf.to_conf(), self.context, self.collector)
            if not self.opened:
                return
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
        if self._cut is not None:
            self._cut.close()
        self.outbox.flush()

    def timers(self) -> list[Timer]:
        rotation: list[Timer] = []
        if self.tracking and self.conf.enable_message_timeouts:
            rotation.append((self.conf.message_timeout_secs / (SPOUT_BUCKETS - 1), self.rotate))
        return rotation + super().timers()

    def mark_exhausted(self) -> None:
        self.exhausted = True

    def count(self, name: str, amount: int) -> None:
        self.metrics.count(name, amount)

    # -- emitting -----------------------------------------------------------------------------
    def wants_next_tuple(self) -> bool:
        if not self.active or (self.exhausted and not self._poll_after_fail):
            return False
        if self._cut is not None and not self._cut.ready:
            return False
        return self.max_pending is None or len(self.pending) < self.max_pending

    def run_burst(self, max_calls: int) -> int:
        """Call ``next_tuple`` up to ``max_calls`` times, stopping early when a call emits
        nothing or the pending budget is spent. Returns how many tuples were emitted. (The
        loop inlines ``wants_next_tuple`` and ``_call``: it runs once per spout tuple.)"""
        if self._cut is not None and not self._cut.ready:
            return 0
        metrics = self.metrics
        kernel_emits = metrics.kernel_emits  # the C emit's count, where it runs (``TaskMetrics``)
        emitted_before = metrics.emitted
        next_tuple = self.spout.next_tuple
        # Nothing leaves ``pending`` during a burst (acks and timeouts come between bursts) and
        # new trees enter its newest bucket: the budget is checked against that bucket alone.
        newest = self.pending.newest
        room = None if self.max_pending is None else self.max_pending - len(self.pending) + len(newest)
        spent = idle = False
        for _ in range(max_calls):
            if not self.active or (self.exhausted and not self._poll_after_fail):
                idle = True
                break
            if room is not None and len(newest) >= room:
                spent = True
                break
            self._poll_after_fail = False
            before = metrics.python_emits if kernel_emits is None else metrics.python_emits + kernel_emits.value
            try:
                next_tuple()
            except Exception as exc:
                self.report_error(exc, "next_tuple raised")
            if self._acked_at_emit:
                self._deliver_acked_at_emit()
            if (metrics.python_emits if kernel_emits is None else metrics.python_emits + kernel_emits.value) == before:
                idle = True
                break
        if self._shuffles and (spent or idle):
            self._pace_shuffles(spent)
        if self._checkpointer is not None and 2 * len(self.pending) >= self.max_pending:  # type: ignore[operator]
            self._ask_for_checkpoint()
        return metrics.emitted - emitted_before

    def _ask_for_checkpoint(self) -> None:
        """Once per wave of results: a commit acks many trees at once, and until one arrives
        the checkpoint spout has been asked already."""
        if not self._asked:
            self._asked = True
            self._link.send_control(self._checkpointer, CHECKPOINT_REQUEST)  # type: ignore[arg-type]

    def _pace_shuffles(self, saturated: bool) -> None:
        """A spout that spent its pending budget is saturated: what it emits as acks free the
        budget goes out together at the next flush anyway. So each such fill goes to one target
        of a shuffle, the next in the round (``ShuffleGrouping.next_run``): one frame per fill
        instead of one per target, and downstream of it the same. (Spread one by one, more
        tasks made more frames per tuple, and each frame costs CPU, mostly waking its receiver;
        ``docs/performance.md`` has the figures.)
        Once ``next_tuple`` has nothing to emit, the spout keeps up with its source, and a
        shuffle spreads its tuples one by one again."""
        for grouping in self._shuffles:
            if saturated:
                grouping.next_run()
            else:
                grouping.stop_runs()

    def emit(self, stream: str, values: list[Any], msg_id: Any, direct_task: int | None) -> list[int]:
        """Route, then send to every target; a tracked tuple starts a tree. Flat on purpose:
        this runs once per spout tuple. Where the C kernel runs, its ``SpoutEmit`` does the same
        for the common emit (``_wire_kernel_emit``): this is its contract."""
        route = self.routes.get(stream)
        if route is None or direct_task is not None or len(values) != route.emit_arity:
            route, targets = self._checked_targets(stream, values, direct_task)
        elif route.fixed is not None:
            targets = route.fixed
        elif route.subscribed:
            key = route.key
            if key < 0 or values[key].__class__ is not str:
                targets = route.choose(self.task_id, values)
            else:
                targets = route.known.get(values[key]) or route.remember(
                    values[key], route.choose(self.task_id, values)
                )
        else:
            targets = []
        self.exhausted = False
        self.metrics.python_emits += 1
        if self._watched:
            self._emitted(stream, values, targets, msg_id)
        stream = route.stream
        item = values[0] if route.single else values
        batches = self._batches
        size = self.outbox.batch_size
        root = val = 0
        if msg_id is not None:
            if self.tracking:
                root = self.root_bits(64) or new_id()
            else:
                self._acked_at_emit.append(msg_id)
        for task in targets:
            batch = batches[task]
            if batch.stream is not stream:
                batch.switch(stream)
            if root:
                edge = getrandbits(64) or new_id()
                val ^= edge
                batch.trees += (root, edge)
            else:
                batch.trees += (0, 0)
            batch.values.append(item)
            if len(batch.values) >= size:
                self.outbox.send_batch(task)
        if root:
            mails = self.outbox.acker_mails
            mails[root % len(mails)].inits[root] = val
            self.pending.newest[root] = msg_id  # ``pending.add``, inline
            if not root & LATENCY_SAMPLE_MASK:
                self._started[root] = time.perf_counter()
            if self._cut is not None:
                self._cut.epoch.append((root, msg_id))  # ``_cut.record``, inline
        return targets.copy()

    def _deliver_acked_at_emit(self) -> None:
        """With ``ackers=0`` a tracked emit is acked as soon as ``next_tuple`` returns."""
        acked, self._acked_at_emit = self._acked_at_emit, []
        for msg_id in acked:
            self._ack(msg_id)

    # -- results ------------------------------------------------------------------------------
    def receive_control(self, payload: SpoutPayload | Barrier) -> None:
        if self._cut is not None:
            if payload.__class__ is Barrier:
                self._on_barrier(payload)
            else:  # (acked, failed, resets)
                self._results_under_cut(payload)  # type: ignore[arg-type]
            return
        acked, failed, resets = payload  # type: ignore[misc]
        pending = self.pending
        self._asked = False
        if acked:
            self._acked(acked, pending.pop_each(acked))
        for root in failed:
            msg_id = pending.pop(root)
            if msg_id is not None:  # None: it timed out already and was failed
                self._started.pop(root, None)
                self._fail(msg_id, "failed")
        for root in resets:
            msg_id = pending.get(root)
            if msg_id is not None:
                pending.put(root, msg_id)

    def _acked(self, roots: Sequence[int], msg_ids: list[Any]) -> None:
        """Call ``ack`` for each tree acked (``msg_ids[i]`` is ``roots[i]``'s, ``None`` if it
        timed out already). Flat on purpose, with ``_ack`` and ``_call`` inline: this runs once
        per spout tuple."""
        now = time.perf_counter()
        started, complete = self._started, self._complete
        observer, component_id = self.observer, self.component_id
        ack = self.spout.ack
        missed = 0
        for root, msg_id in zip(roots, msg_ids, strict=True):
            if msg_id is None:
                missed += 1
                continue
            if not root & LATENCY_SAMPLE_MASK:
                begun = started.pop(root, None)
                if begun is not None:
                    complete.add(now - begun)
            if observer is not None:
                observer.acked(component_id, msg_id)
            try:
                ack(msg_id)
            except Exception as exc:
                self.report_error(exc, "ack raised")
        self.metrics.acked += len(roots) - missed

    def _ack(self, msg_id: Any) -> None:
        self.metrics.acked += 1
        if self.observer is not None:
            self.observer.acked(self.component_id, msg_id)
        self._call("ack", msg_id)

    def _fail(self, msg_id: Any, reason: str) -> None:
        self.metrics.failed += 1
        self._poll_after_fail = True
        if self.observer is not None:
            self.observer.failed(self.component_id, msg_id)
        if self._fail_with_reason:
            self._call("fail", msg_id, reason)
        else:
            self._call("fail", msg_id)

    def _timed_out(self, root: int, msg_id: Any) -> None:
        self._started.pop(root, None)
        self.timed_out += 1
        if self._cut is not None:
            self.metrics.failed += 1
            self._roll_back(f"a tree of msg id {msg_id!r} timed out")
            return
        self._fail(msg_id, "timeout")

    def rotate(self) -> None:
        """Advance the message timeout by one cohort (called every ``message_timeout_secs / (SPOUT_BUCKETS - 1)``)."""
        self.pending.rotate()
        if self._cut is not None and self._cut.rolling_back:  # the request may have been lost
            self._link.send_control(self._coordinator, ROLLBACK_REQUEST)  # type: ignore[arg-type]

    @property
    def finished(self) -> bool:
        """Exhausted, with no tree pending and no replay due: what ``TopologyHandle.wait`` waits
        for. Exactly-once: and every tree emitted covered by a committed checkpoint."""
        if self._cut is not None and (self._cut.uncommitted or not self._cut.ready):
            return False
        return self.exhausted and not self._poll_after_fail and not len(self.pending) and not self._acked_at_emit

    # -- exactly-once (``_exactly_once``) ---------------------------------------------------------
    def _results_under_cut(self, payload: SpoutPayload) -> None:
        """The acker's results, exactly-once: a completed tree only frees the pending budget
        (``ack`` waits for the commit that covers it); a failed one rolls the topology back."""
        acked, failed, resets = payload
        pending = self.pending
        if acked:
            now = time.perf_counter()
            started, complete = self._started, self._complete
            for root in acked:
                if pending.pop(root) is not None and not root & LATENCY_SAMPLE_MASK:
                    begun = started.pop(root, None)
                    if begun is not None:
                        complete.add(now - begun)
        for root in failed:
            msg_id = pending.pop(root)
            if msg_id is not None:
                self._started.pop(root, None)
                self.metrics.failed += 1
                self._roll_back(f"the tree of msg id {msg_id!r} failed")
        for root in resets:
            msg_id = pending.get(root)
            if msg_id is not None:
                pending.put(root, msg_id)

    def _roll_back(self, why: str) -> None:
        """Ask the checkpoint spout to take the topology back to the last committed cut, and
        emit nothing until the ROLLBACK comes (what is emitted meanwhile would be void)."""
        cut = self._cut
        assert cut is not None
        if cut.rolling_back or self._coordinator is None:
            return
        cut.rolling_back = True
        logger.warning(
            "spout %r task %d: %s: rolling the topology back to its last checkpoint",
            self.component_id,
            self.task_id,
            why,
        )
        self._link.send_control(self._coordinator, ROLLBACK_REQUEST)

    def _on_barrier(self, barrier: Barrier) -> None:
        """Act on one step of a checkpoint, then emit it on to every task that reads this spout,
        in order with the data, anchored to the step's tree (``_exactly_once``). A step that
        cannot be done fails the tree: the checkpoint spout rolls back."""
        cut = self._cut
        assert cut is not None
        txid, action = barrier.txid, barrier.action
        try:
            if action == PREPARE:
                if not cut.initialized:
                    self.outbox.fail_tree(barrier.root)  # it must seek first: a rollback will say where
                    return
                cut.prepare(txid)
            elif action == COMMIT:
                self._commit(cut.commit(txid))
            elif action == ROLLBACK:
                self._drop(cut.rollback())
                self.exhausted = False
            elif action == INITSTATE and not cut.initialized:
                cut.initialize()
                self.exhausted = False
        except Exception as exc:
            self.report_error(exc, f"checkpoint {action} of transaction {txid} failed")
            self.outbox.fail_tree(barrier.root)
            return
        self._pass_on(barrier)

    def _commit(self, covered: list[tuple[int, Any]]) -> None:
        """The checkpoint covering these trees committed: ``ack`` each msg id, once."""
        pending, started = self.pending, self._started
        ack = self.spout.ack
        observer, component_id = self.observer, self.component_id
        for root, msg_id in covered:
            pending.pop(root)
            started.pop(root, None)
            if observer is not None:
                observer.acked(component_id, msg_id)
            try:
                ack(msg_id)
            except Exception as exc:
                self.report_error(exc, "ack raised")
        self.metrics.acked += len(covered)

    def _drop(self, void: list[tuple[int, Any]]) -> None:
        """Forget the trees a rollback made void: replaying them is the seek's job, not ``fail``'s."""
        pending, started = self.pending, self._started
        for root, _ in void:
            pending.pop(root)
            started.pop(root, None)

    def _pass_on(self, barrier: Barrier) -> None:
        route = self.routes[CHECKPOINT_STREAM]
        values = [barrier.txid, barrier.action]
        targets = route.choose(self.task_id, values)
        batches = self._batches
        root, val = barrier.root, 0
        for task in targets:
            batch = batches[task]
            if batch.stream is not route.stream:
                batch.switch(route.stream)
            edge = getrandbits(64) or new_id()
            val ^= edge
            batch.trees += (root, edge)
            batch.values.append(values)
        self.outbox.ack(root, barrier.edge ^ val)
        self.outbox.urgent = True
        if self.flush_after_receive:
            self.outbox.flush_data()

    def snapshot(self) -> dict[str, Any]:
        self.metrics.transferred = self.outbox.transferred
        return self.metrics.snapshot(
            pending=len(self.pending), exhausted=self.exhausted, finished=self.finished, timed_out=self.timed_out
        )


def _takes_reason(fail: Any) -> bool:
    """Does the spout's ``fail`` take ``(msg_id, reason)``, or only ``(msg_id)`` (Storm's)?"""
    try:
        signature = inspect.signature(fail)
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in signature.parameters.values()
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    variadic = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in signature.parameters.values())
    return variadic or len(positional) >= 2
