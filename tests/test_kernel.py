"""The C kernel of a ``BasicBolt``'s emit and run loop, a spout's emit and a tuple's subscript
(``rayflow/_speedups.c``), and which build runs (``rayflow/_executors/kernel.py``).

The suite runs on the build this process loaded: the kernel where the install built it, pure
Python where it could not or ``RAYFLOW_PURE_PYTHON=1`` is set. One test here runs the in-process
semantics tests on the other build, in a child process, so that both builds are held to them in
one run of the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from typer.testing import CliRunner

from benchmarks.c_kernel import SEMANTICS_TESTS
from examples.wordcount import SplitSentence, WordCount
from rayflow import BasicBolt, BasicOutputCollector, Spout, TopologyBuilder
from rayflow._acking.ledger_build import LEDGER_BUILD
from rayflow._cli import app
from rayflow._context import TopologyContext
from rayflow._executors import basic_bolt, kernel
from rayflow._executors.kernel import PURE_PYTHON_ENV, load
from rayflow._metrics import TaskMetrics
from rayflow._outbox import AckerMail, DataBatch
from rayflow._router import Route
from rayflow._tuple import Tuple as RealTuple
from rayflow._tuple import TupleSource
from rayflow.testing import CompletedTopology, complete_topology

REPO = Path(__file__).resolve().parents[1]
on_the_kernel = pytest.mark.skipif(kernel.KERNEL is None, reason=f"the C kernel does not run here: {kernel.BUILD}")


def other_build_env() -> dict[str, str] | None:
    """The environment of a child process that runs the other build, or ``None`` if there is
    none here (the kernel is not built)."""
    env = {k: v for k, v in os.environ.items() if k != PURE_PYTHON_ENV}
    if kernel.KERNEL is not None:
        return {**env, PURE_PYTHON_ENV: "1"}
    if load({})[0] is not None:  # built, and off only because RAYFLOW_PURE_PYTHON=1 is set
        return env
    return None


class TestWhichBuildRuns:
    def test_rayflow_pure_python_1_runs_pure_python_where_the_kernel_is_built(self) -> None:
        imported: list[str] = []

        def import_kernel() -> ModuleType:
            imported.append("rayflow._speedups")
            return ModuleType("rayflow._speedups")

        found, build = load({PURE_PYTHON_ENV: "1"}, import_kernel)
        assert (found, build, imported) == (None, "pure Python: RAYFLOW_PURE_PYTHON=1", [])

    def test_a_kernel_that_does_not_import_runs_pure_python(self) -> None:
        """Not built, or built against another Python: the import fails, nothing crashes."""

        def built_for_another_python() -> Any:
            raise ImportError("rayflow/_speedups.so: undefined symbol: _PyObject_GenericGetDict")

        found, build = load({}, built_for_another_python)
        assert found is None
        assert build == "pure Python: no C kernel (rayflow/_speedups.so: undefined symbol: _PyObject_GenericGetDict)"

    def test_a_kernel_whose_setup_refuses_the_classes_runs_pure_python(self) -> None:
        """An old build against classes whose slots were renamed since."""

        def setup(*_: Any) -> None:
            raise TypeError("Tuple._val is not a __slots__ member")

        def import_old_kernel() -> ModuleType:
            old = ModuleType("rayflow._speedups")
            old.setup = setup  # type: ignore[attr-defined]
            return old

        found, build = load({}, import_old_kernel)
        assert found is None
        assert build.endswith("(Tuple._val is not a __slots__ member); reinstall to rebuild it")

    def test_rayflow_version_says_which_build_runs(self) -> None:
        result = CliRunner().invoke(app, ["--version"])
        assert result.exit_code == 0
        assert result.output.strip().endswith(f"({kernel.BUILD}; {LEDGER_BUILD})")


class Sentences(Spout):
    """Stands for the sentences given as ``mocked_sources``."""

    outputs = ["sentence"]

    def next_tuple(self) -> None:
        raise AssertionError("replaced by the mocked sentences")


def word_count(sentences: list[str], conf: dict[str, Any] | None = None) -> CompletedTopology:
    """Storm's word count (``examples/wordcount.py``), 2 x 2, run to completion on ``sentences``."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", Sentences())
    builder.set_bolt("split", SplitSentence(), parallelism=2).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), parallelism=2).fields_grouping("split", ["word"])
    return complete_topology(builder.create_topology(), conf, mocked_sources={"sentences": [[s] for s in sentences]})


@on_the_kernel
class TestOnTheKernel:
    def test_a_word_count_takes_the_c_paths_and_every_tree_is_acked(self) -> None:
        """200 sentences of 6 words: every sentence is emitted in C by the spout, every word by
        the split and every count by the count, each batch runs through the C loop, nothing falls
        back to Python."""
        assert kernel.KERNEL is not None
        sentences = ["the cow jumped over the moon"] * 200
        before = kernel.KERNEL.counters()
        result = word_count(sentences)
        after = kernel.KERNEL.counters()
        assert sorted(result.acked("sentences")) == list(range(200)) and result.failed("sentences") == []
        assert after["emit_fast"] - before["emit_fast"] == 2 * 6 * 200  # a word, then its count
        assert after["emit_fallback"] == before["emit_fallback"]
        assert after["spout_emit_fast"] - before["spout_emit_fast"] == 200  # each sentence
        assert after["spout_emit_fallback"] == before["spout_emit_fallback"]
        assert after["getitem_fast"] - before["getitem_fast"] == 200 + 6 * 200  # tup[0]: a sentence, a word
        assert after["getitem_fallback"] == before["getitem_fallback"]
        assert after["run_inline"] > before["run_inline"]

    def test_a_collector_that_keeps_input_in_its_dict_takes_the_c_paths_too(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The kernels read and write ``input`` through ``BasicOutputCollector``'s slot; a
        collector of a class without it (an instance attribute) is served through its dict."""
        assert kernel.KERNEL is not None

        class DictCollector:
            def __init__(self, task: Any) -> None:
                self._task = task
                self.input: Any = None

            def emit(self, values: list[Any], stream: str = "default") -> list[int]:
                return self._task.emit(stream, values, self.input, None)  # type: ignore[no-any-return]

        monkeypatch.setattr(basic_bolt, "BasicOutputCollector", DictCollector)
        before = kernel.KERNEL.counters()
        result = word_count(["the cow jumped over the moon"] * 20)
        after = kernel.KERNEL.counters()
        assert sorted(result.acked("sentences")) == list(range(20)) and result.failed("sentences") == []
        assert sorted(result.emitted("count"))[-1] == ["the", 40]
        assert after["emit_fast"] - before["emit_fast"] == 2 * 6 * 20
        assert after["emit_fallback"] == before["emit_fallback"]
        assert after["tuples_reused"] > before["tuples_reused"]

    def test_an_emit_on_an_equal_stream_name_of_another_object_takes_that_streams_route(self) -> None:
        """The kernel keeps the route of the last stream object it saw: a stream named by
        another ``str`` object, equal or not, is looked up again, and its route becomes the last."""
        assert kernel.KERNEL is not None

        class Fork(BasicBolt):
            def declare_output_fields(self, declarer: Any) -> None:
                declarer.declare_stream("default", ["word"])
                declarer.declare_stream("upper", ["word"])

            def execute(self, tup: RealTuple, collector: BasicOutputCollector) -> None:
                for word in tup[0].split():
                    collector.emit([word])
                    collector.emit([word.upper()], stream="".join(["up", "per"]))  # a new str each time
                    collector.emit([word], stream="default")

        builder = TopologyBuilder()
        builder.set_spout("sentences", Sentences())
        builder.set_bolt("fork", Fork()).shuffle_grouping("sentences")
        builder.set_bolt("lower", WordCount()).fields_grouping("fork", ["word"])
        builder.set_bolt("upper", WordCount()).fields_grouping("fork", ["word"], stream="upper")
        before = kernel.KERNEL.counters()
        result = complete_topology(builder.create_topology(), mocked_sources={"sentences": [["a b a"]] * 10})
        after = kernel.KERNEL.counters()
        assert sorted(result.acked("sentences")) == list(range(10)) and result.failed("sentences") == []
        assert dict(sorted(map(tuple, result.emitted("lower")))) == {"a": 40, "b": 20}  # the last count of each
        assert dict(sorted(map(tuple, result.emitted("upper")))) == {"A": 20, "B": 10}
        assert after["emit_fallback"] == before["emit_fallback"]

    def test_with_no_acker_every_sentence_is_acked_at_emit_and_every_word_counted_in_c(self) -> None:
        """``ackers=0``: no tree is tracked and the task has no acker mail; the C loop must run
        the batches all the same (it once refused them, failing every input)."""
        assert kernel.KERNEL is not None
        before = kernel.KERNEL.counters()
        result = word_count(["the cow jumped over the moon"] * 50, {"ackers": 0})
        after = kernel.KERNEL.counters()
        assert sorted(result.acked("sentences")) == list(range(50)) and result.failed("sentences") == []
        assert sorted(result.emitted("count"))[-1] == ["the", 100]
        assert after["run_inline"] > before["run_inline"]
        assert after["emit_fast"] - before["emit_fast"] == 2 * 6 * 50
        assert after["spout_emit_fast"] - before["spout_emit_fast"] == 50  # acked at emit, in C

    def test_setup_refuses_classes_without_the_slots_it_writes_and_the_kernel_keeps_running(self) -> None:
        """A refused ``setup`` leaves the offsets in use as they were."""
        assert kernel.KERNEL is not None

        class Tuple:
            __slots__ = ("values", "_source", "_tree")

        with pytest.raises(TypeError, match="Tuple._val is not a __slots__ member"):
            kernel.KERNEL.setup(Tuple, object, object, object, object, object, os.urandom(32))
        with pytest.raises(ValueError, match="32 bytes"):
            kernel.KERNEL.setup(Tuple, object, object, object, object, object, b"short")

        class NoGetitem:
            __slots__ = ("values", "_source", "_tree", "_val")

        with pytest.raises(TypeError, match="NoGetitem.__getitem__ is not a Python function"):
            kernel.KERNEL.setup(NoGetitem, TupleSource, DataBatch, Route, AckerMail, TaskMetrics, os.urandom(32))
        result = word_count(["a b c"] * 10)
        assert sorted(result.acked("sentences")) == list(range(10))

    def test_setup_again_with_the_same_classes_keeps_the_python_subscript_as_the_fallback(self) -> None:
        """A second load (a test's) finds the kernel's own ``__getitem__`` installed already."""
        assert kernel.KERNEL is not None
        kernel.KERNEL.setup(RealTuple, TupleSource, DataBatch, Route, AckerMail, TaskMetrics, os.urandom(32))
        tup = RealTuple(["cow"], TupleSource("split", "default", 1, ["word"]))
        assert (tup["word"], tup[0]) == ("cow", "cow")
        with pytest.raises(KeyError, match="has no field 'n'"):
            tup["n"]
        result = word_count(["a b c"] * 10)
        assert sorted(result.acked("sentences")) == list(range(10))


def test_the_semantics_tests_pass_on_the_other_build() -> None:
    """``SEMANTICS_TESTS`` (in process, not the Ray ones) in a child process on the build this
    process did not load: pure Python under a kernel build, the kernel under
    ``RAYFLOW_PURE_PYTHON=1``. The child's own test of its build checks it loaded the other."""
    env = other_build_env()
    if env is None:
        pytest.skip(f"one build only: {kernel.BUILD}")
    check = "from rayflow._executors import kernel; print(kernel.BUILD)"
    child_build = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, check=True)
    assert child_build.stdout.strip() != kernel.BUILD
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not ray", *SEMANTICS_TESTS],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"on {child_build.stdout.strip()}:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}"


class Keeper(BasicBolt):
    """Keeps every other input it executes (so that the C loop must not reuse those) and records
    the values each input had while it ran."""

    outputs = ["word"]

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.kept: list[tuple[Any, list[Any]]] = []
        self.seen: list[list[Any]] = []
        self.n = 0

    def execute(self, tup: Any, collector: BasicOutputCollector) -> None:
        self.seen.append(list(tup.values))
        self.n += 1
        if self.n % 2:
            self.kept.append((tup, list(tup.values)))


@on_the_kernel
def test_the_c_loop_reuses_only_the_tuples_a_bolt_kept_no_reference_to() -> None:
    """A ``BasicBolt`` that keeps some inputs: each kept tuple still has its own values after the
    run, every input had its own while it ran, and the others were reused."""
    assert kernel.KERNEL is not None
    builder = TopologyBuilder()
    builder.set_spout("sentences", Sentences())
    builder.set_bolt("split", SplitSentence()).shuffle_grouping("sentences")
    builder.set_bolt("keep", Keeper()).global_grouping("split")
    sentences = [f"w{i} x{i} y{i}" for i in range(100)]
    before = kernel.KERNEL.counters()
    result = complete_topology(builder.create_topology(), mocked_sources={"sentences": [[s] for s in sentences]})
    after = kernel.KERNEL.counters()
    (keeper,) = result.components("keep")
    words = [w for s in sentences for w in s.split()]
    assert sorted(v[0] for v in keeper.seen) == sorted(words)
    assert all(list(tup.values) == values for tup, values in keeper.kept)
    assert len({id(tup) for tup, _ in keeper.kept}) == len(keeper.kept) == 150
    assert after["tuples_reused"] > before["tuples_reused"]
    assert sorted(result.acked("sentences")) == list(range(100))
