"""The classes users subclass: ``Spout``, ``Bolt`` and ``BasicBolt``.

Every method has a do-nothing default, so a component overrides only what it needs. Instances
are handed to the builder and pickled: every task runs its own copy, so per-task state set in
``open``/``prepare`` never leaks between tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ._errors import TopologyError
from ._pending import PendingNeed
from ._tuple import DEFAULT_STREAM

if TYPE_CHECKING:
    from ._collectors import BasicOutputCollector, BatchOutputCollector, OutputCollector, SpoutOutputCollector
    from ._context import TopologyContext
    from ._state.key_value import KeyValueState
    from ._tuple import Tuple

__all__ = [
    "BasicBolt",
    "BatchBolt",
    "Bolt",
    "OutputFieldsDeclarer",
    "Spout",
    "StatefulBolt",
    "StreamDeclaration",
    "batch_problems",
]


@dataclass(frozen=True)
class StreamDeclaration:
    """One declared output stream: its fields and whether it takes direct emits only."""

    fields: tuple[str, ...]
    direct: bool = False


class OutputFieldsDeclarer:
    """Collects a component's output streams in ``declare_output_fields``."""

    def __init__(self) -> None:
        self.streams: dict[str, StreamDeclaration] = {}

    def declare(self, fields: list[str] | tuple[str, ...], direct: bool = False) -> None:
        """Declare the fields of the default stream (``direct``: it takes ``emit_direct`` only)."""
        self.declare_stream(DEFAULT_STREAM, fields, direct)

    def declare_stream(self, stream_id: str, fields: list[str] | tuple[str, ...], direct: bool = False) -> None:
        """Declare a named stream and its fields. Raises ``TopologyError`` for an empty id, a
        stream declared twice, or fields that are not distinct names."""
        if not isinstance(stream_id, str) or not stream_id:
            raise TopologyError([f"stream id must be a non-empty string, got {stream_id!r}"])
        if stream_id in self.streams:
            raise TopologyError([f"stream {stream_id!r} is declared twice"])
        if isinstance(fields, str) or not all(isinstance(f, str) for f in fields):
            raise TopologyError([f"fields of stream {stream_id!r} must be a list of names"])
        if len(set(fields)) != len(fields):
            raise TopologyError([f"stream {stream_id!r} declares a field twice: {list(fields)}"])
        self.streams[stream_id] = StreamDeclaration(tuple(fields), bool(direct))


class _Component:
    outputs: ClassVar[list[str] | None] = None
    """Shorthand: the default ``declare_output_fields`` declares these on the default stream."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare the streams this component emits on ``declarer``; the default declares
        ``outputs`` on the default stream."""
        if self.outputs is not None:
            declarer.declare(list(self.outputs))

    def get_component_configuration(self) -> dict[str, Any] | None:
        """Config this component asks for itself, as Storm's ``getComponentConfiguration``
        (e.g. ``{"tick_tuple_freq_secs": 5}`` for a bolt that flushes on ticks). The
        ``config=`` given to ``set_spout``/``set_bolt`` wins over it."""
        return None


class Spout(_Component):
    """A source of tuples. Emit from ``next_tuple``; ``ack``/``fail`` report the fate of a tree."""

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        """Called once in each task before ``next_tuple`` (again in a restarted task): keep the
        collector, open connections. ``conf`` is the topology's config with this component's."""
        pass

    def next_tuple(self) -> None:
        """Emit zero or more tuples. Called in a loop; must not block for long."""

    def ack(self, msg_id: Any) -> None:
        """The tuple tree rooted at ``msg_id`` was fully processed."""

    def fail(self, msg_id: Any) -> None:
        """The tree rooted at ``msg_id`` failed somewhere or timed out: replay it if you need to."""

    def activate(self) -> None:
        """The topology was activated: ``next_tuple`` is called from now on."""
        pass

    def deactivate(self) -> None:
        """The topology was deactivated: ``next_tuple`` is not called until it is activated
        again; acks and fails of trees in flight still arrive."""
        pass

    def close(self) -> None:
        """The task is shutting down (the topology is killed). A task that dies is not told."""
        pass


class Bolt(_Component):
    """A processing step. ``execute`` must ack or fail every input tuple, now or later."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        """Called once in each task before ``execute`` (again in a restarted task): keep the
        collector. ``conf`` is the topology's config with this component's."""
        pass

    def execute(self, tup: Tuple) -> None:
        """Process one input; ack or fail it with the collector, now or later. An exception
        fails it, is counted and logged, and the task goes on."""
        raise NotImplementedError(f"{type(self).__name__} must implement execute(tup)")

    def cleanup(self) -> None:
        """The task is shutting down (the topology is killed). A task that dies is not told."""
        pass


class StatefulBolt(Bolt):
    """A bolt whose state survives restarts (Storm's ``IStatefulBolt``).

    ``init_state`` hands it a ``KeyValueState`` -- empty the first time, the last committed
    state after a restart -- before its first ``execute``. Its acks take effect when the
    checkpoint after them commits, so an input is replayed unless the state that counted it
    was committed (at-least-once *state*). Every emit must be anchored: an unanchored one raises
    ``EmitError`` at the call, since it would survive a rollback that replays its input.

    Ack each input in ``execute``: an input acked later than a rollback that came after its
    execute is acked into a state that no longer holds its update."""

    max_parallelism = 128
    """The number of key groups a fields-grouped bolt's state is kept in, and so the most tasks
    it can be rescaled to; fixed once its state exists (``docs/concepts/state.md``)."""

    def init_state(self, state: KeyValueState) -> None:
        """Keep ``state``: the bolt's state from now on (the same object across rollbacks)."""

    def pre_prepare(self, txid: int) -> None:
        """Called before the state's changes are staged for transaction ``txid``."""

    def pre_commit(self, txid: int) -> None:
        """Called before transaction ``txid`` commits."""

    def pre_rollback(self) -> None:
        """Called before the state goes back to its last committed contents."""


class BatchBolt(_Component):
    """A bolt that executes its inputs in batches: for work that costs less per tuple in bulk
    (a model on a GPU, a vectorised numpy step, a database insert of many rows).

    Inputs are held until ``batch_size`` of them have arrived, or until the first one held has
    waited ``batch_timeout_ms``, then handed to one ``execute_batch`` call, in arrival order. Both
    are class attributes an instance may override (``bolt.batch_size = 8``); topology files set
    them as ``batch_size:`` and ``batch_timeout_ms:`` on the component.

    Reliability stays per tuple, as in a ``BasicBolt``:

    - every emit names its anchors, one or more tuples of the batch (``anchors=tup`` for a result
      per input, ``anchors=tuples`` for one result of the whole batch); an emit without anchors
      raises ``EmitError`` at the call, since an output tied to no input would survive the
      replay of a failed one;
    - ``collector.fail(tup)`` fails one tuple (its spout may replay it); when ``execute_batch``
      returns, every tuple of the batch not failed is acked;
    - an exception fails every tuple of the batch not acked or failed yet (``FailedException``
      silently, anything else is also counted and logged as an error); the task goes on.

    Ticks (``tick_tuple_freq_secs``) are never put in a batch: each goes to ``execute_tick`` on
    its own, between batches. A checkpoint (a topology with a stateful bolt) executes the batch
    held first, so that what arrived before the checkpoint is executed before it is passed on.
    ``complete_topology`` and ``InProcessTopology`` let a partial batch go on their simulated
    clock. Its task's metrics add ``batch_size``, the sizes of the batches executed (a histogram).
    """

    batch_size: int = 64
    """At most this many tuples per ``execute_batch`` call (at least 1)."""
    batch_timeout_ms: float = 20.0
    """A partial batch is executed at the latest this long after its first tuple arrived (> 0)."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        """Called once in each task before the first batch (again in a restarted task): build
        the model here, not in ``__init__``, since the instance is pickled to every task."""
        pass

    def execute_batch(self, tuples: list[Tuple], collector: BatchOutputCollector) -> None:
        """Process a batch of 1 to ``batch_size`` inputs: emit with ``anchors=``, fail what must
        be replayed with ``collector.fail``; the rest is acked on return."""
        raise NotImplementedError(f"{type(self).__name__} must implement execute_batch(tuples, collector)")

    def execute_tick(self, tup: Tuple, collector: BatchOutputCollector) -> None:
        """A tick tuple, outside any batch (the default ignores it). A tick belongs to no tuple
        tree, so an emit here may go without anchors."""

    def cleanup(self) -> None:
        """The task is shutting down (the topology is killed). A task that dies is not told;
        the batch it held is replayed by its spouts after the message timeout."""
        pass

    def pending_need(self) -> PendingNeed:
        """What one task needs in flight towards it to keep pace: a batch filling while the one
        before executes. With fewer trees pending per spout task, no batch fills and each waits
        for ``batch_timeout_ms``. The runner shares this out over the spout tasks that feed the
        bolt and raises the default ``max_spout_pending`` to it (``rayflow/_pending.py``)."""
        return PendingNeed(
            2 * self.batch_size,
            reason=f"fill batches of batch_size={self.batch_size} (one filling while one executes)",
            shortfall=f"batches leave partly filled, each after batch_timeout_ms={self.batch_timeout_ms:g}",
            remedy="lower batch_size",
        )


def batch_problems(bolt: BatchBolt) -> list[str]:
    """What is wrong with ``bolt``'s batch settings (``create_topology`` lists them)."""
    problems = []
    size, timeout = bolt.batch_size, bolt.batch_timeout_ms
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        problems.append(f"batch_size must be an integer >= 1, got {size!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
        problems.append(f"batch_timeout_ms must be a number of milliseconds > 0, got {timeout!r}")
    return problems


class BasicBolt(_Component):
    """A bolt whose emits are anchored to the input and whose input is acked on return.

    Raising ``FailedException`` (or any other exception) fails the input instead.
    """

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        """Called once in each task before ``execute`` (again in a restarted task)."""
        pass

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        """Process one input: emits go out anchored to it, and it is acked on return."""
        raise NotImplementedError(f"{type(self).__name__} must implement execute(tup, collector)")

    def cleanup(self) -> None:
        """The task is shutting down (the topology is killed). A task that dies is not told."""
        pass
