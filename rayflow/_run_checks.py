"""What every runner does with a topology's config before it starts a task: the pending budget
the topology runs with (decided in ``_pending.py``, from what its components need), then the
checks that need both (the state settings, each window against the message timeout and the
pending budget). Ray's ``submit_topology`` and the in-process runner both start here, so they
refuse the same things, and warn of the same: a broker spout in a topology without ackers.

Components take part through hooks, not by name: a component that needs a larger budget says so
with ``pending_need()`` (``_pending.HasPendingNeed``), a spout that settles its messages with a
broker says so with ``acks_to_broker = True``, so this module imports no component kind -- and
no optional extra such as Spark's or a broker's client."""

from __future__ import annotations

import warnings

from ._config import Config
from ._pending import FedComponent, HasPendingNeed, spout_budget
from ._state.validation import check_state_settings
from ._topology import ComponentSpec, Topology
from ._windows.validation import check_window_settings

__all__ = ["config_to_run"]


def config_to_run(topology: Topology, conf: Config, *, reach: bool) -> Config:
    """``conf`` completed for ``topology``; raises ``ConfigError``, ``StateError`` or
    ``TopologyError`` naming what cannot run. ``reach``: also reach the state store."""
    conf = _with_pending_budget(topology, conf)
    check_state_settings(topology, conf, reach=reach)
    check_window_settings(topology, conf)
    if conf.ackers == 0:
        _warn_at_most_once(topology)
    return conf


def _warn_at_most_once(topology: Topology) -> None:
    """With ``ackers=0`` a tracked emit is acked as soon as it is made, and a broker spout acks
    the message to its broker then: a message lost downstream is gone for good. That may be
    what the user wants, but it is silent otherwise, so each such spout is named (a
    ``UserWarning`` per spout; ``warnings.filterwarnings`` on its text silences it)."""
    for spec in topology.spouts:
        if getattr(spec.component, "acks_to_broker", False):
            warnings.warn(
                f"spout {spec.id!r} ({type(spec.component).__name__}) acks each message to its broker as soon as "
                "it is emitted, because the topology has ackers=0: at-most-once, a message lost downstream (a task "
                "that dies, a tuple failed or timed out) is not delivered again. Set ackers to 1 or more (Config, "
                "or topology.acker.executors) for at-least-once",
                stacklevel=4,
            )


def _with_pending_budget(topology: Topology, conf: Config) -> Config:
    fed = []
    for spec in topology.bolts:
        if isinstance(spec.component, HasPendingNeed):
            spouts = _upstream_spouts(topology, spec)
            if spouts:
                spout_tasks = sum(topology.components[cid].parallelism for cid in spouts)
                kind = type(spec.component).__name__
                fed.append(FedComponent(spec.id, kind, spec.parallelism, spout_tasks, spec.component.pending_need()))
    given = "max_spout_pending" in conf.model_fields_set
    budget = spout_budget(conf.max_spout_pending, given=given, stateful=topology.stateful, fed=fed)
    return conf if budget == conf.max_spout_pending else conf.merged({"max_spout_pending": budget})


def _upstream_spouts(topology: Topology, spec: ComponentSpec) -> set[str]:
    """The user spouts whose tuples (or their descendants) reach ``spec``; system components
    (the checkpoint spout, ``__`` ids) feed it no data."""
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
