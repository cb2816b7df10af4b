"""Operator chaining: which links are chained, and that a chained topology keeps Storm's promise.

The plan (no Ray): a bolt fed through shuffle or local_or_shuffle by one component with as many
tasks runs in that component's actor, task i with task i; nothing else is chained. On Ray: a
chained word count acks every sentence and counts every word once, its chained tasks share their
host's process; and when that process is killed, both tasks come back and every tuple is acked.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
import ray

from rayflow import BasicBolt, Config, StatefulBolt, TopologyBuilder, Tuple
from rayflow._chaining import ForwardGrouping, chain_plan, chained_components
from rayflow._runtime import TopologyHandle, submit_topology

from .conftest import eventually
from .test_faults import Numbers, Relay, Sink
from .topology_helpers import Board


class Words(BasicBolt):
    outputs = ["word"]

    def execute(self, tup: Tuple, collector: Any) -> None:
        for word in str(tup[0]).split():
            collector.emit([word])


class Recorder(BasicBolt):
    """Hands every value it executes to the board, in batches of 100 (and the rest at cleanup)."""

    def __init__(self, board: Any) -> None:
        self.board = board

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        self.seen: list[Any] = []

    def execute(self, tup: Tuple, collector: Any) -> None:
        self.seen.append(tup[0])
        if len(self.seen) >= 100:
            ray.get(self.board.add.remote(self.seen))
            self.seen = []

    def cleanup(self) -> None:
        if self.seen:
            ray.get(self.board.add.remote(self.seen))


class Counter(StatefulBolt):
    def execute(self, tup: Tuple) -> None:
        self.collector.ack(tup)


def pipeline(split: int = 1, count: int = 1, **split_config: Any) -> Any:
    """numbers -> words (shuffle, ``split`` tasks) -> sink (fields, ``count`` tasks)"""
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers(10), parallelism=2)
    builder.set_bolt("words", Words(), parallelism=split, config=split_config).shuffle_grouping("numbers")
    builder.set_bolt("sink", Sink(), parallelism=count).fields_grouping("words", ["word"])
    return builder.create_topology()


# -- the plan ---------------------------------------------------------------------------------
def test_a_bolt_shuffled_from_one_component_with_as_many_tasks_is_chained_to_it():
    assert chained_components(pipeline(split=2)) == {"words": "numbers"}


def test_chaining_follows_its_rules():
    """Not chained: other parallelism, a fields grouping, chaining off for the topology or for
    either component, other resources, two upstreams, a spout with an upkeep (a broker's), a
    stateful or exactly-once topology."""
    assert chained_components(pipeline(split=1)) == {}  # 2 spout tasks, 1 bolt task
    assert chained_components(pipeline(split=2, count=2)) == {"words": "numbers"}  # fields: never
    assert chained_components(pipeline(split=2), Config(chaining=False)) == {}
    assert chained_components(pipeline(split=2, **{"rayflow.chaining": False})) == {}

    builder = TopologyBuilder()
    builder.set_spout("a", Numbers(1), config={"rayflow.chaining": False})
    builder.set_bolt("b", Sink()).shuffle_grouping("a")
    assert chained_components(builder.create_topology()) == {}

    builder = TopologyBuilder()
    builder.set_spout("a", Numbers(1))
    builder.set_bolt("b", Sink(), resources={"num_cpus": 1}).local_or_shuffle_grouping("a")
    assert chained_components(builder.create_topology()) == {}

    builder = TopologyBuilder()
    builder.set_spout("a", Numbers(1))
    builder.set_spout("b", Numbers(1))
    builder.set_bolt("c", Sink()).shuffle_grouping("a").shuffle_grouping("b")
    assert chained_components(builder.create_topology()) == {}

    class BrokerLike(Numbers):
        def upkeep(self) -> None:  # heartbeats on the task's event loop: a chained bolt would hold them up
            pass

    builder = TopologyBuilder()
    builder.set_spout("a", BrokerLike(1))
    builder.set_bolt("b", Sink()).shuffle_grouping("a")
    assert chained_components(builder.create_topology()) == {}

    builder = TopologyBuilder()
    builder.set_spout("a", Numbers(1))
    builder.set_bolt("b", Counter()).shuffle_grouping("a")
    assert chained_components(builder.create_topology()) == {}

    builder = TopologyBuilder()
    builder.set_spout("a", Numbers(1))
    builder.set_bolt("b", Sink()).shuffle_grouping("a")
    assert chained_components(builder.create_topology(), Config(processing_guarantee="exactly_once")) == {}


def test_a_chain_of_three_runs_in_the_first_ones_tasks_one_to_one():
    """a (2 tasks) -> b (shuffle) -> c (local_or_shuffle, two streams of b): b's task i and c's
    task i run in a's task i, and each link delivers one-to-one."""
    builder = TopologyBuilder()
    builder.set_spout("a", Numbers(1), parallelism=2)
    builder.set_bolt("b", Relay(), parallelism=2).shuffle_grouping("a")
    builder.set_bolt("c", Sink(), parallelism=2).local_or_shuffle_grouping("b").none_grouping("b")
    topology = builder.create_topology()
    layout = topology.task_layout(1)  # a: 1, 2; b: 3, 4; c: 5, 6; acker: 7
    plan = chain_plan(topology, Config(), layout)
    assert plan.hosts == {3: 1, 4: 2, 5: 1, 6: 2}
    assert plan.guests(1) == [3, 5] and plan.guests(7) == []
    groupings = [sub.grouping for sub in plan.topology.components["c"].inputs]
    assert all(isinstance(g, ForwardGrouping) for g in groupings)
    assert groupings[0].describe() == "local_or_shuffle, chained"
    assert all(not isinstance(sub.grouping, ForwardGrouping) for sub in topology.components["c"].inputs)


# -- on Ray -----------------------------------------------------------------------------------
@pytest.fixture
def run(ray_cluster: str) -> Any:
    handles: list[TopologyHandle] = []

    def submit(topology: Any, **conf: Any) -> TopologyHandle:
        handle = submit_topology("chaining", Config(**{"message_timeout_secs": 3.0, **conf}), topology)
        handles.append(handle)
        return handle

    yield submit
    for handle in handles:
        handle.kill()


def sentences_topology(board: Any, total: int) -> Any:
    """numbers (2 tasks) -> words (2, shuffle: chained) -> record (1, fields)"""
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers(total), parallelism=2)
    builder.set_bolt("words", Words(), parallelism=2).shuffle_grouping("numbers")
    builder.set_bolt("record", Recorder(board)).fields_grouping("words", ["word"])
    return builder.create_topology()


@pytest.mark.parametrize("chaining", [True, False], ids=["chained", "not chained"])
def test_chained_topology_acks_every_tuple_and_delivers_each_once(run: Any, chaining: bool):
    """2,000 numbers through a chained bolt: every tree acked, every number recorded exactly
    once; the chained tasks run in their hosts' processes (one per spout task), and with
    chaining off each task has its own. A tree costs the acker three messages (the spout's
    init, the two bolts' acks); chained, the first bolt's ack folds into the init it executes
    before the init is sent, so most trees cost two."""
    board = Board.remote()
    handle = run(sentences_topology(board, 2000), chaining=chaining)
    assert handle.wait(timeout=60)
    tasks = handle.task_metrics()
    spouts = sorted(t for t, m in tasks.items() if m["component"] == "numbers")
    words = sorted(t for t, m in tasks.items() if m["component"] == "words")
    if chaining:
        assert [tasks[t]["host"] for t in words] == spouts
        assert [tasks[t]["pid"] for t in words] == [tasks[t]["pid"] for t in spouts]
    else:
        assert [tasks[t]["host"] for t in words] == words
        assert not {tasks[t]["pid"] for t in words} & {tasks[t]["pid"] for t in spouts}
    metrics = handle.metrics()
    assert metrics["numbers"]["acked"] == 2000 and metrics["numbers"]["failed"] == 0
    assert metrics["words"]["executed"] == 2000 and metrics["words"]["acked"] == 2000
    acker_messages = metrics["__acker"]["executed"]
    if chaining:
        assert acker_messages <= 2.5 * 2000, acker_messages
    else:
        assert acker_messages == 3 * 2000
    assert all(m["alive"] for m in tasks.values())
    handle.kill()  # the recorder hands in its last batch at cleanup
    assert sorted(ray.get(board.all.remote())) == [str(n) for n in sorted(range(2000), key=str)]


def test_killing_a_chains_process_restarts_both_tasks_and_every_tuple_is_acked(run: Any):
    """numbers -> relay (fields) -> sink (shuffle: chained to relay). Once 500 are acked, the
    relay's process is SIGKILLed: relay and sink come back together under their task ids, the
    trees they held time out and are replayed, and every number ends acked."""
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers(3000))
    builder.set_bolt("relay", Relay()).fields_grouping("numbers", ["n"])
    builder.set_bolt("sink", Sink()).shuffle_grouping("relay")
    handle = run(builder.create_topology(), max_spout_pending=300)
    assert eventually(lambda: handle.metrics()["numbers"]["acked"] >= 500, timeout=60)
    tasks = handle.task_metrics()
    (relay,) = [t for t, m in tasks.items() if m["component"] == "relay"]
    (sink,) = [t for t, m in tasks.items() if m["component"] == "sink"]
    assert tasks[sink]["host"] == relay and tasks[sink]["pid"] == tasks[relay]["pid"]
    os.kill(tasks[relay]["pid"], signal.SIGKILL)
    killed_at = time.monotonic()
    assert eventually(lambda: handle.task_metrics()[sink]["restarts"] == 1, timeout=30)
    assert handle.wait(timeout=40)
    after = handle.task_metrics()
    assert after[relay]["pid"] == after[sink]["pid"] != tasks[relay]["pid"]
    assert after[relay]["alive"] and after[sink]["alive"]
    assert handle.metrics()["numbers"]["acked"] == 3000
    print(f"chain killed: every tree acked {time.monotonic() - killed_at:.1f} s after the kill")
