"""``SqliteStateProvider``: state in a SQLite file on the task's node -- no server needed.

One file per topology (``<dir>/<topology>.sqlite3``; ``dir`` defaults to ``rayflow/state``
under the system's temporary directory), in WAL mode: the tasks of the topology on that node
share it, each in its own namespace, and a checkpoint is one SQLite transaction per task.

What it survives: the death of a task, of its worker process, and of the whole topology (run
it again under the same name and the state is there). What it does not: the loss of the node
or its disk, a task restarted on *another* node (it finds that node's file, without its
state), and on a power cut the last commits before it (``synchronous=NORMAL``). Use the Redis
provider where tasks move between nodes."""

from __future__ import annotations

import os
import pickle
import sqlite3
import tempfile
from typing import Any
from urllib.parse import quote

from .key_value import DELETED
from .provider import StateError, StateProvider

__all__ = ["SqliteStateProvider"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS committed (ns TEXT, key BLOB, value BLOB NOT NULL, PRIMARY KEY (ns, key));
CREATE TABLE IF NOT EXISTS staged (ns TEXT, key BLOB, value BLOB, PRIMARY KEY (ns, key));
CREATE TABLE IF NOT EXISTS txids (ns TEXT PRIMARY KEY, txid INTEGER NOT NULL);
"""


def default_dir() -> str:
    return os.path.join(tempfile.gettempdir(), "rayflow", "state")


class SqliteStateProvider(StateProvider):
    """``state_provider_config``: ``{"dir": "/path/to/dir"}`` (optional)."""

    def __init__(self, config: dict[str, Any], topology_name: str) -> None:
        super().__init__(config, topology_name)
        directory = config.get("dir") or default_dir()
        self.path = os.path.join(str(directory), quote(topology_name, safe="") + ".sqlite3")
        self._db: sqlite3.Connection | None = None

    def describe(self) -> str:
        return f"sqlite file {self.path}"

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.executescript(SCHEMA)
            except (OSError, sqlite3.Error) as exc:
                raise StateError(f"cannot open the state file {self.path}: {exc}") from None
            self._db = db
        return self._db

    def ping(self) -> None:
        self._connection()

    def load(self, namespace: str) -> tuple[dict[Any, Any], int]:
        db = self._connection()
        rows = db.execute("SELECT key, value FROM committed WHERE ns = ?", (namespace,)).fetchall()
        txid = db.execute("SELECT txid FROM txids WHERE ns = ?", (namespace,)).fetchone()
        return {pickle.loads(k): pickle.loads(v) for k, v in rows}, txid[0] if txid else 0

    def stage(self, namespace: str, txid: int, changes: dict[Any, Any]) -> None:
        rows = [
            (namespace, pickle.dumps(k, protocol=5), None if v is DELETED else pickle.dumps(v, protocol=5))
            for k, v in changes.items()
        ]
        self._write(lambda db: db.executemany("INSERT OR REPLACE INTO staged VALUES (?, ?, ?)", rows))

    def commit(self, namespace: str, txid: int) -> None:
        def apply(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT OR REPLACE INTO committed SELECT ns, key, value FROM staged WHERE ns = ? AND value IS NOT NULL",
                (namespace,),
            )
            db.execute(
                "DELETE FROM committed WHERE ns = ? AND key IN (SELECT key FROM staged WHERE ns = ? AND value IS NULL)",
                (namespace, namespace),
            )
            db.execute("DELETE FROM staged WHERE ns = ?", (namespace,))
            db.execute("INSERT OR REPLACE INTO txids VALUES (?, ?)", (namespace, txid))

        self._write(apply)

    def rollback(self, namespace: str) -> None:
        self._write(lambda db: db.execute("DELETE FROM staged WHERE ns = ?", (namespace,)))

    def _write(self, work: Any) -> None:
        """Run ``work`` in one transaction (all of it or none)."""
        db = self._connection()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                work(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StateError(f"writing the state file {self.path} failed: {exc}") from None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
