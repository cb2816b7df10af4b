"""Storm's reliability scenarios, run on Ray: the topology, what is fed, what must be acked or
failed. Each test builds a small topology with a FeederSpout on the session's Ray cluster."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import ray

from rayflow import (
    BasicBolt,
    Bolt,
    Config,
    OutputCollector,
    Spout,
    TopologyBuilder,
    TopologyContext,
    TopologyHandle,
    Tuple,
    submit_topology,
)
from rayflow.testing import FeederSpout

from .conftest import eventually
from .topology_helpers import Board, Holder, Judge, Recorder, Relay, Sink

Submit = Callable[..., TopologyHandle]


@pytest.fixture
def submit(ray_cluster: str) -> Iterator[Submit]:
    """Submit topologies for one test; they are killed when it ends."""
    handles: list[TopologyHandle] = []

    def _submit(builder: TopologyBuilder, conf: dict[str, Any] | None = None, **kwargs: Any) -> TopologyHandle:
        handle = submit_topology("test", Config.of(conf or {}), builder.create_topology(), **kwargs)
        handles.append(handle)
        return handle

    yield _submit
    for handle in handles:
        handle.kill()


def settled(feeder: FeederSpout, n: int) -> Callable[[], bool]:
    return lambda: len(feeder.acked()) + len(feeder.failed()) >= n


class TestTupleTrees:
    def test_fan_out_and_join_complete_only_when_every_branch_does(self, submit: Submit) -> None:
        """spout -> split -> {left, right(held)}: the tree is acked only once the held branch acks."""
        board = Board.remote()
        feeder = FeederSpout(["id"])
        builder = TopologyBuilder()
        builder.set_spout("in", feeder)
        builder.set_bolt("split", Relay(["id"])).shuffle_grouping("in")
        builder.set_bolt("left", Sink(), 2).shuffle_grouping("split")
        builder.set_bolt("right", Holder(board), config={"tick_tuple_freq_secs": 0.1}).shuffle_grouping("split")
        handle = submit(builder)
        feeder.feed([1], msg_id="tree-1")
        assert eventually(lambda: handle.metrics()["left"]["acked"] == 1)
        time.sleep(1.0)
        assert feeder.acked() == [] and feeder.failed() == []
        ray.get(board.set.remote("release"))
        assert eventually(lambda: feeder.acked() == ["tree-1"])
        assert feeder.failed() == []

    def test_joining_aggregator_multi_anchors_and_acks_once_all_inputs_arrive(self, submit: Submit) -> None:
        """A join holding two spout tuples emits one tuple anchored to both: both roots ack together."""

        class Join(Bolt):
            outputs = ["pair"]

            def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
                self.collector = collector
                self.waiting: list[Tuple] = []

            def execute(self, tup: Tuple) -> None:
                self.waiting.append(tup)
                if len(self.waiting) == 2:
                    self.collector.emit([[t[0] for t in self.waiting]], anchors=self.waiting)
                    for t in self.waiting:
                        self.collector.ack(t)
                    self.waiting = []

        feeder = FeederSpout(["id"])
        builder = TopologyBuilder()
        builder.set_spout("in", feeder)
        builder.set_bolt("join", Join()).global_grouping("in")
        builder.set_bolt("out", Sink()).shuffle_grouping("join")
        handle = submit(builder)
        feeder.feed(["a"], msg_id="a")
        time.sleep(0.5)
        assert feeder.acked() == []
        feeder.feed(["b"], msg_id="b")
        assert eventually(lambda: sorted(feeder.acked()) == ["a", "b"])
        assert handle.metrics()["out"]["acked"] == 1

    def test_multi_anchored_tuple_failing_fails_every_root(self, submit: Submit) -> None:
        """The joined tuple fails downstream: both spout tuples it was anchored to are failed."""

        class Pairer(Bolt):
            outputs = ["word"]

            def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
                self.collector = collector
                self.first: Tuple | None = None

            def execute(self, tup: Tuple) -> None:
                if self.first is None:
                    self.first = tup
                    return
                self.collector.emit(["fail"], anchors=[self.first, tup])
                self.collector.ack(self.first)
                self.collector.ack(tup)
                self.first = None

        feeder = FeederSpout(["id"])
        builder = TopologyBuilder()
        builder.set_spout("in", feeder)
        builder.set_bolt("pair", Pairer()).global_grouping("in")
        builder.set_bolt("judge", Judge()).shuffle_grouping("pair")
        submit(builder)
        feeder.feed([1], msg_id=1)
        feeder.feed([2], msg_id=2)
        assert eventually(lambda: sorted(feeder.failed()) == [1, 2])
        assert feeder.acked() == []

    def test_self_anchoring_loop_completes_when_the_countdown_ends(self, submit: Submit) -> None:
        """A bolt fed by its own stream re-emits n-1 anchored to n: acked once it reaches 0."""

        class Countdown(Bolt):
            outputs = ["n"]

            def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
                self.collector = collector

            def execute(self, tup: Tuple) -> None:
                if tup[0] > 0:
                    self.collector.emit([tup[0] - 1], anchors=tup)
                self.collector.ack(tup)

        feeder = FeederSpout(["n"])
        builder = TopologyBuilder()
        builder.set_spout("in", feeder)
        builder.set_bolt("countdown", Countdown()).shuffle_grouping("in").shuffle_grouping("countdown")
        handle = submit(builder)
        feeder.feed([5], msg_id="five")
        assert eventually(lambda: feeder.acked() == ["five"])
        assert handle.metrics()["countdown"]["executed"] == 6

    def test_unanchored_emits_do_not_hold_the_root(self, submit: Submit) -> None:
        """split emits unanchored to a bolt that never acks: the spout tuple is acked anyway."""

        class Unanchored(Bolt):
            outputs = ["id"]

            def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
                self.collector = collector

            def execute(self, tup: Tuple) -> None:
                self.collector.emit([tup[0]])
                self.collector.ack(tup)

        board = Board.remote()
        feeder = FeederSpout(["id"])
        builder = TopologyBuilder()
        builder.set_spout("in", feeder)
        builder.set_bolt("loose", Unanchored()).shuffle_grouping("in")
        builder.set_bolt("never", Holder(board)).shuffle_grouping("loose")
        handle = submit(builder)
        feeder.feed([7], msg_id=7)
        assert eventually(lambda: feeder.acked() == [7])
        assert handle.metrics()["never"]["executed"] == 1


class TestFailuresAndTimeouts:
    def test_explicit_fail_reaches_the_spout_long_before_the_timeout(self, submit: Submit) -> None:
        """With a 30 s timeout, a failed tuple is reported within seconds."""
        feeder = FeederSpout(["word"])
        builder = TopologyBuilder()
        builder.set_spout("in", feeder)
        builder.set_bolt("judge", Judge()).shuffle_grouping("in")
        submit(builder, {"message_timeout_secs": 30})
        started = time.monotonic()
        feeder.feed(["fail"], msg_id="f")
        assert eventually(lambda: feeder.failed() == ["f"], timeout=10)
        assert time.monotonic() - started < 10

    def test_unacked_tree_fails_after_the_timeout_and_not_before(self, submit: Submit) -> None:
        """A held tuple with a 2 s timeout: not failed at 1.5 s, failed by 2 x timeout (+ slack)."""
        board = Board.remote()
        feeder = FeederSpout(["id"])
        builder = TopologyBuilder()
        builder.set_spout("in", feeder)
        builder.set_bolt("hold", Holder(board)).shuffle_grouping("in")
        handle = submit(builder, {"message_timeout_secs": 2})
        feeder.feed([1], msg_id="slow")
        assert eventually(lambda: handle.metrics()["hold"]["executed"] == 1)
        sent = time.monotonic()
        time.sleep(1.5)
        assert feeder.failed() == []
        assert eventually(lambda: feeder.failed() == ["slow"], timeout=6)
        assert time.monotonic() - sent >= 1.5
        assert feeder.acked() == []

    def test_reset_timeout_keeps_a_held_tree_alive_past_several_timeouts(self, submit: Submit) -> None:
        """Timeout 1.5 s; the bolt resets every 0.2 s for 5 s, then acks: acked, never failed."""
        board = Board.remote()
        feeder = FeederSpout(["id"])
        builder = TopologyBuilder()
        builder.set_spout("in", feeder)
        holder = Holder(board, reset=True)
        builder.set_bolt("hold", holder, config={"tick_tuple_freq_secs": 0.2}).shuffle_grouping("in")
        submit(builder, {"message_timeout_secs": 1.5})
        feeder.feed([1], msg_id="kept")
        time.sleep(5.0)
        assert feeder.failed() == []
        ray.get(board.set.remote("release"))
        assert eventually(lambda: feeder.acked() == ["kept"])
        assert feeder.failed() == []


class TestBasicBolt:
    def test_acks_on_return_and_fails_on_failed_exception_and_other_errors(self, submit: Submit) -> None:
        """ok is acked; FailedException and a ValueError fail; the task keeps running after."""
        feeder = FeederSpout(["word"])
        builder = TopologyBuilder()
        builder.set_spout("in", feeder)
        builder.set_bolt("judge", Judge()).shuffle_grouping("in")
        handle = submit(builder)
        for msg_id, word in enumerate(["ok", "fail", "boom"]):
            feeder.feed([word], msg_id=msg_id)
        assert eventually(settled(feeder, 3))
        assert feeder.acked() == [0]
        assert sorted(feeder.failed()) == [1, 2]
        feeder.feed(["ok"], msg_id=3)
        assert eventually(lambda: 3 in feeder.acked())
        judge = handle.metrics()["judge"]
        assert judge["errors"] == 1 and "user code blew up" in judge["last_error"]
        assert judge["failed"] == 2 and judge["acked"] == 2


class TestSpoutControl:
    def test_ackers_zero_acks_the_spout_as_soon_as_it_emits(self, submit: Submit) -> None:
        """No acker: the spout is acked at emit even though the bolt never acks."""
        board = Board.remote()
        feeder = FeederSpout(["id"])
        builder = TopologyBuilder()
        builder.set_spout("in", feeder)
        builder.set_bolt("hold", Holder(board)).shuffle_grouping("in")
        handle = submit(builder, {"ackers": 0})
        feeder.feed([1], msg_id="a")
        assert eventually(lambda: feeder.acked() == ["a"])
        assert "__acker" not in handle.metrics()

    def test_max_spout_pending_caps_trees_in_flight(self, submit: Submit) -> None:
        """max_spout_pending=3 and a bolt that holds everything: only 3 tuples get out."""
        board = Board.remote()
        feeder = FeederSpout(["id"])
        builder = TopologyBuilder()
        builder.set_spout("in", feeder)
        builder.set_bolt("hold", Holder(board), config={"tick_tuple_freq_secs": 0.1}).shuffle_grouping("in")
        handle = submit(builder, {"max_spout_pending": 3})
        feeder.feed_many([([i], i) for i in range(10)])
        assert eventually(lambda: handle.metrics()["hold"]["executed"] >= 3)
        time.sleep(1.0)
        assert handle.metrics()["in"]["emitted"] == 3
        ray.get(board.set.remote("release"))
        assert eventually(lambda: len(feeder.acked()) == 10)

    def test_inactive_topology_emits_nothing_until_activated(self, submit: Submit) -> None:
        """Submitted inactive: nothing is emitted; activate: everything flows; deactivate: it stops."""
        feeder = FeederSpout(["id"])
        builder = TopologyBuilder()
        builder.set_spout("in", feeder)
        builder.set_bolt("sink", Sink()).shuffle_grouping("in")
        handle = submit(builder, active=False)
        feeder.feed_many([([i], i) for i in range(5)])
        time.sleep(1.0)
        assert handle.metrics()["in"]["emitted"] == 0
        handle.activate()
        assert eventually(lambda: len(feeder.acked()) == 5)
        handle.deactivate()
        feeder.feed([99], msg_id=99)
        time.sleep(0.5)
        assert handle.metrics()["in"]["emitted"] == 5
        handle.activate()
        assert eventually(lambda: 99 in feeder.acked())

    def test_wait_returns_once_a_bounded_spout_is_exhausted_and_its_replays_are_acked(self, submit: Submit) -> None:
        """A bounded spout whose first attempt of id 3 fails: wait() is True once 3 is replayed and acked."""

        class Bounded(Spout):
            outputs = ["id"]

            def open(self, conf: dict[str, Any], context: TopologyContext, collector: Any) -> None:
                self.collector = collector
                self.todo = list(range(5))
                self.acked: set[int] = set()

            def next_tuple(self) -> None:
                if not self.todo:
                    self.collector.exhausted()
                    return
                self.collector.emit([self.todo.pop(0)], msg_id=len(self.todo))

            def fail(self, msg_id: Any) -> None:
                self.todo.append(-1)  # replay, marked so the judge lets it through

        class FailOnce(BasicBolt):
            def execute(self, tup: Tuple, collector: Any) -> None:
                if tup[0] == 3:
                    raise ValueError("first attempt of 3 fails")

        builder = TopologyBuilder()
        builder.set_spout("in", Bounded())
        builder.set_bolt("check", FailOnce()).shuffle_grouping("in")
        handle = submit(builder)
        assert handle.wait(timeout=30)
        spout = handle.metrics()["in"]
        assert spout["emitted"] == 6 and spout["acked"] == 5 and spout["failed"] == 1
        assert spout["pending"] == 0

    def test_spout_errors_are_reported_and_the_spout_keeps_running(self, submit: Submit) -> None:
        """next_tuple raises every other call: errors are counted, tuples still flow."""

        class Flaky(Spout):
            outputs = ["id"]

            def open(self, conf: dict[str, Any], context: TopologyContext, collector: Any) -> None:
                self.collector = collector
                self.calls = 0
                self.sent = 0

            def next_tuple(self) -> None:
                self.calls += 1
                if self.calls % 2:
                    raise RuntimeError("flaky source")
                if self.sent < 3:
                    self.collector.emit([self.sent], msg_id=self.sent)
                    self.sent += 1
                else:
                    self.collector.exhausted()

        builder = TopologyBuilder()
        builder.set_spout("in", Flaky())
        builder.set_bolt("sink", Sink()).shuffle_grouping("in")
        handle = submit(builder)
        assert handle.wait(timeout=20)
        spout = handle.metrics()["in"]
        assert spout["acked"] == 3 and spout["errors"] >= 3 and "flaky source" in spout["last_error"]


class TestFlowControl:
    def test_a_slow_bolt_throttles_its_spout_instead_of_queueing_without_bound(self, submit: Submit) -> None:
        """An endless spout (no max_spout_pending) into a bolt taking 5 ms a tuple: the spout
        gets only a bounded distance ahead of the bolt."""

        class Endless(Spout):
            outputs = ["n"]

            def open(self, conf: dict[str, Any], context: TopologyContext, collector: Any) -> None:
                self.collector = collector
                self.n = 0

            def next_tuple(self) -> None:
                self.n += 1
                self.collector.emit([self.n])

        class Slow(BasicBolt):
            def execute(self, tup: Tuple, collector: Any) -> None:
                time.sleep(0.005)

        builder = TopologyBuilder()
        builder.set_spout("in", Endless())
        builder.set_bolt("slow", Slow()).shuffle_grouping("in")
        handle = submit(builder, {"rayflow.batch.size": 10, "rayflow.max.inflight.batches": 2})
        time.sleep(3.0)
        metrics = handle.metrics()
        executed, emitted = metrics["slow"]["executed"], metrics["in"]["emitted"]
        assert executed > 50
        assert emitted - executed < 1_000, (emitted, executed)

    def test_trees_are_acked_to_the_spout_task_that_owns_them(self, submit: Submit) -> None:
        """Two spout tasks and two ackers: every tuple is acked exactly once, to its own task."""
        feeder = FeederSpout(["id"])
        builder = TopologyBuilder()
        builder.set_spout("in", feeder, parallelism=2)
        builder.set_bolt("relay", Relay(["id"]), 2).shuffle_grouping("in")
        builder.set_bolt("sink", Sink(), 2).shuffle_grouping("relay")
        handle = submit(builder, {"ackers": 2})
        feeder.feed_many([([i], i) for i in range(200)])
        assert eventually(lambda: len(feeder.acked()) == 200)
        assert sorted(feeder.acked()) == list(range(200))
        metrics = handle.metrics()
        assert metrics["in"]["acked"] == 200 and metrics["__acker"]["acked"] == 200
        assert metrics["in"]["tasks"] == 2 and metrics["__acker"]["tasks"] == 2


class TestTicks:
    def test_tick_tuples_arrive_at_the_configured_rate(self, submit: Submit) -> None:
        """tick_tuple_freq_secs=0.2 on a bolt: ticks arrive with nothing fed."""

        class TickCounter(Bolt):
            def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
                self.collector = collector

            def execute(self, tup: Tuple) -> None:
                assert tup.is_tick() and tup.source_component == "__system"
                self.collector.ack(tup)

        builder = TopologyBuilder()
        builder.set_spout("in", FeederSpout(["id"]))
        builder.set_bolt("ticked", TickCounter(), config={"tick_tuple_freq_secs": 0.2}).shuffle_grouping("in")
        handle = submit(builder)
        time.sleep(1.5)
        executed = handle.metrics()["ticked"]["executed"]
        assert 3 <= executed <= 10
        assert handle.metrics()["ticked"]["errors"] == 0


class TestGroupingsOnRay:
    def _route(
        self, submit: Submit, declare: Callable[[Any], Any], values: list[Any], tasks: int = 3
    ) -> list[tuple[int, Any]]:
        board = Board.remote()
        feeder = FeederSpout(["key"])
        builder = TopologyBuilder()
        builder.set_spout("in", feeder)
        declare(builder.set_bolt("rec", Recorder(board), tasks))
        handle = submit(builder)
        feeder.feed_many([([v], i) for i, v in enumerate(values)])
        assert eventually(lambda: len(feeder.acked()) == len(values))
        handle.kill()
        return ray.get(board.all.remote())

    def test_fields_grouping_sends_equal_keys_to_one_task(self, submit: Submit) -> None:
        seen = self._route(submit, lambda d: d.fields_grouping("in", ["key"]), ["a", "b", "c", "d"] * 5)
        tasks_per_key: dict[str, set[int]] = {}
        for task, key in seen:
            tasks_per_key.setdefault(key, set()).add(task)
        assert len(seen) == 20 and all(len(t) == 1 for t in tasks_per_key.values())

    def test_all_grouping_copies_to_every_task(self, submit: Submit) -> None:
        seen = self._route(submit, lambda d: d.all_grouping("in"), ["x", "y"])
        assert len(seen) == 6 and len({task for task, _ in seen}) == 3

    def test_global_grouping_sends_everything_to_the_lowest_task(self, submit: Submit) -> None:
        seen = self._route(submit, lambda d: d.global_grouping("in"), list(range(6)))
        assert len(seen) == 6 and {task for task, _ in seen} == {2}  # "in" is task 1, "rec" tasks 2-4

    def test_shuffle_grouping_spreads_over_every_task(self, submit: Submit) -> None:
        seen = self._route(submit, lambda d: d.shuffle_grouping("in"), list(range(30)))
        assert len(seen) == 30 and {task for task, _ in seen} == {2, 3, 4}

    def test_direct_grouping_delivers_to_the_chosen_task(self, submit: Submit) -> None:
        """A bolt emits on a direct stream to the highest task of the recorder only."""

        class Director(BasicBolt):
            def declare_output_fields(self, declarer: Any) -> None:
                declarer.declare(["key"], direct=True)

            def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
                self.target = max(context.get_component_tasks("rec"))

            def execute(self, tup: Tuple, collector: Any) -> None:
                collector.emit_direct(self.target, [tup[0]])

        board = Board.remote()
        feeder = FeederSpout(["key"])
        builder = TopologyBuilder()
        builder.set_spout("in", feeder)
        builder.set_bolt("direct", Director()).shuffle_grouping("in")
        builder.set_bolt("rec", Recorder(board), 3).direct_grouping("direct")
        handle = submit(builder)
        feeder.feed_many([([i], i) for i in range(5)])
        assert eventually(lambda: len(feeder.acked()) == 5)
        handle.kill()
        seen = ray.get(board.all.remote())
        assert len(seen) == 5 and {task for task, _ in seen} == {5}  # tasks: direct=1, in=2, rec=3-5
