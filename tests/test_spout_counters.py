"""A spout's own counters (``SpoutOutputCollector.count``): they show, summed over the
component's tasks, in ``metrics()``, beside the built-in ones (the broker spouts' ``dead_lettered``
is one). In-process, with ``complete_topology``."""

from __future__ import annotations

from typing import Any

import pytest

from rayflow import OutputFieldsDeclarer, Spout, SpoutOutputCollector, TopologyBuilder, TopologyContext
from rayflow._errors import ConfigError
from rayflow._metrics import TaskMetrics, merge
from rayflow.testing import complete_topology
from tests.topology_helpers import Sink


class CountingSpout(Spout):
    """Emits three numbers, counting the odd ones as ``odd`` and declaring ``skipped`` at 0."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["n"])

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector = collector
        self.left = [1, 2, 3]
        collector.count("skipped", 0)

    def next_tuple(self) -> None:
        if not self.left:
            self.collector.exhausted()
            return
        n = self.left.pop(0)
        if n % 2:
            self.collector.count("odd")
        self.collector.emit([n], msg_id=n)


def test_a_spouts_own_counters_are_summed_over_its_tasks_in_metrics() -> None:
    builder = TopologyBuilder()
    builder.set_spout("numbers", CountingSpout(), parallelism=2)
    builder.set_bolt("sink", Sink()).shuffle_grouping("numbers")
    numbers = complete_topology(builder.create_topology()).metrics()["numbers"]
    assert (numbers["odd"], numbers["skipped"], numbers["acked"]) == (4, 0, 6)


def test_a_counter_may_not_take_a_built_in_metrics_name() -> None:
    metrics = TaskMetrics("numbers", "spout")
    with pytest.raises(ConfigError, match="a counter name must be an identifier other than .*got 'acked'"):
        metrics.count("acked")
    with pytest.raises(ConfigError, match="got 'dead lettered'"):
        metrics.count("dead lettered")


def test_tasks_that_never_counted_add_nothing() -> None:
    counted, silent = TaskMetrics("s", "spout"), TaskMetrics("s", "spout")
    counted.count("dead_lettered", 2)
    extra = {"pending": 0, "exhausted": False}
    summary = merge([counted.snapshot(**extra), silent.snapshot(**extra)])
    assert summary["dead_lettered"] == 2
    assert "custom_counters" not in summary
