"""``Connecting``: the task's thread starts a connect and takes its connection, never waiting;
a connection made after the spout gave up on it is closed."""

from __future__ import annotations

import threading

import pytest

from rayflow.connectors._connecting import Connecting
from tests.conftest import eventually


class Gate:
    """A connect that waits until the test lets it finish, then makes a connection (a string)
    or raises."""

    def __init__(self, fails: bool = False) -> None:
        self.open = threading.Event()
        self.fails = fails
        self.closed: list[str] = []

    def connect(self) -> str:
        assert self.open.wait(10)
        if self.fails:
            raise ConnectionRefusedError("refused")
        return "connection"


def test_the_connection_is_taken_once_made_and_never_waited_for() -> None:
    gate = Gate()
    connecting = Connecting(gate.connect, gate.closed.append, "test-connect", due=lambda: False)
    assert not connecting.under_way and connecting.take() is None
    connecting.start()
    connecting.start()  # one connect at a time
    assert connecting.under_way and connecting.take() is None  # still connecting: no wait
    gate.open.set()
    made: list[str] = []

    def taken() -> bool:
        connection = connecting.take()
        if connection is not None:
            made.append(connection)
        return bool(made)

    assert eventually(taken)
    assert made == ["connection"] and not connecting.under_way
    connecting.close()
    assert gate.closed == []  # taken: the spout's to close


def test_what_the_connect_raised_is_raised_by_take() -> None:
    gate = Gate(fails=True)
    gate.open.set()
    connecting = Connecting(gate.connect, gate.closed.append, "test-connect")
    connecting.start()
    with pytest.raises(ConnectionRefusedError):
        assert eventually(lambda: connecting.take() is not None)
    assert not connecting.under_way
    connecting.close()


def test_a_connection_made_after_close_is_closed() -> None:
    gate = Gate()
    connecting = Connecting(gate.connect, gate.closed.append, "test-connect")
    connecting.start()
    connecting.close()
    gate.open.set()
    assert eventually(lambda: gate.closed == ["connection"])


def test_take_starts_a_connect_only_when_it_is_due() -> None:
    gate = Gate()
    gate.open.set()
    due = [False]
    connecting = Connecting(gate.connect, gate.closed.append, "test-connect", due=lambda: due[0])
    assert connecting.take() is None and not connecting.under_way  # the outage's pause is not over
    due[0] = True
    assert connecting.take() is None and connecting.under_way  # started, not waited for
    assert eventually(lambda: connecting.take() == "connection")
    connecting.close()
