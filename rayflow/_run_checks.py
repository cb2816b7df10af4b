"""What every runner does with a topology's config before it starts a task: the defaults that
depend on the topology (the pending budget of a stateful topology, and of one with a Spark sink:
``spark/_pending.py``), then the checks that need both (the state settings, each window against
the message timeout and the pending budget). Ray's ``submit_topology`` and the in-process
runner both start here, so they refuse the same things."""

from __future__ import annotations

import sys

from ._config import Config
from ._state.validation import check_state_settings, with_state_defaults
from ._topology import Topology
from ._windows.validation import check_window_settings

__all__ = ["config_to_run"]


def config_to_run(topology: Topology, conf: Config, *, reach: bool) -> Config:
    """``conf`` completed for ``topology``; raises ``ConfigError``, ``StateError`` or
    ``TopologyError`` naming what cannot run. ``reach``: also reach the state store."""
    given = conf
    conf = with_state_defaults(topology, conf)
    if "rayflow.spark._sink" in sys.modules:  # else no DataFrameSink exists, and Spark's extra may be missing
        from .spark._pending import with_sink_defaults

        conf = with_sink_defaults(topology, conf, given)
    check_state_settings(topology, conf, reach=reach)
    check_window_settings(topology, conf)
    return conf
