"""``BasicBoltAdapter``: a ``BasicBolt`` seen as a ``Bolt``, as Storm's ``BasicBoltExecutor`` does.

The bolt executor runs a ``BasicBolt``'s ``execute`` inline in its batch loop
(``BoltExecutor._run_basic``: every emit anchored to the input, the input acked when ``execute``
returns, failed when it raises), because a call per tuple through an adapter would cost more
than the bookkeeping. This adapter is what the rest of the executor, and whoever drives it, sees
as the task's bolt: it prepares and cleans up the ``BasicBolt`` and holds its collector. It has
no ``execute`` of its own: there is one way a ``BasicBolt`` runs, and it is the executor's."""

from __future__ import annotations

from typing import Any

from .._collectors import BasicOutputCollector, BoltTask, OutputCollector
from .._components import BasicBolt, Bolt, OutputFieldsDeclarer
from .._context import TopologyContext

__all__ = ["BasicBoltAdapter"]


class BasicBoltAdapter(Bolt):
    def __init__(self, user_component: BasicBolt, task: BoltTask) -> None:
        self.user_component = user_component
        self.basic_collector = BasicOutputCollector(task)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.user_component.declare_output_fields(declarer)

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.user_component.prepare(conf, context)

    def cleanup(self) -> None:
        self.user_component.cleanup()
