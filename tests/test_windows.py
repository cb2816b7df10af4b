"""Windowed bolts, as Storm scenarios: the topology, what is fed, which windows run and what
must be acked, failed or emitted -- plus the plain-Python window core underneath."""

from __future__ import annotations

import datetime
import math
import operator
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayflow import Config, ConfigError, Count, Duration, StateError, TopologyBuilder, TopologyError, WindowedBolt
from rayflow._topology import Topology
from rayflow._tuple import Tuple, TupleSource
from rayflow._windows.bolt import WindowSettings
from rayflow._windows.contents import WindowContents, dump, load
from rayflow._windows.manager import (
    Activation,
    CountWindows,
    InTimestampOrder,
    Manager,
    SessionWindows,
    TimeWindows,
)
from rayflow._windows.validation import check_window_settings
from rayflow._windows.watermark import WatermarkTracker
from rayflow.testing import InProcessTopology, complete_topology
from rayflow.topology_file import SpecError, load_topology

from .window_components import FailEverything, Fed, Record, Seen, TopWords


def window_topology(
    bolt: WindowedBolt, *, spouts: int = 1, downstream: bool = False, fields: tuple[str, ...] = ("word", "ts")
) -> Topology:
    builder = TopologyBuilder()
    builder.set_spout("source", Fed(fields), spouts)
    builder.set_bolt("window", bolt).shuffle_grouping("source")
    if downstream:
        builder.set_bolt("sink", FailEverything()).shuffle_grouping("window")
    return builder.create_topology()


def feed(run: InProcessTopology, *words: str, ts: float = 0.0, task: int = 0, first_id: int | None = None) -> None:
    """Feed ``words`` (msg id = the word, timestamp ``ts``) to spout task ``task`` and deliver them."""
    spout: Fed = run.components("source")[task]
    for word in words:
        spout.feed([word, ts], word)
    run.run()


def windows(run: InProcessTopology) -> list[Seen]:
    bolt: Record = run.components("window")[0]
    return bolt.windows


def words_of(run: InProcessTopology) -> list[list[str]]:
    return [w.words for w in windows(run)]


# -- the window core, without a topology ------------------------------------------------------------


class TestLengths:
    def test_a_count_is_a_positive_integer(self) -> None:
        for bad in (0, -1, 1.5, True):
            with pytest.raises(ConfigError, match="Count takes an integer"):
                Count(bad)  # type: ignore[arg-type]

    def test_a_duration_takes_seconds_or_a_timedelta(self) -> None:
        assert Duration(datetime.timedelta(minutes=1)) == Duration(60)
        assert Duration(2).ms == 2000.0
        for bad in (0, -1, math.inf, "5"):
            with pytest.raises(ConfigError, match="Duration takes"):
                Duration(bad)  # type: ignore[arg-type]


def _fire_all(windows: TimeWindows[int], stamps: list[int], watermarks: list[int]) -> list[Activation[int]]:
    fired: list[Activation[int]] = []
    for i, ts in enumerate(stamps):
        windows.add(ts, i)
    for watermark in sorted(watermarks):
        fired += windows.advance(watermark).activations
    fired += windows.advance(10**9).activations
    return fired


class TestTimeWindows:
    def test_a_sliding_window_holds_what_fell_in_it_and_lets_go_after_its_last_window(self) -> None:
        windows: TimeWindows[str] = TimeWindows(Duration(10), Duration(5))
        windows.add(1000, "a")
        windows.add(6000, "b")
        fired = windows.advance(15000).activations
        assert [(a.start_ts, a.end_ts, a.items, a.done) for a in fired] == [
            (-5000, 5000, ["a"], []),
            (0, 10000, ["a", "b"], ["a"]),
            (5000, 15000, ["b"], ["b"]),
        ]
        assert [a.new for a in fired] == [["a"], ["b"], []]
        assert [a.expired for a in fired] == [[], [], ["a"]]
        assert len(windows) == 0

    def test_a_window_fires_only_when_the_time_reaches_its_end(self) -> None:
        windows: TimeWindows[str] = TimeWindows(Duration(10), Duration(10))
        windows.add(9999, "a")
        assert windows.advance(9999).activations == []
        assert [a.items for a in windows.advance(10000).activations] == [["a"]]

    def test_empty_windows_are_skipped_without_walking_them(self) -> None:
        windows: TimeWindows[str] = TimeWindows(Duration(1), Duration(1))
        windows.add(0, "a")
        windows.add(10**12, "b")  # thirty years later
        fired = windows.advance(10**12 + 1000).activations
        assert [a.items for a in fired] == [["a"], ["b"]]

    @settings(max_examples=200, deadline=None)
    @given(
        stamps=st.lists(st.integers(0, 60_000), max_size=40),
        slide=st.integers(1, 10_000),
        slides_per_window=st.integers(1, 4),
        watermarks=st.lists(st.integers(0, 80_000), max_size=6),
    )
    def test_each_item_is_in_every_window_over_it_and_done_after_the_last(
        self, stamps: list[int], slide: int, slides_per_window: int, watermarks: list[int]
    ) -> None:
        length = slide * slides_per_window
        fired = _fire_all(TimeWindows(Duration(length / 1000), Duration(slide / 1000)), stamps, watermarks)
        ends = [a.end_ts for a in fired]
        assert None not in ends
        assert ends == sorted(end for end in ends if end is not None)
        for a in fired:
            start, end = a.start_ts, a.end_ts
            assert start is not None and end is not None
            inside = [i for i, ts in enumerate(stamps) if start <= ts < end]
            assert a.items == sorted(inside, key=lambda i: (stamps[i], i))
        done_at = {i: a.end_ts for a in fired for i in a.done}
        assert sorted(done_at) == list(range(len(stamps)))  # each item done exactly once...
        for i, ts in enumerate(stamps):
            last_end = (ts // slide + slides_per_window) * slide  # ...right after its last window
            assert done_at[i] == last_end

    @settings(max_examples=100, deadline=None)
    @given(stamps=st.lists(st.integers(0, 60_000), max_size=30), data=st.data())
    def test_the_windows_do_not_depend_on_the_arrival_order(self, stamps: list[int], data: st.DataObject) -> None:
        shuffled = data.draw(st.permutations(list(enumerate(stamps))))

        def run(pairs: list[tuple[int, int]]) -> list[tuple[float | None, list[int]]]:
            windows: TimeWindows[int] = TimeWindows(Duration(10), Duration(2.5))
            for i, ts in pairs:
                windows.add(ts, i)
            return [(a.end_ts, sorted(a.items)) for a in windows.advance(10**6).activations]

        assert run(list(enumerate(stamps))) == run(shuffled)


class TestCountWindows:
    def test_a_sliding_count_window_acks_a_tuple_once_it_has_left_for_good(self) -> None:
        windows: CountWindows[int] = CountWindows(Count(3), Count(1))
        fired = [a for i in range(5) for a in windows.add(0, i).activations]
        assert [a.items for a in fired] == [[0], [0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4]]
        assert [a.done for a in fired] == [[], [], [0], [1], [2]]
        assert [a.new for a in fired] == [[0], [1], [2], [3], [4]]

    def test_a_tumbling_count_window_acks_everything_after_its_execute(self) -> None:
        windows: CountWindows[int] = CountWindows(Count(2), Count(2))
        fired = [a for i in range(5) for a in windows.add(0, i).activations]
        assert [(a.items, a.done) for a in fired] == [([0, 1], [0, 1]), ([2, 3], [2, 3])]
        assert len(windows) == 1

    def test_a_count_length_on_a_duration_slide_lets_the_oldest_go_on_arrival(self) -> None:
        windows: CountWindows[int] = CountWindows(Count(2), Duration(5))
        assert [windows.add(0, i).evicted for i in range(3)] == [[], [], [0]]
        (fired,) = windows.advance(5000).activations
        assert fired.items == [1, 2]
        assert fired.expired == [0]

    def test_a_duration_length_on_a_count_slide_evicts_by_the_clock(self) -> None:
        windows: CountWindows[int] = CountWindows(Duration(10), Count(2))
        windows.add(0, 0)
        windows.add(0, 1)  # fires [0, 1]
        assert windows.advance(10001).evicted == [0, 1]
        windows.add(10001, 2)
        (fired,) = windows.add(10001, 3).activations
        assert (fired.items, fired.start_ts, fired.end_ts) == ([2, 3], 1, 10001)


class TestInTimestampOrder:
    def test_count_windows_on_event_time_see_their_tuples_in_timestamp_order(self) -> None:
        windows: InTimestampOrder[str] = InTimestampOrder(Count(2), Count(2))
        for ts, item in [(3000, "c"), (1000, "a"), (4000, "d"), (2000, "b"), (9000, "later")]:
            windows.add(ts, item)
        fired = windows.advance(5000).activations
        assert [a.items for a in fired] == [["a", "b"], ["c", "d"]]
        assert len(windows) == 1

    def test_a_duration_slide_fires_at_each_boundary_with_new_tuples(self) -> None:
        windows: InTimestampOrder[str] = InTimestampOrder(Count(3), Duration(10))
        for ts, item in [(1000, "a"), (2000, "b"), (12000, "c"), (55000, "d")]:
            windows.add(ts, item)
        fired = windows.advance(60000).activations
        assert [a.items for a in fired] == [["a", "b"], ["a", "b", "c"], ["b", "c", "d"]]
        assert windows.horizon() == -math.inf


def _key(item: tuple[str, int]) -> str:
    return item[0]


class TestSessionWindows:
    def test_a_session_closes_a_gap_after_its_last_tuple_per_key(self) -> None:
        windows: SessionWindows[tuple[str, int]] = SessionWindows(Duration(5), _key)
        for ts, item in [(1000, ("a", 1)), (4000, ("a", 2)), (3000, ("b", 3)), (9500, ("a", 4))]:
            windows.add(ts, item)
        assert windows.horizon() == 14500
        assert windows.advance(7999).activations == []
        fired = windows.advance(9000).activations  # "b" closes at 8000, "a" 1 and 2 at 4000 + 5 s
        assert [(a.items, a.start_ts, a.end_ts) for a in fired] == [
            ([("b", 3)], 3000, 8000),
            ([("a", 1), ("a", 2)], 1000, 9000),
        ]
        assert all(a.done == a.items == a.new for a in fired)  # each tuple is in one session
        assert [a.items for a in windows.advance(14500).activations] == [[("a", 4)]]
        assert windows.horizon() == -math.inf

    @settings(max_examples=200, deadline=None)
    @given(
        stamped=st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 30_000)), max_size=30),
        gap=st.integers(1, 5_000),
        data=st.data(),
    )
    def test_the_sessions_do_not_depend_on_the_arrival_order(
        self, stamped: list[tuple[str, int]], gap: int, data: st.DataObject
    ) -> None:
        """Whatever order the same tuples come in, and whenever the watermark moves (as long as
        no tuple is late), the same sessions fire."""

        def sessions(order: list[int], watermarks: list[int]) -> list[tuple[float | None, list[int]]]:
            windows: SessionWindows[tuple[str, int]] = SessionWindows(Duration(gap / 1000), _key)
            fired: list[Activation[tuple[str, int]]] = []
            marks = iter(sorted(watermarks))
            for i in order:
                key, ts = stamped[i]
                windows.add(ts, (key, i))
                mark = next(marks, None)
                if mark is not None:  # never past a tuple still to come: none is late
                    later = [stamped[j][1] for j in order[order.index(i) + 1 :]]
                    fired += windows.advance(min([mark, *later])).activations
            fired += windows.advance(10**9).activations
            return [(a.end_ts, sorted(n for _, n in a.items)) for a in fired]

        order = data.draw(st.permutations(range(len(stamped))))
        watermarks = data.draw(st.lists(st.integers(0, 40_000), max_size=len(stamped)))
        got = sessions(list(order), watermarks)
        expected = sessions(list(range(len(stamped))), [])
        assert sorted(got) == sorted(expected)
        assert sorted(n for _, items in got for n in items) == list(range(len(stamped)))


class TestContents:
    """Exactly-once puts a task's windows in the checkpoint (``contents.py``): loaded again, they
    fire exactly as if they had never left."""

    SOURCE = TupleSource("source", "default", 1, ["n", "key", "ts"])
    MANAGERS: dict[str, Callable[[], Manager[Tuple]]] = {
        "time": lambda: TimeWindows(Duration(5), Duration(2)),
        "count": lambda: CountWindows(Count(4), Count(2)),
        "count on a duration": lambda: CountWindows(Duration(4), Count(3)),
        "timestamp order": lambda: InTimestampOrder(Count(3), Count(3)),
        "session": lambda: SessionWindows(Duration(3), operator.itemgetter("key")),
    }

    def fire(self, windows: Manager[Tuple], stamps: list[int], first: int, last: int) -> list[list[Tuple]]:
        """Add items ``first`` to ``last`` - 1 (``n`` = index, timestamp from ``stamps``), moving
        the time to 3 s behind the latest after each, and past everything once all are in."""
        fired: list[Activation[Tuple]] = []
        for n in range(first, last):
            ts = stamps[n]
            fired += windows.add(ts, Tuple([n, "ab"[n % 2], ts], self.SOURCE)).activations
            fired += windows.advance(max(stamps[: n + 1]) - 3000).activations
        if last == len(stamps):
            fired += windows.advance(10.0**9).activations
        return [a.items for a in fired]

    @settings(max_examples=60, deadline=None)
    @given(stamps=st.lists(st.integers(0, 20_000), min_size=1, max_size=30), data=st.data())
    def test_windows_loaded_from_a_dump_fire_what_they_would_have(self, stamps: list[int], data: st.DataObject) -> None:
        kind = data.draw(st.sampled_from(sorted(self.MANAGERS)))
        cut = data.draw(st.integers(0, len(stamps)))
        settings = WindowSettings(Count(1), Count(1))
        whole = self.fire(self.MANAGERS[kind](), stamps, 0, len(stamps))
        before: Manager[Tuple] = self.MANAGERS[kind]()
        fired = self.fire(before, stamps, 0, cut)
        contents = load(dump(WindowContents(settings, 2, before, 1.5)), settings, 2, "here")
        assert contents.clock == 1.5
        after = self.fire(contents.windows, stamps, cut, len(stamps))
        assert [[t["n"] for t in items] for items in fired + after] == [[t["n"] for t in items] for items in whole]
        restored = [t for items in after for t in items if t["n"] < cut]
        assert all(t._tree is None for t in restored)  # settled: the acks the windows give them are no-ops

    def test_other_settings_or_another_parallelism_are_refused_naming_the_task(self) -> None:
        settings = WindowSettings(Count(3), Count(3))
        blob = dump(WindowContents(settings, 2, CountWindows(Count(3), Count(3))))
        with pytest.raises(
            StateError, match=r"windowed bolt 'w' task 4: .* kept by 2 task\(s\), but the bolt now has 3"
        ):
            load(blob, settings, 3, "windowed bolt 'w' task 4")
        with pytest.raises(StateError, match=r"task 4: the committed windows were written with .*Count\(n=3\)"):
            load(blob, WindowSettings(Count(4), Count(2)), 2, "windowed bolt 'w' task 4")


class TestWatermark:
    def test_the_watermark_is_the_slowest_input_minus_the_lag(self) -> None:
        tracker = WatermarkTracker(["a", "b"], lag_ms=100, idle_timeout_ms=None)
        tracker.observe("a", 5000, now=0)
        assert tracker.update(0) == -math.inf  # "b" has sent nothing: nothing may fire
        tracker.observe("b", 3000, now=0)
        assert tracker.update(0) == 2900
        tracker.observe("b", 1000, now=0)  # out of order: the largest seen counts
        assert tracker.update(0) == 2900

    def test_the_watermark_never_goes_back(self) -> None:
        tracker = WatermarkTracker(["a", "b"], lag_ms=0, idle_timeout_ms=1000)
        tracker.observe("a", 5000, now=0)
        tracker.observe("b", 3000, now=0)
        assert tracker.update(0) == 3000
        tracker.observe("a", 5000, now=1500)
        assert tracker.update(2000) == 5000  # "b" went idle: "a" alone
        tracker.observe("b", 4000, now=2500)  # "b" is back, behind
        assert tracker.update(2500) == 5000

    def test_an_idle_input_is_left_out_after_the_idle_timeout(self) -> None:
        tracker = WatermarkTracker(["a", "b"], lag_ms=0, idle_timeout_ms=5000)
        tracker.observe("a", 9000, now=4000)
        assert tracker.update(4000) == -math.inf
        assert tracker.idle(5000) == ["b"]
        assert tracker.update(5000) == 9000

    def test_with_every_input_idle_the_watermark_stays_and_the_bolt_moves_it(self) -> None:
        tracker = WatermarkTracker(["a", "b"], lag_ms=500, idle_timeout_ms=1000)
        tracker.observe("a", 9000, now=0)
        assert not tracker.all_idle(999)
        assert tracker.update(1000) == -math.inf
        assert tracker.all_idle(1000)
        assert tracker.advance_to(20000) == 20000
        assert tracker.advance_to(10000) == 20000


# -- validation -----------------------------------------------------------------------------------


class TestValidation:
    def problems(self, bolt: WindowedBolt, fields: tuple[str, ...] = ("word", "ts")) -> list[str]:
        with pytest.raises(TopologyError) as caught:
            window_topology(bolt, fields=fields)
        return caught.value.problems

    def test_a_windowed_bolt_needs_a_window(self) -> None:
        (problem,) = self.problems(Record())
        assert "windowed bolt 'window': no window set" in problem

    def test_a_slide_longer_than_the_window_is_refused(self) -> None:
        (problem,) = self.problems(Record().with_window(Count(3), Count(5)))
        assert "slide (5 tuples) is longer than the window (3 tuples)" in problem

    def test_a_late_stream_needs_a_timestamp_field(self) -> None:
        (problem,) = self.problems(Record().with_tumbling_window(Duration(10)).with_late_tuple_stream("late"))
        assert "'window': late tuple stream 'late' without a timestamp field" in problem

    def test_the_timestamp_field_must_be_declared_by_the_inputs(self) -> None:
        bolt = Record().with_tumbling_window(Duration(10)).with_timestamp_field("event_time")
        (problem,) = self.problems(bolt)
        assert "timestamp field 'event_time' is not declared by input 'source' stream 'default'" in problem
        assert "['word', 'ts']" in problem

    def test_session_windows_need_a_timestamp_field_and_a_declared_key(self) -> None:
        problems = self.problems(Record().with_session_window(Duration(5), "user"))
        assert any("session windows (key 'user') need a timestamp field" in p for p in problems)
        assert any("session key field 'user' is not declared by input 'source'" in p for p in problems)

    def test_the_late_stream_is_declared_with_its_one_field(self) -> None:
        bolt = Record().with_tumbling_window(Duration(10)).with_timestamp_field("ts").with_late_tuple_stream("late")
        topology = window_topology(bolt)
        assert topology.components["window"].streams["late"].fields == ("late_tuple",)

    def test_a_duration_window_must_fit_in_the_message_timeout(self) -> None:
        topology = window_topology(Record().with_window(Duration(60), Duration(10)))
        with pytest.raises(TopologyError) as caught:
            check_window_settings(topology, Config(message_timeout_secs=30))
        (problem,) = caught.value.problems
        assert "windowed bolt 'window': the window holds a tuple up to 70 s" in problem
        assert "message_timeout_secs=30" in problem
        check_window_settings(topology, Config(message_timeout_secs=70))

    def test_event_time_adds_the_lag_and_the_watermark_interval(self) -> None:
        bolt = Record().with_tumbling_window(Duration(10)).with_timestamp_field("ts").with_lag(Duration(5))
        with pytest.raises(TopologyError, match="up to 26 s .length plus slide plus lag and watermark interval"):
            check_window_settings(window_topology(bolt), Config(message_timeout_secs=25))

    def test_a_count_window_must_fit_in_max_spout_pending(self) -> None:
        topology = window_topology(Record().with_window(Count(100), Count(10)))
        with pytest.raises(TopologyError, match="keeps up to 110 trees pending, more than max_spout_pending=50"):
            check_window_settings(topology, Config(max_spout_pending=50))
        check_window_settings(topology, Config(max_spout_pending=None))

    def test_the_pending_budget_a_duration_window_allows_is_said_with_numbers(self) -> None:
        """A 10 s window sliding by 2 s holds a tree up to 12 s: 5,000 pending allow ~417/s."""
        from rayflow._windows.validation import pending_advice

        topology = window_topology(Record().with_window(Duration(10), Duration(2)))
        (advice,) = pending_advice(topology, Config(max_spout_pending=5000))
        assert "windowed bolt 'window' holds each tuple's tree up to 12 s" in advice
        assert "at most about 417 trees a second" in advice and "R x 12" in advice
        assert pending_advice(topology, Config(max_spout_pending=None)) == []

    def test_a_window_its_config_cannot_carry_is_refused_before_the_run(self) -> None:
        """The default message timeout (30 s) cannot carry a 60 s window sliding by 10 s."""
        with pytest.raises(TopologyError, match="the window holds a tuple up to 70 s"):
            InProcessTopology(window_topology(Record().with_window(Duration(60), Duration(10))))


# -- in a topology, processing time ------------------------------------------------------------------


class TestCountWindowScenarios:
    def test_a_tumbling_count_window_acks_its_tuples_right_after_execute(self) -> None:
        run = InProcessTopology(window_topology(Record().with_tumbling_window(Count(3))))
        feed(run, "a", "b", "c", "d")
        assert words_of(run) == [["a", "b", "c"]]
        assert run.acked("source") == ["a", "b", "c"]
        assert run.pending_trees() == 1  # "d" waits for its window
        assert run.emitted("window") == [[["a", "b", "c"], None]]

    def test_a_sliding_count_window_acks_a_tuple_only_after_its_last_window(self) -> None:
        run = InProcessTopology(window_topology(Record().with_window(Count(3), Count(1))))
        feed(run, "a", "b", "c", "d", "e")
        assert words_of(run) == [["a"], ["a", "b"], ["a", "b", "c"], ["b", "c", "d"], ["c", "d", "e"]]
        assert run.acked("source") == ["a", "b", "c"]
        assert run.failed("source") == []

    def test_emits_are_anchored_to_every_tuple_of_the_window(self) -> None:
        run = InProcessTopology(window_topology(Record().with_tumbling_window(Count(2)), downstream=True))
        feed(run, "a", "b")
        assert sorted(run.failed("source")) == ["a", "b"]  # the sink failed the window's one emit
        assert run.acked("source") == []

    def test_an_exception_in_execute_fails_the_window_and_the_task_goes_on(self) -> None:
        run = InProcessTopology(window_topology(Record().with_tumbling_window(Count(2))))
        bolt: Record = run.components("window")[0]
        bolt.raising = True
        feed(run, "a", "b")
        assert sorted(run.failed("source")) == ["a", "b"]
        assert "the user's execute broke" in run.metrics()["window"]["last_error"]
        bolt.raising = False
        feed(run, "c", "d")
        assert run.acked("source") == ["c", "d"]


class TestDurationWindowScenarios:
    def test_a_sliding_duration_window_fires_every_slide_on_the_clock(self) -> None:
        run = InProcessTopology(window_topology(Record().with_window(Duration(10), Duration(5))))
        feed(run, "a")
        run.advance(5)
        feed(run, "b")
        assert run.acked("source") == []
        run.advance(5)
        assert run.acked("source") == ["a"]
        run.advance(5)
        assert words_of(run) == [["a"], ["a", "b"], ["b"]]
        assert [w.new for w in windows(run)] == [["a"], ["b"], []]
        assert [w.expired for w in windows(run)] == [[], [], ["a"]]
        assert run.acked("source") == ["a", "b"]

    def test_an_hour_long_tumbling_window_is_driven_by_the_simulated_clock(self) -> None:
        conf = {"message_timeout_secs": 7200}
        run = InProcessTopology(window_topology(Record().with_tumbling_window(Duration(3600))), conf)
        feed(run, *(f"w{i}" for i in range(100)))
        run.advance(3599)
        assert run.acked("source") == []
        run.advance(1)
        assert len(words_of(run)) == 1
        assert len(run.acked("source")) == 100
        assert windows(run)[0].end_ts == 3_600_000.0

    def test_complete_topology_runs_an_hour_long_window_to_the_end(self) -> None:
        started = time.perf_counter()
        bolt = Record().with_tumbling_window(Duration(3600))
        source = [[f"w{i}", 0] for i in range(1000)]
        result = complete_topology(
            window_topology(bolt), {"message_timeout_secs": 7200}, mocked_sources={"source": source}
        )
        elapsed = time.perf_counter() - started
        assert result.finished
        assert sorted(result.acked("source")) == list(range(1000))
        assert result.failed("source") == []
        assert len(result.emitted("window")) == 1
        print(f"one-hour tumbling window, 1000 tuples, complete_topology: {elapsed * 1000:.0f} ms")


# -- in a topology, event time -----------------------------------------------------------------------


def event_time_bolt(*, late: bool = True, idle: float | None = None) -> WindowedBolt:
    bolt = Record().with_tumbling_window(Duration(10)).with_timestamp_field("ts")
    bolt = bolt.with_watermark_interval(Duration(1))
    if late:
        bolt = bolt.with_late_tuple_stream("late")
    if idle is not None:
        bolt = bolt.with_idle_timeout(Duration(idle))
    return bolt


def feed_at(run: InProcessTopology, stamps: dict[str, float], task: int = 0) -> None:
    spout: Fed = run.components("source")[task]
    for word, ts in stamps.items():
        spout.feed([word, ts], word)
    run.run()


class TestEventTimeScenarios:
    def test_windows_fire_as_the_watermark_passes_their_end(self) -> None:
        run = InProcessTopology(window_topology(event_time_bolt()))
        feed_at(run, {"a": 1000, "b": 5000, "c": 12000})
        assert words_of(run) == []  # no watermark yet
        run.advance(1)
        assert words_of(run) == [["a", "b"]]
        assert (windows(run)[0].start_ts, windows(run)[0].end_ts) == (0, 10000)
        assert run.acked("source") == ["a", "b"]

    def test_out_of_order_tuples_within_the_lag_land_in_their_window(self) -> None:
        bolt = event_time_bolt().with_lag(Duration(5))
        run = InProcessTopology(window_topology(bolt))
        feed_at(run, {"a": 1000, "b": 12000, "c": 9000, "d": 14999})  # "c" is behind "b", within the lag
        run.advance(1)
        assert words_of(run) == []  # watermark 9999: the first window ends at 10000
        feed_at(run, {"e": 15000})
        run.advance(1)
        assert words_of(run) == [["a", "c"]]

    def test_a_late_tuple_goes_to_the_late_stream_and_is_acked_at_once(self) -> None:
        run = InProcessTopology(window_topology(event_time_bolt()))
        feed_at(run, {"a": 1000, "b": 12000})
        run.advance(1)  # watermark 12000
        feed_at(run, {"late": 3000})
        assert run.emitted("window", "late") == [[["late", 3000]]]
        assert run.acked("source") == ["a", "late"]

    def test_without_a_late_stream_a_late_tuple_is_logged_and_acked(self, caplog: pytest.LogCaptureFixture) -> None:
        run = InProcessTopology(window_topology(event_time_bolt(late=False)))
        feed_at(run, {"a": 12000})
        run.advance(1)
        feed_at(run, {"late": 3000})
        assert run.acked("source") == ["late"]
        assert "late tuple (timestamp 3000" in caplog.text

    def test_a_missing_or_non_numeric_timestamp_fails_that_tuple(self) -> None:
        run = InProcessTopology(window_topology(event_time_bolt()))
        feed_at(run, {"a": "yesterday", "b": None, "c": 1000})  # type: ignore[dict-item]
        assert sorted(run.failed("source")) == ["a", "b"]
        error = run.metrics()["window"]["last_error"]
        assert "timestamp field 'ts' must hold a number (ms since the epoch)" in error
        assert run.pending_trees() == 1  # "c" waits for its window

    def test_a_slow_upstream_task_holds_the_windows_back_instead_of_making_tuples_late(self) -> None:
        run = InProcessTopology(window_topology(event_time_bolt(), spouts=2))
        feed_at(run, {"a": 1000, "b": 35000}, task=0)
        run.advance(5)
        assert words_of(run) == []  # task 1 has sent nothing: the watermark waits
        feed_at(run, {"slow": 2000}, task=1)  # not late
        run.advance(1)
        assert words_of(run) == []  # watermark 2000
        feed_at(run, {"c": 21000}, task=1)
        run.advance(1)
        assert words_of(run) == [["a", "slow"]]
        assert run.emitted("window", "late") == []

    def test_an_idle_timeout_lets_the_others_drive_the_watermark(self) -> None:
        run = InProcessTopology(window_topology(event_time_bolt(idle=3), spouts=2))
        feed_at(run, {"a": 1000, "b": 35000}, task=0)
        run.advance(2)
        assert words_of(run) == []
        feed_at(run, {"c": 36000}, task=0)
        run.advance(1)  # task 1 has been idle for 3 s: left out, the watermark is 36000
        assert words_of(run) == [["a"]]
        feed_at(run, {"late": 2000}, task=1)  # the price: what it sends now may be late
        assert run.emitted("window", "late") == [[["late", 2000]]]

    def test_when_every_input_is_idle_the_last_windows_fire(self) -> None:
        run = InProcessTopology(window_topology(event_time_bolt(idle=3), spouts=2))
        feed_at(run, {"a": 1000, "b": 15000}, task=0)
        run.advance(3)
        assert words_of(run) == [["a"], ["b"]]
        assert run.pending_trees() == 0
        feed_at(run, {"after": 16000}, task=1)  # its window has fired: late
        assert run.emitted("window", "late") == [[["after", 16000]]]

    def test_a_count_window_on_event_time_counts_in_timestamp_order(self) -> None:
        bolt = Record().with_tumbling_window(Count(2)).with_timestamp_field("ts").with_lag(Duration(1))
        run = InProcessTopology(window_topology(bolt))
        feed_at(run, {"b": 2000, "a": 1000, "d": 4000, "c": 3000, "e": 9000})
        run.advance(1)  # watermark 8000
        assert words_of(run) == [["a", "b"], ["c", "d"]]
        assert sorted(run.acked("source")) == ["a", "b", "c", "d"]

    def test_session_windows_per_key_close_a_gap_after_their_last_tuple(self) -> None:
        bolt = Record().with_session_window(Duration(5), "word").with_timestamp_field("ts")
        run = InProcessTopology(window_topology(bolt))
        spout: Fed = run.components("source")[0]
        for msg_id, (word, ts) in enumerate([("x", 1000), ("y", 2000), ("x", 4000), ("x", 12000), ("y", 30000)]):
            spout.feed([word, ts], msg_id)
        run.run()
        run.advance(1)  # watermark 30000: the one input's latest
        # y (2000) closed at 7000, x (1000, 4000) at 9000, x (12000) at 17000; y (30000) is open
        assert words_of(run) == [["y"], ["x", "x"], ["x"]]
        assert sorted(run.acked("source")) == [0, 1, 2, 3]

    def test_the_contracts_top_words(self) -> None:
        bolt = TopWords().with_tumbling_window(Duration(10)).with_timestamp_field("ts")
        run = InProcessTopology(window_topology(bolt))
        feed_at(run, {"x": 1000, "y": 2000})
        spout: Fed = run.components("source")[0]
        spout.feed(["y", 3000], "y2")
        spout.feed(["z", 15000], "z")
        run.run()
        run.advance(1)
        assert run.emitted("window") == [["y", 2, 10000.0]]


# -- topology files --------------------------------------------------------------------------------

FILE = """\
name: windows
spouts:
  - {{id: source, class: tests.window_components.Fed}}
bolts:
  - id: window
    class: tests.window_components.Record
    window: {window}
streams:
  - {{from: source, to: window, grouping: {{type: shuffle}}}}
"""


class TestTopologyFiles:
    def load(self, tmp_path: Path, window: str) -> Topology:
        path = tmp_path / "windows.yaml"
        path.write_text(FILE.format(window=window))
        return load_topology(path).topology

    def problems(self, tmp_path: Path, window: str) -> list[str]:
        with pytest.raises(SpecError) as caught:
            self.load(tmp_path, window)
        return [str(p) for p in caught.value.problems]

    def test_a_bolt_entry_carries_its_window(self, tmp_path: Path) -> None:
        topology = self.load(
            tmp_path, "{length: {seconds: 20}, slide: {count: 10}, timestamp_field: ts, lag_secs: 5, late_stream: late}"
        )
        bolt = topology.components["window"].component
        assert isinstance(bolt, WindowedBolt)
        assert bolt.window_settings is not None
        assert (bolt.window_settings.length, bolt.window_settings.slide) == (Duration(20), Count(10))
        assert (bolt.window_settings.lag, bolt.window_settings.late_stream) == (Duration(5), "late")

    def test_without_a_slide_the_window_tumbles(self, tmp_path: Path) -> None:
        bolt = self.load(tmp_path, "{length: {count: 5}}").components["window"].component
        assert isinstance(bolt, WindowedBolt) and bolt.window_settings is not None
        assert bolt.window_settings.slide == Count(5)

    def test_a_late_stream_without_a_timestamp_field_is_placed_on_its_line(self, tmp_path: Path) -> None:
        (problem,) = self.problems(tmp_path, "{length: {seconds: 10}, late_stream: late}")
        assert "windows.yaml:5 bolts[0]: windowed bolt 'window':" in problem
        assert "late tuple stream 'late' without a timestamp field" in problem

    def test_a_bolt_entry_may_carry_session_windows(self, tmp_path: Path) -> None:
        window = "{session: {gap_secs: 20, key_field: word}, timestamp_field: ts}"
        bolt = self.load(tmp_path, window).components["window"].component
        assert isinstance(bolt, WindowedBolt) and bolt.window_settings is not None
        assert (bolt.window_settings.length, bolt.window_settings.session_key) == (Duration(20), "word")

    def test_a_window_longer_than_the_message_timeout_is_placed_on_its_line(self, tmp_path: Path) -> None:
        (problem,) = self.problems(tmp_path, "{length: {seconds: 60}, slide: {seconds: 10}}")
        assert "windows.yaml:7 bolts[0].window: windowed bolt 'window': the window holds a tuple up to 70 s" in problem
        assert "message_timeout_secs=30" in problem

    def test_a_length_is_a_count_or_seconds(self, tmp_path: Path) -> None:
        (problem,) = self.problems(tmp_path, "{length: {count: 5, seconds: 3}}")
        assert "windows.yaml:7" in problem
        assert "give one of 'count' (tuples) or 'seconds'" in problem


# -- on Ray ----------------------------------------------------------------------------------------


@pytest.mark.ray
def test_the_example_runs_unchanged_on_ray(ray_cluster: str) -> None:
    """The event-time top words (a timer-driven watermark on the wall clock, two upstream
    tasks, a late stream) acks every sentence on Ray and closes its windows in order."""
    from examples.windowed_wordcount import CONF, build
    from rayflow import submit_topology

    handle = submit_topology("windows", CONF, build(sentences=300))
    try:
        assert handle.wait(timeout=120)
        metrics = handle.metrics()
    finally:
        handle.kill()
    assert metrics["sentences"]["acked"] == 300
    assert metrics["sentences"]["failed"] == 0
    assert metrics["top"]["emitted"] >= 3  # 30 s of event time in 10 s windows
    assert metrics["top"]["errors"] == 0
