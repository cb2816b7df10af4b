"""Helpers for testing topologies.

``complete_topology`` runs a topology to completion in this process, without Ray, on a
simulated clock (Storm's ``Testing.completeTopology``); ``InProcessTopology`` is the runner
under it, for tests that drive a topology step by step. ``FeederSpout`` is fed from a test
while the topology runs on Ray (it needs a running Ray; it is imported on first use).
"""

from typing import TYPE_CHECKING, Any

from ._completion import CompletedTopology, MockedSpout, complete_topology
from ._in_process import InProcessTopology

if TYPE_CHECKING:
    from ._feeder import FeederSpout


def __getattr__(name: str) -> Any:
    if name == "FeederSpout":
        from ._feeder import FeederSpout

        return FeederSpout
    raise AttributeError(f"module 'rayflow.testing' has no attribute {name!r}")


__all__ = ["CompletedTopology", "FeederSpout", "InProcessTopology", "MockedSpout", "complete_topology"]
