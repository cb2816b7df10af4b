"""The bolt task: rebuilds tuples from incoming batches, runs the user's ``execute`` and turns
acks and fails into acker traffic. User exceptions fail the input; the task keeps running."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from .._acking.anchoring import anchor, getrandbits, new_id, tree_acks
from .._collectors import BasicOutputCollector, OutputCollector
from .._components import Bolt
from .._config import Config
from .._context import TopologyContext
from .._errors import FailedException
from .._exactly_once.wiring import exactly_once
from .._outbox import DataPayload
from .._state.alignment import CheckpointAlignment
from .._state.checkpoint import CHECKPOINT_STREAM, INITSTATE, PREPARE, ROLLBACK
from .._topology import Topology
from .._tuple import DEFAULT_STREAM, SYSTEM_COMPONENT, TICK_STREAM, Tuple, TupleSource
from . import kernel
from .base import Emitter, Link, Timer, logger
from .bolt_kind import BoltKind, CheckpointDeferred, KindFactory
from .input_emit import InputEmit, input_emits

__all__ = ["BoltExecutor"]

_TICK_SOURCE = -1
_CUTS = (PREPARE, ROLLBACK)
"""The checkpoint steps an exactly-once bolt aligns with its inputs held back: a PREPARE cuts
the state, a ROLLBACK separates what the spouts emitted before seeking from what after."""
MAX_TIMED = 1024
"""Sampled tuples a plain bolt may hold un-acked while their process latency is being timed."""


class BoltExecutor(Emitter):
    kind = "bolt"

    def __init__(
        self,
        topology: Topology,
        conf: Config,
        context: TopologyContext,
        link: Link,
        kind: KindFactory | None = None,
    ) -> None:
        """``kind`` wraps the user's component (``kinds.py``); ``None`` runs it as a plain bolt."""
        super().__init__(topology, conf, context, link)
        component = self.topology.components[self.component_id].component
        self.collector = OutputCollector(self)
        self.input_collector: BasicOutputCollector | None = None
        """The collector whose ``input`` anchors ``emit_input`` (set by an inline kind)."""
        self._input_emits: dict[str, InputEmit] = {}
        """The input collector's emit per stream (``wire_input_emits``)."""
        self._kind: BoltKind | None = kind(component, self) if kind is not None else None
        self.bolt: Bolt = self._kind if self._kind is not None else component  # type: ignore[assignment]
        self._inline = self._kind is not None and self._kind.inline
        spec = self.topology.components[self.component_id]
        upstream = [s.component for s in spec.inputs if s.stream == CHECKPOINT_STREAM]
        self._alignment = CheckpointAlignment(
            sum(len(self.context.get_component_tasks(c)) for c in upstream), one_attempt=exactly_once(self.conf)
        )
        # source task -> {stream: TupleSource}, to rebuild tuples.
        self._sources: dict[int, dict[str, TupleSource]] = {
            _TICK_SOURCE: {TICK_STREAM: TupleSource(SYSTEM_COMPONENT, TICK_STREAM, _TICK_SOURCE, ["rate_secs"])}
        }
        for component_id, streams in self.topology.stream_fields().items():
            for task in self.context.get_component_tasks(component_id):
                self._sources[task] = {s: TupleSource(component_id, s, task, f) for s, f in streams.items()}
        self._process = self.metrics.latency("process_latency_ms")
        self._execute_latency = self.metrics.latency("execute_latency_ms")
        self._exactly_once = exactly_once(self.conf)
        self._held_back: dict[int, list[DataPayload]] = {}
        """Exactly-once: inputs (source tasks) waiting for a checkpoint to align -> what they
        sent since, in order (``_receive_aligned``)."""
        self._inbox: deque[DataPayload] = deque()
        self._draining = False
        self._waiting_step: list[Tuple] | None = None
        """A PREPARE aligned, waiting for this task to settle its inputs (``_align``)."""
        self._void = 0
        """Inputs unsettled when the last rollback came: void, never waited for."""
        self._recovered = False
        """Exactly-once: may this task pass a PREPARE? After a ROLLBACK, or an INITSTATE unless
        it was ``restarted`` (``_checkpoint``)."""
        self._failed_at_cut = 0
        """Exactly-once: ``metrics.failed`` when the last PREPARE or ROLLBACK was acted on."""
        if self._exactly_once:
            self.receive = self._receive_aligned  # type: ignore[method-assign]
        self._timed: dict[Tuple, float] = {}
        """Sampled tuples of a plain bolt -> when their execute started (for process latency)."""

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        try:
            self.bolt.prepare(self.conf.to_conf(), self.context, self.collector)
        except Exception as exc:
            self.report_error(exc, "prepare raised")

    def close(self) -> None:
        try:
            self.bolt.cleanup()
        except Exception as exc:
            self.report_error(exc, "cleanup raised")
        self.outbox.flush()

    def timers(self) -> list[Timer]:
        freq = self.conf.tick_tuple_freq_secs
        ticks: list[Timer] = [(freq, lambda: self.tick(freq))] if freq else []
        own = self._kind.timers() if self._kind is not None else []
        return ticks + own + super().timers()

    # -- input --------------------------------------------------------------------------------
    def receive(self, payload: DataPayload) -> None:
        """Execute a batch of tuples from one source task, then send what they produced.

        Each stream segment of the batch runs through the kind's ``run_inline`` (a
        ``BasicBolt``, run and acked inline) or ``_run_plain``, the hot loops of every bolt. Latencies are sampled once
        per batch (the execute latency of a batch's first stream segment, per tuple; a plain
        bolt's first tuple until it is acked); busy time is measured per batch."""
        source_task, values_column, trees, streams, ends, joined = payload
        sources = self._sources[source_task]
        basic = self._inline
        run_inline = self._kind.run_inline if self._kind is not None else None
        perf = time.perf_counter
        started = batch_started = perf()
        failed = 0
        timed = self._timed if not basic and len(self._timed) < MAX_TIMED else None
        tree_values = kernel.read_ids(trees)
        begin = system = 0
        rest: DataPayload | None = None
        for segment, (stream, end) in enumerate(zip(streams, ends, strict=True)):
            source = sources[stream]
            column = values_column[begin:end]
            if len(source.fields) == 1 and not basic:  # an inline kind makes each list itself
                column = [[v] for v in column]
            if stream == CHECKPOINT_STREAM:
                self._receive_checkpoints(column, tree_values, source, joined)
                system += end - begin
                begin = end
                if source_task in self._held_back:  # exactly-once: this input waits for alignment
                    if segment + 1 < len(streams):
                        rest = _rest_of(payload, segment + 1, end)
                    break
                continue
            if basic:
                failed += run_inline(column, tree_values, source, joined)  # type: ignore[misc]
            else:
                failed += self._run_plain(column, tree_values, source, joined, timed, started)
                timed = None
            if started:
                if begin < end:
                    done = perf() - started
                    self._execute_latency.add(done / (end - begin))
                    if basic:
                        self._process.add(done / (end - begin))
                started = 0.0
            begin = end
        metrics = self.metrics
        if basic:
            metrics.acked += begin - system - failed
        metrics.executed += begin - system
        metrics.busy_secs += perf() - batch_started
        # Data goes on at once (unless the driver sends it: ``flush_after_receive``); acker
        # traffic is sent by the runtime after a linger, so that one control frame carries the
        # acks of many batches.
        if self.flush_after_receive:
            self.outbox.flush_data()
        if rest is not None:
            self._held_back[source_task].append(rest)

    def _receive_aligned(self, payload: DataPayload) -> None:
        """``receive`` under exactly-once: an input that has delivered a PREPARE or a ROLLBACK
        is held back (``_held_back``) until every input has, as Flink aligns barriers, so that
        a checkpoint cuts every input at the same step. Held payloads go first once released,
        in the order they came."""
        self._inbox.append(payload)
        self._drain()

    def _drain(self) -> None:
        inbox = self._inbox
        if self._draining:
            return
        self._draining = True
        try:
            while inbox:
                payload = inbox.popleft()
                held = self._held_back.get(payload[0])
                if held is not None:
                    held.append(payload)
                    if CHECKPOINT_STREAM in payload[3]:
                        # A held input sent the next step: the coordinator gave up the one
                        # being aligned (it sends one step at a time). Let everything go.
                        self._abandon_alignment()
                else:
                    BoltExecutor.receive(self, payload)
        finally:
            self._draining = False

    def _release(self) -> None:
        """Every input held back goes on: its checkpoint was acted on, or abandoned."""
        for held in self._held_back.values():
            self._inbox.extendleft(reversed(held))
        self._held_back = {}

    def _run_plain(
        self,
        column: list[list[Any]],
        trees: Iterator[int],
        source: TupleSource,
        joined: list[Any],
        timed: dict[Tuple, float] | None,
        started: float,
    ) -> int:
        """Execute one stream segment on a plain ``Bolt`` (which acks or fails each input
        itself, now or later); returns how many raised, which fails them. The first input is
        entered in ``timed`` (when given) for its process latency."""
        execute = self.bolt.execute
        new_tuple = object.__new__
        failed = 0
        for values, root, val in zip(column, trees, trees, strict=False):
            if root or not val:  # Tuple(values, source, root, val), as in ``BasicBoltAdapter.run_inline``
                tup = new_tuple(Tuple)
                tup.values = values
                tup._source = source
                tup._tree = root
                tup._val = val
            else:
                tup = Tuple(values, source, joined[val - 1])
            if timed is not None:  # its ack may come later
                timed[tup] = started
                timed = None
            try:
                execute(tup)
            except Exception as exc:
                if not isinstance(exc, FailedException):
                    self.report_error(exc, f"execute raised on {tup!r}")
                self.fail(tup)
                failed += 1
        return failed

    def execute_each(self, tuples: list[Tuple]) -> None:
        """Execute tuples that were held back (a stateful bolt's, until its state was loaded)."""
        execute = self.bolt.execute
        for tup in tuples:
            try:
                execute(tup)
            except Exception as exc:
                if not isinstance(exc, FailedException):
                    self.report_error(exc, f"execute raised on {tup!r}")
                self.fail(tup)

    # -- checkpoints --------------------------------------------------------------------------
    def _receive_checkpoints(
        self, column: list[list[Any]], trees: Iterator[int], source: TupleSource, joined: list[Any]
    ) -> None:
        """Checkpoint tuples (system tuples: in no user counter). Once one has come from every
        upstream task, act on it (a stateful bolt's state), send it on anchored to them all and
        ack them; if the action fails, fail them: the checkpoint spout rolls back."""
        for values, root, val in zip(column, trees, trees, strict=False):
            tup = Tuple(values, source, root if root or not val else joined[val - 1], val if root else 0)
            ready, stale = self._alignment.add(tup)
            for old in stale:
                self.outbox.fail_tree(old._tree)
            if self._exactly_once:
                self._align(tup, ready, stale)
            elif ready:
                self._checkpoint(ready)

    # -- exactly-once alignment ---------------------------------------------------------------
    def _align(self, tup: Tuple, ready: list[Tuple], stale: list[Tuple]) -> None:
        """Exactly-once: hold this input back once it has delivered a PREPARE or a ROLLBACK,
        until every input has (Flink's barrier alignment); let the inputs go once the step is
        acted on, or abandoned (a new attempt came: ``stale``).

        A PREPARE also waits for this task to settle (ack or fail) every input it received
        before it: a bolt that acks later emits later, and what it emits for an input before
        the cut must reach the next bolts before the cut too."""
        if stale and self._waiting_step is not None:
            for old in self._waiting_step:
                self.outbox.fail_tree(old._tree)
            self._stop_waiting()
        if ready and ready[0].values[1] == PREPARE and self._kind is not None:
            self._kind.flush()
        if ready and ready[0].values[1] == PREPARE and self._unsettled() > 0:
            self._held_back.setdefault(tup.source_task, [])
            self._waiting_step = ready
            self.ack = self._ack_then_go_on  # type: ignore[method-assign]
            self.fail = self._fail_then_go_on  # type: ignore[method-assign]
            return
        if ready or stale:
            self._release()
        if not ready and tup.values[1] in _CUTS:
            self._held_back.setdefault(tup.source_task, [])
        if ready:
            if ready[0].values[1] == ROLLBACK:
                self._void = self.metrics.executed - self.metrics.acked - self.metrics.failed
            self._checkpoint(ready)

    def _abandon_alignment(self) -> None:
        for old in self._alignment.clear() + (self._waiting_step or []):
            self.outbox.fail_tree(old._tree)
        if self._waiting_step is not None:
            self._stop_waiting()
        self._release()

    def _unsettled(self) -> int:
        """Inputs executed and neither acked nor failed yet, leaving out those a rollback made
        void (their trees were dropped with it)."""
        metrics = self.metrics
        return metrics.executed - metrics.acked - metrics.failed - self._void

    def _ack_then_go_on(self, tup: Tuple) -> None:
        BoltExecutor.ack(self, tup)
        self._go_on_if_settled()

    def _fail_then_go_on(self, tup: Tuple) -> None:
        BoltExecutor.fail(self, tup)
        self._go_on_if_settled()

    def _go_on_if_settled(self) -> None:
        ready = self._waiting_step
        if ready is None or self._unsettled() > 0:
            return
        self._stop_waiting()
        self._release()
        self._checkpoint(ready)
        self._drain()

    def _stop_waiting(self) -> None:
        self._waiting_step = None
        del self.ack  # back to the class's own: no check per ack while nothing waits
        del self.fail

    def _checkpoint(self, tuples: list[Tuple]) -> None:
        txid, action = tuples[0].values
        if self._exactly_once and action == PREPARE and not self._recovered:
            # A task started again may have lost inputs its peers sent to the old task (before
            # they heard of this one), and the checkpoint spout may not have heard of the
            # restart yet: a cut through it now could cover inputs it never executed. It
            # passes no PREPARE before a ROLLBACK has reached it: every input sent the ROLLBACK
            # here, so what came before is void and what comes after arrives. An INITSTATE is
            # not enough (it may come from a recovery begun before the restart, passed on by
            # peers that already knew the new task); it is, for a task of a new topology.
            logger.info(
                "bolt %r task %d: started again, no rollback seen yet: failing checkpoint %d",
                self.component_id,
                self.task_id,
                txid,
            )
            for tup in tuples:
                self.outbox.fail_tree(tup._tree)
            return
        if self._exactly_once and action == PREPARE and self.metrics.failed != self._failed_at_cut:
            # This task failed an input since the last cut: the input's tree is not in the state
            # whole, so this cut must not commit. The spout hears of the failure too, from the
            # acker, but perhaps only after the cut commits (another acker, a message lost to a
            # restart): the task that failed it says so here, in order with the cut.
            logger.info(
                "bolt %r task %d: %d input(s) failed since the last checkpoint: failing checkpoint %d",
                self.component_id,
                self.task_id,
                self.metrics.failed - self._failed_at_cut,
                txid,
            )
            self._failed_at_cut = self.metrics.failed
            for tup in tuples:
                self.outbox.fail_tree(tup._tree)
            return
        if action in (PREPARE, ROLLBACK):
            self._failed_at_cut = self.metrics.failed  # failed before a rollback: void with it
        if action == ROLLBACK or (action == INITSTATE and not self.restarted):
            self._recovered = True
        if self._kind is not None:
            try:
                self._kind.checkpoint(action, txid)
            except Exception as exc:
                if isinstance(exc, CheckpointDeferred):
                    logger.info(
                        "bolt %r task %d: %s: failing checkpoint %d", self.component_id, self.task_id, exc, txid
                    )
                else:
                    self.report_error(exc, f"checkpoint {action} of transaction {txid} failed")
                for tup in tuples:
                    self.outbox.fail_tree(tup._tree)
                return
        emitted = self.metrics.python_emits
        self.emit(CHECKPOINT_STREAM, [txid, action], tuples, None)
        self.metrics.python_emits = emitted
        for tup in tuples:
            self.ack_trees(tup)
        self.outbox.urgent = True

    def snapshot(self) -> dict[str, Any]:
        snap = super().snapshot()
        if self._kind is not None:
            snap.update(self._kind.snapshot())
        return snap

    def tick(self, freq_secs: float) -> None:
        """Deliver a tick tuple. Ticks are system tuples: untracked (acking or failing one is
        harmless and counts nothing), kept out of the counters a user reads (``executed``,
        ``acked``, ``failed``) and out of the latency samples (a bolt that holds its ticks, as
        ``DataFrameSink`` does, would otherwise fill the sample slots for good). A tick that
        raises is reported like any execute."""
        tup = Tuple([freq_secs], self._sources[_TICK_SOURCE][TICK_STREAM])
        tup._tree = None  # settled from the start: ack and fail return at once
        try:
            if self._kind is not None:
                self._kind.tick(tup)
            else:
                self.bolt.execute(tup)
        except FailedException:
            pass
        except Exception as exc:
            self.report_error(exc, f"execute raised on {tup!r}")
        if self.flush_after_receive:
            self.outbox.flush_data()

    # -- output -------------------------------------------------------------------------------
    def emit_input(self, values: list[Any], stream: str = DEFAULT_STREAM) -> list[int]:
        """``BasicOutputCollector.emit`` on a stream other than the one its collector's ``emit``
        is bound to (``wire_input_emits``): that stream's own emit, or ``emit`` for a stream
        that has none (undeclared or direct: it raises)."""
        emit = self._input_emits.get(stream)
        if emit is None:
            return self.emit(stream, values, self.input_collector.input, None)  # type: ignore[union-attr]
        return emit(values, stream)

    def wire_input_emits(self) -> None:
        """Bind the input collector's ``emit`` (set by an inline kind) to the emit of the
        component's default stream, or of its only stream (``input_emit.py``), again whenever an
        observer comes or goes: each emit is built knowing whether anyone watches. Where the C
        kernel runs (``kernel.py``), the collector's ``emit`` is its ``EmitKernel`` instead, which
        hands what is off its fast path to ``emit_input``, and so to the same Python emits."""
        collector = self.input_collector
        assert collector is not None, "an inline kind sets the input collector before wiring it"
        observe = self._emitted if self._watched else None
        emits = self._input_emits = input_emits(self, self._batches, observe, self.emit_input)
        if kernel.KERNEL is not None:
            if self.metrics.kernel_emits is None:  # kept when the emit is built again: one count per task
                self.metrics.kernel_emits = kernel.KERNEL.EmitCount()
            collector.emit = kernel.KERNEL.EmitKernel(  # type: ignore[method-assign]
                self, collector, self.emit_input, DEFAULT_STREAM
            )
        elif DEFAULT_STREAM in emits:
            collector.emit = emits[DEFAULT_STREAM]  # type: ignore[method-assign]
        elif len(emits) == 1:
            (collector.emit,) = emits.values()  # type: ignore[method-assign]
        else:
            collector.emit = self.emit_input  # type: ignore[method-assign]

    def _watch_changed(self) -> None:
        if self.input_collector is not None:
            self.wire_input_emits()

    def emit(
        self, stream: str, values: list[Any], anchors: Tuple | Sequence[Tuple] | None, direct_task: int | None
    ) -> list[int]:
        """Route, then send to every target anchored to ``anchors``. Flat on purpose: this runs
        once per emitted tuple; the one-anchor, one-root case (every ``BasicBolt`` emit) takes
        no helper call at all."""
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
        self.metrics.python_emits += 1
        if self._watched:
            self._emitted(stream, values, targets)
        if not targets:
            return []
        stream = route.stream
        item = values[0] if route.single else values
        batches = self._batches
        size = self.outbox.batch_size
        if anchors.__class__ is Tuple and anchors._tree.__class__ is int:
            tup: Tuple = anchors
            root: int = tup._tree  # type: ignore[assignment]
            for task in targets:
                batch = batches[task]
                if batch.stream is not stream:
                    batch.switch(stream)
                if root:
                    edge = getrandbits(64) or new_id()
                    tup._val ^= edge
                    batch.trees += (root, edge)
                else:
                    batch.trees += (0, 0)
                batch.values.append(item)
                if len(batch.values) >= size:
                    self.outbox.send_batch(task)
            return targets.copy()
        if anchors is None:
            anchors = []
        elif anchors.__class__ is Tuple:
            anchors = [anchors]
        for task in targets:
            batch = batches[task]
            if batch.stream is not stream:
                batch.switch(stream)
            batch.add_tree(*anchor(anchors))  # type: ignore[arg-type]
            batch.values.append(item)
            if len(batch.values) >= size:
                self.outbox.send_batch(task)
        return targets.copy()

    def ack_trees(self, tup: Tuple) -> None:
        """Ack ``tup`` in every tree it belongs to, counting nothing (a kind's own bookkeeping)."""
        ack = self.outbox.ack
        for root, val in tree_acks(tup):
            ack(root, val)
        tup._tree = None

    def ack(self, tup: Tuple) -> None:
        if tup._tree is None:  # acked or failed already
            return
        self.ack_trees(tup)
        self.metrics.acked += 1
        if self._timed:
            self._timed_out(tup)

    def ack_each(self, tuples: list[Tuple]) -> None:
        """``ack`` each of ``tuples`` not acked or failed yet: a kind that acks many at once
        (a batch bolt's batch). Flat on purpose, as ``BasicBoltAdapter.run_inline``: the common
        tuple, in one tree, goes straight into its acker's mail."""
        mails = self.outbox.acker_mails
        n_ackers = len(mails)
        acked = 0
        for tup in tuples:
            tree = tup._tree
            if tree is None:  # acked or failed already
                continue
            if tree.__class__ is int:
                if tree:
                    acks = mails[tree % n_ackers].acks
                    acks[tree] = acks.get(tree, 0) ^ tup._val
                tup._tree = None
            else:
                self.ack_trees(tup)
            acked += 1
        self.metrics.acked += acked
        if self._timed:
            for tup in tuples:
                self._timed_out(tup)

    def fail(self, tup: Tuple) -> None:
        if tup._tree is None:
            return
        self.outbox.fail_tree(tup._tree)
        tup._tree = None
        self.metrics.failed += 1
        if self._timed:
            self._timed_out(tup)

    def acked_elsewhere(self, tup: Tuple) -> None:
        """A kind took ``tup``'s ack into its own hands (a stateful bolt holds it until the
        commit): count it as acked, and end its process latency sample."""
        self.metrics.acked += 1
        if self._timed:
            self._timed_out(tup)

    def _timed_out(self, tup: Tuple) -> None:
        started = self._timed.pop(tup, None)
        if started is not None:
            self._process.add(time.perf_counter() - started)

    def reset_timeout(self, tup: Tuple) -> None:
        tree = tup._tree
        if tree:
            for root in (tree,) if tree.__class__ is int else tree:  # type: ignore[union-attr]
                self.outbox.acker(root).resets.append(root)


def _rest_of(payload: DataPayload, segment: int, start: int) -> DataPayload:
    """The part of ``payload`` from stream segment ``segment`` (its first tuple: ``start``) on."""
    source_task, values, trees, streams, ends, joined = payload
    return (
        source_task,
        values[start:],
        trees[2 * start :],
        streams[segment:],
        [end - start for end in ends[segment:]],
        joined,
    )
