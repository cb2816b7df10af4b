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
from typing import Any

from .._collectors import SpoutOutputCollector
from .._components import OutputFieldsDeclarer, Spout
from .._config import Config
from .._context import TopologyContext
from .._errors import TopologyError
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
) -> CompletedTopology:
    """Run ``topology`` to completion in this process, without Ray, deterministically.

    Spouts in ``mocked_sources`` are replaced by ones emitting each given value list once,
    tracked, with the list index as msg id. The run goes on until nothing moves; then the
    simulated clock goes forward past ``message_timeout_secs``, so trees still pending time out
    (their spouts may replay), and again -- until every spout is exhausted with nothing pending,
    a round changes nothing, or ``max_rounds`` rounds have passed. Components run as on Ray
    (``open``/``prepare`` first, ticks when their config asks, ``close``/``cleanup`` at the end).
    A topology with a stateful bolt checkpoints on the simulated clock, with the memory state
    provider unless ``conf`` names another.
    """
    if not isinstance(topology, Topology):
        got = type(topology).__name__
        raise TopologyError([f"expected a Topology from TopologyBuilder.create_topology(), got {got}"])
    if mocked_sources:
        topology = _mock(topology, mocked_sources)
    config = Config.of(conf)
    run = InProcessTopology(topology, config)
    rounds = 0
    # Twice the timeout: a spout's pending map expires a tree within that, whatever its phase.
    step = 2 * config.message_timeout_secs
    run.run()
    if topology.stateful:
        # Trees through a stateful bolt complete at the next commit: let the checkpoint interval
        # pass (a few times: recovery takes a checkpoint or two) before timing anything out.
        for _ in range(CHECKPOINTS_BEFORE_TIMEOUT):
            if run.finished:
                break
            run.advance(config.checkpoint_interval_ms / 1000.0)
            run.run()
    while not run.finished and rounds < max_rounds:
        before = run.recorder.emit_count
        run.advance(step)
        run.run()
        rounds += 1
        pending = sum(e.snapshot().get("pending", 0) for e in run.executors.values() if e.is_source)
        if run.recorder.emit_count == before and not pending:
            break  # a quiet round with nothing pending: only more of the same can follow
    run.close()
    return CompletedTopology(run, rounds)
