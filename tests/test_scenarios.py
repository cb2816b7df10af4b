"""Storm's reliability scenarios, in this process on a simulated clock (no Ray, no sleeps).

Each test reads like one of Storm's: the topology, what is fed, what must be acked or failed.
One-shot scenarios run with ``complete_topology`` (mocked sources: row *i* has msg id *i*);
those that need to act in the middle -- release a held tuple, move the clock, activate -- drive
an ``InProcessTopology`` step by step and read the components' state back through
``.components(...)``. What is the Ray runtime's own job (transport, backpressure, wall-clock
timers, the handle) is tested in ``test_runtime.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from rayflow import (
    BasicBolt,
    BasicOutputCollector,
    Bolt,
    OutputCollector,
    Spout,
    SpoutOutputCollector,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)
from rayflow._topology import ACKER_COMPONENT
from rayflow.testing import InProcessTopology, complete_topology

from .topology_helpers import Bounded, Feeder, Flaky, Holder, Judge, Recorder, Relay, Sink

TIMEOUT = 30.0
"""message_timeout_secs of the timeout scenarios: Storm's default; it costs nothing here."""


# -- components ---------------------------------------------------------------------------------


class Join(Bolt):
    """Waits for two inputs, then emits their pair anchored to both and acks both."""

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


class FailingPair(Join):
    """A Join whose pair is the word "fail" (so that a ``Judge`` downstream fails it)."""

    outputs = ["word"]

    def execute(self, tup: Tuple) -> None:
        self.waiting.append(tup)
        if len(self.waiting) == 2:
            self.collector.emit(["fail"], anchors=self.waiting)
            for t in self.waiting:
                self.collector.ack(t)
            self.waiting = []


class Countdown(Bolt):
    """Fed by its own stream: re-emits n-1 anchored to n while n > 0."""

    outputs = ["n"]

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        if tup[0] > 0:
            self.collector.emit([tup[0] - 1], anchors=tup)
        self.collector.ack(tup)


class Unanchored(Bolt):
    """Passes its input on unanchored, then acks it."""

    outputs = ["id"]

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        self.collector.emit([tup[0]])
        self.collector.ack(tup)


class FirstAttemptOf(BasicBolt):
    """Does something wrong with the first attempt of ``value``: raises (``drop=False``: the
    tuple fails at once), or drops it without acking (``drop=True``: it times out)."""

    def __init__(self, value: Any, drop: bool = False) -> None:
        self.value = value
        self.drop = drop

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.attempts = 0

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        if tup[0] != self.value:
            return
        self.attempts += 1
        if self.attempts == 1:
            raise ValueError(f"first attempt of {self.value} fails")


class Dropper(Bolt):
    """Acks every input except the first attempt of ``value``, which it never acks."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector
        self.dropped: list[Tuple] = []

    def execute(self, tup: Tuple) -> None:
        if tup[0] == self.value and not self.dropped:
            self.dropped.append(tup)
            return
        self.collector.ack(tup)


class TickCounter(Bolt):
    """Keeps every tick tuple it gets (and acks it: harmless, ticks are not tracked)."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector
        self.ticks: list[Tuple] = []

    def execute(self, tup: Tuple) -> None:
        if tup.is_tick():
            self.ticks.append(tup)
        self.collector.ack(tup)


class Director(BasicBolt):
    """Emits every input on a direct stream to the highest task of ``rec``."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(["key"], direct=True)

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.target = max(context.get_component_tasks("rec"))

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit_direct(self.target, [tup[0]])


# -- helpers --------------------------------------------------------------------------------------


def feeder(run: InProcessTopology, spout_id: str = "in", task: int = 0) -> Feeder:
    """The ``Feeder`` object of one task of ``spout_id`` (each task has its own copy)."""
    spout = run.components(spout_id)[task]
    assert isinstance(spout, Feeder)
    return spout


def holder(run: InProcessTopology, bolt_id: str) -> Holder:
    """The ``Holder`` object of ``bolt_id``'s (only) task."""
    bolt = run.components(bolt_id)[0]
    assert isinstance(bolt, Holder)
    return bolt


def release(run: InProcessTopology, bolt_id: str) -> int:
    """Release what the ``Holder`` task of ``bolt_id`` holds and deliver the acks; returns how many."""
    released = holder(run, bolt_id).release()
    run.settle()
    return released


# -- scenarios ------------------------------------------------------------------------------------


class TestTupleTrees:
    def test_fan_out_and_join_complete_only_when_every_branch_does(self) -> None:
        """in -> split -> {left (2 tasks, acks), right (holds)}: fed one tuple, the tree stays
        pending while ``right`` holds its branch, and is acked once it lets go."""
        builder = TopologyBuilder()
        builder.set_spout("in", Feeder(["id"]))
        builder.set_bolt("split", Relay(["id"])).shuffle_grouping("in")
        builder.set_bolt("left", Sink(), 2).shuffle_grouping("split")
        builder.set_bolt("right", Holder()).shuffle_grouping("split")
        run = InProcessTopology(builder.create_topology())
        feeder(run).feed([1], msg_id="tree-1")
        run.run()
        assert run.metrics()["left"]["acked"] == 1
        assert feeder(run).acked == [] and feeder(run).failed == []
        assert run.pending_trees() == 1
        assert release(run, "right") == 1
        assert feeder(run).acked == ["tree-1"] and feeder(run).failed == []
        assert run.pending_trees() == 0

    def test_joining_aggregator_multi_anchors_and_acks_once_all_inputs_arrive(self) -> None:
        """in -> join (global) -> out: the join holds "a" until "b" arrives and emits their pair
        anchored to both; neither root is acked before the pair is, then both are."""
        builder = TopologyBuilder()
        builder.set_spout("in", Feeder(["id"]))
        builder.set_bolt("join", Join()).global_grouping("in")
        builder.set_bolt("out", Sink()).shuffle_grouping("join")
        run = InProcessTopology(builder.create_topology())
        feeder(run).feed(["a"], msg_id="a")
        run.run()
        assert feeder(run).acked == [] and run.pending_trees() == 1
        feeder(run).feed(["b"], msg_id="b")
        run.run()
        assert sorted(feeder(run).acked) == ["a", "b"]
        assert run.metrics()["out"]["acked"] == 1

    def test_multi_anchored_tuple_failing_fails_every_root(self) -> None:
        """in -> pair (global) -> judge: fed 1 and 2, the pair anchored to both is failed by the
        judge, and both spout tuples are failed; neither is acked."""
        builder = TopologyBuilder()
        builder.set_spout("in", Feeder(["id"]))
        builder.set_bolt("pair", FailingPair()).global_grouping("in")
        builder.set_bolt("judge", Judge()).shuffle_grouping("pair")
        result = complete_topology(builder.create_topology(), mocked_sources={"in": [[1], [2]]})
        assert sorted(result.failed("in")) == [0, 1]
        assert result.acked("in") == []
        assert result.emitted("pair") == [["fail"]]

    def test_self_anchoring_loop_completes_when_the_countdown_ends(self) -> None:
        """in -> countdown, which also reads its own stream: fed 5, it re-emits 4..0 each
        anchored to the one before; the spout tuple is acked once 0 is executed."""
        builder = TopologyBuilder()
        builder.set_spout("in", Feeder(["n"]))
        builder.set_bolt("countdown", Countdown()).shuffle_grouping("in").shuffle_grouping("countdown")
        result = complete_topology(builder.create_topology(), mocked_sources={"in": [[5]]})
        assert result.acked("in") == [0] and result.failed("in") == []
        assert result.emitted("countdown") == [[4], [3], [2], [1], [0]]
        assert result.metrics()["countdown"]["executed"] == 6

    def test_unanchored_emits_do_not_hold_the_root(self) -> None:
        """in -> loose -> never: ``loose`` emits unanchored to a bolt that never acks; the spout
        tuple is acked anyway, with no timeout needed."""
        builder = TopologyBuilder()
        builder.set_spout("in", Feeder(["id"]))
        builder.set_bolt("loose", Unanchored()).shuffle_grouping("in")
        builder.set_bolt("never", Holder()).shuffle_grouping("loose")
        result = complete_topology(builder.create_topology(), mocked_sources={"in": [[7]]})
        assert result.acked("in") == [0] and result.failed("in") == []
        assert result.rounds == 0  # acked before the clock ever moved
        assert [len(h.held) for h in result.components("never")] == [1]


class TestFailuresAndTimeouts:
    def test_explicit_fail_reaches_the_spout_without_waiting_for_the_timeout(self) -> None:
        """in -> judge, timeout 30 s: a tuple the judge fails is failed at the spout before the
        clock moves at all."""
        builder = TopologyBuilder()
        builder.set_spout("in", Feeder(["word"]))
        builder.set_bolt("judge", Judge()).shuffle_grouping("in")
        run = InProcessTopology(builder.create_topology(), {"message_timeout_secs": TIMEOUT})
        feeder(run).feed(["fail"], msg_id="f")
        run.run()
        assert feeder(run).failed == ["f"] and feeder(run).acked == []
        assert run.now == 0.0

    def test_unacked_tree_fails_after_the_timeout_and_not_before(self) -> None:
        """in -> hold, timeout 30 s: a held tuple is not failed at 15 s nor at 30 s (the spout's
        pending map fails a tree between one and two timeouts after its emit), and is failed by
        60 s. Acked late, after it failed, it is not acked as well."""
        builder = TopologyBuilder()
        builder.set_spout("in", Feeder(["id"]))
        builder.set_bolt("hold", Holder()).shuffle_grouping("in")
        run = InProcessTopology(builder.create_topology(), {"message_timeout_secs": TIMEOUT})
        feeder(run).feed([1], msg_id="slow")
        run.run()
        run.advance(TIMEOUT / 2)
        assert feeder(run).failed == []
        run.advance(TIMEOUT / 2)
        assert feeder(run).failed == []
        run.advance(TIMEOUT)
        assert feeder(run).failed == ["slow"]
        assert release(run, "hold") == 1
        assert feeder(run).acked == [] and feeder(run).failed == ["slow"]

    @pytest.mark.parametrize("reset", [True, False], ids=["reset", "no-reset"])
    def test_reset_timeout_keeps_a_held_tree_alive_past_several_timeouts(self, reset: bool) -> None:
        """in -> hold (ticks every 1 s), timeout 10 s: a bolt that calls reset_timeout on every
        tick holds a tuple for 100 s (ten timeouts) and then acks it: acked, never failed.
        Without the resets the same tuple fails by 20 s."""
        builder = TopologyBuilder()
        builder.set_spout("in", Feeder(["id"]))
        builder.set_bolt("hold", Holder(reset=reset), config={"tick_tuple_freq_secs": 1}).shuffle_grouping("in")
        run = InProcessTopology(builder.create_topology(), {"message_timeout_secs": 10})
        feeder(run).feed([1], msg_id="kept")
        run.run()
        if not reset:
            run.advance(20)
            assert feeder(run).failed == ["kept"]
            return
        run.advance(100)
        assert feeder(run).failed == []
        assert holder(run, "hold").resets == 100
        assert release(run, "hold") == 1
        assert feeder(run).acked == ["kept"] and feeder(run).failed == []

    def test_a_timed_out_tree_is_replayed_by_its_spout_and_acked(self) -> None:
        """A bounded spout of ids 0..4 -> a bolt that drops the first attempt of 2 without acking:
        2 times out, the spout replays it, and the run ends with all five acked and 2 failed once."""
        builder = TopologyBuilder()
        builder.set_spout("in", Bounded(5))
        builder.set_bolt("drop", Dropper(2)).shuffle_grouping("in")
        result = complete_topology(builder.create_topology(), {"message_timeout_secs": TIMEOUT})
        assert result.finished
        assert result.failed("in") == [2]
        assert sorted(result.acked("in")) == [0, 1, 2, 3, 4]
        assert result.emitted("in") == [[0], [1], [2], [3], [4], [2]]
        assert result.rounds >= 1  # only the simulated clock could fail it


class TestBasicBolt:
    def test_acks_on_return_and_fails_on_failed_exception_and_other_errors(self) -> None:
        """in -> judge (BasicBolt), fed ok, fail, boom, ok: "ok" is acked on return, the
        FailedException and the ValueError both fail their tuple, only the ValueError counts as
        an error, and the task goes on to ack the last "ok"."""
        builder = TopologyBuilder()
        builder.set_spout("in", Feeder(["word"]))
        builder.set_bolt("judge", Judge()).shuffle_grouping("in")
        result = complete_topology(
            builder.create_topology(), mocked_sources={"in": [["ok"], ["fail"], ["boom"], ["ok"]]}
        )
        assert result.acked("in") == [0, 3]
        assert result.failed("in") == [1, 2]
        judge = result.metrics()["judge"]
        assert judge["errors"] == 1 and "user code blew up" in judge["last_error"]
        assert judge["failed"] == 2 and judge["acked"] == 2


class TestSpoutControl:
    def test_ackers_zero_acks_the_spout_as_soon_as_it_emits(self) -> None:
        """ackers=0, in -> hold (never acks): the spout tuple is acked at emit, and there is no
        acker task."""
        builder = TopologyBuilder()
        builder.set_spout("in", Feeder(["id"]))
        builder.set_bolt("hold", Holder()).shuffle_grouping("in")
        run = InProcessTopology(builder.create_topology(), {"ackers": 0})
        feeder(run).feed([1], msg_id="a")
        assert run.run_spouts() == 1
        assert feeder(run).acked == ["a"]  # before the bolt has even received it
        run.settle()
        assert len(holder(run, "hold").held) == 1
        assert ACKER_COMPONENT not in run.metrics()

    def test_max_spout_pending_caps_trees_in_flight(self) -> None:
        """max_spout_pending=3, in -> hold: fed 10, only 3 tuples get out; each release of the
        held ones lets the next 3 out, until all 10 are acked."""
        builder = TopologyBuilder()
        builder.set_spout("in", Feeder(["id"]))
        builder.set_bolt("hold", Holder()).shuffle_grouping("in")
        run = InProcessTopology(builder.create_topology(), {"max_spout_pending": 3})
        for i in range(10):
            feeder(run).feed([i], msg_id=i)
        released = []
        while len(feeder(run).acked) < 10:
            run.run()
            assert run.metrics()["in"]["pending"] <= 3
            released.append(release(run, "hold"))
        assert released == [3, 3, 3, 1]
        assert feeder(run).acked == list(range(10))

    def test_inactive_topology_emits_nothing_until_activated(self) -> None:
        """Started inactive, in -> sink, fed 5: nothing is emitted; activated, all 5 are acked;
        deactivated, a sixth is not emitted; activated again, it is."""
        builder = TopologyBuilder()
        builder.set_spout("in", Feeder(["id"]))
        builder.set_bolt("sink", Sink()).shuffle_grouping("in")
        run = InProcessTopology(builder.create_topology(), active=False)
        for i in range(5):
            feeder(run).feed([i], msg_id=i)
        assert run.run() == 0 and run.metrics()["in"]["emitted"] == 0
        run.activate()
        assert run.run() == 5 and feeder(run).acked == [0, 1, 2, 3, 4]
        run.deactivate()
        feeder(run).feed([99], msg_id=99)
        assert run.run() == 0 and run.metrics()["in"]["emitted"] == 5
        run.activate()
        run.run()
        assert feeder(run).acked[-1] == 99

    def test_bounded_spout_finishes_once_its_replays_are_acked(self) -> None:
        """A bounded spout of ids 0..4 -> a bolt that raises on the first attempt of 3: 3 is
        failed, replayed and acked; the topology finishes with nothing pending."""
        builder = TopologyBuilder()
        builder.set_spout("in", Bounded(5))
        builder.set_bolt("check", FirstAttemptOf(3)).shuffle_grouping("in")
        result = complete_topology(builder.create_topology())
        assert result.finished and result.rounds == 0  # no timeout involved
        assert result.failed("in") == [3]
        assert sorted(result.acked("in")) == [0, 1, 2, 3, 4]
        assert result.emitted("in") == [[0], [1], [2], [3], [4], [3]]
        spout = result.metrics()["in"]
        assert spout["emitted"] == 6 and spout["acked"] == 5 and spout["failed"] == 1 and spout["pending"] == 0

    def test_spout_errors_are_reported_and_the_spout_keeps_running(self) -> None:
        """A spout whose next_tuple raises every other call -> sink: the errors are counted and
        the last one kept, and all three tuples are still emitted and acked."""
        builder = TopologyBuilder()
        builder.set_spout("in", Flaky())
        builder.set_bolt("sink", Sink()).shuffle_grouping("in")
        result = complete_topology(builder.create_topology())
        assert result.finished
        assert result.acked("in") == [0, 1, 2]
        assert result.rounds == 0  # a raising next_tuple is not taken for an idle spout
        spout = result.metrics()["in"]
        assert spout["errors"] >= 3 and "flaky source" in spout["last_error"]

    def test_a_join_across_a_raising_next_tuple_is_not_timed_out(self) -> None:
        """in -> join: the spout emits "a", raises twice, then emits "b"; the join pairs them.
        Both trees are acked: the raises are not a pause long enough to time "a" out."""

        class Stutter(Spout):
            outputs = ["v"]

            def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
                self.collector = collector
                self.script = ["a", "raise", "raise", "b"]

            def next_tuple(self) -> None:
                if not self.script:
                    self.collector.exhausted()
                    return
                step = self.script.pop(0)
                if step == "raise":
                    raise RuntimeError("source hiccup")
                self.collector.emit([step], msg_id=step)

        builder = TopologyBuilder()
        builder.set_spout("in", Stutter())
        builder.set_bolt("join", Join()).shuffle_grouping("in")
        result = complete_topology(builder.create_topology())
        assert (sorted(result.acked("in")), result.failed("in")) == (["a", "b"], [])
        assert result.emitted("join") == [[["a", "b"]]]

    def test_trees_are_acked_to_the_spout_task_that_owns_them(self) -> None:
        """in (2 tasks) -> relay (2) -> sink (2), 2 ackers: each spout task is told exactly the
        msg ids it emitted, once each."""
        builder = TopologyBuilder()
        builder.set_spout("in", Feeder(["id"]), parallelism=2)
        builder.set_bolt("relay", Relay(["id"]), 2).shuffle_grouping("in")
        builder.set_bolt("sink", Sink(), 2).shuffle_grouping("relay")
        run = InProcessTopology(builder.create_topology(), {"ackers": 2})
        for task in (0, 1):
            for i in range(50):
                feeder(run, task=task).feed([i], msg_id=(task, i))
        run.run()
        for task in (0, 1):
            assert sorted(feeder(run, task=task).acked) == [(task, i) for i in range(50)]
        assert all(acker.snapshot()["acked"] > 0 for acker in run.tasks(ACKER_COMPONENT))  # both ackers used
        assert run.metrics()[ACKER_COMPONENT]["acked"] == 100


class TestTicks:
    def test_tick_tuples_arrive_at_the_configured_rate(self) -> None:
        """ticked with tick_tuple_freq_secs=0.2, nothing fed: 1 s brings exactly 5 ticks from
        __system on __tick, none tracked by the acker."""
        builder = TopologyBuilder()
        builder.set_spout("in", Feeder(["id"]))
        builder.set_bolt("ticked", TickCounter(), config={"tick_tuple_freq_secs": 0.2}).shuffle_grouping("in")
        run = InProcessTopology(builder.create_topology())
        run.advance(1.0)
        counter = run.components("ticked")[0]
        assert isinstance(counter, TickCounter)
        ticks = counter.ticks
        assert len(ticks) == 5
        assert {(t.source_component, t.source_stream) for t in ticks} == {("__system", "__tick")}
        assert run.pending_trees() == 0
        assert run.metrics()["ticked"]["errors"] == 0


class TestGroupings:
    """in -> rec (3 tasks, tasks 2-4: "in" is task 1), each recording (task, value) it gets."""

    def _route(self, declare: Any, values: list[Any]) -> list[tuple[int, Any]]:
        builder = TopologyBuilder()
        builder.set_spout("in", Feeder(["key"]))
        declare(builder.set_bolt("rec", Recorder(), 3))
        result = complete_topology(builder.create_topology(), mocked_sources={"in": [[v] for v in values]})
        assert sorted(result.acked("in")) == list(range(len(values)))
        return [seen for rec in result.components("rec") for seen in rec.seen]

    def test_fields_grouping_sends_equal_keys_to_one_task(self) -> None:
        """Fed a, b, c, d five times over: every copy of a key reaches the same task."""
        seen = self._route(lambda d: d.fields_grouping("in", ["key"]), ["a", "b", "c", "d"] * 5)
        tasks_per_key: dict[str, set[int]] = {}
        for task, key in seen:
            tasks_per_key.setdefault(key, set()).add(task)
        assert len(seen) == 20 and all(len(t) == 1 for t in tasks_per_key.values())

    def test_all_grouping_copies_to_every_task(self) -> None:
        """Fed x and y: each of the three tasks gets both."""
        seen = self._route(lambda d: d.all_grouping("in"), ["x", "y"])
        assert sorted(seen) == [(task, v) for task in (2, 3, 4) for v in ("x", "y")]

    def test_global_grouping_sends_everything_to_the_lowest_task(self) -> None:
        """Fed 0..5: all of it reaches task 2, in order."""
        seen = self._route(lambda d: d.global_grouping("in"), list(range(6)))
        assert seen == [(2, v) for v in range(6)]

    def test_shuffle_grouping_spreads_evenly_over_every_task(self) -> None:
        """Fed 30 tuples: round-robin in a shuffled order gives each task 10."""
        seen = self._route(lambda d: d.shuffle_grouping("in"), list(range(30)))
        per_task = {task: sum(1 for t, _ in seen if t == task) for task in (2, 3, 4)}
        assert per_task == {2: 10, 3: 10, 4: 10}

    def test_direct_grouping_delivers_to_the_chosen_task(self) -> None:
        """in -> direct -> rec (3 tasks, direct): every tuple goes to the task ``direct`` picks,
        the highest (tasks: direct=1, in=2, rec=3-5)."""
        builder = TopologyBuilder()
        builder.set_spout("in", Feeder(["key"]))
        builder.set_bolt("direct", Director()).shuffle_grouping("in")
        builder.set_bolt("rec", Recorder(), 3).direct_grouping("direct")
        result = complete_topology(builder.create_topology(), mocked_sources={"in": [[i] for i in range(5)]})
        assert sorted(result.acked("in")) == [0, 1, 2, 3, 4]
        assert [rec.seen for rec in result.components("rec")] == [[], [], [(5, i) for i in range(5)]]
