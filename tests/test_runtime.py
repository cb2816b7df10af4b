"""The Ray runtime itself: what only a topology running on Ray can show.

Tuple-tree semantics are tested in process (``test_scenarios.py``); here a few topologies run
on the session's Ray cluster to check what the runtime adds: tuples crossing actors end to end,
backpressure between actors, acker results routed back to the right spout actor, tick timers on
a wall clock, the handle's activate/deactivate/kill/wait, and errors surfacing in its metrics.
Nothing sleeps for a fixed time: a test waits on a condition with a deadline (``eventually``),
and where it must show that something does *not* happen it watches for a short, justified window
(``stays``).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import ray

from examples.wordcount import SENTENCES, SplitSentence, Tally, WordCount
from rayflow import (
    BasicBolt,
    BasicOutputCollector,
    Bolt,
    Config,
    OutputCollector,
    OutputFieldsDeclarer,
    SpoutOutputCollector,
    TopologyBuilder,
    TopologyContext,
    TopologyHandle,
    Tuple,
    submit_topology,
)
from rayflow.testing import FeederSpout

from .conftest import eventually
from .topology_helpers import Board, Bounded, Endless, Flaky, Holder, Relay, Sink

pytestmark = pytest.mark.ray

Submit = Callable[..., TopologyHandle]

DEADLINE = 60.0
"""How long a condition may take to come true: generous, the machine is shared and busy (a
deadline costs nothing when the condition comes true sooner)."""


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


def stays(check: Callable[[], bool], secs: float, interval: float = 0.05) -> bool:
    """``check`` holds every time it is looked at for ``secs`` seconds (the window in which a
    test shows that something does not happen)."""
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        if not check():
            return False
        time.sleep(interval)
    return check()


class Slow(BasicBolt):
    """Takes 5 ms a tuple (the work it stands for; not a wait in the test)."""

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        time.sleep(0.005)


class TickCounter(Bolt):
    """Emits one unanchored ``("tick",)`` per tick it gets, so its ``emitted`` counts the ticks
    (ticks are system tuples: they do not count as executed); anything else is an error."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        assert tup.is_tick() and tup.source_component == "__system"
        self.collector.emit(["tick"])
        self.collector.ack(tup)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["kind"])


def test_wordcount_end_to_end_and_kill(submit: Submit) -> None:
    """feeder -> split (2 tasks, shuffle) -> count (2 tasks, fields), the example's bolts: 100
    sentences fed across actors are all acked; kill() runs every count task's cleanup, which
    hands its counts to a tally -- together a plain Counter over the sentences -- and then no
    task is alive; a second kill() is harmless."""
    sentences = [SENTENCES[i % len(SENTENCES)] for i in range(100)]
    tally_name = f"tally-{uuid.uuid4().hex}"
    tally = Tally.options(name=tally_name).remote()  # type: ignore[attr-defined]
    feeder = FeederSpout(["sentence"])
    builder = TopologyBuilder()
    builder.set_spout("sentences", feeder)
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(tally=tally_name), 2).fields_grouping("split", ["word"])
    handle = submit(builder)
    feeder.feed_many([([s], i) for i, s in enumerate(sentences)])
    assert eventually(lambda: len(feeder.acked()) == len(sentences), timeout=DEADLINE)
    assert sorted(feeder.acked()) == list(range(len(sentences))) and feeder.failed() == []
    handle.kill()  # the count tasks hand their counts to the tally in cleanup
    assert ray.get(tally.result.remote()) == Counter(w for s in sentences for w in s.split())
    assert not any(m["alive"] for m in handle.metrics().values())
    handle.kill()


def test_a_slow_bolt_throttles_its_spout_instead_of_queueing_without_bound(submit: Submit) -> None:
    """An endless spout (no max_spout_pending) into a bolt taking 5 ms a tuple, batches of 10
    and 2 batches in flight: while the bolt executes its first 200 tuples, the spout never gets
    more than a bounded distance ahead (unthrottled it would be thousands ahead)."""
    builder = TopologyBuilder()
    builder.set_spout("in", Endless(tracked=False))
    builder.set_bolt("slow", Slow()).shuffle_grouping("in")
    handle = submit(builder, {"rayflow.batch.size": 10, "rayflow.max.inflight.batches": 2})
    gaps: list[int] = []

    def slow_got_200() -> bool:
        metrics = handle.metrics()
        executed: int = metrics["slow"]["executed"]
        gaps.append(metrics["in"]["emitted"] - executed)
        return executed >= 200

    assert eventually(slow_got_200, timeout=DEADLINE)
    assert max(gaps) < 1_000, gaps


def test_trees_are_acked_to_the_spout_task_that_owns_them(submit: Submit) -> None:
    """feeder (2 tasks) -> relay -> sink, 2 ackers, each task an actor: 200 tuples are each
    acked exactly once (an acker's result sent to the wrong spout task would be lost there)."""
    feeder = FeederSpout(["id"])
    builder = TopologyBuilder()
    builder.set_spout("in", feeder, parallelism=2)
    builder.set_bolt("relay", Relay(["id"])).shuffle_grouping("in")
    builder.set_bolt("sink", Sink()).shuffle_grouping("relay")
    handle = submit(builder, {"ackers": 2})
    feeder.feed_many([([i], i) for i in range(200)])
    assert eventually(lambda: len(feeder.acked()) == 200, timeout=DEADLINE)
    assert sorted(feeder.acked()) == list(range(200))
    metrics = handle.metrics()
    assert metrics["in"]["acked"] == 200 and metrics["__acker"]["acked"] == 200
    assert metrics["in"]["tasks"] == 2 and metrics["__acker"]["tasks"] == 2


def test_tick_tuples_arrive_on_the_wall_clock(submit: Submit) -> None:
    """A bolt with tick_tuple_freq_secs=0.2, nothing fed: ticks keep arriving, and 5 of them
    take at least ~1 s (not faster than configured; loosely: the machine may be slow)."""
    builder = TopologyBuilder()
    builder.set_spout("in", FeederSpout(["id"]))
    builder.set_bolt("ticked", TickCounter(), config={"tick_tuple_freq_secs": 0.2}).shuffle_grouping("in")
    handle = submit(builder)
    assert eventually(lambda: handle.metrics()["ticked"]["emitted"] >= 1, timeout=DEADLINE)
    first, started = handle.metrics()["ticked"]["emitted"], time.monotonic()
    assert eventually(lambda: handle.metrics()["ticked"]["emitted"] >= first + 5, timeout=DEADLINE)
    assert time.monotonic() - started >= 0.8  # 5 periods of 0.2 s, less timer jitter
    assert handle.metrics()["ticked"]["errors"] == 0


def test_activate_and_deactivate_start_and_stop_the_spouts(submit: Submit) -> None:
    """Submitted inactive, feeder -> sink, fed 5: nothing is emitted; activated, all 5 are
    acked; deactivated, a sixth is not emitted; activated again, it is acked."""
    feeder = FeederSpout(["id"])
    builder = TopologyBuilder()
    builder.set_spout("in", feeder)
    builder.set_bolt("sink", Sink()).shuffle_grouping("in")
    handle = submit(builder, active=False)
    feeder.feed_many([([i], i) for i in range(5)])
    # An active FeederSpout polls its channel every 5 ms and emits at once: 0.5 s is ~100 polls.
    assert stays(lambda: handle.metrics()["in"]["emitted"] == 0, 0.5)
    handle.activate()
    assert eventually(lambda: sorted(feeder.acked()) == [0, 1, 2, 3, 4], timeout=DEADLINE)
    handle.deactivate()
    feeder.feed([99], msg_id=99)
    assert stays(lambda: handle.metrics()["in"]["emitted"] == 5, 0.5)  # same window, same reason
    handle.activate()
    assert eventually(lambda: 99 in feeder.acked(), timeout=DEADLINE)


def test_wait_returns_only_once_a_bounded_spout_has_nothing_pending(submit: Submit) -> None:
    """A bounded spout of 5 ids -> hold (releases on a tick once the board says so): wait()
    times out while the held trees are pending, and returns True once they are acked."""
    board = Board.remote()
    builder = TopologyBuilder()
    builder.set_spout("in", Bounded(5))
    builder.set_bolt("hold", Holder(board), config={"tick_tuple_freq_secs": 0.05}).shuffle_grouping("in")
    handle = submit(builder)
    assert eventually(lambda: handle.metrics()["hold"]["executed"] >= 5, timeout=DEADLINE)
    # The spout is exhausted with 5 trees held: wait() polls every 50 ms; 0.3 s is 6 polls.
    assert handle.wait(timeout=0.3) is False
    ray.get(board.set.remote("release"))
    assert handle.wait(timeout=DEADLINE)
    spout = handle.metrics()["in"]
    assert spout["emitted"] == 5 and spout["acked"] == 5 and spout["pending"] == 0


class NameReporter(Bounded):
    """``Bounded`` that hands in the topology name its config carries when it opens."""

    def __init__(self, n: int, board: Any) -> None:
        super().__init__(n)
        self.board = board

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        super().open(conf, context, collector)
        ray.get(self.board.add.remote([conf.get("topology.name")]))


def test_components_find_the_topology_name_in_their_config(submit: Submit) -> None:
    """As in Storm, ``conf["topology.name"]`` is the name the topology was submitted under
    (the Redis spout prefixes its consumer names with it)."""
    board = Board.remote()
    builder = TopologyBuilder()
    builder.set_spout("in", NameReporter(1, board))
    builder.set_bolt("sink", Sink()).shuffle_grouping("in")
    submit(builder)
    assert eventually(lambda: ray.get(board.all.remote()) == ["test"], timeout=DEADLINE)


def test_spout_errors_are_reported_in_the_metrics(submit: Submit) -> None:
    """A spout whose next_tuple raises every other call -> sink: the actor survives, the
    topology finishes, and handle.metrics() counts the errors and keeps the last one."""
    builder = TopologyBuilder()
    builder.set_spout("in", Flaky())
    builder.set_bolt("sink", Sink()).shuffle_grouping("in")
    handle = submit(builder)
    assert handle.wait(timeout=DEADLINE)
    spout = handle.metrics()["in"]
    assert spout["acked"] == 3 and spout["errors"] >= 3 and "flaky source" in spout["last_error"]
    assert spout["alive"] and spout["restarts"] == 0


def test_what_tasks_log_reaches_the_driver(submit: Submit, caplog: pytest.LogCaptureFixture) -> None:
    """Ray's workers' output is not sent to the driver, yet a component's errors (with their
    traceback) and topology.debug's emits are logged by the driver's "rayflow" logger, and say
    which task and process they came from."""
    caplog.set_level(logging.INFO, logger="rayflow")
    builder = TopologyBuilder()
    builder.set_spout("in", Flaky())
    builder.set_bolt("sink", Sink()).shuffle_grouping("in")
    submit(builder, {"topology.debug": True})

    def logged(level: int, *parts: str) -> bool:
        return any(r.levelno == level and all(p in r.getMessage() for p in parts) for r in caplog.records)

    where = "[test task "
    assert eventually(lambda: logged(logging.ERROR, where, "RuntimeError: flaky source", "Traceback"), DEADLINE)
    assert eventually(lambda: logged(logging.INFO, where, "in:", " emit default [2] msg_id=2"), DEADLINE)
