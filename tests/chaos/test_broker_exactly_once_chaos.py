"""Exactly-once from a broker under fire: a Redis stream, nine SIGKILLs, every count exact and
every row written once.

    source (RedisStreamSpout, 2 tasks) --shuffle--> split (2) --fields(word)--> count (StatefulBolt, 2)
                                       --shuffle--> number --> archive (DataFrameSink, write_parquet)
                                                           --> ledger (PostgresSink, a TwoPhaseCommitSink)

20,000 numbered messages in a Redis stream, ``processing_guarantee="exactly_once"``, state in
SQLite; split fails a few messages once after emitting half of their words. Nine SIGKILLs, one
at a time once the previous victim is back and checkpoints go on: the stateful count twice, the
spout twice, the acker, the checkpoint spout, split and both sinks. At the end the group holds
nothing pending (every entry's checkpoint committed and its ``XACK`` went out), the count tasks
have committed since, the committed counts equal the truth -- not one word above it, where
at-least-once state ends thousands above (``test_state_chaos.py``) -- and the Parquet table and
the PostgreSQL table each hold every message number exactly once. The PostgreSQL branch is left
out, saying so, where no server runs. Each kill's recovery is printed
(``pytest -s -m chaos tests/chaos/test_broker_exactly_once_chaos.py``)."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rayflow
from rayflow import Bolt, Config, OutputCollector, TopologyBuilder, TopologyContext, Tuple
from rayflow._state.provider import open_provider
from rayflow.state import load_component
from tests.chaos.chaos_kit import StreamGroup
from tests.connectors.brokers import REDIS_URL, require_redis, unique
from tests.connectors.exactly_once_kit import Count, Split, truth

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.ray,
    pytest.mark.broker,
]

TOTAL = 20_000
FAIL_ONCE = frozenset({1_234, 9_876, 17_000})
PLAN = ["count", "source", "__acker", "archive", "__checkpoint", "source", "split", "ledger", "count"]
POSTGRES_URL = os.environ.get("RAYFLOW_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


class Number(Bolt):
    """``"n w1 w2 ..."`` -> ``(n,)``: what the sinks write, one row per message."""

    outputs = ["n"]

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        text = tup[0].decode() if isinstance(tup[0], bytes) else tup[0]
        self.collector.emit([int(text.split(None, 1)[0])], anchors=tup)
        self.collector.ack(tup)


def _postgres() -> str | None:
    """Why the PostgreSQL branch cannot run here, or ``None``."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (the postgres extra)"
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        return f"no PostgreSQL at {POSTGRES_URL} ({str(exc).strip().splitlines()[0]})"
    return None


def _topology(spout: Any, archive: Path, ledger: str | None) -> Any:
    """The broker kit's word count (``exactly_once_kit.topology``), and the message numbers
    into Parquet and PostgreSQL."""
    from examples.postgres_sink import PostgresSink
    from rayflow.spark import DataFrameSink, write_parquet

    builder = TopologyBuilder()
    builder.set_spout("source", spout, parallelism=2)
    builder.set_bolt("split", Split(FAIL_ONCE), parallelism=2).shuffle_grouping("source")
    builder.set_bolt("count", Count(), parallelism=2).fields_grouping("split", ["word"])
    builder.set_bolt("number", Number()).shuffle_grouping("source")
    builder.set_bolt("archive", DataFrameSink(write_parquet(str(archive)), batch_rows=2000)).shuffle_grouping("number")
    if ledger is not None:
        builder.set_bolt("ledger", PostgresSink(POSTGRES_URL, ledger, ["n"])).shuffle_grouping("number")
    return builder.create_topology()


DEADLINE_SECS = 300.0


@pytest.fixture
def redis_client() -> Iterator[Any]:
    require_redis()
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    yield client
    client.close()


def test_a_redis_stream_counted_exactly_through_nine_kills(ray_cluster: str, redis_client: Any, tmp_path: Path) -> None:
    from rayflow.connectors.redis import RedisStreamSpout

    name, stream = unique("chaos-broker-eo"), unique("chaos-eo-stream")
    state = {"dir": str(tmp_path)}
    conf = Config.of(
        {
            "processing_guarantee": "exactly_once",
            "message_timeout_secs": 10,
            "checkpoint_interval_ms": 500,
            "max_spout_pending": 2000,
            "state_provider": "sqlite",
            "state_provider_config": state,
        }
    )
    why_not = _postgres()
    ledger = None if why_not else name.replace("-", "_")
    if ledger is None:
        print(f"\n  the PostgreSQL sink is left out: {why_not}")
    else:
        from examples.postgres_sink import create_tables

        create_tables(POSTGRES_URL, ledger, {"n": "integer"})
    plan = [c if ledger or c != "ledger" else "count" for c in PLAN]
    archive = tmp_path / "archive"
    entries = StreamGroup(redis_client, stream, "chaos", TOTAL)
    try:
        entries.fill()
        spout = RedisStreamSpout(stream, "chaos", fields=("body",))
        handle = rayflow.submit_topology(name, conf, _topology(spout, archive, ledger))
        rng = random.Random(11)
        kills: list[tuple[str, int, float, float]] = []  # component, task, checkpoints on after, back after (s)
        started = time.monotonic()
        try:
            for i, component in enumerate(plan):
                while entries.delivered() < TOTAL * (i + 1) / (len(plan) + 2):
                    assert time.monotonic() < started + DEADLINE_SECS, f"stalled before kill {i + 1}"
                    time.sleep(0.1)
                kills.append(_kill(handle, component, rng))
            while entries.state() != (0, 0):  # every entry read, its checkpoint committed, its XACK in
                assert time.monotonic() < started + DEADLINE_SECS, f"not drained: {entries.state()} {handle.metrics()}"
                time.sleep(0.1)
            ended = time.monotonic()
            # The spouts XACK at their step of a commit, ahead of the count tasks' step: wait for
            # each count task to commit twice more, so that the last commit is theirs too.
            tasks = handle.task_metrics()
            count_tasks = sorted(t for t, info in tasks.items() if info["component"] == "count")
            while any(handle.task_metrics()[t]["checkpoints"] < tasks[t]["checkpoints"] + 2 for t in count_tasks):
                assert time.monotonic() < ended + 30, f"no commit after the drain: {handle.task_metrics()}"
                time.sleep(0.1)
            while len(_archived(archive)) < TOTAL or (ledger and len(_ledgered(ledger)) < TOTAL):
                assert time.monotonic() < ended + 60, f"sinks not published: {handle.metrics()}"
                time.sleep(0.2)
            metrics = handle.metrics()
        finally:
            handle.kill()
    finally:
        redis_client.delete(stream)
    archived, ledgered = Counter(_archived(archive)), Counter(_ledgered(ledger) if ledger else [])
    if ledger:
        _drop(ledger)
    provider = open_provider("sqlite", state, name)
    counts: Counter[str] = Counter(load_component(provider, name, "count"))
    committed_at = {
        "__checkpoint": provider.load(f"{name}/__checkpoint/task-0")[1],
        **{f"source:{i}": provider.load(f"{name}/source/task-{i}")[1] for i in range(2)},
    }  # a spout task committed past the count tasks would have XACKed what they did not count
    committed_at["count"] = provider.load(f"{name}/count/layout")[1]  # its state is kept per key group
    provider.close()
    expected = truth(TOTAL)
    above = sum(max(0, counts[w] - expected[w]) for w in expected)
    below = sum(max(0, expected[w] - counts[w]) for w in expected)
    print(f"\n== chaos: exactly-once stateful count from a Redis stream, {TOTAL:,} messages ==")
    for component, task, rolled, back in kills:
        print(f"  kill {component}:{task}: task back after {back:.1f} s, checkpoints going on after {rolled:.1f} s")
    print(
        f"  {expected.total():,} words true, {counts.total():,} committed; above the truth {above}, below {below}; "
        f"checkpoints {metrics['__checkpoint']['checkpoints']}, rollbacks {metrics['__checkpoint']['rollbacks']}, "
        f"{TOTAL / (ended - started):,.0f} messages/s overall; committed at transaction {committed_at}"
    )
    sinks = {"archive": archived, "ledger": ledgered}
    twice = {sink: sum(1 for n in rows.values() if n > 1) for sink, rows in sinks.items()}
    print(f"  rows: Parquet {archived.total():,}, PostgreSQL {ledgered.total():,}; written twice: {twice}")
    assert len(kills) == len(PLAN)
    assert counts == expected, f"{above} words above the truth, {below} below"
    assert archived == Counter(range(TOTAL)), f"Parquet: {twice['archive']} twice, {TOTAL - len(archived)} missing"
    if ledger:
        assert ledgered == Counter(range(TOTAL)), f"PostgreSQL: {twice['ledger']} twice, {TOTAL - len(ledgered)} lost"


def _archived(archive: Path) -> list[int]:
    """The message numbers the Parquet table holds (published files only: staging is hidden)."""
    import pyarrow.parquet as pq

    files = sorted(archive.glob("batch_id=*/*.parquet"))  # the staging directories start with "_"
    return [n for f in files for n in pq.read_table(f, columns=["n"]).column("n").to_pylist()]


def _ledgered(table: str) -> list[int]:
    import psycopg

    with psycopg.connect(POSTGRES_URL, connect_timeout=5) as conn:
        return [n for (n,) in conn.execute(f"SELECT n FROM {table}")]


def _drop(table: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}, {table}_staging")


def _kill(handle: rayflow.TopologyHandle, component: str, rng: random.Random) -> tuple[str, int, float, float]:
    """SIGKILL a task of ``component``; wait until it is back and checkpoints go on (a surviving
    count task rolled back or committed twice). Returns the kill and its two delays."""
    tasks = handle.task_metrics()
    task = rng.choice(sorted(t for t, info in tasks.items() if info["component"] == component))
    witnesses = {
        t: (info["rollbacks"], info["checkpoints"])
        for t, info in tasks.items()
        if info["component"] == "count" and t != task
    }
    killed_at = time.monotonic()
    os.kill(int(tasks[task]["pid"]), signal.SIGKILL)
    rolled = back = None
    while rolled is None or back is None:
        assert time.monotonic() < killed_at + 60, f"{component}:{task} not recovered"
        now = time.monotonic() - killed_at
        infos = handle.task_metrics()
        if back is None and infos[task]["alive"] and infos[task]["pid"] != tasks[task]["pid"]:
            back = now
        if rolled is None and any(
            infos[t]["rollbacks"] > r or infos[t]["checkpoints"] >= c + 2 for t, (r, c) in witnesses.items()
        ):
            rolled = now
        time.sleep(0.05)
    return component, task, rolled, back
