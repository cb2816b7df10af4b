"""Exactly-once into PostgreSQL: a TwoPhaseCommitSink writing one transaction per checkpoint.

    sentences (Sentences) --shuffle--> split (SplitFailingHalfway) --shuffle--> words (PostgresSink)

The topology runs with ``processing_guarantee="exactly_once"``. ``split`` fails a few sentences
on purpose after emitting half of their words, and every failure rolls the topology back to its
last checkpoint; the words already written for the current checkpoint are thrown away with
their transaction, so each ``(sentence, index, word)`` row lands in the table exactly once.

How ``PostgresSink`` commits in two phases with ordinary transactions, on any PostgreSQL:

- ``invoke`` adds a row to the open transaction, sent (``COPY``) into a staging table under the
  transaction's name (``transaction_name(txid)``) in the task's open database transaction;
- ``pre_commit`` (the checkpoint's PREPARE) commits that database transaction: the rows are
  durable, in the staging table, and no reader of the target table sees them;
- ``commit`` (the checkpoint's COMMIT) moves the rows of that name from the staging table into
  the target in one database transaction: atomic, and idempotent -- a second move finds nothing;
- ``abort`` rolls the open database transaction back and deletes the staged rows of the name;
- ``recover_and_commit``/``recover_and_abort`` do the same by name, for a task restarted
  between the PREPARE and the COMMIT.

PostgreSQL's own ``PREPARE TRANSACTION``/``COMMIT PREPARED`` would do the same job, but it needs
``max_prepared_transactions`` above its default of 0 (a server restart), and a prepared
transaction holds its locks until it is finished; the staging table needs neither.

Run it (PostgreSQL on 127.0.0.1:5432, the ``postgres`` extra: ``pip install -e '.[postgres]'``)::

    python examples/postgres_sink.py --url postgresql://postgres@127.0.0.1:5432/test

It prints the rows written and ``every row exactly once: yes``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

if not __package__:  # run as a script: make ``examples`` importable, as under ``python -m``
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from examples.wordcount import SENTENCES  # noqa: E402
from rayflow import (  # noqa: E402
    Bolt,
    Config,
    LocalCluster,
    OutputCollector,
    Spout,
    SpoutOutputCollector,
    TopologyBuilder,
    TopologyContext,
    Tuple,
    TwoPhaseCommitSink,
)
from rayflow._topology import Topology  # noqa: E402

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
COLUMNS = {"sentence": "integer", "index": "integer", "word": "text"}


def connect(url: str, *, autocommit: bool = False) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=autocommit, connect_timeout=5)


def create_tables(url: str, table: str, columns: dict[str, str]) -> None:
    """(Re)create ``table`` and its staging table ``<table>_staging`` (with a ``txn`` column)."""
    from psycopg import sql

    with connect(url, autocommit=True) as conn:
        for name, extra in ((f"{table}_staging", [("txn", "text")]), (table, [])):
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
            definition = sql.SQL(", ").join(
                sql.SQL("{} {}").format(sql.Identifier(column), sql.SQL(kind))
                for column, kind in [*extra, *columns.items()]
            )
            conn.execute(sql.SQL("CREATE TABLE {} ({})").format(sql.Identifier(name), definition))
        staging = sql.Identifier(f"{table}_staging")
        conn.execute(sql.SQL("CREATE INDEX ON {} (txn)").format(staging))


@dataclass
class PgTransaction:
    """One checkpoint's rows of one task: ``pending`` not yet sent to the staging table."""

    name: str
    pending: list[list[Any]] = field(default_factory=list)
    rows: int = 0


class PostgresSink(TwoPhaseCommitSink[PgTransaction]):
    """Writes each input's values as a row of ``table`` (columns ``columns``, in the order of the
    input's fields), one checkpoint at a time, exactly once (see the module's docstring).
    ``create_tables`` makes the table and its staging table beforehand."""

    SEND_ROWS = 1000
    """Rows of a transaction sent to the staging table together."""

    def __init__(self, url: str, table: str, columns: list[str]) -> None:
        self.url = url
        self.table = table
        self.columns = list(columns)

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        from psycopg import sql

        self.writes = connect(self.url)
        self.control = connect(self.url, autocommit=True)
        target, staging = sql.Identifier(self.table), sql.Identifier(f"{self.table}_staging")
        columns = sql.SQL(", ").join(sql.Identifier(c) for c in self.columns)
        self._copy = sql.SQL("COPY {} (txn, {}) FROM STDIN").format(staging, columns)
        self._move = sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} WHERE txn = %s").format(
            target, columns, columns, staging
        )
        self._drop = sql.SQL("DELETE FROM {} WHERE txn = %s").format(staging)

    def cleanup(self) -> None:
        self.writes.close()
        self.control.close()

    def begin_transaction(self, txid: int) -> PgTransaction:
        name = self.transaction_name(txid)
        self.writes.execute(self._drop, (name,))  # what an attempt of this name left, if anything
        return PgTransaction(name)

    def invoke(self, transaction: PgTransaction, tup: Tuple) -> None:
        transaction.pending.append(tup.values)
        transaction.rows += 1
        if len(transaction.pending) >= self.SEND_ROWS:
            self._send(transaction)

    def _send(self, transaction: PgTransaction) -> None:
        with self.writes.cursor() as cursor, cursor.copy(self._copy) as copy:
            for values in transaction.pending:
                copy.write_row([transaction.name, *values])
        transaction.pending = []

    def pre_commit(self, transaction: PgTransaction) -> None:
        self._send(transaction)
        self.writes.commit()

    def commit(self, transaction: PgTransaction) -> None:
        self._publish(transaction.name)

    def abort(self, transaction: PgTransaction) -> None:
        self.writes.rollback()
        self.control.execute(self._drop, (transaction.name,))

    def recover_and_commit(self, txid: int) -> None:
        self._publish(self.transaction_name(txid))

    def recover_and_abort(self, txid: int) -> None:
        self.control.execute(self._drop, (self.transaction_name(txid),))

    def _publish(self, name: str) -> None:
        """Move the rows staged under ``name`` into the table, in one database transaction."""
        with self.control.transaction():
            self.control.execute(self._move, (name,))
            self.control.execute(self._drop, (name,))


class Sentences(Spout):
    """``total`` sentences, shared out among the spout's tasks. Exactly-once: where a task stands
    is the next sentence it emits, and a rollback seeks back to it. At-least-once: a sentence that
    fails is emitted again."""

    outputs = ["sentence", "text"]

    def __init__(self, total: int) -> None:
        self.total = total

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        tasks = context.get_component_tasks(context.this_component_id)
        self.step = len(tasks)
        self.next = tasks.index(context.this_task_id)
        self.collector = collector
        self.failed: list[int] = []

    def next_tuple(self) -> None:
        if self.failed:
            sentence = self.failed.pop()
        elif self.next < self.total:
            sentence, self.next = self.next, self.next + self.step
        else:
            self.collector.exhausted()
            return
        self.collector.emit([sentence, SENTENCES[sentence % len(SENTENCES)]], msg_id=sentence)

    def fail(self, msg_id: Any) -> None:
        self.failed.append(msg_id)

    def position(self) -> int:
        return self.next

    def seek(self, position: int) -> None:
        self.next = position


class SplitFailingHalfway(Bolt):
    """Emits ``(sentence, index, word)`` per word. Each sentence of ``failing`` is failed, once
    per task, after half of its words went out: the rollback must take those back."""

    outputs = ["sentence", "index", "word"]

    def __init__(self, failing: set[int]) -> None:
        self.failing = set(failing)

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        sentence, words = tup["sentence"], tup["text"].split()
        failing = sentence in self.failing
        for index, word in enumerate(words[: len(words) // 2] if failing else words):
            self.collector.emit([sentence, index, word], anchors=tup)
        if failing:
            self.failing.discard(sentence)
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


def build(url: str, table: str, sentences: int, failing: set[int], sink: PostgresSink | None = None) -> Topology:
    builder = TopologyBuilder()
    builder.set_spout("sentences", Sentences(sentences))
    builder.set_bolt("split", SplitFailingHalfway(failing), parallelism=2).shuffle_grouping("sentences")
    sink = sink if sink is not None else PostgresSink(url, table, list(COLUMNS))
    builder.set_bolt("words", sink, parallelism=2).shuffle_grouping("split")
    return builder.create_topology()


def expected_rows(sentences: int) -> int:
    return sum(len(SENTENCES[i % len(SENTENCES)].split()) for i in range(sentences))


def count_rows(url: str, table: str) -> tuple[int, int, int]:
    """Rows in ``table``, distinct ``(sentence, index)`` among them, and rows left staged."""
    from psycopg import sql

    target, staging = sql.Identifier(table), sql.Identifier(f"{table}_staging")
    query = sql.SQL("SELECT count(*), count(DISTINCT (sentence, index)), (SELECT count(*) FROM {}) FROM {}")
    with connect(url, autocommit=True) as conn:
        rows, distinct, staged = conn.execute(query.format(staging, target)).fetchone()
    return rows, distinct, staged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="PostgreSQL to write to (default: %(default)s)")
    parser.add_argument("--table", default="rayflow_words")
    parser.add_argument("--sentences", type=int, default=5_000)
    parser.add_argument("--failures", type=int, default=3, help="sentences split fails halfway (once per task)")
    parser.add_argument("--timeout", type=float, default=180.0, help="give up after this many seconds")
    args = parser.parse_args(argv)

    create_tables(args.url, args.table, COLUMNS)
    failing = set(random.Random(0).sample(range(args.sentences), min(args.failures, args.sentences)))
    # A run of its own: its checkpoints in a new directory, so that it does not resume the
    # committed cut of an earlier run (whose table create_tables has just dropped).
    state = {"dir": tempfile.mkdtemp(prefix="rayflow-postgres-example-")}
    conf = Config(processing_guarantee="exactly_once", message_timeout_secs=30, state_provider_config=state)
    print("starting a local Ray, then the topology (20-45 s on a busy box)...", flush=True)
    with LocalCluster() as cluster:
        handle = cluster.submit_topology("postgres-words", conf, build(args.url, args.table, args.sentences, failing))
        finished = handle.wait(timeout=args.timeout)
        # The spouts are done once the last checkpoint's COMMIT has passed them; the sink tasks
        # commit their transactions a moment later.
        deadline = time.monotonic() + 10.0
        while count_rows(args.url, args.table)[2] and time.monotonic() < deadline:
            time.sleep(0.1)
        metrics = handle.metrics()
        handle.kill()

    rows, distinct, staged = count_rows(args.url, args.table)
    expected = expected_rows(args.sentences)
    print(
        f"sentences: {args.sentences:,}  acked: {metrics['sentences']['acked']:,}  "
        f"transactions committed: {metrics['words']['checkpoints']:,}, aborted: {metrics['words']['rollbacks']:,}"
    )
    print(f"rows: {rows:,}  distinct: {distinct:,}  expected: {expected:,}  left staged: {staged:,}")
    exact = finished and rows == distinct == expected and staged == 0
    print(f"every row exactly once: {'yes' if exact else 'NO'}")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
