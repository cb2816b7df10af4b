"""Exactly-once on Ray: a task is SIGKILLed, or the whole topology dies, and every count ends
exact.

The topology: numbered sentences (2 spout tasks, ``position``/``seek``) -> split (2 tasks) ->
count (a ``StatefulBolt``, 2 tasks, fields(word)), state in SQLite (no server), with
``processing_guarantee="exactly_once"``. Once a third of the words are counted, one task is
killed; the run must end with each msg id acked once and the committed counts equal to the
truth, not above it (what at-least-once state gives: ``test_state_on_ray.py``)."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rayflow import Config
from rayflow._runtime import TopologyHandle, submit_topology
from rayflow._state.provider import StateProvider, open_provider
from rayflow.state import load_component
from tests.connectors.brokers import unique

from .conftest import eventually
from .exactly_once_components import true_counts, wordcount

TOTAL = 15_000
"""Enough for the kill, a third of the way in and after every count task's first commit, to land
with sentences in flight and for the run to go on past it: the rollback to committed counts, the
spouts seeking back and the replay are what could count twice or lose counts."""
TRUTH = Counter(true_counts(TOTAL))


def committed(provider: StateProvider, name: str, handle: TopologyHandle) -> Counter[str]:
    return Counter(load_component(provider, name, "count"))


@pytest.fixture
def run(ray_cluster: str, tmp_path: Path) -> Iterator[Any]:
    handles: list[TopologyHandle] = []
    state = {"state_provider": "sqlite", "state_provider_config": {"dir": str(tmp_path)}}

    def submit(name: str) -> TopologyHandle:
        config = Config.of(
            {
                "processing_guarantee": "exactly_once",
                "message_timeout_secs": 10,
                "checkpoint_interval_ms": 250,
                **state,
            }
        )
        handle = submit_topology(name, config, wordcount(TOTAL, spouts=2))
        handles.append(handle)
        return handle

    submit.provider = lambda name: open_provider("sqlite", state["state_provider_config"], name)  # type: ignore[attr-defined]
    yield submit
    for handle in handles:
        handle.kill()


def finish(handle: TopologyHandle) -> None:
    assert handle.wait(timeout=180), f"not finished: {handle.metrics()}"


@pytest.mark.parametrize(
    "victim",
    [
        "count",
        "sentences",
        "__checkpoint",
        pytest.param("split", marks=pytest.mark.chaos),  # the chaos run kills these too
        pytest.param("__acker", marks=pytest.mark.chaos),
    ],
)
def test_a_killed_task_leaves_every_count_exact(run: Any, victim: str) -> None:
    name = unique("eo-kill")
    handle = run(name)
    third = TRUTH.total() // 3

    def under_way() -> bool:
        """A third of the words counted, and every count task has committed (so that the kill
        rolls back to counts that are not empty: the restore is what is under test)."""
        tasks = handle.task_metrics().values()
        commits = [m["checkpoints"] for m in tasks if m["component"] == "count"]
        return handle.metrics()["count"]["executed"] >= third and min(commits, default=0) >= 1

    assert eventually(under_way, timeout=90)
    tasks = handle.task_metrics()
    task = min(t for t, m in tasks.items() if m["component"] == victim)
    # The topology has recovered once a count task that survives commits again after rolling
    # back (a killed checkpoint spout with nothing prepared recovers without a rollback).
    witness = min(t for t, m in tasks.items() if m["component"] == "count" and t != task)
    rollbacks, checkpoints = tasks[witness]["rollbacks"], tasks[witness]["checkpoints"]
    killed_at = time.monotonic()
    os.kill(tasks[task]["pid"], signal.SIGKILL)

    def recovered() -> bool:
        info = handle.task_metrics()[witness]
        return info["checkpoints"] >= checkpoints + 2 and (info["rollbacks"] > rollbacks or victim == "__checkpoint")

    assert eventually(recovered, timeout=60)
    took = time.monotonic() - killed_at
    finish(handle)
    metrics = handle.metrics()
    if victim == "sentences":  # its counters went with its process, and its new one replays from the commit
        assert metrics["sentences"]["acked"] <= TOTAL
    else:  # each msg id acked once
        assert metrics["sentences"]["acked"] == TOTAL
    counts = committed(run.provider(name), name, handle)
    assert counts == TRUTH, {w: counts[w] - TRUTH[w] for w in TRUTH if counts[w] != TRUTH[w]}
    print(f"{victim} killed after {checkpoints} checkpoints: committing again {took:.1f} s later; counts exact")


def test_the_whole_topology_killed_and_submitted_again_resumes_exactly(run: Any) -> None:
    name = unique("eo-resume")
    first = run(name)
    assert eventually(lambda: first.metrics()["sentences"]["acked"] >= TOTAL // 4, timeout=90)
    first.kill()
    acked_before = first.metrics()["sentences"]["acked"]
    second = run(name)
    finish(second)
    assert second.metrics()["sentences"]["acked"] <= TOTAL - acked_before
    assert committed(run.provider(name), name, second) == TRUTH
