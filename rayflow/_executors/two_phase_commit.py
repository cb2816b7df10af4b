"""``TwoPhaseCommitAdapter``: a ``TwoPhaseCommitSink`` run as a bolt, as Flink runs a
``TwoPhaseCommitSinkFunction`` on its checkpoints.

Under exactly-once the checkpoint steps reach ``checkpoint`` aligned (``BoltKind``), a PREPARE
with every input held back, so what the task received before it belongs to that checkpoint:

- one transaction is open (``current``), for the checkpoint whose PREPARE comes next
  (``current_txid``); each input is ``invoke``d into it and acked at once;
- PREPARE(n): ``pre_commit`` the open transaction -- its txid is n -- keep it in ``prepared``
  and begin transaction n + 1;
- COMMIT(n): ``commit`` every kept transaction up to n (one that raises is kept, and the COMMIT
  sent again retries it);
- ROLLBACK(n): the last committed checkpoint is n - 1: ``abort`` the kept transactions from n
  and the open one, and begin n again (the spouts replay into it);
- a task that has seen no step yet -- new, restarted, or one whose abort failed -- holds its
  inputs (``waiting``): INITSTATE(t) begins t + 1 and invokes them; ROLLBACK(n) drops them (they
  came before the cut the spouts go back to), calls ``recover_and_abort(n)`` for what an earlier
  incarnation may have pre-committed, and begins n; a COMMIT(n) before either is a checkpoint an
  earlier incarnation pre-committed: ``recover_and_commit(n)``; a PREPARE is deferred (it fails,
  and the rollback that follows starts the task).

An input whose ``invoke`` raised is failed, which rolls the topology back; until that ROLLBACK
the transaction is ``broken``: later inputs are held, not written, and a PREPARE fails.

Under at-least-once the steps are ignored: a transaction begins with the first input after a
commit, and every ``commit_interval_secs`` the task pre-commits and commits it, then acks its
inputs -- or, if anything raised, aborts it and fails them. A sink that implements ``execute``
itself (``DataFrameSink``) runs as that bolt instead.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .._components import Bolt, OutputFieldsDeclarer
from .._context import TopologyContext
from .._errors import RayflowError
from .._exactly_once.wiring import exactly_once
from .._sinks import TwoPhaseCommitSink
from .._state.checkpoint import COMMIT, INITSTATE, PREPARE, ROLLBACK, namespace
from .._tuple import Tuple
from .base import Timer, logger
from .bolt_kind import BoltKind, CheckpointDeferred

if TYPE_CHECKING:  # the executor builds its kind; the kind only calls back into it
    from .._collectors import OutputCollector
    from .bolt import BoltExecutor

__all__ = ["TwoPhaseCommitAdapter"]


class TwoPhaseCommitAdapter(BoltKind):
    def __init__(self, user_component: TwoPhaseCommitSink[Any], task: BoltExecutor) -> None:
        self.user_component = user_component
        self._task = task
        self.exactly_once = exactly_once(task.conf)
        self.plain = not self.exactly_once and type(user_component).execute is not Bolt.execute
        """At-least-once, and the sink is a bolt of its own: it runs as that bolt."""
        self.initialized = False
        self.broken = False
        self.current: Any = None
        self.current_txid = 0
        self.prepared: dict[int, Any] = {}
        self.waiting: list[Tuple] = []
        self.held: list[Tuple] = []
        """At-least-once: the inputs of the open transaction, acked once it commits."""
        self._next_txid = time.time_ns() // 1000
        """At-least-once: the txids a task gives its transactions (unique across its restarts)."""
        self.commits = 0
        self.aborts = 0
        if self.plain:
            self.execute = user_component.execute  # type: ignore[method-assign]

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.user_component.declare_output_fields(declarer)

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        sink = self.user_component
        # By the task's index among its component's tasks, not its id: a topology resumed with
        # another component rescaled moves the ids, and a restarted task must find its own
        # pre-committed transactions, not a sibling's.
        sink._transaction_prefix = namespace(conf, context.this_component_id, context.this_task_index)
        sink.prepare(conf, context, collector)

    def cleanup(self) -> None:
        """The open transaction is aborted; pre-committed ones are left for the checkpoint that
        decides them (a topology submitted again recovers them)."""
        try:
            if self.current is not None:
                self.user_component.abort(self.current)
        finally:
            self.user_component.cleanup()

    def tick(self, tup: Tuple) -> None:
        if self.plain:
            self.user_component.execute(tup)

    def timers(self) -> list[Timer]:
        if self.exactly_once or self.plain:
            return []
        return [(float(self.user_component.commit_interval_secs), self._commit_open)]

    def snapshot(self) -> dict[str, Any]:
        """Committed and aborted transactions, under a stateful bolt's names (the metrics, the
        web page and Prometheus know them): ``checkpoints`` and ``rollbacks``."""
        return {"checkpoints": self.commits, "rollbacks": self.aborts}

    # -- input --------------------------------------------------------------------------------
    def execute(self, tup: Tuple) -> None:
        if self.exactly_once:
            if not self.initialized or self.broken:
                self.waiting.append(tup)
                return
            try:
                self.user_component.invoke(self.current, tup)
            except BaseException:
                self.broken = True  # the rollback this failure starts aborts the transaction
                raise
            self._task.ack(tup)
            return
        if self.current is None:
            self._next_txid += 1
            self.current = self.user_component.begin_transaction(self._next_txid)
        try:
            self.user_component.invoke(self.current, tup)
        except BaseException:
            self._abandon()
            raise
        self.held.append(tup)

    # -- at-least-once --------------------------------------------------------------------------
    def _commit_open(self) -> None:
        """Commit the open transaction and ack its inputs; abort it and fail them if that raised."""
        if self.current is None:
            return
        sink = self.user_component
        try:
            sink.pre_commit(self.current)
            sink.commit(self.current)
        except Exception as exc:
            self._task.report_error(exc, f"transaction {self._next_txid} could not commit; its inputs are failed")
            self._abandon()
            return
        self.commits += 1
        self.current = None
        held, self.held = self.held, []
        for tup in held:
            self._task.ack(tup)

    def _abandon(self) -> None:
        """Abort the open transaction and fail its inputs (their spouts replay them)."""
        transaction, self.current = self.current, None
        held, self.held = self.held, []
        for tup in held:
            self._task.fail(tup)
        self.aborts += 1
        try:
            self.user_component.abort(transaction)
        except Exception as exc:
            self._task.report_error(exc, f"abort of transaction {self._next_txid} raised")

    # -- exactly-once ---------------------------------------------------------------------------
    def checkpoint(self, action: str, txid: int) -> None:
        if not self.exactly_once:
            return  # at-least-once commits on its own clock
        if not self.initialized:
            self._uninitialized(action, txid)
        elif action == PREPARE:
            self._prepare(txid)
        elif action == COMMIT:
            self._commit(txid)
        elif action == ROLLBACK:
            self._rollback(txid)

    def _uninitialized(self, action: str, txid: int) -> None:
        sink = self.user_component
        if action == COMMIT:
            sink.recover_and_commit(txid)
        elif action == PREPARE:
            raise CheckpointDeferred(f"sink task {self._task.task_id} has not started its first transaction yet")
        elif action == ROLLBACK:
            self.waiting = []
            sink.recover_and_abort(txid)
            self._begin(txid)
        elif action == INITSTATE:
            self._begin(txid + 1)
            waiting, self.waiting = self.waiting, []
            self._task.execute_each(waiting)

    def _begin(self, txid: int) -> None:
        self.current = self.user_component.begin_transaction(txid)
        self.current_txid = txid
        self.initialized = True
        self.broken = False

    def _prepare(self, txid: int) -> None:
        if self.broken:
            raise RayflowError(f"transaction {txid} is broken (an input could not be written): a rollback is due")
        if txid != self.current_txid:
            raise RayflowError(f"checkpoint {txid} prepares, but the open transaction is {self.current_txid}")
        try:
            self.user_component.pre_commit(self.current)
        except BaseException:
            self.broken = True
            raise
        self.prepared[txid] = self.current
        self.current = None
        try:
            self._begin(txid + 1)
        except BaseException:
            self._fall_back()
            raise

    def _commit(self, txid: int) -> None:
        for done in sorted(t for t in self.prepared if t <= txid):
            self.user_component.commit(self.prepared[done])
            del self.prepared[done]
            self.commits += 1

    def _rollback(self, txid: int) -> None:
        """Commit what the rollback keeps (none, when the transaction ran as it should), abort
        the rest and begin ``txid`` again. An abort (or the begin) that raised leaves the task
        uninitialized: the ROLLBACK is sent again, and finds the transaction by its name then."""
        self._commit(txid - 1)
        doomed = [self.prepared.pop(t) for t in sorted(self.prepared)]
        if self.current is not None:
            doomed.append(self.current)
        self.current = None
        try:
            for transaction in doomed:
                self.user_component.abort(transaction)
                self.aborts += 1
            self._begin(txid)
        except BaseException:
            self._fall_back()
            raise
        logger.info("sink %r task %d: rolled back to transaction %d", self._task.component_id, self._task.task_id, txid)

    def _fall_back(self) -> None:
        """Forget the transactions: the next step deals with them by name, as in a new task."""
        self.initialized = False
        self.current = None
        self.prepared = {}
