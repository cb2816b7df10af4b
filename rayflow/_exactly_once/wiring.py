"""A topology in its exactly-once form, made at submit (the guarantee is a ``Config`` setting,
so ``create_topology`` cannot know it).

Every spout declares the checkpoint stream and every bolt reads it from each component it reads
-- spouts included, not the checkpoint spout (``__init__.py``: the steps run through the spouts)
-- and the checkpoint spout is there whether or not a bolt is stateful, since a sink commits with
the checkpoints too. What cannot be exactly-once is refused here, naming it."""

from __future__ import annotations

import dataclasses

from .._components import OutputFieldsDeclarer
from .._config import Config
from .._errors import TopologyError
from .._groupings import AllGrouping
from .._state.checkpoint import CHECKPOINT_COMPONENT, CHECKPOINT_STREAM, CheckpointSpout
from .._topology import ComponentSpec, Subscription, Topology

__all__ = ["exactly_once", "with_guarantee"]


def exactly_once(conf: Config) -> bool:
    return conf.processing_guarantee == "exactly_once"


def with_guarantee(topology: Topology, conf: Config) -> Topology:
    """``topology`` as it runs under ``conf``'s processing guarantee (unchanged for
    at-least-once); raises ``TopologyError`` listing what cannot run exactly-once."""
    if not exactly_once(conf):
        return topology
    problems = _problems(topology, conf)
    if problems:
        raise TopologyError(problems)
    specs = {cid: dataclasses.replace(spec) for cid, spec in topology.components.items()}
    declarer = OutputFieldsDeclarer()
    CheckpointSpout().declare_output_fields(declarer)
    stream = declarer.streams[CHECKPOINT_STREAM]
    if CHECKPOINT_COMPONENT not in specs:
        specs[CHECKPOINT_COMPONENT] = ComponentSpec(
            CHECKPOINT_COMPONENT, CheckpointSpout(), 1, {}, [], dict(declarer.streams)
        )
    for cid, spec in specs.items():
        if cid == CHECKPOINT_COMPONENT:
            continue
        spec.streams = {**spec.streams, CHECKPOINT_STREAM: stream}
        if spec.is_spout:
            continue
        data = [sub for sub in spec.inputs if sub.stream != CHECKPOINT_STREAM]
        sources = list(dict.fromkeys(sub.component for sub in data))
        spec.inputs = data + [Subscription(s, CHECKPOINT_STREAM, AllGrouping()) for s in sources]
    return Topology(specs)


def _problems(topology: Topology, conf: Config) -> list[str]:
    problems = []
    if conf.ackers < 1:
        problems.append(
            "processing_guarantee 'exactly_once' needs an acker (ackers >= 1): a failed tuple is "
            "how a rollback starts; got ackers=0"
        )
    for spec in topology.spouts:
        if spec.id == CHECKPOINT_COMPONENT:
            continue
        missing = [m for m in ("position", "seek") if not callable(getattr(spec.component, m, None))]
        if missing:
            problems.append(
                f"spout {spec.id!r} ({type(spec.component).__name__}) cannot run exactly-once: it has no "
                f"{' and no '.join(missing)}(); a spout must say where it stands (position) and go back there "
                "(seek) for a rollback to replay exactly what the last checkpoint did not cover"
            )
    return problems
