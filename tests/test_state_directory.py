"""Where the SQLite provider keeps its files, and what it refuses to read.

Its files hold pickles, and unpickling runs code: a file another local user could have written
must never be read. By default the files live in a directory of the user's own that survives a
reboot (``$XDG_STATE_HOME/rayflow/state``), created with mode 0700; a directory or file that is
another user's, or that others can write, is refused before anything is read from it."""

from __future__ import annotations

import os
import pickle
import sqlite3
import stat
import tempfile
from pathlib import Path

import pytest

from rayflow import StateError
from rayflow._state.sqlite import default_dir
from rayflow.state import SqliteStateProvider


class Booby:
    """Unpickling it leaves a mark: the proof that a file was read."""

    def __init__(self, mark: Path) -> None:
        self.mark = mark

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (str(self.mark),))


def planted(directory: Path, mark: Path) -> None:
    """A state file for topology ``wc`` whose committed value runs code when loaded."""
    directory.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(directory / "wc.sqlite3")
    db.execute("CREATE TABLE committed (ns TEXT, key BLOB, value BLOB NOT NULL, PRIMARY KEY (ns, key))")
    db.execute("INSERT INTO committed VALUES (?, ?, ?)", ("wc/count/1", pickle.dumps("k"), pickle.dumps(Booby(mark))))
    db.commit()
    db.close()


class TestDefaultDirectory:
    def test_it_is_under_xdg_state_home(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
        assert default_dir() == str(tmp_path / "state" / "rayflow" / "state")

    def test_without_it_under_the_home_directory(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.delenv("XDG_STATE_HOME", raising=False)
        monkeypatch.setenv("HOME", str(tmp_path))
        assert default_dir() == str(tmp_path / ".local" / "state" / "rayflow" / "state")

    def test_a_relative_xdg_state_home_is_ignored_as_the_spec_says(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        monkeypatch.setenv("XDG_STATE_HOME", "relative/state")
        monkeypatch.setenv("HOME", str(tmp_path))
        assert default_dir() == str(tmp_path / ".local" / "state" / "rayflow" / "state")

    def test_it_is_created_private_and_the_state_survives_a_new_provider(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
        provider = SqliteStateProvider({}, "wc")
        provider.stage("wc/count/group-1", 1, {"moon": 2})
        provider.commit("wc/count/group-1", 1)
        provider.close()
        directory = tmp_path / "state" / "rayflow" / "state"
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert stat.S_IMODE((directory / "wc.sqlite3").stat().st_mode) == 0o600
        assert SqliteStateProvider({}, "wc").load("wc/count/group-1") == ({"moon": 2}, 1)


class TestRefusals:
    def test_a_directory_others_can_write_is_refused_before_anything_is_read(self, tmp_path: Path) -> None:
        directory, mark = tmp_path / "shared", tmp_path / "ran"
        planted(directory, mark)
        directory.chmod(0o777)
        provider = SqliteStateProvider({"dir": str(directory)}, "wc")
        with pytest.raises(
            StateError, match=r"the state directory .*shared can be written by other users \(mode 0o777\)"
        ):
            provider.load("wc/count/1")
        assert not mark.exists()
        directory.chmod(0o700)  # the same file in a private directory is read (and runs)
        provider.load("wc/count/1")
        assert mark.exists()

    def test_a_file_others_can_write_is_refused(self, tmp_path: Path) -> None:
        mark = tmp_path / "ran"
        planted(tmp_path / "state", mark)
        (tmp_path / "state" / "wc.sqlite3").chmod(0o666)
        with pytest.raises(StateError, match=r"the state file .*wc\.sqlite3 can be written by other users"):
            SqliteStateProvider({"dir": str(tmp_path / "state")}, "wc").load("wc/count/1")
        assert not mark.exists()

    def test_a_directory_of_another_user_is_refused(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        mark = tmp_path / "ran"
        planted(tmp_path / "state", mark)
        owner = (tmp_path / "state").stat().st_uid
        monkeypatch.setattr(os, "getuid", lambda: owner + 1)  # this process, seen as another user
        with pytest.raises(StateError, match=rf"belongs to user id {owner}, not to this user \({owner + 1}\)"):
            SqliteStateProvider({"dir": str(tmp_path / "state")}, "wc").ping()
        assert not mark.exists()

    def test_state_left_in_the_old_default_directory_is_refused_naming_the_move(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """rayflow kept state in the world-writable ``<tmp>/rayflow/state`` before: a topology
        whose state is only there is not started empty, nor is the file read."""
        mark = tmp_path / "ran"
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
        planted(tmp_path / "tmp" / "rayflow" / "state", mark)
        with pytest.raises(StateError, match=r"topology 'wc' has state in .*tmp/rayflow/state/wc\.sqlite3.* mv "):
            SqliteStateProvider({}, "wc").ping()
        assert not mark.exists()
        assert SqliteStateProvider({}, "other").load("other/count/1") == ({}, 0)  # another topology: no matter
