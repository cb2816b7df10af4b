"""What every runner does with a topology's config before it starts a task: the defaults that
depend on the topology (a stateful topology's pending budget), then the checks that need both
(the state settings, each window against the message timeout and the pending budget). Ray's
``submit_topology`` and the in-process runner both start here, so they refuse the same things."""

from __future__ import annotations

from ._config import Config
from ._state.validation import check_state_settings, with_state_defaults
from ._topology import Topology
from ._windows.validation import check_window_settings

__all__ = ["config_to_run"]


def config_to_run(topology: Topology, conf: Config, *, reach: bool) -> Config:
    """``conf`` completed for ``topology``; raises ``ConfigError``, ``StateError`` or
    ``TopologyError`` naming what cannot run. ``reach``: also reach the state store."""
    conf = with_state_defaults(topology, conf)
    check_state_settings(topology, conf, reach=reach)
    check_window_settings(topology, conf)
    return conf
