"""``SqliteStateProvider``: state in a SQLite file on the task's node -- no server needed.

One file per topology (``<dir>/<topology>.sqlite3``), in WAL mode: the tasks of the topology on
that node share it, each in its own namespaces, and each checkpoint step of a task is one
SQLite transaction, whatever the number of key groups it touches.

Where: ``dir`` in ``state_provider_config``, or by default a directory of the user's own that
survives a reboot: ``$XDG_STATE_HOME/rayflow/state``, ``~/.local/state/rayflow/state`` without
it (the XDG base directory spec's place for state). The file holds pickles, and unpickling runs
code, so before anything is read the provider checks that the directory and the file belong to
the user running the task and that no other user can write them (created with mode 0700), and
refuses with ``StateError`` otherwise. Before this default, state went to the world-writable
``/tmp/rayflow/state``: a topology whose state is still there is refused, naming the move that
carries it over, rather than started empty.

The layout: ``committed`` holds one row per key (pickled key and value) per namespace, ``txids``
the txid each namespace was committed at. A stage adds one row per namespace to ``staging``: the
namespace's changes pickled as one dict (pickling in bulk, one ``executemany``); a commit applies
them to ``committed`` (sorted by key, one ``executemany`` of upserts and one of deletes) and
records the txids. (The ``staged`` table, one row per key, is what rayflow staged before; a
commit still applies rows left in it.)

What it survives: the death of a task, of its worker process, of the whole topology and a
reboot (run it again under the same name and the state is there). What it does not: the loss
of the node or its disk, a task restarted on *another* node (it finds that node's file, without
its state), and on a power cut the last commits before it (``synchronous=NORMAL``). Use the
Redis provider where tasks move between nodes."""

from __future__ import annotations

import os
import pickle
import sqlite3
import stat
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from .key_value import DELETED
from .provider import StateError, StateProvider

__all__ = ["SqliteStateProvider", "default_dir", "legacy_dir"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS committed (ns TEXT, key BLOB, value BLOB NOT NULL, PRIMARY KEY (ns, key));
CREATE TABLE IF NOT EXISTS staged (ns TEXT, key BLOB, value BLOB, PRIMARY KEY (ns, key));
CREATE TABLE IF NOT EXISTS staging (ns TEXT NOT NULL, changes BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS staging_ns ON staging (ns);
CREATE TABLE IF NOT EXISTS txids (ns TEXT PRIMARY KEY, txid INTEGER NOT NULL);
"""

IN_CHUNK = 500
"""Namespaces per ``IN (...)`` list (SQLite caps the parameters of one statement)."""


def default_dir() -> str:
    """``$XDG_STATE_HOME/rayflow/state``, or ``~/.local/state/rayflow/state``."""
    base = os.environ.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(base):  # the spec: a relative path is invalid and ignored
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "rayflow", "state")


def legacy_dir() -> str:
    """Where state went by default before ``default_dir``: world-writable, wiped at reboot."""
    return os.path.join(tempfile.gettempdir(), "rayflow", "state")


def check_private(path: str, what: str) -> None:
    """Raise ``StateError`` unless ``path`` belongs to this user and no other user can write it."""
    if not hasattr(os, "getuid"):  # not POSIX: no owner to compare
        return
    info = os.stat(path)
    uid = os.getuid()
    if info.st_uid != uid:
        raise StateError(
            f"the state {what} {path} belongs to user id {info.st_uid}, not to this user ({uid}): its "
            "pickles would run as code of this topology. Set state_provider_config "
            '{"dir": ...} to a directory of your own'
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StateError(
            f"the state {what} {path} can be written by other users (mode {stat.S_IMODE(info.st_mode):#o}): a "
            f"file they put there would be unpickled as code of this topology. Run chmod go-w {path} "
            '(chmod 700 for a directory), or set state_provider_config {"dir": ...} to a directory of your own'
        )


def _apply(db: sqlite3.Connection, namespace: str, changes: dict[Any, Any]) -> None:
    """Write one staged set of changes into ``committed``."""
    dumps = pickle.dumps
    puts, deletes = [], []
    for key, value in changes.items():
        if value is DELETED:
            deletes.append((namespace, dumps(key, protocol=5)))
        else:
            puts.append((namespace, dumps(key, protocol=5), dumps(value, protocol=5)))
    puts.sort()  # in index order: each page of the index is visited once
    db.executemany(
        "INSERT INTO committed VALUES (?, ?, ?) ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value", puts
    )
    db.executemany("DELETE FROM committed WHERE ns = ? AND key = ?", deletes)


def _chunks(items: Sequence[str]) -> list[Sequence[str]]:
    return [items[i : i + IN_CHUNK] for i in range(0, len(items), IN_CHUNK)]


def _marks(items: Sequence[str]) -> str:
    return ",".join("?" * len(items))


class SqliteStateProvider(StateProvider):
    """``state_provider_config``: ``{"dir": "/path/to/dir"}`` (optional; see the module doc)."""

    def __init__(self, config: dict[str, Any], topology_name: str) -> None:
        super().__init__(config, topology_name)
        self._default = not config.get("dir")
        directory = config.get("dir") or default_dir()
        self._file = quote(topology_name, safe="") + ".sqlite3"
        self.path = os.path.join(str(directory), self._file)
        self._db: sqlite3.Connection | None = None

    def describe(self) -> str:
        return f"sqlite file {self.path}"

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            directory = os.path.dirname(self.path)
            try:
                self._refuse_legacy()
                os.makedirs(directory, mode=0o700, exist_ok=True)
                check_private(directory, "directory")
                if os.path.exists(self.path):
                    check_private(self.path, "file")
                db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
                os.chmod(self.path, 0o600)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.executescript(SCHEMA)
            except (OSError, sqlite3.Error) as exc:
                raise StateError(f"cannot open the state file {self.path}: {exc}") from None
            self._db = db
        return self._db

    def _refuse_legacy(self) -> None:
        """With the default directory: refuse when this topology's state is only in the old one."""
        old = os.path.join(legacy_dir(), self._file)
        if self._default and not os.path.exists(self.path) and os.path.exists(old):
            raise StateError(
                f"topology {self.topology_name!r} has state in {old}, the world-writable directory rayflow used "
                f"before, and none in {self.path}: check that the file is yours, then move it (mkdir -p -m 700 "
                f"{os.path.dirname(self.path)} && mv {old} {self.path}), or set state_provider_config "
                f'{{"dir": "{legacy_dir()}"}} to use it where it is (not advised), or delete it to start afresh'
            )

    def ping(self) -> None:
        self._connection()

    def load(self, namespace: str) -> tuple[dict[Any, Any], int]:
        return self.load_many([namespace])[namespace]

    def load_many(self, namespaces: Sequence[str]) -> dict[str, tuple[dict[Any, Any], int]]:
        db = self._connection()
        loaded: dict[str, tuple[dict[Any, Any], int]] = {ns: ({}, 0) for ns in namespaces}
        loads = pickle.loads
        for chunk in _chunks(list(loaded)):
            marks = _marks(chunk)
            for ns, key, value in db.execute(f"SELECT ns, key, value FROM committed WHERE ns IN ({marks})", chunk):
                loaded[ns][0][loads(key)] = loads(value)
            for ns, txid in db.execute(f"SELECT ns, txid FROM txids WHERE ns IN ({marks})", chunk):
                loaded[ns] = (loaded[ns][0], txid)
        return loaded

    def namespaces(self, prefix: str) -> list[str]:
        rows = (
            self._connection()
            .execute("SELECT ns FROM txids WHERE ns >= ? AND ns < ?", (prefix, prefix + "\U0010ffff"))
            .fetchall()
        )
        return [ns for (ns,) in rows]

    def stage(self, namespace: str, txid: int, changes: dict[Any, Any]) -> None:
        self.stage_many(txid, {namespace: changes})

    def stage_many(self, txid: int, changes: Mapping[str, dict[Any, Any]]) -> None:
        rows = [(ns, pickle.dumps(c, protocol=5)) for ns, c in changes.items() if c]
        if rows:
            self._write(lambda db: db.executemany("INSERT INTO staging VALUES (?, ?)", rows))

    def commit(self, namespace: str, txid: int) -> None:
        self.commit_many([namespace], txid)

    def commit_many(self, namespaces: Sequence[str], txid: int) -> None:
        def apply(db: sqlite3.Connection) -> None:
            for chunk in _chunks(namespaces):
                marks = _marks(chunk)
                self._apply_legacy_staged(db, chunk, marks)
                query = f"SELECT ns, changes FROM staging WHERE ns IN ({marks}) ORDER BY rowid"
                for ns, blob in db.execute(query, chunk).fetchall():  # in staging order: a later one wins
                    _apply(db, ns, pickle.loads(blob))
                db.execute(f"DELETE FROM staging WHERE ns IN ({marks})", chunk)
            db.executemany("INSERT OR REPLACE INTO txids VALUES (?, ?)", [(ns, txid) for ns in namespaces])

        self._write(apply)

    @staticmethod
    def _apply_legacy_staged(db: sqlite3.Connection, chunk: Sequence[str], marks: str) -> None:
        """Rows staged one per key, as rayflow did before ``staging``: committed first."""
        if db.execute(f"SELECT 1 FROM staged WHERE ns IN ({marks}) LIMIT 1", chunk).fetchone() is None:
            return
        db.execute(
            f"INSERT OR REPLACE INTO committed SELECT ns, key, value FROM staged "
            f"WHERE ns IN ({marks}) AND value IS NOT NULL",
            chunk,
        )
        db.execute(
            f"DELETE FROM committed WHERE (ns, key) IN (SELECT ns, key FROM staged WHERE ns IN ({marks}) "
            "AND value IS NULL)",
            chunk,
        )
        db.execute(f"DELETE FROM staged WHERE ns IN ({marks})", chunk)

    def rollback(self, namespace: str) -> None:
        self.rollback_many([namespace])

    def rollback_many(self, namespaces: Sequence[str]) -> None:
        def drop(db: sqlite3.Connection) -> None:
            for chunk in _chunks(namespaces):
                marks = _marks(chunk)
                db.execute(f"DELETE FROM staging WHERE ns IN ({marks})", chunk)
                db.execute(f"DELETE FROM staged WHERE ns IN ({marks})", chunk)

        self._write(drop)

    def _write(self, work: Callable[[sqlite3.Connection], Any]) -> None:
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
