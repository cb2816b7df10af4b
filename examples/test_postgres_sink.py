"""The PostgreSQL sink of ``postgres_sink.py`` against a real server, in process: after a
rollback in the middle, and after a sink task killed between its PREPARE and its COMMIT, every
row is in the table exactly once and nothing is left staged.

Needs PostgreSQL (``RAYFLOW_POSTGRES_URL``, default ``postgresql://postgres@127.0.0.1:5432/test``)
and psycopg (the ``postgres`` extra); skipped, saying which is missing, without them.

Run:  python -m pytest examples/test_postgres_sink.py
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from examples.postgres_sink import COLUMNS, PgTransaction, PostgresSink, build, count_rows, create_tables, expected_rows
from rayflow import Config
from rayflow.testing import InProcessTopology, complete_topology

URL = os.environ.get("RAYFLOW_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
EXACTLY_ONCE = Config(processing_guarantee="exactly_once", max_spout_pending=50)
SENTENCES = 200


def _server() -> str | None:
    """Why the tests cannot run here, or ``None``."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed: pip install -e '.[postgres]'"
    try:
        psycopg.connect(URL, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        return f"no PostgreSQL at {URL} ({str(exc).strip().splitlines()[0]}); set RAYFLOW_POSTGRES_URL"
    return None


@pytest.fixture(scope="module")
def server() -> str:
    reason = _server()
    if reason:
        pytest.skip(reason)
    return URL


@pytest.fixture
def table(server: str) -> Iterator[str]:
    name = f"rayflow_test_{uuid.uuid4().hex[:8]}"
    create_tables(server, name, COLUMNS)
    yield name
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '2s'")  # a connection a failed test left open must not hang it
        try:
            conn.execute(f"DROP TABLE IF EXISTS {name}, {name}_staging")
        except psycopg.errors.LockNotAvailable:
            pass


class CommitFailingOnce(PostgresSink):
    """The first ``commit`` of a transaction with rows raises before it moves anything (the
    network dropped)."""

    raised: list[str] = []

    def commit(self, transaction: PgTransaction) -> None:
        if transaction.rows and not CommitFailingOnce.raised:
            CommitFailingOnce.raised.append(transaction.name)
            raise OSError("simulated: the connection dropped before the commit")
        super().commit(transaction)


def test_a_rollback_in_the_middle_leaves_every_row_once(server: str, table: str) -> None:
    """Sentences 50 and 120 fail after half their words were written: each failure rolls the
    topology back, and the words written into the open transaction go with it."""
    result = complete_topology(build(server, table, SENTENCES, {50, 120}), EXACTLY_ONCE)
    assert count_rows(server, table) == (expected_rows(SENTENCES), expected_rows(SENTENCES), 0)
    assert sorted(result.acked("sentences")) == list(range(SENTENCES))
    assert result.metrics()["words"]["rollbacks"] >= 2


def test_a_sink_killed_before_its_commit_commits_by_name(server: str, table: str) -> None:
    """A commit fails, and the task is killed before the COMMIT is sent again: its next
    incarnation moves the rows staged under the transaction's name."""
    CommitFailingOnce.raised.clear()
    sink = CommitFailingOnce(server, table, list(COLUMNS))
    run = InProcessTopology(build(server, table, SENTENCES, {50}, sink=sink), EXACTLY_ONCE)
    try:
        while not CommitFailingOnce.raised:
            run.advance(1.0)
            run.run()
        assert count_rows(server, table)[2] > 0, "the transaction is staged"
        index = int(CommitFailingOnce.raised[0].split("/")[2].removeprefix("task-"))  # topology/words/task-N/txid
        victim = [t for t, c in sorted(run.layout.items()) if c == "words"][index]
        dead: PostgresSink = run.executors[victim].bolt.user_component  # type: ignore[attr-defined]
        run.kill(victim)
        dead.cleanup()  # a task that dies drops its connections: its open transaction with them
        for _ in range(10):
            run.advance(1.0)
            run.run()
        assert run.finished
    finally:
        run.close()
    assert count_rows(server, table) == (expected_rows(SENTENCES), expected_rows(SENTENCES), 0)


def test_at_least_once_commits_on_its_own_clock(server: str, table: str) -> None:
    """Without exactly-once the words of a failed sentence written before it failed are
    written again: every row at least once."""
    complete_topology(build(server, table, SENTENCES, {50}))
    rows, distinct, staged = count_rows(server, table)
    assert distinct == expected_rows(SENTENCES) and staged == 0
    assert rows > distinct
