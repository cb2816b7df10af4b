"""What every executor has: its place in the topology, an outbox, metrics and error reporting."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..config import Config
from ..context import TopologyContext
from ..metrics import TaskMetrics
from ..outbox import Outbox
from ..topology import ACKER_COMPONENT, Topology

__all__ = ["Executor"]

logger = logging.getLogger("rayflow")

SendData = Callable[[int, tuple[int, list[Any]]], None]
SendControl = Callable[[int, tuple[str, Any]], None]


class Executor:
    kind = ""

    def __init__(
        self,
        topology: Topology,
        conf: Config,
        context: TopologyContext,
        send_data: SendData,
        send_control: SendControl,
    ) -> None:
        self.topology = topology
        self.context = context
        self.task_id = context.this_task_id
        self.component_id = context.this_component_id
        spec = topology.components.get(self.component_id)
        self.conf = conf.merged(spec.config if spec else None)
        self.outbox = Outbox(self.task_id, self.conf.batch_size, send_data, send_control)
        self.metrics = TaskMetrics(self.component_id, self.kind)
        self.acker_tasks = context.get_component_tasks(ACKER_COMPONENT)
        self.debug = self.conf.debug

    def acker_for(self, root: int) -> int:
        """Trees are sharded over the ackers by root id."""
        ackers = self.acker_tasks
        return ackers[root % len(ackers)]

    def report_error(self, exc: BaseException, where: str) -> None:
        """Count and log a user error; the task carries on."""
        self.metrics.errors += 1
        self.metrics.last_error = f"{where}: {type(exc).__name__}: {exc}"
        logger.error(
            "component %r task %d: %s: %s: %s",
            self.component_id,
            self.task_id,
            where,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )

    def snapshot(self) -> dict[str, Any]:
        return self.metrics.snapshot()
