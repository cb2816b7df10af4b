"""``complete_topology``: run a topology to completion in this process and look at what happened.

Modelled on Storm's ``Testing.completeTopology``: the way to unit-test a topology without a
cluster. Example::

    from rayflow.testing import complete_topology

    result = complete_topology(builder.create_topology(),
                               mocked_sources={"sentences": [["the cow"], ["the moon"]]})
    assert result.acked("sentences") == [0, 1]
    assert sorted(w for (w,) in result.emitted("split")) == ["cow", "moon", "the", "the"]
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

from .._collectors import SpoutOutputCollector
from .._components import OutputFieldsDeclarer, Spout
from .._config import Config
from .._context import TopologyContext
from .._errors import TopologyError
from .._executors import SpoutExecutor
from .._state.checkpoint import CHECKPOINT_COMPONENT
from .._topology import Topology
from .._tuple import DEFAULT_STREAM
from ._in_process import InProcessTopology

__all__ = ["CompletedTopology", "complete_topology"]

CHECKPOINTS_BEFORE_TIMEOUT = 3


class MockedSpout(Spout):
    """Emits each of ``rows`` once, tracked, with its index in ``rows`` as the msg id; no
    replays. With several tasks, task *i* of *n* takes the rows ``i, i + n, ...``."""

    def __init__(self, rows: list[list[Any]], fields: tuple[str, ...]) -> None:
        self.rows = rows
        self.fields = fields

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(list(self.fields))

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        tasks = context.get_component_tasks(context.this_component_id)
        self._next = iter(range(tasks.index(context.this_task_id), len(self.rows), len(tasks)))
        self._collector = collector

    def next_tuple(self) -> None:
        index = next(self._next, None)
        if index is None:
            self._collector.exhausted()
        else:
            self._collector.emit(list(self.rows[index]), msg_id=index)


def _mock(topology: Topology, mocked_sources: dict[str, list[list[Any]]]) -> Topology:
    problems = []
    components = dict(topology.components)
    for spout_id, rows in mocked_sources.items():
        spec = components.get(spout_id)
        if spec is None or not spec.is_spout:
            spouts = ", ".join(sorted(s.id for s in topology.spouts))
            problems.append(f"mocked_sources: {spout_id!r} is not a spout of the topology (spouts: {spouts})")
            continue
        declared = spec.streams.get(DEFAULT_STREAM)
        if declared is None:
            problems.append(f"mocked_sources: spout {spout_id!r} declares no default stream to emit on")
            continue
        for i, row in enumerate(rows):
            if not isinstance(row, (list, tuple)) or len(row) != len(declared.fields):
                problems.append(
                    f"mocked_sources[{spout_id!r}][{i}]: {row!r} is not a list of {len(declared.fields)} "
                    f"value(s) for fields {list(declared.fields)}"
                )
        spec = copy.copy(spec)
        spec.component = MockedSpout([list(r) for r in rows], declared.fields)
        components[spout_id] = spec
    if problems:
        raise TopologyError(problems)
    return Topology(components)


class CompletedTopology:
    """What a completed run did. Tuples and msg ids are listed in the order they happened."""

    def __init__(self, run: InProcessTopology, rounds: int) -> None:
        self._run = run
        self.rounds = rounds
        """How many times the clock was moved past the message timeout."""
        self.finished = run.finished
        """Every spout ended exhausted with nothing pending (else ``max_rounds`` ran out)."""

    def emitted(self, component: str, stream: str = DEFAULT_STREAM) -> list[list[Any]]:
        """Every tuple ``component`` emitted on ``stream``, replays included."""
        return self._run.emitted(component, stream)

    def acked(self, spout: str) -> list[Any]:
        """The msg ids ``spout`` was told were acked."""
        return self._run.acked(spout)

    def failed(self, spout: str) -> list[Any]:
        """The msg ids ``spout`` was told failed (explicitly, or by timeout)."""
        return self._run.failed(spout)

    def metrics(self) -> dict[str, dict[str, Any]]:
        """Counters per component: the shape of ``TopologyHandle.metrics()``."""
        return self._run.metrics()

    def components(self, component_id: str) -> list[Any]:
        """The user's component object of each task of ``component_id``, after ``cleanup``/``close``."""
        return self._run.components(component_id)


def complete_topology(
    topology: Topology,
    conf: Config | dict[str, Any] | None = None,
    *,
    mocked_sources: dict[str, list[list[Any]]] | None = None,
    max_rounds: int = 100,
    seed: int = 0,
) -> CompletedTopology:
    """Run ``topology`` to completion in this process, without Ray, deterministically.

    Spouts in ``mocked_sources`` are replaced by ones emitting each given value list once,
    tracked, with the list index as msg id. The run goes on until nothing moves; then the
    simulated clock goes forward past ``message_timeout_secs``, so trees still pending time out
    (their spouts may replay), and again -- until every spout is exhausted with nothing pending,
    a round changes nothing, or ``max_rounds`` rounds have passed. A round is one move of the
    clock, or one more failure of the same message: a spout that replays every failure with a
    bolt that fails every tuple stops once one message has failed ``max_rounds`` times.
    Components run as on Ray (``open``/``prepare`` first, ticks when their config asks,
    ``close``/``cleanup`` at the end). A topology with a stateful bolt checkpoints on the
    simulated clock, with the memory state provider unless ``conf`` names another.

    Every random choice rayflow makes (which task of a shuffle grouping gets a tuple, tree ids)
    is drawn from ``seed``: the same topology, inputs and seed give the same run, in the same
    order, every time. A run that ends unfinished (``result.finished`` is ``False``) warns
    (``UserWarning``), saying which spout did not finish and why.

    Raises ``TopologyError`` for something that is not a ``Topology`` or a ``mocked_sources``
    entry that does not fit its spout.
    """
    if not isinstance(topology, Topology):
        got = type(topology).__name__
        raise TopologyError([f"expected a Topology from TopologyBuilder.create_topology(), got {got}"])
    if mocked_sources:
        topology = _mock(topology, mocked_sources)
    config = Config.of(conf)
    run = InProcessTopology(topology, config, seed=seed)
    rounds = 0
    # Twice the timeout: a spout's pending map expires a tree within that, whatever its phase.
    step = 2 * config.message_timeout_secs
    run.run(max_rounds)
    if topology.stateful:
        # Trees through a stateful bolt complete at the next commit: let the checkpoint interval
        # pass (a few times: recovery takes a checkpoint or two) before timing anything out.
        for _ in range(CHECKPOINTS_BEFORE_TIMEOUT):
            if run.finished or _looping(run, max_rounds):
                break
            run.advance(config.checkpoint_interval_ms / 1000.0)
            run.run(max_rounds)
    while not run.finished and rounds < max_rounds and not _looping(run, max_rounds):
        before = run.recorder.emit_count
        run.advance(step)
        run.run(max_rounds)
        rounds += 1
        pending = sum(e.snapshot().get("pending", 0) for e in run.executors.values() if e.is_source)
        if run.recorder.emit_count == before and not pending:
            break  # a quiet round with nothing pending: only more of the same can follow
    unfinished = _unfinished(run, rounds, max_rounds)
    run.close()
    if unfinished:
        warnings.warn(unfinished, stacklevel=2)
    return CompletedTopology(run, rounds)


def _looping(run: InProcessTopology, max_rounds: int) -> bool:
    """Has one message failed ``max_rounds`` times (a replay loop)?"""
    return 0 < max_rounds <= run.recorder.replays


def _unfinished(run: InProcessTopology, rounds: int, max_rounds: int) -> str:
    """Why the run did not finish, for the warning (``""`` when it did)."""
    if run.finished:
        return ""
    recorder = run.recorder
    if _looping(run, max_rounds) and recorder.most_failed is not None:
        spout, msg_id, times = recorder.most_failed
        why = (
            f"a replay loop: message {msg_id!r} of spout {spout!r} failed {times:,} times, and was replayed "
            f"each time ({recorder.fail_count:,} failures in all). A spout that replays every failure and a "
            "bolt that fails every tuple never finish"
        )
    elif rounds >= max_rounds > 0:
        why = f"the clock moved past the message timeout {rounds:,} times and trees were still pending"
    else:
        why = "nothing moved any more"
    spouts = []
    for executor in run.executors.values():
        if not isinstance(executor, SpoutExecutor) or executor.component_id == CHECKPOINT_COMPONENT:
            continue
        where = f"spout {executor.component_id!r} (task {executor.task_id})"
        if not executor.opened:
            spouts.append(f"{where} did not open: {executor.metrics.last_error}")
        elif executor.finished:
            continue
        elif len(executor.pending):
            spouts.append(f"{where} has {len(executor.pending):,} tree(s) pending")
        elif not executor.exhausted:
            spouts.append(
                f"{where} never said it was exhausted: once a spout has emitted everything, its "
                "next_tuple calls collector.exhausted()"
            )
        else:
            spouts.append(f"{where} has failed messages to replay")
    raised = [
        f"{cid!r} raised {m['errors']:,} time(s), the last: {m['last_error']}"
        for cid, m in run.metrics().items()
        if m.get("errors")
    ]
    return f"complete_topology stopped unfinished (max_rounds={max_rounds}): {why}. " + "; ".join(spouts + raised)
