"""First use (issue 22): what a newcomer meets after the install works -- the README's examples
run as written, ``complete_topology`` repeats itself, a replay loop ends, an error repeated on
every tuple is logged once, a run that ends unfinished says why, ``rayflow run``'s summary fits
80 columns without cutting a number, and a spout that cannot open fails the run."""

from __future__ import annotations

import importlib
import io
import json
import logging
import os
import random
import re
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from textwrap import dedent
from typing import Any

import pytest
from rich.console import Console

import rayflow
from rayflow import (
    BasicBolt,
    BasicOutputCollector,
    Bolt,
    Config,
    FailedException,
    RayflowError,
    Spout,
    SpoutOutputCollector,
    Topology,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)
from rayflow._cli import console, monitor
from rayflow._cli.exit_codes import ExitCode
from rayflow._run_checks import config_to_run
from rayflow.testing import InProcessTopology, _in_process, complete_topology
from rayflow.topology_file import LoadedTopology, load_topology

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

RUN_DEADLINE_SECS = 10.0
"""A run that loops is stopped long before this; one that reached it would loop for minutes."""


def readme_block(heading: str) -> str:
    """The first Python code block of the README's section ``heading``."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index(f"\n## {heading}\n") :]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, f"no Python block under {heading!r}"
    return found.group(1)


def readme_namespace() -> dict[str, Any]:
    """What the README's spout section defines (``Sentences``, ``Split``, ``Count``,
    ``build_wordcount``), as a user who pasted it would have it."""
    namespace: dict[str, Any] = {"__name__": "readme"}
    exec(readme_block("Writing a spout"), namespace)
    return namespace


# -- components ---------------------------------------------------------------------------------
class Replaying(Spout):
    """Emits 0, 1, 2, tracked, and replays every failure under the same msg id."""

    outputs = ["n"]

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector = collector
        self.todo = [0, 1, 2]

    def next_tuple(self) -> None:
        if self.todo:
            n = self.todo.pop(0)
            self.collector.emit([n], msg_id=n)
        else:
            self.collector.exhausted()

    def fail(self, msg_id: Any) -> None:
        self.todo.append(msg_id)


class Numbers(Spout):
    """Emits 0 .. ``count - 1``, tracked; ``exhausted`` only when ``says_exhausted``."""

    outputs = ["n"]

    def __init__(self, count: int, says_exhausted: bool = True) -> None:
        self.count = count
        self.says_exhausted = says_exhausted

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector = collector
        self.next = 0

    def next_tuple(self) -> None:
        if self.next < self.count:
            self.collector.emit([self.next], msg_id=self.next)
            self.next += 1
        elif self.says_exhausted:
            self.collector.exhausted()


class Renumbering(Replaying):
    """Replays a failure under a new msg id, as a broker does with a new delivery tag."""

    def fail(self, msg_id: Any) -> None:
        self.todo.append(msg_id + 3)


class Endless(Spout):
    """Emits untracked numbers for ever."""

    outputs = ["n"]

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector = collector

    def next_tuple(self) -> None:
        self.collector.emit([0])


class Unopenable(Numbers):
    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        raise ConnectionError("no broker at 127.0.0.1:5672")


class Boom(BasicBolt):
    """Raises on every tuple: ``ValueError`` on even numbers, ``KeyError`` on odd ones."""

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        if tup["n"] % 2 == 0:
            raise ValueError(f"boom on {tup['n']}")
        raise KeyError(tup["n"])


class AlwaysFails(BasicBolt):
    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        raise ValueError(f"boom on {tup['n']}")


class SplitFailingOnce(BasicBolt):
    """Splits a sentence into words, but fails each sentence the first time it comes."""

    outputs = ["word"]

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.seen: set[str] = set()

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        if tup["sentence"] not in self.seen:
            self.seen.add(tup["sentence"])
            raise FailedException("the first attempt fails")
        for word in tup["sentence"].split():
            collector.emit([word])


class Holds(Bolt):
    """Never acks: every tree times out."""

    def execute(self, tup: Tuple) -> None:
        pass


class Pass(BasicBolt):
    """Passes each number on, and keeps what its task saw."""

    outputs = ["n"]

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.seen: list[int] = []

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        self.seen.append(tup["n"])
        collector.emit([tup["n"]])


def replay_loop() -> Topology:
    builder = TopologyBuilder()
    builder.set_spout("numbers", Replaying())
    builder.set_bolt("boom", AlwaysFails()).shuffle_grouping("numbers")
    return builder.create_topology()


def fan_out() -> Topology:
    """Every random choice in one topology: shuffle, none and local-or-shuffle groupings over
    several tasks, two spout tasks, three ackers (a tree's acker is picked by its root id)."""
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers(40), parallelism=2)
    builder.set_bolt("a", Pass(), parallelism=3).shuffle_grouping("numbers")
    builder.set_bolt("b", Pass(), parallelism=3).none_grouping("a")
    builder.set_bolt("c", Pass(), parallelism=2).local_or_shuffle_grouping("b").shuffle_grouping("numbers")
    return builder.create_topology()


def record(topology: Topology, seed: int) -> tuple[Any, ...]:
    """Everything a run did, in order, with what each task of each bolt saw."""
    result = complete_topology(topology, Config(ackers=3), seed=seed)
    assert result.finished
    return (
        tuple(result.acked("numbers")),
        tuple(tuple(v) for c in "abc" for v in result.emitted(c)),
        tuple(tuple(task.seen) for c in "abc" for task in result.components(c)),
    )


# -- tests --------------------------------------------------------------------------------------
class TestTheReadme:
    def test_the_testing_snippet_passes_every_time(self) -> None:
        """The README's ``complete_topology`` snippet, on the README's word count, 200 times."""
        snippet = compile(readme_block("Testing your topology"), "README.md", "exec")
        base = readme_namespace()
        for _ in range(200):
            exec(snippet, dict(base))  # its asserts: acked 0 and 1, the four words

    @pytest.mark.parametrize("hash_seed", ["0", "1", "4242", "random"])
    def test_the_testing_snippet_passes_whatever_the_hash_seed(self, hash_seed: str) -> None:
        """In a fresh interpreter per ``PYTHONHASHSEED``: the snippet passes, and the run is the
        same one (every tuple count emitted, in order)."""
        script = (
            "import json, sys; sys.path.insert(0, 'tests'); import test_first_use as t\n"
            "ns = t.readme_namespace()\n"
            "exec(t.readme_block('Testing your topology'), ns)\n"
            "print(json.dumps(ns['result'].emitted('count')))\n"
        )
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        root = README.parent
        out = subprocess.run(
            [sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        namespace = readme_namespace()
        exec(readme_block("Testing your topology"), namespace)
        assert json.loads(out.stdout) == namespace["result"].emitted("count")

    def test_the_spout_example_replays_and_its_counts_come_out(self) -> None:
        """The README's spout and count bolt, unmocked, behind a split that fails each sentence
        the first time: both sentences are failed once, replayed and acked, the run finishes
        without a warning, and the counts are read off the bolt objects."""
        readme = readme_namespace()
        sentences = ["the cow jumped over the moon", "the man went to the store"]
        builder = TopologyBuilder()
        builder.set_spout("sentences", readme["Sentences"](sentences))
        builder.set_bolt("split", SplitFailingOnce()).shuffle_grouping("sentences")
        builder.set_bolt("count", readme["Count"](), parallelism=2).fields_grouping("split", ["word"])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            result = complete_topology(builder.create_topology())
        assert result.finished
        assert result.failed("sentences") == [0, 1] and result.acked("sentences") == [0, 1]
        counts = sum((Counter(task.counts) for task in result.components("count")), Counter())
        assert counts == Counter(" ".join(sentences).split())

    def test_its_topology_file_is_configs_wordcount(self) -> None:
        """The README's YAML is ``configs/wordcount.yaml`` as it is, after its comment header,
        so what it shows is what ``rayflow run configs/wordcount.yaml`` runs."""
        text = README.read_text(encoding="utf-8")
        shown = re.findall(r"```yaml\n(.*?)```", text, re.S)
        config = (ROOT / "configs" / "wordcount.yaml").read_text(encoding="utf-8")
        assert shown == [config[config.index("name:") :]]


class TestDeterminism:
    def test_the_same_seed_gives_the_same_run(self) -> None:
        """Shuffle, none and local-or-shuffle groupings, two spout tasks, three ackers: five runs
        with one seed are one run."""
        runs = {record(fan_out(), seed=7) for _ in range(5)}
        assert len(runs) == 1

    def test_the_seed_is_what_decides(self) -> None:
        """Other seeds spread the tuples otherwise (else the seed would reach nothing)."""
        assert len({record(fan_out(), seed=seed)[2] for seed in range(6)}) > 1

    def test_the_seed_does_not_touch_the_random_module(self) -> None:
        """A component's own ``random`` draws are the test's to seed, before and after a run."""
        random.seed(3)
        expected = [random.random() for _ in range(3)]
        random.seed(3)
        complete_topology(fan_out(), seed=1)
        assert [random.random() for _ in range(3)] == expected


class TestReplayLoop:
    def test_max_rounds_stops_a_replay_loop(self, caplog: pytest.LogCaptureFixture) -> None:
        """A spout that replays every failure -> a bolt that fails every tuple, ``max_rounds=5``:
        each message fails five times, the run returns unfinished at once and warns of the
        replay loop, and the error is logged twice (its traceback, then its 10th time)."""
        started = time.monotonic()
        with caplog.at_level(logging.ERROR, logger="rayflow"):
            with pytest.warns(UserWarning, match=r"max_rounds=5\): a replay loop: message 0 of spout 'numbers'"):
                result = complete_topology(replay_loop(), max_rounds=5)
        assert time.monotonic() - started < RUN_DEADLINE_SECS
        assert not result.finished
        assert Counter(result.failed("numbers")) == {0: 5, 1: 5, 2: 5}
        assert result.metrics()["boom"]["errors"] == 15
        logged = [r for r in caplog.records if r.name == "rayflow"]
        assert [r.exc_info is not None for r in logged] == [True, False]
        assert "the same error 10 times so far" in logged[1].getMessage()

    def test_the_default_max_rounds_ends_it_too(self, caplog: pytest.LogCaptureFixture) -> None:
        """The same loop with the default ``max_rounds`` (100): 300 failures, three log records."""
        started = time.monotonic()
        with caplog.at_level(logging.ERROR, logger="rayflow"):
            with pytest.warns(UserWarning, match="replay loop"):
                result = complete_topology(replay_loop())
        assert time.monotonic() - started < RUN_DEADLINE_SECS
        assert len(result.failed("numbers")) == 300
        assert len([r for r in caplog.records if r.name == "rayflow"]) == 3  # the 1st, 10th, 100th

    def test_an_unbounded_run_names_the_replay_loop(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """``InProcessTopology.run()`` without ``max_replays`` gives up on the loop with an error
        that says it is one, not that the spout is unbounded."""
        monkeypatch.setattr(_in_process, "MAX_EMITS_PER_RUN", 300)
        said = r"trees failed on the way \(message \d of spout 'numbers' \d+ time\(s\)\): a replay loop\?"
        with pytest.raises(RayflowError, match=said):
            InProcessTopology(replay_loop()).run()

    def test_an_endless_spout_is_named_as_one(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(_in_process, "MAX_EMITS_PER_RUN", 300)
        builder = TopologyBuilder()
        builder.set_spout("endless", Endless())
        builder.set_bolt("pass", Pass()).shuffle_grouping("endless")
        with pytest.raises(RayflowError, match=r"no tree failed: a spout that never runs dry .*exhausted\(\)"):
            InProcessTopology(builder.create_topology()).run()


class TestErrorLog:
    def test_each_distinct_error_is_logged_once_in_full_then_counted(self, caplog: pytest.LogCaptureFixture) -> None:
        """250 tuples through a bolt raising ``ValueError`` on even numbers and ``KeyError`` on
        odd ones: each error's first time with its traceback, then its 10th and 100th; every
        one of them counted in the metrics."""
        builder = TopologyBuilder()
        builder.set_spout("numbers", Numbers(250))
        builder.set_bolt("boom", Boom()).shuffle_grouping("numbers")
        with caplog.at_level(logging.ERROR, logger="rayflow"):
            result = complete_topology(builder.create_topology())
        logged = [(r.getMessage(), r.exc_info is not None) for r in caplog.records if r.name == "rayflow"]
        assert [full for _, full in logged] == [True, True, False, False, False, False]
        assert "ValueError: boom on 0" in logged[0][0] and "KeyError: 1" in logged[1][0]
        assert sum("the same error 100 times so far" in message for message, _ in logged) == 2
        assert result.metrics()["boom"]["errors"] == 250


class TestUnfinishedRunsWarn:
    def test_a_spout_that_never_says_exhausted(self) -> None:
        builder = TopologyBuilder()
        builder.set_spout("numbers", Numbers(3, says_exhausted=False))
        builder.set_bolt("pass", Pass()).shuffle_grouping("numbers")
        with pytest.warns(UserWarning, match=r"spout 'numbers' \(task 1\) never said .*collector\.exhausted\(\)"):
            result = complete_topology(builder.create_topology())
        assert not result.finished and result.acked("numbers") == [0, 1, 2]

    def test_a_spout_whose_open_raised(self) -> None:
        builder = TopologyBuilder()
        builder.set_spout("numbers", Unopenable(3))
        builder.set_bolt("pass", Pass()).shuffle_grouping("numbers")
        with pytest.warns(UserWarning, match=r"did not open: open raised: ConnectionError: no broker"):
            result = complete_topology(builder.create_topology())
        assert not result.finished

    def test_trees_still_pending_after_max_rounds(self) -> None:
        """A bolt that never acks, a spout replaying under new msg ids, ``max_rounds=2``: the
        clock moves twice and the run says so."""
        builder = TopologyBuilder()
        builder.set_spout("numbers", Renumbering())
        builder.set_bolt("sink", Holds()).shuffle_grouping("numbers")
        with pytest.warns(UserWarning, match=r"the clock moved past the message timeout 2 times.* 3 tree\(s\) pending"):
            result = complete_topology(builder.create_topology(), max_rounds=2)
        assert result.rounds == 2 and result.failed("numbers") == [0, 1, 2, 3, 4, 5]

    def test_a_finished_run_does_not_warn(self) -> None:
        builder = TopologyBuilder()
        builder.set_spout("numbers", Numbers(3))
        builder.set_bolt("pass", Pass()).shuffle_grouping("numbers")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert complete_topology(builder.create_topology()).finished


# -- rayflow run's summary --------------------------------------------------------------------
WIDE = """\
    name: wide
    spouts:
      - {id: sentences, class: tests.topology_file_components.WordSpout}
    bolts:
      - {id: split_sentences_into_words, class: tests.topology_file_components.Upper}
      - {id: count, class: tests.topology_file_components.Count}
      - {id: upper, class: tests.topology_file_components.Upper}
      - {id: again, class: tests.topology_file_components.Upper}
    streams:
      - {from: sentences, to: split_sentences_into_words, grouping: {type: shuffle}}
      - {from: split_sentences_into_words, to: count, grouping: {type: fields, fields: [word]}}
      - {from: split_sentences_into_words, to: upper, grouping: {type: shuffle}}
      - {from: upper, to: again, grouping: {type: shuffle}}
"""


class Handle:
    """Stands in for a ``TopologyHandle``: the same metrics every time."""

    killed = False

    def __init__(self, metrics: dict[str, dict[str, Any]], done: bool) -> None:
        self._metrics = metrics
        self._done = done

    def metrics(self) -> dict[str, dict[str, Any]]:
        return self._metrics

    def task_metrics(self) -> dict[int, dict[str, Any]]:
        return {}  # the run's table is the subject here; the tasks' view has tests of its own (test_cli.py)

    def wait(self, timeout: float | None = None) -> bool:
        return self._done

    def deactivate(self) -> None:
        pass

    def kill(self) -> None:
        pass


def counters(**counts: Any) -> dict[str, Any]:
    latency = {"mean": 1.5, "p50": 12_345.678, "p99": 208_123.0}
    base = {"tasks": 12, "emitted": 0, "acked": 0, "failed": 0, "executed": 0, "errors": 0, "last_error": None}
    return {**base, "complete_latency_ms": latency, "process_latency_ms": latency, **counts}


def watch(
    loaded: LoadedTopology,
    metrics: dict[str, dict[str, Any]],
    width: int,
    *,
    duration: float | None = None,
    done: bool = True,
) -> tuple[ExitCode, str]:
    """``rayflow run``'s monitor over ``metrics`` on a console ``width`` columns wide (not a
    terminal: one progress line a poll, then the summary), for ``duration`` seconds or until
    it ends on its own."""
    out = io.StringIO()
    original = console.out, console.err
    console.out = console.err = Console(file=out, width=width)
    try:
        outcome = monitor.Monitor(Handle(metrics, done), loaded, duration).run()  # type: ignore[arg-type]
    finally:
        console.out, console.err = original
    return outcome, out.getvalue()


@pytest.fixture
def fast_monitor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor, "REFRESH_SECS", 0.01)
    monkeypatch.setattr(monitor, "OPEN_SECS", 0.05)
    monkeypatch.setattr(monitor, "DRAIN_SECS", 0.05)


@pytest.fixture
def wide(tmp_path: Path) -> LoadedTopology:
    path = tmp_path / "wide.yaml"
    path.write_text(dedent(WIDE))
    return load_topology(path)


@pytest.mark.usefixtures("fast_monitor")
class TestRunSummary:
    @pytest.mark.parametrize("width", [40, 60, 80, 100, 132])
    def test_numbers_are_never_cut(self, wide: LoadedTopology, width: int) -> None:
        """Billions in every cell, five components, consoles from 40 to 132 columns: every
        number of the summary is printed whole."""
        spout = counters(emitted=100_000_000, acked=99_999_999, failed=1_234_567, pending=1_000_000, exhausted=True)
        metrics = {"sentences": spout}
        for cid in ("split_sentences_into_words", "count", "upper", "again"):
            metrics[cid] = counters(acked=1_234_567_890, emitted=9_876_543_210, failed=12_345_678)
        _, out = watch(wide, metrics, width, duration=0.05)
        summary = out[out.index("summary after") :]
        table = summary[: summary.index("executed/s (bolts)")]  # the verdicts after it wrap where the terminal does
        assert max(len(line.rstrip()) for line in table.splitlines()) <= width
        numbers = set(re.findall(r"[\d,.]*\d", summary))
        for expected in ("100,000,000", "99,999,999", "1,234,567", "1,000,000", "1,234,567,890", "9,876,543,210"):
            assert expected in numbers, (expected, summary)
        assert "12,345.68" in numbers and "208,123.00" in numbers
        assert not any(ch in summary for ch in "…")

    def test_a_spout_that_did_not_open_fails_the_run(self, wide: LoadedTopology) -> None:
        """A spout whose ``open`` raised, and nothing else moves: the run ends on its own (exit
        3), and the summary says the spout did not open rather than that every tree was acked."""
        metrics = {"sentences": counters(errors=1, last_error="open raised: ConnectionError: no broker", pending=0)}
        for cid in ("split_sentences_into_words", "count", "upper", "again"):
            metrics[cid] = counters()
        started = time.monotonic()
        outcome, out = watch(wide, metrics, width=100, done=False)
        assert time.monotonic() - started < RUN_DEADLINE_SECS
        assert outcome == ExitCode.COMPONENTS_RAISED
        assert "(sentences did not open within 0.05s)" in out
        assert "sentences: did not open, so it emitted nothing (open raised: ConnectionError: no broker)" in out
        assert "every tuple tree was acked" not in out


UNOPENABLE = """\
    name: unopenable
    spouts:
      - {id: numbers, class: tests.test_first_use.Unopenable, kwargs: {count: 3}}
    bolts:
      - {id: pass, class: tests.test_first_use.Pass}
    streams:
      - {from: numbers, to: pass, grouping: {type: shuffle}}
"""


def test_rayflow_run_ends_a_run_whose_spout_cannot_open(ray_cluster: str, tmp_path: Path) -> None:
    """``rayflow run`` without ``--duration``, a spout whose ``open`` raises: the run ends by
    itself soon after ``OPEN_SECS``, exit 3, and the summary does not call it a success."""
    path = tmp_path / "unopenable.yaml"
    path.write_text(dedent(UNOPENABLE))
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "rayflow", "run", str(path), "--address", ray_cluster],
        cwd=README.parent,
        env={"PATH": os.environ["PATH"], "HOME": os.environ["HOME"]},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 3, result.stderr
    assert time.monotonic() - started < 120
    assert f"(numbers did not open within {monitor.OPEN_SECS:g}s)" in result.stdout
    assert "numbers: did not open, so it emitted nothing (open raised: ConnectionError: no broker" in result.stdout
    assert "every tuple tree was acked" not in result.stdout


# -- the examples and the configs as a newcomer runs them -------------------------------------
EXAMPLES = [
    "wordcount",
    "windowed_wordcount",
    "inference",
    "stateful_wordcount",
    "postgres_sink",
    "wordcount_spark",
    "dataframe_roundtrip",
]
"""The examples with a ``main``: each runs on a local Ray it starts."""


class RayWouldStart(Exception):
    """Raised by the stand-in ``LocalCluster``: the example got as far as starting Ray."""


class NoCluster:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RayWouldStart


def example(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """``examples.<name>``, importable as the docs run it, writing into ``tmp_path``, with a
    ``LocalCluster`` that raises ``RayWouldStart`` instead of starting Ray."""
    if name in ("wordcount_spark", "dataframe_roundtrip"):
        pytest.importorskip("pyspark", reason="the Spark examples need the spark extra")
    monkeypatch.syspath_prepend(str(ROOT))
    module = importlib.import_module(f"examples.{name}")
    monkeypatch.setattr(rayflow, "LocalCluster", NoCluster)  # the examples that import it in main
    if hasattr(module, "LocalCluster"):
        monkeypatch.setattr(module, "LocalCluster", NoCluster)
    if hasattr(module, "OUTPUT"):
        monkeypatch.setattr(module, "OUTPUT", tmp_path / "output")
    if hasattr(module, "create_tables"):  # postgres_sink: no server needed to get this far
        monkeypatch.setattr(module, "create_tables", lambda *args: None)
    return module


class TestExamples:
    @pytest.mark.parametrize("name", EXAMPLES)
    def test_each_says_so_before_ray_starts(
        self, name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Ray takes 20-45 s to start on a busy box: an example says it is starting first, as
        ``rayflow run`` does, rather than print nothing meanwhile."""
        module = example(name, monkeypatch, tmp_path)
        with pytest.raises(RayWouldStart):
            module.main(["--state-dir", str(tmp_path / "state")] if name == "stateful_wordcount" else [])
        assert "starting a local Ray" in capsys.readouterr().out

    @pytest.mark.parametrize("name", EXAMPLES)
    def test_each_help_is_plain_text(
        self, name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``--help`` prints the first paragraph of the docstring: no reStructuredText markup."""
        module = example(name, monkeypatch, tmp_path)
        with pytest.raises(SystemExit):
            module.main(["--help"])
        out = capsys.readouterr().out
        assert out.startswith("usage:") and "``" not in out and ":class:" not in out, out

    def test_the_spark_example_leaves_the_budget_to_its_sink(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The Spark word count sets no ``max_spout_pending``: the runner gives its spout the
        budget the sink's batches need, and warns of nothing."""
        module = example("wordcount_spark", monkeypatch, tmp_path)
        topology = module.build(10_000)
        with caplog.at_level(logging.WARNING, logger="rayflow"):
            conf = config_to_run(topology, module.CONF, reach=False)
        assert not caplog.records, [r.getMessage() for r in caplog.records]
        [sink] = [spec.component for spec in topology.bolts if spec.id == "sink"]
        assert conf.max_spout_pending == sink.pending_need().trees  # one spout task, one sink task


@pytest.mark.parametrize(
    "path", sorted(str(p.relative_to(ROOT)) for p in [*ROOT.glob("configs/*.yaml"), *ROOT.glob("examples/*.yaml")])
)
def test_each_topology_file_agrees_with_the_runners_checks(
    path: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every shipped topology file loads, and the checks every runner makes before it starts a
    task (the pending budget against a sink's need, state and window settings) pass without a
    warning: an example never warns about its own settings."""
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT))
    try:
        loaded = load_topology(ROOT / path)
    except ImportError as exc:  # a broker's client or Spark: an extra not installed
        pytest.skip(f"{path} needs an extra: {exc}")
    with caplog.at_level(logging.WARNING, logger="rayflow"):
        config_to_run(loaded.topology, loaded.config, reach=False)
    assert not caplog.records, [r.getMessage() for r in caplog.records]
