"""The spouts' pending budget (``rayflow/_pending.py``): the defaults work together, and a
component that needs more trees in flight says so through ``pending_need()``, which the runner
shares out over the spout tasks feeding it. No Spark: the sink's own case is
``tests/spark/test_sink_pending.py``."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from rayflow import BasicBolt, Config, Spout, TopologyBuilder
from rayflow._pending import DEFAULT_MAX_SPOUT_PENDING, STATEFUL_MAX_SPOUT_PENDING, PendingNeed
from rayflow._run_checks import config_to_run
from rayflow._topology import Topology


class Rows(Spout):
    outputs = ["row"]

    def next_tuple(self) -> None:
        pass


class Pass(BasicBolt):
    outputs = ["row"]

    def execute(self, tup: Any, collector: Any) -> None:
        collector.emit(tup.values)


class Hungry(BasicBolt):
    """A bolt whose every task needs ``trees`` in flight towards it."""

    outputs = ["row"]

    def __init__(self, trees: int) -> None:
        self.trees = trees

    def execute(self, tup: Any, collector: Any) -> None:
        pass

    def pending_need(self) -> PendingNeed:
        return PendingNeed(self.trees, reason="keep busy", shortfall="it idles", remedy="be less hungry")


def feeding(bolt: BasicBolt, *, spouts: int = 1, tasks: int = 1, through: bool = False) -> Topology:
    builder = TopologyBuilder()
    builder.set_spout("rows", Rows(), parallelism=spouts)
    if through:
        builder.set_bolt("pass", Pass(), parallelism=3).shuffle_grouping("rows")
    builder.set_bolt("hungry", bolt, parallelism=tasks).shuffle_grouping("pass" if through else "rows")
    return builder.create_topology()


class TestDefaults:
    def test_the_default_budget_holds_more_than_a_batch(self) -> None:
        """A budget below ``batch_size`` would leave every frame half empty."""
        defaults = Config()
        assert defaults.max_spout_pending == DEFAULT_MAX_SPOUT_PENDING
        assert DEFAULT_MAX_SPOUT_PENDING > defaults.batch_size

    def test_a_stateful_topology_has_the_larger_default(self) -> None:
        assert STATEFUL_MAX_SPOUT_PENDING > DEFAULT_MAX_SPOUT_PENDING


class TestComponentNeeds:
    def test_a_need_above_the_default_raises_the_budget(self) -> None:
        conf = config_to_run(feeding(Hungry(20_000)), Config(), reach=False)
        assert conf.max_spout_pending == 20_000

    def test_a_need_below_the_default_leaves_it(self) -> None:
        conf = config_to_run(feeding(Hungry(10)), Config(), reach=False)
        assert conf.max_spout_pending == DEFAULT_MAX_SPOUT_PENDING

    def test_the_need_is_shared_out_over_the_spout_tasks_that_feed_it(self) -> None:
        """Through a bolt in between: four spout tasks share what two hungry tasks need."""
        conf = config_to_run(feeding(Hungry(20_000), spouts=4, tasks=2, through=True), Config(), reach=False)
        assert conf.max_spout_pending == 20_000 * 2 // 4

    def test_a_budget_the_user_set_is_kept_and_the_component_it_holds_back_named(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.WARNING, logger="rayflow"):
            conf = config_to_run(feeding(Hungry(20_000)), Config(max_spout_pending=100), reach=False)
        assert conf.max_spout_pending == 100
        (record,) = caplog.records
        assert record.getMessage().startswith("max_spout_pending=100 holds Hungry 'hungry' back: its 1 task(s)")
        assert "20000 pending trees per spout task" in record.getMessage()
