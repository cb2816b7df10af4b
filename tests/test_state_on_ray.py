"""Stateful bolts on Ray: a task dies and its results survive.

The topology: sentences -> split (2 tasks) -> count (a ``StatefulBolt``, 2 tasks, fields(word)),
state in SQLite (no server) or Redis. Once a third of the words are counted, one task is
SIGKILLed: the stateful count, the acker, the checkpoint spout or the sentence spout. The run
ends with every sentence acked and the committed counts at or above the truth for every word
(at-least-once state: nothing committed is lost; replays may count twice). Without a kill the
committed counts are exact."""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rayflow import Config, StateError
from rayflow._runtime import TopologyHandle, submit_topology
from rayflow._state.provider import StateProvider, open_provider
from rayflow.state import load_component
from tests.connectors.brokers import REDIS_URL, require_redis, unique

from .conftest import eventually
from .state_components import wordcount

SENTENCES = [f"w{i % 101} x{i % 7} the" for i in range(60_000)]
TRUTH = Counter(w for s in SENTENCES for w in s.split())
TIMEOUT = 5.0


def committed(provider: StateProvider, name: str) -> Counter[str]:
    """The committed counts of every count task, summed (what a restart would load)."""
    return Counter(load_component(provider, name, "count"))


@pytest.fixture(params=["sqlite", "redis"])
def provider_conf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    if request.param == "sqlite":
        yield {"state_provider": "sqlite", "state_provider_config": {"dir": str(tmp_path)}}
        return
    require_redis()
    prefix = unique("rayflow-test-state")
    yield {"state_provider": "redis", "state_provider_config": {"url": REDIS_URL, "key_prefix": prefix}}
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(f"{prefix}:*"))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
def run(ray_cluster: str) -> Iterator[Any]:
    handles: list[TopologyHandle] = []

    def submit(name: str, conf: dict[str, Any]) -> TopologyHandle:
        config = Config.of({"message_timeout_secs": TIMEOUT, "checkpoint_interval_ms": 250, **conf})
        handle = submit_topology(name, config, wordcount(SENTENCES))
        handles.append(handle)
        return handle

    yield submit
    for handle in handles:
        handle.kill()


def finish(handle: TopologyHandle) -> None:
    assert handle.wait(timeout=120), f"not finished: {handle.metrics()}"


def test_without_kills_the_committed_counts_are_exact(run: Any, provider_conf: dict[str, Any]) -> None:
    name = unique("state-exact")
    handle = run(name, provider_conf)
    finish(handle)
    metrics = handle.metrics()
    assert metrics["sentences"]["acked"] == len(SENTENCES) and metrics["sentences"]["failed"] == 0
    assert metrics["count"]["checkpoints"] >= 1 and metrics["count"]["rollbacks"] == 0
    provider = open_provider(provider_conf["state_provider"], provider_conf["state_provider_config"], name)
    assert committed(provider, name) == TRUTH


@pytest.mark.parametrize("victim", ["count", "__acker", "__checkpoint", "sentences"])
def test_a_killed_task_loses_no_committed_update(run: Any, tmp_path: Path, victim: str) -> None:
    """SIGKILL one task a third of the way through, once every count task has committed (state
    in SQLite): the task comes back, a restarted count loads its committed counts -- not empty
    ones -- before any tuple, and at the end no word's committed count is below the truth."""
    name = unique("state-kill")
    conf: dict[str, Any] = {"state_provider": "sqlite", "state_provider_config": {"dir": str(tmp_path)}}
    handle = run(name, conf)
    third = TRUTH.total() // 3

    def under_way() -> bool:
        """A third of the words counted, and a commit behind every count task: the restore of
        committed counts is what a killed count must do right."""
        tasks = handle.task_metrics().values()
        commits = [m["checkpoints"] for m in tasks if m["component"] == "count"]
        return handle.metrics()["count"]["executed"] >= third and min(commits, default=0) >= 1

    assert eventually(under_way, timeout=90)
    tasks = handle.task_metrics()
    task = min(t for t, m in tasks.items() if m["component"] == victim)
    os.kill(tasks[task]["pid"], signal.SIGKILL)
    assert eventually(lambda: handle.task_metrics()[task]["restarts"] == 1, timeout=30)
    finish(handle)
    counts = committed(open_provider("sqlite", conf["state_provider_config"], name), name)
    lost = {w: TRUTH[w] - counts[w] for w in TRUTH if counts[w] < TRUTH[w]}
    assert not lost, f"committed updates lost after killing {victim}: {lost}"
    print(f"{victim} killed: counted {counts.total() - TRUTH.total():,} words above the truth (replays)")


def test_a_rescaled_count_goes_on_from_the_committed_counts(ray_cluster: str, tmp_path: Path) -> None:
    """The word count under one name with the count on 2 tasks, then on 3 (state in SQLite, no
    kill): the second run's tasks load the keys the fields grouping now sends them (a key sent
    to a task that does not own its group would fail every checkpoint, and the run would not
    finish), and the committed counts are exactly twice the truth."""
    name = unique("state-rescale")
    sentences = SENTENCES[:6_000]
    truth = Counter(w for s in sentences for w in s.split())
    conf = Config.of(
        {"checkpoint_interval_ms": 250, "state_provider": "sqlite", "state_provider_config": {"dir": str(tmp_path)}}
    )
    for tasks in (2, 3):
        handle = submit_topology(name, conf, wordcount(sentences, count_tasks=tasks))
        try:
            finish(handle)
            assert handle.metrics()["count"]["rollbacks"] == 0
        finally:
            handle.kill()
    provider = open_provider("sqlite", {"dir": str(tmp_path)}, name)
    assert committed(provider, name) == Counter({w: 2 * n for w, n in truth.items()})
    provider.close()


def test_a_state_store_that_cannot_be_reached_is_a_submit_error(ray_cluster: str) -> None:
    conf = Config.of({"state_provider": "redis", "state_provider_config": {"url": "redis://user:s3cret@127.0.0.1:1/0"}})
    with pytest.raises(StateError, match=r"state_provider 'redis': .*redis://user:\*\*\*@127\.0\.0\.1:1/0") as err:
        submit_topology(unique("state-unreachable"), conf, wordcount(SENTENCES[:10]))
    assert "s3cret" not in str(err.value)
