"""The defaults work together: a topology with a ``DataFrameSink`` gets a pending budget in which
its batches can fill (Storm's ``max_spout_pending`` below one batch kept every Spark job small),
shared out over the spout tasks feeding each sink; a budget the user set is respected, with a
warning when it holds a sink back. Config only: no Spark, no Ray."""

from __future__ import annotations

import logging
from typing import Any

import pytest

pytest.importorskip("pyarrow")

from rayflow import BasicBolt, Config, Spout, TopologyBuilder  # noqa: E402
from rayflow._pending import DEFAULT_MAX_SPOUT_PENDING, STATEFUL_MAX_SPOUT_PENDING  # noqa: E402
from rayflow._run_checks import config_to_run  # noqa: E402
from rayflow._topology import Topology  # noqa: E402
from rayflow.spark import DataFrameSink, write_parquet  # noqa: E402
from rayflow.spark._sink import MAX_INFLIGHT, MAX_INFLIGHT_TOGETHER  # noqa: E402
from rayflow.testing import InProcessTopology  # noqa: E402


class Rows(Spout):
    outputs = ["word", "n"]

    def next_tuple(self) -> None:
        pass


class Parse(BasicBolt):
    outputs = ["word", "n"]

    def execute(self, tup: Any, collector: Any) -> None:
        collector.emit(tup.values)


def rows_to_sink(sink: DataFrameSink, *, spouts: int = 1, sinks: int = 1, parse: bool = False) -> Topology:
    builder = TopologyBuilder()
    builder.set_spout("rows", Rows(), parallelism=spouts)
    if parse:
        builder.set_bolt("parse", Parse(), parallelism=3).shuffle_grouping("rows")
    builder.set_bolt("sink", sink, parallelism=sinks).shuffle_grouping("parse" if parse else "rows")
    return builder.create_topology()


def sink(batch_rows: int = 10_000) -> DataFrameSink:
    return DataFrameSink(write_parquet("/nonexistent/rayflow-test"), batch_rows=batch_rows)


def write(df: Any, batch_id: int) -> None:
    """A foreach_batch of the user's: a Spark job of each batch."""


BATCHES = MAX_INFLIGHT_TOGETHER + 1
"""A write_parquet sink task's batches in Spark or filling at once."""

WRITER = write_parquet("/nonexistent/rayflow-test")
"""A write_parquet named by its dotted path, as a topology file names it."""


class TestDefaultBudget:
    def test_all_defaults_let_the_sink_fill_its_batches(self) -> None:
        """Config() and DataFrameSink(write_parquet(path)): the 5,000 trees a spout task had
        in flight were half of one 10,000-row batch; now four batches can be in Spark (three
        written together behind the first) and a fifth fill."""
        conf = config_to_run(rows_to_sink(sink()), Config(), reach=False)
        assert conf.max_spout_pending == BATCHES * 10_000 == 50_000

    def test_a_write_parquet_named_by_its_dotted_path_counts_as_one(self) -> None:
        conf = config_to_run(rows_to_sink(DataFrameSink(f"{__name__}.WRITER")), Config(), reach=False)
        assert conf.max_spout_pending == BATCHES * 10_000

    def test_a_foreach_batch_of_the_users_has_two_batches_in_spark_and_one_filling(self) -> None:
        conf = config_to_run(rows_to_sink(DataFrameSink(write)), Config(), reach=False)
        assert conf.max_spout_pending == (MAX_INFLIGHT + 1) * 10_000 == 30_000

    def test_the_budget_is_shared_out_over_the_spout_tasks_feeding_the_sink(self) -> None:
        """Through a parsing bolt: two spout tasks share what two sink tasks need; one spout task
        feeding two sink tasks needs it all."""
        two_by_two = config_to_run(rows_to_sink(sink(), spouts=2, sinks=2, parse=True), Config(), reach=False)
        assert two_by_two.max_spout_pending == BATCHES * 10_000 * 2 // 2
        one_by_two = config_to_run(rows_to_sink(sink(), spouts=1, sinks=2), Config(), reach=False)
        assert one_by_two.max_spout_pending == BATCHES * 10_000 * 2

    def test_the_default_is_never_lowered(self) -> None:
        """Small batches need less than the plain default: the default stays."""
        conf = config_to_run(rows_to_sink(sink(batch_rows=100)), Config(), reach=False)
        assert conf.max_spout_pending == DEFAULT_MAX_SPOUT_PENDING

    def test_a_topology_without_a_sink_keeps_the_plain_default(self) -> None:
        builder = TopologyBuilder()
        builder.set_spout("rows", Rows())
        builder.set_bolt("parse", Parse()).shuffle_grouping("rows")
        conf = config_to_run(builder.create_topology(), Config(), reach=False)
        assert conf.max_spout_pending == DEFAULT_MAX_SPOUT_PENDING

    def test_the_in_process_runner_applies_it_too(self) -> None:
        run = InProcessTopology(rows_to_sink(sink()), active=False)
        try:
            assert run.conf.max_spout_pending == BATCHES * 10_000
        finally:
            run.close()

    def test_a_stateful_topology_with_a_sink_gets_the_larger_of_both(self) -> None:
        from tests.state_components import StatefulCount  # a StatefulBolt feeding the sink

        builder = TopologyBuilder()
        builder.set_spout("rows", Rows())
        builder.set_bolt("count", StatefulCount()).fields_grouping("rows", ["word"])
        builder.set_bolt("sink", sink(batch_rows=1_000)).shuffle_grouping("count")
        conf = config_to_run(builder.create_topology(), Config(state_provider="memory"), reach=False)
        assert conf.max_spout_pending == max(STATEFUL_MAX_SPOUT_PENDING, BATCHES * 1_000)


class TestUserBudget:
    def test_a_budget_the_user_set_is_kept_and_the_sink_it_holds_back_named(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.WARNING, logger="rayflow"):
            conf = config_to_run(rows_to_sink(sink()), Config(max_spout_pending=5_000), reach=False)
        assert conf.max_spout_pending == 5_000
        (record,) = [r for r in caplog.records if "DataFrameSink" in r.getMessage()]
        assert "max_spout_pending=5000" in record.getMessage() and "'sink'" in record.getMessage()
        assert "50000 pending trees per spout task" in record.getMessage()

    @pytest.mark.parametrize("pending", [50_000, 100_000, None])
    def test_a_budget_that_fits_the_sink_is_kept_without_a_word(
        self, pending: int | None, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.WARNING, logger="rayflow"):
            conf = config_to_run(rows_to_sink(sink()), Config(max_spout_pending=pending), reach=False)
        assert conf.max_spout_pending == pending
        assert not [r for r in caplog.records if "DataFrameSink" in r.getMessage()]
