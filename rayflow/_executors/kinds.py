"""Which kind of bolt runs each component: the one table ``make_executor`` reads.

The first row whose component class matches wins, so a more specific class comes first (a
windowed bolt is checked before anything it might also be). A component that matches no row is
a plain ``Bolt`` and runs as it is.

A kind lives with its concept where it has one (the stateful kind in ``_state/``) and builds on
``bolt_kind.py``, so it imports this package first: ``make_executor`` imports this table when it
builds a task, not at the top of the package, or importing such a kind first would come back to
it half-made."""

from __future__ import annotations

from typing import Any

from .._components import BasicBolt, BatchBolt, StatefulBolt
from .._sinks import TwoPhaseCommitSink
from .._state.bolt_kind import StatefulBoltAdapter
from .._windows.bolt import WindowedBolt
from .basic_bolt import BasicBoltAdapter
from .batch_bolt import BatchBoltAdapter
from .bolt_kind import KindFactory
from .two_phase_commit import TwoPhaseCommitAdapter
from .windowed_bolt import WindowedBoltAdapter

__all__ = ["BOLT_KINDS", "KindFactory", "bolt_kind"]

BOLT_KINDS: tuple[tuple[type[Any], KindFactory], ...] = (
    (WindowedBolt, WindowedBoltAdapter),
    (StatefulBolt, StatefulBoltAdapter),
    (TwoPhaseCommitSink, TwoPhaseCommitAdapter),
    (BasicBolt, BasicBoltAdapter),
    (BatchBolt, BatchBoltAdapter),
)


def bolt_kind(component: Any) -> KindFactory | None:
    """How ``component`` is wrapped for its executor (``None``: a plain bolt, run as it is)."""
    for cls, factory in BOLT_KINDS:
        if isinstance(component, cls):
            return factory
    return None
