"""``BasicBoltAdapter``: runs a ``BasicBolt`` as a ``Bolt``, as Storm's ``BasicBoltExecutor`` does,
so the bolt executor has one path for both."""

from __future__ import annotations

from typing import Any

from ..collectors import BasicOutputCollector, OutputCollector
from ..components import BasicBolt, Bolt, OutputFieldsDeclarer
from ..context import TopologyContext
from ..errors import FailedException
from ..tuple import Tuple

__all__ = ["BasicBoltAdapter"]


class BasicBoltAdapter(Bolt):
    """Every emit is anchored to the input; the input is acked when ``execute`` returns and
    failed when it raises ``FailedException``. Any other exception propagates to the executor,
    which reports it and fails the input, as for every bolt."""

    def __init__(self, basic: BasicBolt) -> None:
        self.basic = basic

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.basic.declare_output_fields(declarer)

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self._collector = collector
        self._basic_collector = BasicOutputCollector(collector)
        self.basic.prepare(conf, context)

    def execute(self, tup: Tuple) -> None:
        basic_collector = self._basic_collector
        basic_collector.input = tup
        try:
            self.basic.execute(tup, basic_collector)
        except FailedException:
            self._collector.fail(tup)
            return
        self._collector.ack(tup)

    def cleanup(self) -> None:
        self.basic.cleanup()
