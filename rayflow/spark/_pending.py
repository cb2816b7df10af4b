"""The spouts' pending budget a ``DataFrameSink`` needs, applied where a topology's defaults are.

A sink task keeps up to ``max_inflight`` batches in Spark (one being written, the others waiting;
for ``write_parquet`` the waiting ones are written together by the next job) and fills one more
meanwhile. A Spark job costs about the same whether it writes a few thousand rows or many, so
the sink keeps pace only if the spouts may have ``(max_inflight + 1) * batch_rows`` trees in
flight towards each sink task. The default budget of a plain topology
(``DEFAULT_MAX_SPOUT_PENDING`` per spout task) is below one default batch: every batch then left
when Spark had room, never full, and the sink ran at a fraction of its pace.

So ``with_sink_defaults`` (called by ``config_to_run``, like the stateful defaults) raises the
budget of a topology with a sink whose config leaves ``max_spout_pending`` unset to what its
sinks need, shared out over the spout tasks that feed each sink; it never lowers it. A budget the
user set is kept as it is, with a warning when it holds a sink below full batches. Only more
trees may be in flight: when each is acked, and how many times it may be replayed, is unchanged.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from .._config import Config
from .._topology import ComponentSpec, Topology
from ._sink import DataFrameSink

__all__ = ["SinkNeed", "sink_needs", "with_sink_defaults"]

logger = logging.getLogger("rayflow")


@dataclass(frozen=True)
class SinkNeed:
    """What one sink needs of the spouts that feed it: ``pending`` trees per spout task."""

    sink: str
    tasks: int
    batch_rows: int
    batches: int
    """Batches of one task in Spark or filling at once."""
    spout_tasks: int

    @property
    def pending(self) -> int:
        return math.ceil(self.batches * self.batch_rows * self.tasks / max(1, self.spout_tasks))


def sink_needs(topology: Topology) -> list[SinkNeed]:
    """One ``SinkNeed`` per ``DataFrameSink`` component of ``topology`` fed by a spout."""
    needs = []
    for spec in topology.bolts:
        if isinstance(spec.component, DataFrameSink):
            spouts = _upstream_spouts(topology, spec)
            if spouts:
                tasks = sum(topology.components[cid].parallelism for cid in spouts)
                sink = spec.component
                needs.append(SinkNeed(spec.id, spec.parallelism, sink.batch_rows, sink.max_inflight + 1, tasks))
    return needs


def with_sink_defaults(topology: Topology, conf: Config, given: Config) -> Config:
    """``conf`` with a pending budget its sinks can fill batches within, unless ``given`` (the
    config as the user passed it) sets one; then a warning names the sink it holds back."""
    needs = sink_needs(topology)
    if not needs:
        return conf
    need = max(needs, key=lambda n: n.pending)
    pending = conf.max_spout_pending
    if "max_spout_pending" in given.model_fields_set:
        if pending is not None and pending < need.pending:
            logger.warning(
                "max_spout_pending=%d holds DataFrameSink %r below full batches: its %d task(s) of batch_rows=%d "
                "fill %d batches each (%d in Spark, one filling) only with %d pending trees per spout task "
                "(%d spout task(s) feed it); with fewer, every Spark job writes fewer rows and the sink is "
                "slower. Leave max_spout_pending unset for that, or lower batch_rows",
                pending,
                need.sink,
                need.tasks,
                need.batch_rows,
                need.batches,
                need.batches - 1,
                need.pending,
                need.spout_tasks,
            )
        return conf
    if pending is None or pending >= need.pending:
        return conf
    return conf.merged({"max_spout_pending": need.pending})


def _upstream_spouts(topology: Topology, spec: ComponentSpec) -> set[str]:
    """The user spouts whose tuples (or their descendants) reach ``spec``; system components
    (the checkpoint spout, ``__`` ids) do not feed a sink rows."""
    seen: set[str] = set()
    spouts: set[str] = set()
    todo = [sub.component for sub in spec.inputs]
    while todo:
        cid = todo.pop()
        if cid in seen or cid.startswith("__") or cid not in topology.components:
            continue
        seen.add(cid)
        upstream = topology.components[cid]
        if upstream.is_spout:
            spouts.add(cid)
        else:
            todo.extend(sub.component for sub in upstream.inputs)
    return spouts
