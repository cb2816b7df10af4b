"""``TwoPhaseCommitSink``: a sink of your own that writes exactly once, as Flink's
``TwoPhaseCommitSinkFunction`` does.

The store does the atomic part; rayflow tells it when. Under ``processing_guarantee=
"exactly_once"`` every checkpoint is a consistent cut of the whole topology
(``rayflow/_exactly_once``), and a sink that writes the tuples of one checkpoint in one
transaction of its store -- made durable but not visible when the checkpoint prepares, made
visible when it commits, thrown away when it rolls back -- holds every tuple exactly once. This
module is the class a user subclasses; ``rayflow/_executors/two_phase_commit.py`` drives it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

from ._components import Bolt
from ._errors import RayflowError

if TYPE_CHECKING:
    from ._tuple import Tuple

__all__ = ["TwoPhaseCommitSink"]

TransactionT = TypeVar("TransactionT")


class TwoPhaseCommitSink(Bolt, Generic[TransactionT]):
    """Base class for a sink that commits what it writes with the topology's checkpoints.

    Subclass it and say how your store begins, writes, pre-commits, commits and aborts a
    transaction; ``TransactionT`` is whatever handle you need (a connection's transaction, a
    staging file). Open connections in ``prepare`` (``Bolt.prepare``), close them in
    ``cleanup``. A sink emits nothing.

    Under ``processing_guarantee="exactly_once"`` (Flink's contract):

    - There is one open transaction per task, for the checkpoint being gathered:
      ``begin_transaction(txid)`` opens it, and every input goes into it through
      ``invoke(transaction, tup)``. The input is acked as soon as ``invoke`` returns: the
      checkpoint, not the ack, is what makes it durable, since a rollback takes the spouts
      back before it.
    - When checkpoint ``txid`` prepares, ``pre_commit`` flushes its transaction and makes it
      durable, but not visible; the next transaction begins at once. Everything the task
      received before the checkpoint's PREPARE is in it (the PREPARE is aligned across every
      input, so it is a consistent cut).
    - When checkpoint ``txid`` commits everywhere, ``commit`` makes that transaction visible.
      It may be called again for a transaction it committed (a COMMIT sent again), so it must
      be idempotent; if it raises, the checkpoint's COMMIT is sent again later and ``commit``
      retried: a commit must eventually succeed.
    - When the topology rolls back, ``abort`` throws away the open transaction and any
      pre-committed one the rollback voids; the spouts replay those tuples into a new
      transaction of the same ``txid``.
    - A task that died between ``pre_commit`` and ``commit`` is started again without its
      transaction handles; the checkpoint spout tells the new task what became of that
      checkpoint, and it calls ``recover_and_commit(txid)`` or ``recover_and_abort(txid)``,
      which must find the transaction by its name (``transaction_name(txid)``: topology,
      component, task and txid, the same in every incarnation of the task) and finish it. Both
      may be called for a transaction that was already finished, or never pre-committed:
      then they do nothing. A topology submitted again under its name, with a durable state
      provider, recovers the same way.
    - Any exception from these methods fails the checkpoint step that called them, so the
      topology rolls back (``invoke``, ``pre_commit``) or the step is sent again (``commit``,
      ``abort``, the recoveries).

    Under at-least-once (the default guarantee) a task commits its open transaction every
    ``commit_interval_secs`` -- ``pre_commit`` then ``commit`` -- and acks its inputs only once
    that returned; if anything raised, it calls ``abort`` and fails them, so their spouts
    replay them. A row is then written at least once. A task that dies between ``pre_commit``
    and ``commit`` leaves that transaction to its store (nothing names it to a later task), and
    its tuples are replayed. Keep ``commit_interval_secs`` well under ``message_timeout_secs``.

    A subclass that is a whole bolt of its own (it implements ``execute``, as
    ``rayflow.spark.DataFrameSink`` does) runs as that bolt under at-least-once, and through
    the transaction methods above only under exactly-once.

    Example (a file per transaction, renamed into place at the commit)::

        class Lines(TwoPhaseCommitSink[str]):
            def begin_transaction(self, txid):
                path = f"/data/out/_{self.transaction_name(txid).replace('/', '-')}"
                open(path, "w").close()
                return path
            def invoke(self, path, tup):
                with open(path, "a") as f:
                    f.write(f"{tup[0]}\\n")
            ...
    """

    commit_interval_secs: float = 1.0
    """Under at-least-once, how often a task commits its open transaction (and acks its inputs)."""

    def begin_transaction(self, txid: int) -> TransactionT:
        """Open a transaction for checkpoint ``txid`` (under at-least-once, a number of the
        task's own) and return its handle. A transaction of the same txid may have been begun
        and aborted before (a rollback replays a checkpoint under its txid): start afresh,
        discarding anything such an attempt left under its name."""
        raise NotImplementedError(f"{type(self).__name__} must implement begin_transaction(txid)")

    def invoke(self, transaction: TransactionT, tup: Tuple) -> None:
        """Write one input into ``transaction``. Raising fails the input (and, under
        exactly-once, rolls the topology back)."""
        raise NotImplementedError(f"{type(self).__name__} must implement invoke(transaction, tup)")

    def pre_commit(self, transaction: TransactionT) -> None:
        """Flush ``transaction`` and make it durable, but not visible, so that ``commit`` --
        by this task or by a later one through ``recover_and_commit`` -- cannot fail for want
        of its data. Raising fails the checkpoint (exactly-once) or the batch (at-least-once)."""
        raise NotImplementedError(f"{type(self).__name__} must implement pre_commit(transaction)")

    def commit(self, transaction: TransactionT) -> None:
        """Make a pre-committed ``transaction`` visible. Idempotent: it may be called again."""
        raise NotImplementedError(f"{type(self).__name__} must implement commit(transaction)")

    def abort(self, transaction: TransactionT) -> None:
        """Throw ``transaction`` away, whether or not it was pre-committed."""
        raise NotImplementedError(f"{type(self).__name__} must implement abort(transaction)")

    def recover_and_commit(self, txid: int) -> None:
        """Commit the transaction of checkpoint ``txid`` that an earlier incarnation of this
        task pre-committed, found by ``transaction_name(txid)``; nothing if there is none (it
        was committed already)."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement recover_and_commit(txid): a task restarted after a "
            "pre_commit must be able to commit that transaction by its name, transaction_name(txid)"
        )

    def recover_and_abort(self, txid: int) -> None:
        """Throw away whatever an earlier incarnation of this task left of the transaction of
        checkpoint ``txid`` (found by ``transaction_name(txid)``); nothing if there is none."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement recover_and_abort(txid): a task restarted after a "
            "pre_commit must be able to abort that transaction by its name, transaction_name(txid)"
        )

    def transaction_name(self, txid: int) -> str:
        """The name of this task's transaction for ``txid``: ``topology/component/task-N/txid``
        (``N``: the task's index among its component's tasks), the same in every incarnation of
        the task and in a resumed topology whose other components changed their parallelism,
        and unique in the topology. Known from ``prepare`` on."""
        prefix = getattr(self, "_transaction_prefix", None)
        if prefix is None:
            raise RayflowError(
                f"{type(self).__name__}.transaction_name is known only in a running task: call it from "
                "prepare or later, not in __init__"
            )
        return f"{prefix}/{txid}"
