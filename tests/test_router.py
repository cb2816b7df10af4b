"""Routing: which tasks a tuple goes to, and shuffle's preference for the tasks that keep up.

Run in process on a ``Wire`` (``tests/executor_components.py``).
"""

from __future__ import annotations

from typing import Any

from rayflow._context import TopologyContext
from rayflow._router import Router
from rayflow._topology import TopologyBuilder

from .executor_components import (
    Hold,
    Sentences,
    Split,
    streams_topology,
)


class TestRouter:
    def test_fans_out_to_every_subscriber(self):
        """One emit goes to one task of each shuffle subscriber and every task of an all subscriber."""
        builder = TopologyBuilder()
        builder.set_spout("sentences", Sentences())
        builder.set_bolt("split", Split(), parallelism=2).shuffle_grouping("sentences")
        builder.set_bolt("audit", Hold(), parallelism=3).all_grouping("sentences")
        topology = builder.create_topology()
        layout = topology.task_layout(ackers=1)
        router = Router(topology, TopologyContext(4, layout, topology.stream_fields()))
        targets = router.targets("default", ["a b"])
        assert sorted(t for t in targets if t in (1, 2, 3)) == [1, 2, 3]  # audit: tasks 1-3
        assert len([t for t in targets if t in (5, 6)]) == 1  # split: tasks 5-6
        assert len(targets) == 4

    def test_stream_without_subscribers(self):
        """A declared stream nobody reads routes to no task."""
        topology = streams_topology()
        router = Router(topology, TopologyContext(4, topology.task_layout(1), topology.stream_fields()))
        assert router.targets("audit", ["w"]) == []


class TestLoadAwareShuffle:
    def grouping(self) -> Any:
        from rayflow._groupings import ShuffleGrouping, StreamId

        layout = {1: "s", 2: "b", 3: "b", 4: "b"}
        grouping = ShuffleGrouping()
        grouping.prepare(TopologyContext(1, layout, {"s": {"default": ("x",)}}), StreamId("s", "default"), [2, 3, 4])
        return grouping

    def test_even_backlogs_keep_round_robin(self):
        """With equal backlogs every target gets one tuple per round."""
        grouping = self.grouping()
        grouping.update_load(lambda task: 5)
        picks = [grouping.choose_tasks(1, ["x"])[0] for _ in range(30)]
        assert sorted(picks.count(t) for t in (2, 3, 4)) == [10, 10, 10]

    def test_backlogged_target_gets_fewer_tuples(self):
        """A target far behind the others gets a small share, but still some."""
        grouping = self.grouping()
        grouping.update_load(lambda task: 1000 if task == 3 else 0)
        picks = [grouping.choose_tasks(1, ["x"])[0] for _ in range(170)]
        assert 0 < picks.count(3) <= 10 and picks.count(2) == picks.count(4)

    def test_runs_send_every_tuple_to_one_target_until_the_next_run(self):
        """In runs each target in turn takes every tuple; stopped, one turn per tuple again."""
        grouping = self.grouping()
        grouping.next_run()
        first = {grouping.choose_tasks(1, ["x"])[0] for _ in range(5)}
        grouping.next_run()
        second = {grouping.choose_tasks(1, ["x"])[0] for _ in range(5)}
        assert len(first) == len(second) == 1 and first != second
        grouping.stop_runs()
        assert len({grouping.choose_tasks(1, ["x"])[0] for _ in range(3)}) == 3


class TestFixedRoutes:
    """A stream whose every grouping answers the same for every tuple is routed without asking."""

    def router(self, split: int, audit: int) -> Router:
        builder = TopologyBuilder()
        builder.set_spout("sentences", Sentences())
        builder.set_bolt("split", Split(), parallelism=split).fields_grouping("sentences", ["sentence"])
        if audit:
            builder.set_bolt("audit", Hold(), parallelism=audit).all_grouping("sentences")
        topology = builder.create_topology()
        layout = topology.task_layout(ackers=1)
        spout_task = next(task for task, component in layout.items() if component == "sentences")
        return Router(topology, TopologyContext(spout_task, layout, topology.stream_fields()))

    def test_one_target_task(self):
        router = self.router(split=1, audit=0)
        route = router.routes["default"]
        assert route.fixed is not None and route.fixed == router.targets("default", ["a b"])

    def test_every_grouping_fixed_adds_up(self):
        """fields into one task and all into three: the four tasks, each once."""
        router = self.router(split=1, audit=3)
        route = router.routes["default"]
        assert route.fixed is not None and sorted(route.fixed) == sorted(router.targets("default", ["a b"]))
        assert len(route.fixed) == 4

    def test_a_choice_left_keeps_the_route_asking(self):
        assert self.router(split=2, audit=3).routes["default"].fixed is None
