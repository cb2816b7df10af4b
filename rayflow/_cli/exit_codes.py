"""``rayflow run``'s exit codes: what each means, and which one a run's last metrics earn."""

from __future__ import annotations

from enum import IntEnum
from typing import Any

__all__ = ["MEANING", "Metrics", "ExitCode", "exit_code_of"]

Metrics = dict[str, dict[str, Any]]
"""``TopologyHandle.metrics()``: per component id, its counters."""


class ExitCode(IntEnum):
    """``rayflow run``'s exit codes; ``MEANING`` words them for its help and its last line."""

    ACKED = 0
    NOT_STARTED = 1
    TREES_FAILED = 2
    COMPONENTS_RAISED = 3


MEANING = {
    ExitCode.ACKED: "every tuple tree was acked and no component raised",
    ExitCode.NOT_STARTED: "the file is invalid, or Ray or the topology could not start",
    ExitCode.TREES_FAILED: "some tuple trees failed, or were still pending at the end",
    ExitCode.COMPONENTS_RAISED: "a component raised an exception (this wins over 2)",
}


def exit_code_of(metrics: Metrics, spouts: list[str], components: list[str]) -> ExitCode:
    """The verdict on a run from its last metrics: a component that raised wins over failed or
    pending trees."""
    if any(metrics[cid].get("errors") for cid in components):
        return ExitCode.COMPONENTS_RAISED
    if any(metrics[s]["failed"] or metrics[s].get("pending") for s in spouts):
        return ExitCode.TREES_FAILED
    return ExitCode.ACKED
