"""The spouts' pending budget, ``max_spout_pending``: the one place that decides it.

The budget is how many tuple trees one spout task may have in flight (emitted, not yet acked or
failed); at the budget the spout stops emitting until a tree completes. ``Config`` takes its
default from here, and ``config_to_run`` (``_run_checks.py``) asks ``spout_budget`` for the
budget a topology runs with. The defaults, and why each is what it is:

- ``DEFAULT_MAX_SPOUT_PENDING``, any topology: finite, so that a bolt that never acks cannot
  grow the spout's and the acker's memory without bound (a pending tree costs them well under a
  kilobyte); and more than one full batch towards a task (``Config.batch_size``), so that a
  spout's tuples can fill a batch and the next one meanwhile instead of every frame leaving
  half empty on its linger. A budget below a batch would cap every frame: the defaults are
  pinned together by ``tests/test_pending.py``.
- ``STATEFUL_MAX_SPOUT_PENDING``, a topology with a stateful bolt: its trees stay pending until
  the commit after them, two to three times as long, so the spouts need that many times the
  trees in flight to keep the same pace (Little's law).
- A component's own need (``PendingNeed``, from its ``pending_need()``): what one of its tasks
  must have in flight towards it to keep pace -- a ``DataFrameSink`` task, its batches in Spark
  and one filling, since a Spark job costs about as much for a few rows as for a full batch.
  It is shared out over the spout tasks that feed the component (``FedComponent``).

A topology whose config leaves ``max_spout_pending`` unset gets the largest of these: the
budget is only ever raised. One the user set is kept as it is (``None`` lifts the cap), with a
warning when it holds a component below its need. Only how many trees may be in flight changes:
when each is acked, and how often it may be replayed, does not.

Plain Python below ``Config``: it knows no topology. Components contribute their need through
``HasPendingNeed``, so the runner's checks know no component kind (no Spark) by name.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "DEFAULT_MAX_SPOUT_PENDING",
    "STATEFUL_MAX_SPOUT_PENDING",
    "FedComponent",
    "HasPendingNeed",
    "PendingNeed",
    "spout_budget",
]

logger = logging.getLogger("rayflow")

DEFAULT_MAX_SPOUT_PENDING = 5000
"""Trees in flight per spout task of a topology that needs no more (see the module docstring)."""

STATEFUL_MAX_SPOUT_PENDING = 3 * DEFAULT_MAX_SPOUT_PENDING
"""The same for a topology with a stateful bolt: its trees wait for the next checkpoint to come
down the same queues and for the commit behind it (``benchmarks/stateful_wordcount.py``)."""


@dataclass(frozen=True)
class PendingNeed:
    """What one task of a component needs in flight towards it to keep pace: ``trees``; the
    other fields word the warning given when a budget set by hand is smaller."""

    trees: int
    reason: str
    """What the trees are for, after "its N task(s)": ``of batch_rows=10000 fill 3 batches ...``."""
    shortfall: str
    """What a smaller budget costs, after "with fewer,"."""
    remedy: str
    """What else to change, after "Leave max_spout_pending unset for that, or"."""


@runtime_checkable
class HasPendingNeed(Protocol):
    """A component that needs more trees in flight towards it than the default budget may give."""

    def pending_need(self) -> PendingNeed: ...


@dataclass(frozen=True)
class FedComponent:
    """A component with a ``PendingNeed`` in a topology: ``tasks`` of it, fed (through any
    bolts) by ``spout_tasks`` spout tasks."""

    id: str
    kind: str
    """Its class name, for the warning."""
    tasks: int
    spout_tasks: int
    need: PendingNeed

    @property
    def per_spout_task(self) -> int:
        """Its tasks' need shared out over the spout tasks feeding them, rounded up."""
        return math.ceil(self.need.trees * self.tasks / max(1, self.spout_tasks))


def spout_budget(configured: int | None, *, given: bool, stateful: bool, fed: Sequence[FedComponent]) -> int | None:
    """The pending budget per spout task a topology runs with.

    ``configured`` is ``max_spout_pending`` as the config has it, and ``given`` whether the user
    set it: then it is returned as it is, with a warning naming the component that needs the
    most if it holds that one below its need. Otherwise: the largest default that applies."""
    if given:
        if fed and configured is not None:
            most = max(fed, key=lambda f: f.per_spout_task)
            if configured < most.per_spout_task:
                logger.warning(
                    "max_spout_pending=%d holds %s %r back: its %d task(s) %s only with %d pending trees per "
                    "spout task (%d spout task(s) feed it); with fewer, %s. Leave max_spout_pending unset for "
                    "that, or %s",
                    configured,
                    most.kind,
                    most.id,
                    most.tasks,
                    most.need.reason,
                    most.per_spout_task,
                    most.spout_tasks,
                    most.need.shortfall,
                    most.need.remedy,
                )
        return configured
    base = STATEFUL_MAX_SPOUT_PENDING if stateful else DEFAULT_MAX_SPOUT_PENDING
    return max([base, *(f.per_spout_task for f in fed)])
