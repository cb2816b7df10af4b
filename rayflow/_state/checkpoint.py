"""The checkpoint protocol: Storm's checkpoint spout and stream, spelled for rayflow.

A topology with a stateful bolt gets (from ``create_topology``) one more spout, ``__checkpoint``,
and every bolt one more input and output stream, ``__checkpoint`` (fields ``txid``, ``action``):
a bolt subscribes to the checkpoint stream of each component it reads (of the checkpoint spout where it reads a spout)
with an all grouping. Checkpoint tuples are tracked like data: each bolt, once it holds the
tuple from every upstream task (``alignment.py``), acts on it, emits it on, anchored, and acks
what it held. The checkpoint spout learns from the acker that every bolt has acted.

The spout keeps its transaction state -- ``(txid, phase)`` -- in the state provider, and moves it
one step per acked tuple:

    COMMITTED(t)  --interval or request-->  PREPARE(t+1): every stateful bolt stages its changes
    PREPARING(t)  --acked-->                COMMIT(t):    every stateful bolt commits, and acks
                                                          the inputs it acked before the prepare
    COMMITTING(t) --acked-->                COMMITTED(t)

A PREPARE that fails or times out is answered by ROLLBACK: every stateful bolt drops what it
staged, returns to its committed state and fails the inputs it acked since, so their spouts
replay them. A failed COMMIT or ROLLBACK is sent again (both are idempotent).

Exactly-once (``rayflow/_exactly_once``) runs the same transaction through the spout tasks and
adds one input: a spout task whose tree failed asks for a rollback (``request_rollback``), and
so does any task's restart. The transaction then goes back to its last commit: a PREPARE in
flight is abandoned and rolled back; when nothing is prepared, a ROLLBACK of the next txid makes
every task drop what it did since the commit.

Recovery -- the spout's first open, its restart, and after every rollback -- finishes what its
stored phase left open (COMMITTING: COMMIT again; PREPARING: ROLLBACK) and then sends INITSTATE:
a bolt task that has not been initialized (new, or restarted) loads its committed state then,
calls the user's ``init_state``, and only then executes the inputs it held meanwhile. A task
that is not initialized fails a PREPARE, which forces that rollback and recovery: a restarted
task is initialized within a checkpoint interval or two.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from .._collectors import SpoutOutputCollector
from .._components import OutputFieldsDeclarer, Spout
from .._context import TopologyContext
from .provider import StateError, StateProvider, task_provider, topology_name

__all__ = [
    "CHECKPOINT_COMPONENT",
    "CHECKPOINT_FIELDS",
    "CHECKPOINT_REQUEST",
    "CHECKPOINT_STREAM",
    "CheckpointSpout",
    "namespace",
    "task_namespace",
]

logger = logging.getLogger("rayflow")

CHECKPOINT_COMPONENT = "__checkpoint"
CHECKPOINT_STREAM = "__checkpoint"
CHECKPOINT_FIELDS = ("txid", "action")
CHECKPOINT_REQUEST = "checkpoint-request"
"""The control payload a spout sends the checkpoint spout when its pending budget runs low."""

INITSTATE, PREPARE, COMMIT, ROLLBACK = "initstate", "prepare", "commit", "rollback"
COMMITTED, PREPARING, COMMITTING = "committed", "preparing", "committing"
_RECOVERY = {COMMITTED: INITSTATE, PREPARING: ROLLBACK, COMMITTING: COMMIT}
_TX_KEY = "transaction"
ROLLBACKS_BEFORE_PAUSE = 3
"""Exactly-once: rollbacks in a row (no two commits in a row between them: right after a
rollback a commit may only repeat the cut it returned to) before each further one waits for the next
checkpoint interval. A message that fails every time (a poison message) would otherwise roll the
topology back as fast as it can replay, burning every core; paused, it costs one replay per
interval while the log names it."""


def namespace(conf: dict[str, Any], component: str, index: int) -> str:
    """Where one task's state lives in a provider: the topology's name, the component, and the
    task's index among its component's tasks -- not its task id, which moves when a topology is
    submitted again with a component whose name sorts before it rescaled."""
    return task_namespace(topology_name(conf), component, index)


def task_namespace(topology_name: str, component: str, index: int) -> str:
    """``namespace`` by the topology's name."""
    return f"{topology_name}/{component}/task-{index}"


def legacy_namespaces(provider: StateProvider, conf: dict[str, Any], component: str) -> list[str]:
    """Where rayflow kept a component's per-task state before it kept it by index (before
    2026-11-27): ``topology/component/<task id>``, in task id order, which is the tasks' order
    among the component's as long as the component's own parallelism is the same. For carrying
    what a topology committed then into the namespaces of ``namespace``."""
    prefix = f"{topology_name(conf)}/{component}/"
    found = [(int(ns[len(prefix) :]), ns) for ns in provider.namespaces(prefix) if ns[len(prefix) :].isdigit()]
    return [ns for _, ns in sorted(found)]


class CheckpointSpout(Spout):
    """The ``__checkpoint`` spout (one task). Its executor calls ``tick`` every checkpoint
    interval and ``request`` when a spout asks for an early checkpoint; everything else is the
    spout lifecycle. ``next_tuple`` emits only to start a recovery: the other steps are emitted
    from ``ack``/``fail``/``tick``, as soon as they are due."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare_stream(CHECKPOINT_STREAM, list(CHECKPOINT_FIELDS))

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector = collector
        self.namespace = namespace(conf, context.this_component_id, 0)  # the topology's one checkpoint spout
        self.conf = conf
        self.provider: StateProvider = task_provider(conf)
        self.txid, self.phase = 0, COMMITTED
        self.loaded = False
        self.recovering = True
        self.in_flight: tuple[int, str] | None = None
        self.due = False
        self.hold_until_tick = False
        self.commits = 0
        self.rollbacks = 0
        self.exactly_once = conf.get("processing_guarantee") == "exactly_once"
        self.took: list[float] = []
        """Seconds from each PREPARE to its COMMIT being acted on everywhere, for the metrics
        (the executor takes them)."""
        self._prepared_at = 0.0
        self.rollback_due = False
        """Exactly-once: something failed since the last commit; roll back before going on."""
        self.rollbacks_in_row = 0
        """Exactly-once: rollbacks with no two commits in a row between them
        (``ROLLBACKS_BEFORE_PAUSE``)."""
        self._clean_commits = 0
        self._load()

    def _load(self) -> None:
        try:
            data, _ = self.provider.load(self.namespace)
        except StateError as exc:
            self._trouble(f"cannot read the checkpoint state, will retry every interval: {exc}")
            return
        if _TX_KEY not in data:
            data = self._carried_over()
        self.txid, self.phase = data.get(_TX_KEY, (0, COMMITTED))
        self.loaded = True
        logger.info("checkpoint spout: transaction %d %s, recovering", self.txid, self.phase)

    def _carried_over(self) -> dict[Any, Any]:
        """The transaction a topology stored under the checkpoint spout's task id, before it was
        kept by index (``legacy_namespaces``); the next store moves it to ``self.namespace``."""
        legacy = legacy_namespaces(self.provider, self.conf, CHECKPOINT_COMPONENT)
        if len(legacy) != 1:
            return {}
        data, _ = self.provider.load(legacy[0])
        if _TX_KEY in data:
            logger.info("checkpoint spout: transaction carried over from %s", legacy[0])
        return data

    def _trouble(self, message: str) -> None:
        logger.warning("checkpoint spout: %s", message)
        self.hold_until_tick = True

    def _persist(self, txid: int, phase: str) -> bool:
        """Store the transaction state; on failure keep the last stored one and recover from it."""
        try:
            self.provider.stage(self.namespace, txid, {_TX_KEY: (txid, phase)})
            self.provider.commit(self.namespace, txid)
        except StateError as exc:
            self.recovering = True
            self._trouble(f"cannot store transaction {txid} {phase}, will recover from {self.phase}: {exc}")
            return False
        self.txid, self.phase = txid, phase
        return True

    def _emit(self, txid: int, action: str) -> None:
        self.in_flight = (txid, action)
        self.collector.emit([txid, action], msg_id=(txid, action), stream=CHECKPOINT_STREAM)

    def _step(self) -> None:
        """Send what is due, when nothing is in flight."""
        if self.in_flight is not None or self.hold_until_tick:
            return
        if not self.loaded:
            self._load()
            if not self.loaded:
                return
        action = _RECOVERY[self.phase] if self.recovering else None
        if self.rollback_due and self.phase == COMMITTED and action in (INITSTATE, None):
            self._emit(self.txid + 1, ROLLBACK)  # nothing prepared: drop what came since the commit
        elif action is not None:
            self._emit(self.txid, action)
        elif self.due and self._persist(self.txid + 1, PREPARING):
            self.due = False
            self._prepared_at = time.perf_counter()
            self._emit(self.txid, PREPARE)

    # -- driven by the executor -----------------------------------------------------------------
    def tick(self) -> None:
        self.due = True
        self.hold_until_tick = False
        self._step()

    def request(self) -> None:
        self.due = True
        self._step()

    def restart_seen(self) -> None:
        """A task of the topology was restarted: abandon the checkpoint in flight (its acks or
        fails, if any come, are ignored) and recover from the stored phase at the next tick,
        not after the message timeout. A PREPARE in flight is answered by ROLLBACK; recovery
        ends with INITSTATE, which the restarted task waits for before it executes anything.
        Not at once: the other tasks learn the restarted task's address about when this spout
        does, and what they send to its old one is lost."""
        self.in_flight = None
        self.recovering = True
        self.hold_until_tick = True
        if self.exactly_once:  # what the task held, and sent to it, is lost: back to the cut
            self.rollback_due = True

    def request_rollback(self) -> None:
        """Exactly-once: a spout task's tree failed or timed out. A PREPARE in flight cannot
        commit a cut that includes it: abandon it (recovery rolls it back); a COMMIT in flight
        finishes first (its cut is whole); then roll back."""
        self.rollback_due = True
        if self.in_flight is not None and self.in_flight[1] == PREPARE:
            self.in_flight = None
            self.recovering = True
        self._pause_if_looping()
        self._step()

    def _pause_if_looping(self) -> None:
        """Exactly-once: past ``ROLLBACKS_BEFORE_PAUSE`` rollbacks in a row, the next one waits
        for the interval's tick."""
        if not self.exactly_once or self.rollbacks_in_row < ROLLBACKS_BEFORE_PAUSE or self.hold_until_tick:
            return
        if self.rollbacks_in_row % ROLLBACKS_BEFORE_PAUSE == 0:
            logger.warning(
                "checkpoint spout: %d rollbacks in a row: each further one waits for the "
                "next checkpoint interval. A message that fails every time keeps the topology from moving on: "
                "the warnings above name its tree and the error that failed it",
                self.rollbacks_in_row,
            )
        self.hold_until_tick = True

    # -- the spout lifecycle ----------------------------------------------------------------------
    def next_tuple(self) -> None:
        self._step()
        self.collector.exhausted()  # nothing to poll: the next step comes from an ack or a tick

    def ack(self, msg_id: Any) -> None:
        if msg_id != self.in_flight:
            return  # abandoned (``restart_seen``)
        txid, action = msg_id
        self.in_flight = None
        if action == PREPARE:
            if self._persist(txid, COMMITTING):
                self._emit(txid, COMMIT)
            return
        if action == COMMIT:
            if self._persist(txid, COMMITTED):
                self.commits += 1
                self._clean_commits += 1
                if self._clean_commits >= 2:  # one commit may be the bare cut a rollback returned to
                    self.rollbacks_in_row = 0
                if self._prepared_at:
                    self.took.append(time.perf_counter() - self._prepared_at)
                    self._prepared_at = 0.0
        elif action == ROLLBACK:
            if self._persist(txid - 1, COMMITTED):
                logger.warning("checkpoint spout: transaction %d rolled back", txid)
                self.rollbacks += 1
                self.rollbacks_in_row += 1
                self._clean_commits = 0
                self.recovering = True
                self.rollback_due = False
        elif action == INITSTATE:
            self.recovering = False
        self._step()

    def fail(self, msg_id: Any) -> None:
        if msg_id != self.in_flight:
            return  # abandoned (``restart_seen``)
        txid, action = msg_id
        self.in_flight = None
        if action == PREPARE:
            logger.warning("checkpoint spout: transaction %d failed to prepare: rolling back", txid)
            self.recovering = True  # PREPARING(txid) is stored: recovery rolls it back
            self._pause_if_looping()
            self._step()
        else:  # COMMIT, ROLLBACK and INITSTATE are sent again, at the next interval
            self.recovering = True
            self.hold_until_tick = True

    def close(self) -> None:
        self.provider.close()
