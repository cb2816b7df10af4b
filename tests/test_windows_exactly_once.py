"""Windowed bolts under ``processing_guarantee="exactly_once"``, in process.

The topology: numbers (a spout that can go back) -> a relay that fails a number once -> a
windowed bolt of two tasks (fields-grouped by key) that emits one row per window -> a sink: a
stateful count of each window's rows, or a two-phase-commit sink collecting them. Whatever
fails -- a tuple, the windowed task, the spout, the sink -- every window fired downstream is
committed exactly once: the committed rows are those of a run where nothing failed, each once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rayflow import Config, Count, Duration, TopologyBuilder, WindowedBolt
from rayflow._topology import Topology
from rayflow._windows.validation import pending_advice
from rayflow.state import SqliteStateProvider, load_component
from rayflow.testing import InProcessTopology, complete_topology
from tests.sink_components import STORES, Store, StoreSink

from .window_components import Numbers, Relay, WindowCount, WindowRows

TOTAL = 40

WINDOWS: dict[str, Any] = {
    "count tumbling": lambda bolt: bolt.with_tumbling_window(Count(3)),
    "count sliding": lambda bolt: bolt.with_window(Count(4), Count(2)),
    "event time tumbling": lambda bolt: (
        bolt.with_tumbling_window(Duration(1)).with_timestamp_field("ts").with_idle_timeout(Duration(2))
    ),
    "event time sliding": lambda bolt: (
        bolt.with_window(Duration(2), Duration(1)).with_timestamp_field("ts").with_idle_timeout(Duration(2))
    ),
    "event time sessions": lambda bolt: (
        bolt.with_session_window(Duration(0.25), "key").with_timestamp_field("ts").with_idle_timeout(Duration(2))
    ),
    "processing time tumbling": lambda bolt: bolt.with_tumbling_window(Duration(2)),
}
"""Windows whose rows a failure-free run fixes, and one (processing time) whose contents depend
on when the tuples arrive: there each number must be in exactly one committed window."""
DETERMINISTIC = [kind for kind in WINDOWS if not kind.startswith("processing")]
COMPONENTS = ["numbers", "relay", "windows", "sink", "__acker", "__checkpoint"]


def topology(
    kind: str,
    *,
    fail_once: frozenset[int] = frozenset(),
    raise_once: frozenset[int] = frozenset(),
    sink: Any = None,
) -> Topology:
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers(TOTAL))
    builder.set_bolt("relay", Relay(fail_once), parallelism=2).fields_grouping("numbers", ["key"])
    windows: WindowedBolt = WINDOWS[kind](WindowRows(raise_once))
    builder.set_bolt("windows", windows, parallelism=2).fields_grouping("relay", ["key"])
    builder.set_bolt("sink", sink or WindowCount(), parallelism=2).fields_grouping("windows", ["window"])
    return builder.create_topology()


def conf(tmp_path: Path, name: str, **more: Any) -> Config:
    return Config(
        processing_guarantee="exactly_once",
        max_spout_pending=8,
        state_provider="sqlite",
        state_provider_config={"dir": str(tmp_path)},
    ).merged({"topology.name": name, **more})


def committed(tmp_path: Path, name: str) -> Counter[str]:
    """Each window's row -> how many times the sink's committed state counted it."""
    provider = SqliteStateProvider({"dir": str(tmp_path)}, name)
    try:
        return Counter(load_component(provider, name, "sink"))
    finally:
        provider.close()


def run_out(run: InProcessTopology, *, rounds: int = 400) -> None:
    """Drive ``run`` a few tuples at a time, half a simulated second apart (so checkpoints commit
    between them, with windows open), until every spout is done; then 10 s more: the last time
    windows fire and a checkpoint commits their rows."""
    for _ in range(rounds):
        run.run_spouts(3)
        run.settle()
        if run.finished:
            break
        run.advance(0.5)
    else:
        raise AssertionError(f"not finished after {rounds} rounds: {run.metrics()}")
    for _ in range(20):
        run.advance(0.5)
        run.settle()


def windows_of(rows: Counter[str]) -> list[list[int]]:
    return [[int(n) for n in row.split(":")[1].split(",")] for row in rows]


REFERENCE: dict[str, Counter[str]] = {}


def reference(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Counter[str]:
    """The rows of ``kind``'s windows in a run where nothing fails (once per kind)."""
    if kind not in REFERENCE:
        path = tmp_path_factory.mktemp("reference")
        run_out(InProcessTopology(topology(kind), conf(path, "reference")))
        REFERENCE[kind] = committed(path, "reference")
    return REFERENCE[kind]


def assert_exact(kind: str, rows: Counter[str], tmp_path_factory: pytest.TempPathFactory) -> None:
    assert {row: n for row, n in rows.items() if n != 1} == {}, "a window's row committed twice"
    if kind in DETERMINISTIC:
        assert rows == reference(kind, tmp_path_factory)
    else:  # tumbling: each number taken in is in one window, and the last windows fired
        assert sorted(n for ns in windows_of(rows) for n in ns) == list(range(TOTAL))


class TestWithoutFailures:
    @pytest.mark.parametrize("kind", list(WINDOWS))
    def test_every_window_fires_once_and_its_row_is_committed_once(
        self, kind: str, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        rows = reference(kind, tmp_path_factory)
        assert rows and set(rows.values()) == {1}
        numbers = sorted(n for ns in windows_of(rows) for n in ns)
        if kind == "count tumbling":  # what is left of each task's numbers waits for its window to fill
            assert len(set(numbers)) == len(numbers) > TOTAL - 2 * 3
        elif "tumbling" in kind:
            assert numbers == list(range(TOTAL))

    def test_inputs_are_acked_on_arrival_and_the_spout_is_told_at_the_commit(self, tmp_path: Path) -> None:
        """No window holds a tree: every msg id is acked once, count windows held open included."""
        run = InProcessTopology(topology("count tumbling"), conf(tmp_path, "acks"))
        run_out(run)
        assert sorted(run.acked("numbers")) == list(range(TOTAL))
        assert run.failed("numbers") == []
        assert run.pending_trees() == 0

    def test_a_window_longer_than_the_message_timeout_or_the_pending_budget_is_not_refused(
        self, tmp_path: Path
    ) -> None:
        """At-least-once refuses both (a tree would wait for its window); here no tree waits."""
        builder = TopologyBuilder()
        builder.set_spout("numbers", Numbers(TOTAL))
        builder.set_bolt("windows", WindowRows().with_tumbling_window(Count(50))).shuffle_grouping("numbers")
        builder.set_bolt("sink", WindowCount()).fields_grouping("windows", ["window"])
        held = WindowRows().with_window(Duration(60), Duration(10))
        builder.set_bolt("minute", held).shuffle_grouping("numbers")
        eo = conf(tmp_path, "big", max_spout_pending=4, message_timeout_secs=5)
        assert pending_advice(builder.create_topology(), eo) == []
        result = complete_topology(builder.create_topology(), eo)
        assert sorted(result.acked("numbers")) == list(range(TOTAL))


class TestAFailedTuple:
    @pytest.mark.parametrize("kind", list(WINDOWS))
    def test_the_rollback_restores_the_windows_and_each_row_is_committed_once(
        self, kind: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        run = InProcessTopology(topology(kind, fail_once=frozenset({5, 17, 30})), conf(tmp_path, "failed"))
        run_out(run)
        assert_exact(kind, committed(tmp_path, "failed"), tmp_path_factory)
        assert run.metrics()["windows"]["rollbacks"] >= 1
        assert sorted(run.acked("numbers")) == list(range(TOTAL))
        assert run.failed("numbers") == []

    @pytest.mark.parametrize("kind", DETERMINISTIC)
    def test_an_execute_that_raises_refuses_the_cut_and_the_window_fires_again(
        self, kind: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        run = InProcessTopology(topology(kind, raise_once=frozenset({8})), conf(tmp_path, "raised"))
        run_out(run)
        assert_exact(kind, committed(tmp_path, "raised"), tmp_path_factory)
        assert run.metrics()["windows"]["errors"] >= 1


def run_with_a_kill(run: InProcessTopology, component: str, after: int = 3) -> None:
    for _ in range(after):  # part of the stream, with a checkpoint or two committed
        run.run_spouts(5)
        run.settle()
        run.advance(1.0)
    run.kill(next(t for t, c in run.layout.items() if c == component))
    run_out(run)


class TestAKilledTask:
    @pytest.mark.parametrize("kind", list(WINDOWS))
    @pytest.mark.parametrize("component", ["windows", "numbers"])
    def test_each_row_is_committed_once(
        self, kind: str, component: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        run = InProcessTopology(topology(kind), conf(tmp_path, "killed"))
        run_with_a_kill(run, component)
        assert_exact(kind, committed(tmp_path, "killed"), tmp_path_factory)
        assert run.metrics()[component]["restarts"] == 1
        assert sorted(run.acked("numbers")) == list(range(TOTAL))

    def test_a_restarted_windowed_task_restores_the_windows_it_had_committed(self, tmp_path: Path) -> None:
        """Killed with no input on the way after a commit: the new task holds what the old one held."""
        run = InProcessTopology(topology("count sliding"), conf(tmp_path, "restored"))
        for _ in range(3):
            run.run_spouts(5)
            run.settle()
            run.advance(1.0)
        run.advance(2.0)  # a checkpoint commits what every task holds
        task = max((t for t, c in run.layout.items() if c == "windows"), key=lambda t: len(held(run, t)))
        before = held(run, task)
        assert before
        run.kill(task)
        run.advance(2.0)  # a rollback and its recovery
        assert held(run, task) == before


def held(run: InProcessTopology, task: int) -> list[int]:
    """The numbers a count-windowed task holds, oldest first."""
    windows = run.executors[task].bolt.windows  # type: ignore[attr-defined]
    return [item["n"] for _, _, item in windows._items]


@pytest.fixture
def store(request: pytest.FixtureRequest) -> Iterator[tuple[str, Store]]:
    key = request.node.name
    STORES[key] = Store()
    try:
        yield key, STORES[key]
    finally:
        del STORES[key]


class TestACollectingSink:
    @pytest.mark.parametrize("kind", DETERMINISTIC)
    def test_a_two_phase_commit_sink_writes_each_window_once(
        self, kind: str, store: tuple[str, Store], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        key, db = store
        run = InProcessTopology(
            topology(kind, fail_once=frozenset({11}), sink=StoreSink(key)), conf(tmp_path, "collected")
        )
        run_with_a_kill(run, "windows")
        rows = Counter(row[0] for row in db.rows)
        assert rows == reference(kind, tmp_path_factory)


class TestResume:
    def test_a_topology_started_again_resumes_its_open_windows(
        self, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        first = InProcessTopology(topology("count sliding"), conf(tmp_path, "resumed"))
        for _ in range(3):
            first.run_spouts(5)
            first.settle()
            first.advance(1.0)
        assert 0 < len(first.acked("numbers")) < TOTAL
        # Every task dies at once; the same topology is submitted again under the same name.
        run_out(InProcessTopology(topology("count sliding"), conf(tmp_path, "resumed")))
        assert_exact("count sliding", committed(tmp_path, "resumed"), tmp_path_factory)

    def test_other_window_settings_are_refused_naming_the_bolt(self, tmp_path: Path) -> None:
        first = InProcessTopology(topology("count tumbling"), conf(tmp_path, "changed"))
        for _ in range(3):
            first.run_spouts(5)
            first.settle()
            first.advance(1.0)
        second = InProcessTopology(topology("count sliding"), conf(tmp_path, "changed"))
        second.run()
        second.advance(1.0)
        errors = [str(task.metrics.last_error) for task in second.tasks("windows") if task.metrics.errors]
        assert errors and "windowed bolt 'windows' task" in errors[0]
        assert "were written with WindowSettings(length=Count(n=3)" in errors[0]
        assert second.acked("numbers") == []  # no checkpoint commits past the refusal


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(list(WINDOWS)),
    failing=st.sets(st.integers(0, TOTAL - 1), max_size=3),
    kill=st.one_of(st.none(), st.tuples(st.sampled_from(COMPONENTS), st.integers(0, 500))),
    seed=st.integers(0, 2**16),
)
# The recovery after the failed number stalls the spouts for longer than the idle timeout: were
# that idleness, the watermark would pass the numbers replayed after the cut and make them late.
@example(kind="event time tumbling", failing={6}, kill=("__checkpoint", 1), seed=0)
def test_wherever_a_failure_strikes_each_window_is_committed_once(
    tmp_path_factory: pytest.TempPathFactory,
    kind: str,
    failing: set[int],
    kill: tuple[str, int] | None,
    seed: int,
) -> None:
    """Which number fails, which task dies, and at which delivery (so in whichever phase of
    whichever checkpoint, with whichever windows open): each row committed once, and the rows
    those of a run without failures."""
    tmp_path = tmp_path_factory.mktemp("weo")
    run = InProcessTopology(topology(kind, fail_once=frozenset(failing)), conf(tmp_path, "h"), seed=seed)
    deliveries = 0
    for _ in range(60):
        run.run_spouts(3)
        while run.step():
            deliveries += 1
            if kill is not None and deliveries == kill[1]:
                run.kill(next(t for t, c in run.layout.items() if c == kill[0]))
        run.advance(0.5)
        if run.finished:
            break
    run_out(run)
    assert_exact(kind, committed(tmp_path, "h"), tmp_path_factory)
    assert sorted(run.acked("numbers")) == list(range(TOTAL))
    assert run.failed("numbers") == []


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(DETERMINISTIC),
    failing=st.sets(st.integers(0, TOTAL - 1), max_size=2),
    killed=st.sampled_from(["windows", "numbers", "sink"]),
    at=st.integers(0, 300),
    unaware=st.sets(st.sampled_from(COMPONENTS), min_size=1),
    told_after=st.integers(1, 200),
    seed=st.integers(0, 2**16),
)
def test_a_restart_heard_late_by_some_tasks_commits_each_window_once(
    tmp_path_factory: pytest.TempPathFactory,
    kind: str,
    failing: set[int],
    killed: str,
    at: int,
    unaware: set[str],
    told_after: int,
    seed: int,
) -> None:
    """On Ray the peers of a restarted task hear of it one by one, and what they send it
    meanwhile is lost: a windowed task's inputs, the windows' rows to the sink. Whoever hears
    late, and for however long: each window's row committed once, as without failures."""
    tmp_path = tmp_path_factory.mktemp("weo")
    run = InProcessTopology(topology(kind, fail_once=frozenset(failing)), conf(tmp_path, "late"), seed=seed)
    task = next(t for t, c in run.layout.items() if c == killed)
    late = {t for t, c in run.layout.items() if c in unaware and t != task}
    deliveries, told_at = 0, None
    for _ in range(80):
        run.run_spouts(3)
        while run.step():
            deliveries += 1
            if deliveries == at:
                run.kill(task, unaware=late)
                told_at = at + told_after
            if deliveries == told_at:
                run.tell_restart(task)
        run.advance(0.5)
        if run.finished and (told_at is None or deliveries >= told_at):
            break
    run.tell_restart(task)  # everyone has heard by the end
    run_out(run)
    assert_exact(kind, committed(tmp_path, "late"), tmp_path_factory)
    assert sorted(run.acked("numbers")) == list(range(TOTAL))
