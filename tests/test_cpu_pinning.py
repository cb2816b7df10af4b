"""Pinning task actors to cores (``rayflow.worker.cpu.pinning``): which task gets which core, that
every thread of a process is pinned, and a word count on Ray with pinning on, whose busy
processes each run on a core of their own and whose every sentence is acked."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import psutil
import pytest

from examples.wordcount import SentenceSpout, SplitSentence, WordCount
from rayflow import Config, LocalCluster, TopologyBuilder
from rayflow._runtime.cpu_pinning import core_for
from tests.conftest import eventually

LINUX = sys.platform.startswith("linux") and hasattr(os, "sched_setaffinity")


class TestCoreFor:
    """Task actors of a node, ackers aside, take the cores in turn, in task order."""

    NODES = {1: "a", 2: "a", 3: "b", 4: "a", 5: "a"}
    ACKERS = {5}

    def test_each_task_of_a_node_gets_the_next_core(self) -> None:
        assert [core_for(t, self.NODES, self.ACKERS, {0, 1, 2, 3}) for t in (1, 2, 4)] == [0, 1, 2]

    def test_more_tasks_than_cores_wrap_round(self) -> None:
        assert [core_for(t, self.NODES, self.ACKERS, {6, 7}) for t in (1, 2, 4)] == [6, 7, 6]

    def test_another_node_counts_its_own_tasks(self) -> None:
        assert core_for(3, self.NODES, self.ACKERS, {0, 1}) == 0

    def test_an_acker_an_unknown_task_or_no_core_is_not_pinned(self) -> None:
        assert core_for(5, self.NODES, self.ACKERS, {0, 1}) is None
        assert core_for(9, self.NODES, self.ACKERS, {0, 1}) is None
        assert core_for(1, self.NODES, self.ACKERS, set()) is None


@pytest.mark.skipif(not LINUX, reason="CPU affinity is set through Linux's sched_setaffinity")
def test_every_thread_of_the_process_is_pinned_and_later_threads_inherit_it() -> None:
    """In a child process (pinning this one would pin the test session): a thread started
    before and one started after end up on the one core."""
    core = max(os.sched_getaffinity(0))
    script = textwrap.dedent(
        f"""
        import os, threading
        from rayflow._runtime.cpu_pinning import pin_process
        ready, stop = threading.Event(), threading.Event()
        seen = {{}}
        def early():
            ready.set()
            stop.wait(30)
            seen["early"] = os.sched_getaffinity(0)
        before = threading.Thread(target=early)
        before.start()
        ready.wait(30)
        pinned = pin_process({core})
        stop.set()
        before.join(30)
        later = threading.Thread(target=lambda: seen.update(later=os.sched_getaffinity(0)))
        later.start()
        later.join(30)
        print(pinned, sorted(os.sched_getaffinity(0)), sorted(seen["early"]), sorted(seen["later"]))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    pinned, *sets = done.stdout.split(" ", 1)
    assert int(pinned) >= 2
    assert sets[0].strip() == f"[{core}] [{core}] [{core}]"


@pytest.mark.skipif(not LINUX, reason="CPU affinity is set through Linux's sched_setaffinity")
def test_a_pinned_word_count_runs_its_busy_tasks_on_cores_of_their_own(ray_cluster: str) -> None:
    """spout -> split (chained to it) -> count, one acker, pinning on: the spout's process and
    the count's each on one core, not the same one; the acker free; every sentence acked."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(2_000))
    builder.set_bolt("split", SplitSentence()).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount()).fields_grouping("split", ["word"])
    conf = Config.of({"cpu_pinning": True, "max_spout_pending": 500})
    with LocalCluster() as cluster:
        handle = cluster.submit_topology("pinned", conf, builder.create_topology())
        try:
            assert handle.wait(timeout=120)
            tasks = handle.task_metrics()
            cores = {m["component"]: m["core"] for m in tasks.values()}
            assert cores["__acker"] is None
            assert cores["split"] == cores["sentences"]  # chained: the spout's process
            assert {cores["sentences"], cores["count"]} == set(sorted(os.sched_getaffinity(0))[:2])
            for m in tasks.values():
                allowed = {t.id: os.sched_getaffinity(t.id) for t in psutil.Process(m["pid"]).threads()}
                if m["core"] is not None:
                    assert set(map(frozenset, allowed.values())) == {frozenset({m["core"]})}
            assert eventually(lambda: handle.metrics()["sentences"]["acked"] == 2_000, timeout=30)
        finally:
            handle.kill()
