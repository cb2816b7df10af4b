"""``BasicBoltAdapter``: a ``BasicBolt`` seen as a ``Bolt``, as Storm's ``BasicBoltExecutor`` does.

The bolt executor runs a ``BasicBolt``'s ``execute`` inline in its batch loop (every emit
anchored to the input, the input acked when ``execute`` returns, failed when it raises); this
adapter is what the rest of the executor, and whoever drives it, sees as the task's bolt: it
prepares and cleans up the ``BasicBolt`` and holds its collector."""

from __future__ import annotations

from typing import Any

from .._collectors import BasicOutputCollector, BoltTask, OutputCollector
from .._components import BasicBolt, Bolt, OutputFieldsDeclarer
from .._context import TopologyContext
from .._errors import FailedException
from .._tuple import Tuple

__all__ = ["BasicBoltAdapter"]


class BasicBoltAdapter(Bolt):
    def __init__(self, basic: BasicBolt, task: BoltTask) -> None:
        self.basic = basic
        self.basic_collector = BasicOutputCollector(task)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.basic.declare_output_fields(declarer)

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self._collector = collector
        self.basic.prepare(conf, context)

    def execute(self, tup: Tuple) -> None:
        """One input, as the executor's loop runs it (for a caller that holds only a ``Bolt``)."""
        self.basic_collector.input = tup
        try:
            self.basic.execute(tup, self.basic_collector)
        except FailedException:
            self._collector.fail(tup)
            return
        finally:
            self.basic_collector.input = None
        self._collector.ack(tup)

    def cleanup(self) -> None:
        self.basic.cleanup()
