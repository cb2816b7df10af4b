"""Exactly-once under fire: nine SIGKILLs and every committed count exact.

    sentences (2 tasks, position/seek) --shuffle--> split (2) --fields(word)--> count (StatefulBolt, 2)

40,000 numbered sentences, ``processing_guarantee="exactly_once"``, state in SQLite. Nine
SIGKILLs, one at a time once the previous victim is back: the stateful count three times, the
acker twice, the checkpoint spout twice, a spout task and a split task. At the end each msg id
was acked once and the committed counts equal the truth -- not above it, as at-least-once state
ends (``test_state_chaos.py``). Each kill's rollback time is printed (``pytest -s -m chaos``)."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

import rayflow
from rayflow import Config
from rayflow._state.provider import open_provider
from rayflow.state import load_component
from tests.connectors.brokers import unique
from tests.exactly_once_components import true_counts, wordcount

pytestmark = [pytest.mark.chaos, pytest.mark.ray]

TOTAL = 40_000
PLAN = ["count", "__acker", "__checkpoint", "count", "sentences", "__checkpoint", "split", "count", "__acker"]
DEADLINE_SECS = 300.0


def test_nine_kills_leave_every_count_exact(ray_cluster: str, tmp_path: Path) -> None:
    name = unique("chaos-eo")
    state = {"dir": str(tmp_path)}
    conf = Config.of(
        {
            "processing_guarantee": "exactly_once",
            "message_timeout_secs": 10,
            "checkpoint_interval_ms": 500,
            "state_provider": "sqlite",
            "state_provider_config": state,
        }
    )
    handle = rayflow.submit_topology(name, conf, wordcount(TOTAL, spouts=2))
    rng = random.Random(7)
    progress = AckedSoFar()
    kills: list[tuple[str, int, float, float]] = []  # component, task, checkpoints on after (s), back after (s)
    started = time.monotonic()
    try:
        for i, component in enumerate(PLAN):
            while progress(handle) < TOTAL * (i + 1) / (len(PLAN) + 2):
                assert time.monotonic() < started + DEADLINE_SECS, f"stalled before kill {i + 1}: {handle.metrics()}"
                time.sleep(0.1)
            tasks = handle.task_metrics()
            task = rng.choice(sorted(t for t, info in tasks.items() if info["component"] == component))
            # Checkpoints going on (a commit or a rollback) show in a count task that survives (a
            # restarted task's counters start again from zero). A killed checkpoint spout needs
            # no rollback unless it died with a checkpoint prepared: it recovers and commits on.
            counts = [t for t, info in tasks.items() if info["component"] == "count" and t != task]
            witnesses = {t: (tasks[t]["rollbacks"], tasks[t]["checkpoints"]) for t in counts}
            killed_at = time.monotonic()
            os.kill(int(tasks[task]["pid"]), signal.SIGKILL)
            rolled = back = None
            while rolled is None or back is None:
                assert time.monotonic() < killed_at + 60, f"kill {i + 1} ({component}:{task}) not recovered"
                now = time.monotonic() - killed_at
                info = handle.task_metrics()[task]
                if back is None and info["alive"] and info["pid"] != tasks[task]["pid"]:
                    back = now
                if rolled is None and any(_moved(handle.task_metrics()[t], *n) for t, n in witnesses.items()):
                    rolled = now
                time.sleep(0.05)
            kills.append((component, task, rolled, back))
        assert handle.wait(timeout=DEADLINE_SECS), f"not finished: {handle.metrics()}"
        ended = time.monotonic()
        metrics = handle.metrics()
        acked = progress(handle)
    finally:
        handle.kill()
    provider = open_provider("sqlite", state, name)
    counts: Counter[str] = Counter(load_component(provider, name, "count"))
    provider.close()
    truth = Counter(true_counts(TOTAL))
    print(f"\n== chaos: exactly-once stateful count, {TOTAL:,} sentences, state in SQLite ==")
    for component, task, rolled, back in kills:
        print(f"  kill {component}:{task}: task back after {back:.1f} s, checkpoints going on after {rolled:.1f} s")
    above = sum(max(0, counts[w] - truth[w]) for w in truth)
    below = sum(max(0, truth[w] - counts[w]) for w in truth)
    print(
        f"  {truth.total():,} words true, {counts.total():,} committed; above the truth {above}, below {below}; "
        f"checkpoints {metrics['__checkpoint']['checkpoints']}, rollbacks {metrics['__checkpoint']['rollbacks']}, "
        f"{TOTAL / (ended - started):,.0f} sentences/s overall"
    )
    assert len(kills) == len(PLAN)
    assert counts == truth
    assert acked == TOTAL, "each msg id acked once, over the spout tasks' lives"


class AckedSoFar:
    """Sentences acked so far, over the spout tasks' lives (a restarted task counts from zero)."""

    def __init__(self) -> None:
        self.before: dict[int, int] = {}
        self.last: dict[int, int] = {}

    def __call__(self, handle: rayflow.TopologyHandle) -> int:
        for task, info in handle.task_metrics().items():
            if info["component"] == "sentences":
                if info["acked"] < self.last.get(task, 0):
                    self.before[task] = self.before.get(task, 0) + self.last[task]
                self.last[task] = info["acked"]
        return sum(self.before.values()) + sum(self.last.values())


def _moved(info: dict[str, int], rollbacks: int, checkpoints: int) -> bool:
    """Has a task rolled back, or committed twice (once may be the checkpoint before the kill)?"""
    return info["rollbacks"] > rollbacks or info["checkpoints"] >= checkpoints + 2
