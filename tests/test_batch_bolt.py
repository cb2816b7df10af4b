"""``BatchBolt``: inputs executed in batches, reliability kept per tuple.

The scenarios run in process on the simulated clock (``complete_topology``, or
``InProcessTopology`` driven step by step when the test feeds tuples and moves the clock
itself): numbers go from a spout through a ``Doubler`` (``tests/batch_components.py``), which
records its batches, into an optional sink. One test runs the same on the session's Ray.
"""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rayflow import BatchBolt, Config, TopologyBuilder, TopologyError, submit_topology
from rayflow._executors.batch_bolt import FLUSH_STEPS
from rayflow._metrics import BATCH_SIZE_BUCKETS
from rayflow._topology import Topology
from rayflow._ui._prometheus import PrometheusExposition
from rayflow._ui._recorder import MetricsRecorder
from rayflow.testing import InProcessTopology, complete_topology
from rayflow.topology_file import SpecError, load_topology

from .batch_components import Doubler, FailSome, Log, Numbers, Settle, Unanchored
from .ui_helpers import FakeHandle

TIMEOUT_SECS = Doubler.batch_timeout_ms / 1000.0


def topology(
    bolt: Any,
    spout: Numbers | None = None,
    sink: Any = None,
    parallelism: int = 1,
    stateful_sink: bool = False,
) -> Topology:
    """numbers -> double (``bolt``) -> sink (when given) and log (a stateful bolt, when asked)."""
    builder = TopologyBuilder()
    builder.set_spout("numbers", spout or Numbers())
    builder.set_bolt("double", bolt, parallelism).fields_grouping("numbers", ["n"])  # a replay meets its task
    if sink is not None:  # the one output of each batch, or the one of each tuple
        builder.set_bolt("sink", sink).shuffle_grouping("double", "sums" if bolt.whole_batch else "default")
    if stateful_sink:
        builder.set_bolt("log", Log()).shuffle_grouping("double")
    return builder.create_topology()


def sized(bolt: BatchBolt, batch_size: int, batch_timeout_ms: float | None = None) -> BatchBolt:
    bolt.batch_size = batch_size
    if batch_timeout_ms is not None:
        bolt.batch_timeout_ms = batch_timeout_ms
    return bolt


def batches(run: Any) -> list[list[int]]:
    """Every batch the ``double`` tasks executed, each task's in order, task after task."""
    return [batch for task in run.components("double") for batch in task.batches]


def fed(bolt: BatchBolt, *numbers: int, **kwargs: Any) -> InProcessTopology:
    """An in-process run of numbers -> ``bolt``, ``numbers`` emitted and delivered; the clock at 0."""
    run = InProcessTopology(topology(bolt, **kwargs))
    spout: Numbers = run.components("numbers")[0]
    spout.feed(*numbers)
    run.run()
    return run


# -- batches --------------------------------------------------------------------------------------


class TestBatches:
    def test_full_batches_then_the_rest_after_the_timeout(self) -> None:
        """Ten numbers, batches of four: two full batches at once, the last two on the clock,
        every output anchored to its input and every input acked."""
        result = complete_topology(topology(sized(Doubler(), 4), Numbers(10)))
        assert batches(result) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
        assert result.emitted("double") == [[n, 2 * n] for n in range(10)]
        assert sorted(result.acked("numbers")) == list(range(10))
        assert result.failed("numbers") == []

    def test_the_class_attributes_are_the_defaults_an_instance_overrides(self) -> None:
        bolt = Doubler()
        assert (bolt.batch_size, bolt.batch_timeout_ms) == (64, 20.0)
        bolt.batch_size = 3
        assert Doubler.batch_size == 64
        result = complete_topology(topology(bolt, Numbers(7)))
        assert batches(result) == [[0, 1, 2], [3, 4, 5], [6]]

    def test_batch_size_one_executes_each_tuple_alone(self) -> None:
        result = complete_topology(topology(sized(Doubler(), 1), Numbers(3)))
        assert batches(result) == [[0], [1], [2]]

    def test_each_task_batches_what_it_gets(self) -> None:
        """Two tasks: each executes only its own inputs, in the order they came."""
        result = complete_topology(topology(sized(Doubler(), 8), Numbers(40), parallelism=2))
        per_task = [[n for batch in task.batches for n in batch] for task in result.components("double")]
        assert sorted(per_task[0] + per_task[1]) == list(range(40))
        assert all(numbers == sorted(numbers) and numbers for numbers in per_task)
        assert all(len(batch) <= 8 for batch in batches(result))


# -- acks and fails -------------------------------------------------------------------------------


class TestAcking:
    def test_nothing_is_acked_before_its_batch_is_executed(self) -> None:
        run = fed(sized(Doubler(), 4), 1, 2, 3)
        assert run.acked("numbers") == [] and run.pending_trees() == 3
        run.components("numbers")[0].feed(4)
        run.run()
        assert sorted(run.acked("numbers")) == [1, 2, 3, 4]

    def test_a_failed_tuple_is_replayed_and_the_rest_of_its_batch_acked(self) -> None:
        """``collector.fail`` fails one tuple: its spout replays it; the others of its batch
        are acked when ``execute_batch`` returns."""
        result = complete_topology(topology(sized(Doubler(fail_once=(2, 5)), 4), Numbers(8, replay=True)))
        assert result.failed("numbers") == [2, 5]
        assert sorted(result.acked("numbers")) == list(range(8))
        assert batches(result)[:2] == [[0, 1, 2, 3], [4, 5, 6, 7]]
        assert sorted(n for n, _ in result.emitted("double")) == list(range(8))  # 2 and 5 on their replay
        assert result.metrics()["double"]["failed"] == 2

    def test_an_exception_fails_the_whole_batch_and_the_task_goes_on(self) -> None:
        result = complete_topology(topology(sized(Doubler(raise_on=5), 4), Numbers(12, replay=True)))
        assert sorted(result.failed("numbers")) == [4, 5, 6, 7]
        assert sorted(result.acked("numbers")) == list(range(12))
        metrics = result.metrics()["double"]
        assert metrics["errors"] == 1
        assert "execute_batch raised on a batch of 4 tuple(s): ValueError" in metrics["last_error"]
        assert metrics["failed"] == 4

    def test_an_output_failed_downstream_fails_only_its_own_input(self) -> None:
        """Anchoring is per tuple: the sink failing the output of 6 fails 6's tree alone."""
        topo = topology(sized(Doubler(), 4), Numbers(8, replay=True), sink=FailSome((6,)))
        result = complete_topology(topo)
        assert result.failed("numbers") == [6]
        assert sorted(result.acked("numbers")) == list(range(8))

    def test_an_output_anchored_to_the_whole_batch_fails_every_input_of_it(self) -> None:
        """One ``[sum, count]`` per batch, anchored to every tuple of it: failing it replays
        the batch (0..3 sum to 6)."""
        sink = FailSome((6,), field="sum")
        result = complete_topology(topology(sized(Doubler(whole_batch=True), 4), Numbers(8, replay=True), sink=sink))
        assert sorted(result.failed("numbers")) == [0, 1, 2, 3]
        assert sorted(result.acked("numbers")) == list(range(8))

    @pytest.mark.parametrize("failing", [False, True])
    def test_inputs_in_several_trees_are_acked_or_failed_in_each(self, failing: bool) -> None:
        """A second batch bolt takes the per-batch sums, each in the trees of four numbers:
        acking them completes every number; failing them fails every number."""
        builder = TopologyBuilder()
        builder.set_spout("numbers", Numbers(8))
        builder.set_bolt("double", sized(Doubler(whole_batch=True), 4)).shuffle_grouping("numbers")
        builder.set_bolt("settle", sized(Settle(failing), 2)).shuffle_grouping("double", "sums")
        result = complete_topology(builder.create_topology())
        assert sorted(result.failed("numbers") if failing else result.acked("numbers")) == list(range(8))
        assert (result.acked("numbers") if failing else result.failed("numbers")) == []

    def test_an_emit_without_anchors_is_refused_and_fails_the_batch(self) -> None:
        result = complete_topology(topology(sized(Unanchored(), 2), Numbers(2)))
        metrics = result.metrics()["double"]
        assert metrics["emitted"] == 0 and metrics["failed"] == 2
        assert "EmitError: batch bolt 'double': emit on stream 'default' without anchors" in metrics["last_error"]
        assert "anchors=tup" in metrics["last_error"]


# -- the batch timeout, on the simulated clock ----------------------------------------------------


class TestTimeout:
    def test_a_partial_batch_goes_when_its_first_tuple_has_waited_the_timeout(self) -> None:
        run = fed(sized(Doubler(), 8), 1, 2, 3)
        run.advance(TIMEOUT_SECS * (FLUSH_STEPS - 1) / FLUSH_STEPS)
        assert batches(run) == []
        run.advance(TIMEOUT_SECS / FLUSH_STEPS)
        assert batches(run) == [[1, 2, 3]]
        assert sorted(run.acked("numbers")) == [1, 2, 3]

    @pytest.mark.parametrize("arrival", [0.001, 0.0049, 0.0051, 0.0137])
    def test_a_partial_batch_never_waits_longer_than_the_timeout(self, arrival: float) -> None:
        """Whenever its first tuple comes, the batch goes within the timeout, and not before
        all but one step of it."""
        run = InProcessTopology(topology(sized(Doubler(), 8)))
        run.advance(arrival)
        run.components("numbers")[0].feed(1)
        run.run()
        step = TIMEOUT_SECS / FLUSH_STEPS
        run.advance(TIMEOUT_SECS - step - 1e-9)
        assert batches(run) == []
        run.advance(step)
        assert batches(run) == [[1]]

    def test_a_longer_timeout_holds_longer(self) -> None:
        run = fed(sized(Doubler(), 8, batch_timeout_ms=1000), 1)
        run.advance(0.5)
        assert batches(run) == []
        run.advance(0.5)
        assert batches(run) == [[1]]

    def test_tuples_after_a_timed_out_batch_start_a_new_one(self) -> None:
        run = fed(sized(Doubler(), 8), 1)
        run.advance(TIMEOUT_SECS)
        run.components("numbers")[0].feed(2, 3)
        run.run()
        run.advance(TIMEOUT_SECS)
        assert batches(run) == [[1], [2, 3]]


# -- ticks ----------------------------------------------------------------------------------------


class TestTicks:
    def test_ticks_never_enter_a_batch_and_go_to_execute_tick(self) -> None:
        """Ticks every second for three seconds while a batch fills: the batch holds numbers
        only, each tick went to ``execute_tick`` (whose emit needs no anchors), and no tick is
        counted as executed."""
        topo = topology(sized(Doubler(), 4, batch_timeout_ms=60_000))
        run = InProcessTopology(topo, Config(tick_tuple_freq_secs=1))
        spout: Numbers = run.components("numbers")[0]
        for n in range(4):
            spout.feed(n)
            run.run()
            run.advance(1.0)
        bolt: Doubler = run.components("double")[0]
        assert bolt.batches == [[0, 1, 2, 3]]
        assert bolt.ticks == 4
        assert [values for values in run.emitted("double") if values[0] == -1] == [[-1, 1], [-1, 2], [-1, 3], [-1, 4]]
        assert run.metrics()["double"]["executed"] == 4 and run.metrics()["double"]["errors"] == 0

    def test_a_batch_bolt_ignores_ticks_unless_it_asks(self) -> None:
        class Quiet(BatchBolt):
            def execute_batch(self, tuples: list[Any], collector: Any) -> None:
                pass

        run = InProcessTopology(topology(Quiet()), Config(tick_tuple_freq_secs=1))
        run.advance(3.0)
        assert run.metrics()["double"]["errors"] == 0


# -- checkpoints ----------------------------------------------------------------------------------


class TestCheckpoints:
    def test_a_checkpoint_executes_the_batch_held_before_it_is_passed_on(self) -> None:
        """With a stateful bolt downstream, a PREPARE reaches it after the outputs of every
        tuple the batch bolt had received, though the batch was neither full nor timed out."""
        topo = topology(sized(Doubler(), 64, batch_timeout_ms=600_000), stateful_sink=True)
        conf = Config(checkpoint_interval_ms=1000)
        run = InProcessTopology(topo, conf)
        run.advance(1.0)  # the state is initialized, a first transaction prepared
        run.components("numbers")[0].feed(1, 2, 3)
        run.run()
        log: Log = run.components("log")[0]
        before = len(log.log)
        assert batches(run) == []
        run.advance(1.0)
        assert batches(run) == [[1, 2, 3]]
        assert log.log[before:] == [("tuple", 1), ("tuple", 2), ("tuple", 3), ("prepare", 2)]
        run.advance(2.0)
        assert sorted(run.acked("numbers")) == [1, 2, 3]


# -- metrics --------------------------------------------------------------------------------------


class TestMetrics:
    def test_batch_sizes_are_a_histogram_beside_the_usual_counters(self) -> None:
        result = complete_topology(topology(sized(Doubler(), 4), Numbers(10)))
        metrics = result.metrics()["double"]
        assert (metrics["executed"], metrics["acked"], metrics["emitted"]) == (10, 10, 10)
        assert metrics["batch_size"]["p50"] == 4 and metrics["batch_size"]["mean"] == pytest.approx(10 / 3)

    def test_a_task_snapshot_has_the_buckets_prometheus_exports(self) -> None:
        run = fed(sized(Doubler(), 4), *range(10))
        run.advance(TIMEOUT_SECS)
        (task,) = run.tasks("double")
        snapshot = task.snapshot()
        sizes = snapshot["sizes"]["batch_size"]
        assert sizes["count"] == 3 and sizes["total"] == 10
        assert sizes["buckets"][BATCH_SIZE_BUCKETS.index(2)] == 1 and sizes["buckets"][BATCH_SIZE_BUCKETS.index(4)] == 3

        handle = FakeHandle("numbers")
        handle.tasks = {task.task_id: {**snapshot, "component": "double", "alive": True, "restarts": 0}}
        recorder = MetricsRecorder(handle)
        recorder.poll()
        text = PrometheusExposition(recorder).render().decode()
        exported = {
            s.labels["le"]: s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "rayflow_task_batch_size_bucket"
        }
        assert list(exported) == [f"{b:g}" for b in BATCH_SIZE_BUCKETS] + ["+Inf"]
        assert exported["1"] == 0 and exported["2"] == 1 and exported["4"] == 3 and exported["+Inf"] == 3
        assert "rayflow_component_batch_size_sum" in text


# -- settings -------------------------------------------------------------------------------------


class TestSettings:
    @pytest.mark.parametrize("value", [0, -1, 2.5, True, "64"])
    def test_batch_size_is_an_integer_of_at_least_one(self, value: Any) -> None:
        bolt = Doubler()
        bolt.batch_size = value
        with pytest.raises(TopologyError, match=r"bolt 'double': batch_size must be an integer >= 1, got"):
            topology(bolt)

    @pytest.mark.parametrize("value", [0, -5, float("inf"), float("nan"), "20"])
    def test_batch_timeout_ms_is_a_positive_number(self, value: Any) -> None:
        bolt = Doubler()
        bolt.batch_timeout_ms = value
        with pytest.raises(TopologyError, match=r"bolt 'double': batch_timeout_ms must be a number of milliseconds"):
            topology(bolt)

    def test_the_default_pending_budget_covers_two_batches_of_each_task(self) -> None:
        """Left unset, ``max_spout_pending`` is raised to what the batches need: two batches
        (one filling, one executing) of each of the bolt's tasks, shared over the spout tasks."""
        run = InProcessTopology(topology(sized(Doubler(), 4_000), parallelism=2))
        assert run.conf.max_spout_pending == 2 * 4_000 * 2

    def test_a_budget_set_below_a_batch_is_named_with_the_fix(self, caplog: pytest.LogCaptureFixture) -> None:
        with caplog.at_level(logging.WARNING, logger="rayflow"):
            run = InProcessTopology(topology(sized(Doubler(), 64)), Config(max_spout_pending=50))
        assert run.conf.max_spout_pending == 50
        (warning,) = [r.getMessage() for r in caplog.records if "max_spout_pending=50" in r.getMessage()]
        assert "Doubler 'double'" in warning and "batch_size=64" in warning and "128 pending trees" in warning
        assert "lower batch_size" in warning

    def test_a_small_budget_still_completes_on_the_timeout(self) -> None:
        """Below a batch, the batches never fill: each goes on its timeout, and all is acked."""
        result = complete_topology(topology(sized(Doubler(), 8), Numbers(12)), Config(max_spout_pending=3))
        assert result.finished and sorted(result.acked("numbers")) == list(range(12))
        assert all(len(batch) <= 3 for batch in batches(result))


# -- topology files -------------------------------------------------------------------------------

TOPOLOGY_FILE = """\
name: batches
spouts:
  - {id: numbers, class: tests.batch_components.Numbers, kwargs: {total: 10}}
bolts:
  - {id: double, class: tests.batch_components.Doubler, batch_size: 4, batch_timeout_ms: 250}
streams:
  - {from: numbers, to: double, grouping: {type: shuffle}}
"""


class TestTopologyFile:
    def write(self, tmp_path: Path, text: str) -> Path:
        path = tmp_path / "batches.yaml"
        path.write_text(textwrap.dedent(text))
        return path

    def test_batch_size_and_timeout_are_keys_of_the_component(self, tmp_path: Path) -> None:
        loaded = load_topology(self.write(tmp_path, TOPOLOGY_FILE))
        bolt = loaded.topology.components["double"].component
        assert isinstance(bolt, Doubler) and (bolt.batch_size, bolt.batch_timeout_ms) == (4, 250.0)
        assert Doubler.batch_size == 64  # the instance's, not the class's
        result = complete_topology(loaded.topology)
        assert batches(result) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]

    def test_on_a_bolt_that_does_not_batch_they_are_a_problem_at_their_line(self, tmp_path: Path) -> None:
        text = TOPOLOGY_FILE.replace("tests.batch_components.Doubler", "tests.batch_components.FailSome")
        with pytest.raises(SpecError) as raised:
            load_topology(self.write(tmp_path, text))
        message = str(raised.value)
        assert "batches.yaml:5" in message
        assert "'batch_size' and 'batch_timeout_ms': only a rayflow.BatchBolt takes them" in message

    @pytest.mark.parametrize("setting", ["batch_size: 0", "batch_timeout_ms: 0", "batch_size: many"])
    def test_bad_values_are_refused_at_their_line(self, tmp_path: Path, setting: str) -> None:
        text = TOPOLOGY_FILE.replace("batch_size: 4, batch_timeout_ms: 250", setting)
        with pytest.raises(SpecError) as raised:
            load_topology(self.write(tmp_path, text))
        assert "batches.yaml:5" in str(raised.value) and setting.split(":")[0] in str(raised.value)


# -- on Ray ---------------------------------------------------------------------------------------


def test_batches_on_ray_ack_every_tuple_and_replay_the_failed(ray_cluster: str) -> None:
    """On the session's Ray, on the wall clock: 500 numbers through two batch tasks (batches of
    16, failing two numbers once and raising on one batch): every number is acked in the end,
    the batch sizes reach the metrics, no batch is larger than its size."""
    bolt = sized(Doubler(fail_once=(7, 300), raise_on=250), 16)
    topo = topology(bolt, Numbers(500, replay=True), parallelism=2)
    handle = submit_topology("batches", Config(message_timeout_secs=30), topo)
    try:
        assert handle.wait(timeout=120)
        metrics = handle.metrics()
        tasks = [m for m in handle.task_metrics().values() if m["component"] == "double"]
    finally:
        handle.kill()
    assert metrics["numbers"]["acked"] == 500
    assert 2 < metrics["numbers"]["failed"] <= 2 + 16
    assert metrics["double"]["errors"] == 1
    sizes = [m["sizes"]["batch_size"] for m in tasks]
    assert sum(s["total"] for s in sizes) == metrics["double"]["executed"]
    assert max(x for s in sizes for x in s["recent"]) <= 16
    assert metrics["double"]["batch_size"]["p50"] > 1


def test_the_inference_example_on_ray_with_a_gpu_asked_for(ray_cluster: str) -> None:
    """``examples/inference.py`` on the session's Ray (two logical GPUs, no CUDA: numpy runs),
    two model tasks asking for a GPU each: every event is acked and both model tasks executed
    batches."""
    from examples.inference import CONF, build

    handle = submit_topology("inference", CONF, build(events=3_000, gpus=1, model_tasks=2))
    try:
        assert handle.wait(timeout=180)
        metrics = handle.metrics()
        tasks = [m for m in handle.task_metrics().values() if m["component"] == "model"]
    finally:
        handle.kill()
    assert metrics["events"]["acked"] == 3_000 and metrics["model"]["errors"] == 0
    assert len(tasks) == 2 and all(m["sizes"]["batch_size"]["count"] > 0 for m in tasks)
