"""Why trees failed: a tree that times out (a cycle that never ends, a bolt that holds its
tuple) is counted apart from one a bolt failed, and ``rayflow run``'s summary says which."""

from __future__ import annotations

from pathlib import Path

import pytest

from rayflow._cli.monitor import _spout_verdict, flow_order
from rayflow._metrics import merge
from rayflow.topology_file import load_topology

from .executor_components import Count, Hold, Wire, pipeline, wordcount

ROOT = Path(__file__).resolve().parent.parent


class TestTimedOutIsCounted:
    def test_a_tree_that_times_out(self) -> None:
        """A held tuple's tree fails at 1.25 T: one failed, one timed out."""
        wire = Wire(pipeline(Hold()))
        wire.spout().feed("slow", msg_id=1)
        wire.run()
        wire.advance(1.25 * wire.conf.message_timeout_secs)
        snap = wire.task("sentences").snapshot()
        assert (snap["failed"], snap["timed_out"]) == (1, 1)

    def test_a_tree_a_bolt_fails(self) -> None:
        """A bolt's fail is a failure, not a timeout."""
        wire = Wire(wordcount(count=Count(fail_word="cow")))
        wire.spout().feed("the cow", msg_id=1)
        wire.run()
        wire.settle()
        assert wire.spout().failed == [1]
        snap = wire.task("sentences").snapshot()
        assert (snap["failed"], snap["timed_out"]) == (1, 0)

    def test_merged_over_tasks(self) -> None:
        wire = Wire(pipeline(Hold()))
        snap = wire.task("sentences").snapshot()
        assert merge([{**snap, "timed_out": 2}, {**snap, "timed_out": 3}])["timed_out"] == 5


class TestSummary:
    def test_the_summary_says_why(self) -> None:
        m = {"emitted": 10, "acked": 4, "failed": 6, "pending": 0, "timed_out": 5}
        assert _spout_verdict("words", m) == (
            "words: 4 of 10 tuple tree(s) acked, 6 failed, 0 still pending"
            " (of the failed: 5 timed out, 1 failed by a bolt)"
        )

    def test_no_reasons_without_failures(self) -> None:
        m = {"emitted": 10, "acked": 8, "failed": 0, "pending": 2, "timed_out": 0}
        assert _spout_verdict("words", m) == "words: 8 of 10 tuple tree(s) acked, 0 failed, 2 still pending"


class TestCycles:
    def test_a_cycle_loads_and_is_drawn_once(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Storm allows cycles, so does a topology file; each bolt is listed once."""
        monkeypatch.syspath_prepend(str(ROOT))
        (tmp_path / "cycle.yaml").write_text(
            "name: cycle\n"
            "spouts:\n  - {id: words, class: tests.topology_file_components.WordSpout}\n"
            "bolts:\n"
            "  - {id: a, class: tests.topology_file_components.Upper}\n"
            "  - {id: b, class: tests.topology_file_components.Upper}\n"
            "streams:\n"
            "  - {from: words, to: a, grouping: {type: shuffle}}\n"
            "  - {from: a, to: b, grouping: {type: shuffle}}\n"
            "  - {from: b, to: a, grouping: {type: shuffle}}\n"
        )
        loaded = load_topology(tmp_path / "cycle.yaml")
        assert flow_order(loaded.topology) == ["a", "b"]
