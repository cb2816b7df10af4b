"""Resources on the Ray cluster: what a component asks for, what is refused, where tasks go.

In process: the options are checked key by key (a typo gets a "did you mean"), ``beside`` is
checked across the topology, and a topology's requests are weighed against nodes' totals. On
the session's Ray (two CPUs, two logical GPUs, one ``reader``: ``conftest.py``): each GPU task
sees its own GPU and sees one again after it is killed, a request no node can meet is refused
at submit naming the component, a spout asking for ``reader`` is placed where it is, and a task
whose resources are taken waits -- shown so in ``task_metrics`` -- until they are free.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rayflow import BasicBolt, Config, TopologyBuilder, TopologyContext, TopologyError, Tuple
from rayflow._resources import Ask, Resources, unmet
from rayflow._runtime import TopologyHandle, submit_topology
from rayflow._topology import Topology

from .conftest import SESSION_GPUS, eventually
from .topology_helpers import Board, Bounded, Endless, Sink


def problems(**resources: Any) -> list[str]:
    """What ``create_topology`` says about a bolt asking for ``resources``."""
    builder = TopologyBuilder()
    builder.set_spout("numbers", Endless())
    builder.set_bolt("embed", Sink(), resources=resources).shuffle_grouping("numbers")
    with pytest.raises(TopologyError) as caught:
        builder.create_topology()
    return caught.value.problems


class TestOptions:
    """The options a component gives, checked by ``create_topology`` before anything runs."""

    def test_ray_spellings_are_accepted_and_kept_on_the_component(self) -> None:
        builder = TopologyBuilder()
        builder.set_spout("numbers", Endless(), resources={"resources": {"reader": 1}})
        asked = {"num_cpus": 0.5, "num_gpus": 1, "memory": 2**30, "accelerator_type": "T4", "runtime_env": {}}
        builder.set_bolt("embed", Sink(), 2, resources=asked).shuffle_grouping("numbers")
        topology = builder.create_topology()
        assert topology.components["embed"].resources == asked
        assert Resources.of(topology.components["numbers"].resources).request(0.01) == {"CPU": 0.01, "reader": 1.0}

    def test_unknown_key_gets_a_did_you_mean(self) -> None:
        assert problems(num_gpu=1) == ["bolt 'embed': resources.num_gpu: unknown key (did you mean 'num_gpus'?)"]

    def test_options_rayflow_sets_itself_are_refused_with_the_reason(self) -> None:
        [problem] = problems(max_restarts=3)
        assert problem.startswith("bolt 'embed': resources.max_restarts: rayflow sets max_restarts itself")
        assert "rayflow.max.task.restarts" in problem

    @pytest.mark.parametrize(
        "given, said",
        [
            ({"num_gpus": -1}, "resources.num_gpus: Input should be greater than or equal to 0, got -1"),
            ({"num_cpus": True}, "resources.num_cpus: Input should be a valid number, got True"),
            ({"num_gpus": 1.5}, "resources.num_gpus: more than one GPU must be a whole number, got 1.5"),
            ({"memory": "8GB"}, "resources.memory: Input should be a valid integer, got '8GB'"),
            ({"resources": {"GPU": 1}}, "resources.resources: ask for GPU with num_gpus, not in resources"),
            ({"resources": {"reader": 0.00001}}, "resources.resources: Ray counts resources in steps of 0.0001"),
            ({"scheduling_strategy": "PACK"}, "resources.scheduling_strategy: must be one of SPREAD, DEFAULT"),
        ],
    )
    def test_bad_values_are_refused(self, given: dict[str, Any], said: str) -> None:
        [problem] = problems(**given)
        assert problem.startswith(f"bolt 'embed': {said}"), problem

    def test_a_ray_scheduling_strategy_object_is_taken_as_is(self) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        strategy = NodeAffinitySchedulingStrategy("ab" * 28, soft=True)
        assert Resources.of({"scheduling_strategy": strategy}).scheduling_strategy is strategy

    def test_resources_must_be_a_mapping(self) -> None:
        builder = TopologyBuilder()
        builder.set_spout("numbers", Endless(), resources=["num_gpus"])  # type: ignore[arg-type]
        with pytest.raises(TopologyError, match=r"'numbers': resources must be a dict of Ray actor options"):
            builder.create_topology()


class TestBeside:
    def topology(self, **beside: str) -> list[str]:
        builder = TopologyBuilder()
        builder.set_spout("numbers", Endless(), resources={"beside": beside["numbers"]} if "numbers" in beside else {})
        builder.set_bolt("split", Sink(), 2, resources={"beside": beside.get("split", "numbers")}).shuffle_grouping(
            "numbers"
        )
        try:
            builder.create_topology()
        except TopologyError as exc:
            return exc.problems
        return []

    def test_beside_another_component_is_sound(self) -> None:
        assert self.topology() == []

    def test_an_unknown_component_gets_a_did_you_mean(self) -> None:
        assert self.topology(split="number") == [
            "bolt 'split': resources.beside: no component 'number' (did you mean 'numbers'?) (components: numbers)"
        ]

    def test_itself_and_a_round_are_refused(self) -> None:
        assert self.topology(split="split") == ["bolt 'split': resources.beside: a component cannot be beside itself"]
        [problem] = self.topology(numbers="split")
        assert problem.startswith("resources.beside goes round: ") and "'split'" in problem

    def test_beside_and_a_scheduling_strategy_are_refused_together(self) -> None:
        assert problems(beside="numbers", scheduling_strategy="SPREAD") == [
            "bolt 'embed': resources.beside: give beside or scheduling_strategy, not both: beside decides the strategy"
        ]

    def test_each_task_starts_on_the_node_of_the_task_of_the_same_index(self) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from rayflow._runtime.placement import Placement

        builder = TopologyBuilder()
        builder.set_spout("numbers", Endless(), 2)
        builder.set_bolt("split", Sink(), 3, resources={"beside": "numbers"}).shuffle_grouping("numbers")
        topology = builder.create_topology()
        layout = topology.task_layout(1)  # numbers: 1, 2; split: 3, 4, 5; the acker: 6
        placement = Placement("beside", topology, Config(), layout)
        nodes = {1: "a" * 56, 2: "b" * 56}
        assert placement.options(1, nodes)["scheduling_strategy"] == "SPREAD"
        placed = [placement.options(task, nodes)["scheduling_strategy"] for task in (3, 4, 5)]
        assert all(isinstance(s, NodeAffinitySchedulingStrategy) and s.soft for s in placed)
        assert [s.node_id for s in placed] == ["a" * 56, "b" * 56, "a" * 56]
        assert placement.options(3, {})["scheduling_strategy"] == "SPREAD"  # its partner not placed (yet)


NODE = {"CPU": 2.0, "GPU": 2.0, "memory": 8 * 2**30, "reader": 1.0, "node:10.0.0.1": 1.0}


def ask(component: str, tasks: int, **resources: Any) -> Ask:
    asked = Resources.of(resources)
    return Ask(component, "bolt", tasks, asked.request(0.01), asked.asked(0.01))


class TestUnmet:
    """A topology's requests against the nodes' totals, in plain Python."""

    def test_what_fits_is_not_reported(self) -> None:
        assert unmet([ask("a", 2, num_gpus=1), ask("b", 1, resources={"reader": 1}), ask("c", 20)], [NODE]) == []

    def test_a_task_no_node_can_hold_names_the_component_and_the_cluster(self) -> None:
        assert unmet([ask("embed", 1, num_gpus=4)], [NODE, {"CPU": 4.0}]) == [
            "bolt 'embed' asks for num_gpus=4 per task, and no node has that much: the most on one node is GPU 2 "
            "(the cluster has 2 node(s): CPU 6, GPU 2, memory 8 GiB, 'reader' 1)"
        ]

    def test_a_resource_no_node_has(self) -> None:
        [found] = unmet([ask("reader", 1, resources={"writer": 1})], [NODE])
        assert found.startswith("bolt 'reader' asks for resources={'writer': 1} per task, and no node has 'writer'")

    def test_amounts_that_fit_on_different_nodes_only(self) -> None:
        [found] = unmet([ask("embed", 1, num_gpus=1, resources={"writer": 1})], [NODE, {"CPU": 1.0, "writer": 1.0}])
        assert "no node has all of it at once" in found

    def test_more_in_all_than_the_cluster_has(self) -> None:
        assert unmet([ask("embed", 2, num_gpus=1), ask("score", 1, num_gpus=1)], [NODE]) == [
            "GPU: the tasks ask for 3 in all (bolt 'embed' 2 x 1, bolt 'score' 1 x 1), and the cluster has 2"
        ]


class TestARestartThatWaits:
    """The supervisor's bound on a start attempt (placing the actor, starting its process) is
    not spent while Ray reports the actor waiting for resources: a new actor would only queue
    behind it. Past the bound otherwise, the attempt is made again."""

    class Waiting:
        def __init__(self, tasks: set[int]) -> None:
            self.tasks = tasks

        def waiting(self, tasks: Any) -> set[int]:
            return self.tasks & set(tasks)

        def request(self, task: int) -> dict[str, float]:
            return {"CPU": 0.01, "GPU": 1.0}

    def overdue(self, waiting: set[int]) -> tuple[Any, list[str]]:
        from rayflow._runtime.supervisor import ATTEMPT_SECS, Restart, Supervisor

        placement: Any = self.Waiting(waiting)
        supervisor = Supervisor("t", {1: "embed"}, {}, {}, {}, lambda task: None, lambda task: False, -1, placement)
        failed: list[str] = []
        supervisor._failed = lambda restart, cause: failed.append(cause)  # type: ignore[method-assign]
        restart = Restart(1, "killed", 0.0, object(), object(), "listening", deadline=0.0)
        supervisor._overdue(restart, 100.0)
        assert restart.deadline in (0.0, 100.0 + ATTEMPT_SECS)
        return restart, failed

    def test_an_attempt_waiting_for_resources_is_given_more_time(self) -> None:
        restart, failed = self.overdue({1})
        assert failed == [] and restart.deadline > 100.0 and restart.waited

    def test_an_attempt_overdue_for_another_reason_is_made_again(self) -> None:
        restart, failed = self.overdue(set())
        assert failed == ["not started within 30 s (listening)"] and not restart.waited


# -- on the session's Ray --------------------------------------------------------------------


class GpuBolt(BasicBolt):
    """Records, once per start of its task, the GPUs Ray gave the process."""

    def __init__(self, board: Any) -> None:
        self.board = board

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        import ray

        self.board.add.remote([(context.this_task_id, os.getpid(), ray.get_gpu_ids())])

    def execute(self, tup: Tuple, collector: Any) -> None:
        pass


@pytest.fixture
def run(ray_cluster: str) -> Iterator[Any]:
    handles: list[TopologyHandle] = []

    def submit(topology: Topology, name: str = "resources") -> TopologyHandle:
        handle = submit_topology(name, Config(message_timeout_secs=5), topology)
        handles.append(handle)
        return handle

    yield submit
    for handle in handles:
        handle.kill()


def test_each_gpu_task_has_its_own_gpu_and_gets_one_again_when_restarted(run: Any) -> None:
    import ray

    board = Board.remote()
    builder = TopologyBuilder()
    builder.set_spout("numbers", Endless(tracked=False))
    builder.set_bolt("embed", GpuBolt(board), SESSION_GPUS, resources={"num_gpus": 1}).shuffle_grouping("numbers")
    handle = run(builder.create_topology())

    def starts() -> list[tuple[int, int, list[Any]]]:
        return [tuple(r) for r in ray.get(board.all.remote())]  # type: ignore[misc]

    assert eventually(lambda: len(starts()) == SESSION_GPUS, timeout=60)
    first = {task: ids for task, _, ids in starts()}
    assert all(len(ids) == 1 for ids in first.values()), first
    assert len({ids[0] for ids in first.values()}) == SESSION_GPUS  # one each, none shared
    tasks = handle.task_metrics()
    for task, ids in first.items():
        assert tasks[task]["gpu_ids"] == ids
        assert tasks[task]["resources"] == {"CPU": 0.01, "GPU": 1.0}
        assert tasks[task]["state"] == "running" and tasks[task]["node_ip"]

    victim = min(first)
    os.kill(next(pid for task, pid, _ in starts() if task == victim), signal.SIGKILL)
    assert eventually(lambda: len(starts()) == SESSION_GPUS + 1, timeout=60)
    task, _, ids = starts()[-1]
    assert task == victim and len(ids) == 1
    assert ids != first[max(first)]  # the GPU the killed task let go, not its sibling's
    assert eventually(lambda: handle.task_metrics()[victim]["state"] == "running", timeout=30)
    assert handle.task_metrics()[victim]["restarts"] == 1


@pytest.mark.parametrize(
    "parallelism, resources, said",
    [
        (1, {"num_gpus": SESSION_GPUS + 1}, "bolt 'embed' asks for num_gpus=3 per task, and no node has that much"),
        (1, {"resources": {"writer": 1}}, "bolt 'embed' asks for resources={'writer': 1} per task, and no node has"),
        (SESSION_GPUS + 1, {"num_gpus": 1}, "GPU: the tasks ask for 3 in all (bolt 'embed' 3 x 1), and the cluster"),
    ],
    ids=["too-many-per-task", "unknown-resource", "too-many-in-all"],
)
def test_a_request_the_cluster_can_never_meet_is_refused_at_submit(
    ray_cluster: str, parallelism: int, resources: dict[str, Any], said: str
) -> None:
    builder = TopologyBuilder()
    builder.set_spout("numbers", Endless())
    builder.set_bolt("embed", Sink(), parallelism, resources=resources).shuffle_grouping("numbers")
    started = time.monotonic()
    with pytest.raises(TopologyError) as caught:
        submit_topology("never", None, builder.create_topology())
    assert time.monotonic() - started < 10
    [problem] = caught.value.problems
    assert problem.startswith(said), problem
    assert problem.endswith("; no autoscaler is configured to add a node")


def test_a_custom_resource_places_a_spout_and_a_bolt_beside_it(run: Any) -> None:
    import ray

    builder = TopologyBuilder()
    builder.set_spout("reader", Bounded(500), resources={"resources": {"reader": 1}})
    builder.set_bolt("sink", Sink(), 2, resources={"beside": "reader"}).shuffle_grouping("reader")
    handle = run(builder.create_topology())
    assert ray.available_resources().get("reader", 0) == 0  # the spout holds the only one
    tasks = handle.task_metrics()
    [spout] = [m for m in tasks.values() if m["component"] == "reader"]
    assert spout["resources"] == {"CPU": 0.01, "reader": 1.0}
    assert all(m["node_id"] == spout["node_id"] for m in tasks.values() if m["component"] == "sink")
    assert handle.wait(timeout=60)
    assert handle.metrics()["reader"]["acked"] == 500
    handle.kill()
    assert eventually(lambda: ray.available_resources().get("reader", 0) == 1, timeout=20)


def test_a_task_whose_resources_are_taken_waits_and_says_so(run: Any) -> None:
    """The only ``reader`` is held by another actor: the topology starts without its spout,
    ``task_metrics`` shows the spout waiting for resources, and once the reader is free the
    spout starts and every tuple is acked."""
    import ray

    holder = ray.remote(num_cpus=0, resources={"reader": 1})(Holding).remote()
    ray.get(holder.ready.remote())
    builder = TopologyBuilder()
    builder.set_spout("reader", Bounded(300), resources={"resources": {"reader": 1}})
    builder.set_bolt("sink", Sink(), 2).shuffle_grouping("reader")
    started = time.monotonic()
    handle = run(builder.create_topology())
    assert time.monotonic() - started < 30
    [spout] = [t for t, c in handle.task_metrics().items() if c["component"] == "reader"]
    assert eventually(lambda: handle.task_metrics()[spout]["state"] == "waiting for resources", timeout=20)
    assert not handle.task_metrics()[spout]["alive"]
    assert handle.metrics()["sink"]["alive"]  # the rest runs meanwhile

    ray.kill(holder)
    assert eventually(lambda: handle.task_metrics()[spout]["state"] == "running", timeout=60)
    assert handle.wait(timeout=60)
    assert handle.metrics()["reader"]["acked"] == 300
    assert handle.task_metrics()[spout]["restarts"] == 0  # its first start, not a restart


class Holding:
    """An actor that only holds what it was created with."""

    def ready(self) -> bool:
        return True
