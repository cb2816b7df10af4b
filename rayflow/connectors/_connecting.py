"""``Connecting``: a broker connection made on a thread of its own, taken by the task's thread.

Making a connection waits for the broker (a TCP connect, TLS, the protocol's handshake: seconds
against a broker that does not answer), and a spout's calls run on its task's one thread, which
must never wait. So the connect runs on a helper thread and the spout only looks, on each call,
whether it is done; once taken, the connection belongs to the task's thread alone. One thread
per spout task, made at its first connect (``open`` starts that one too, so that opening a
spout never waits for its broker) and kept for the reconnects.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

__all__ = ["Connecting"]

C = TypeVar("C")


class Connecting(Generic[C]):
    """Runs ``connect`` on a helper thread named ``thread_name``: when ``take`` finds no connect
    under way and ``due()`` says it is time (the outage's pause is over), or when ``start``ed.
    ``close`` closes (with ``close_connection``) a connection that is made after the spout gave
    up on it."""

    def __init__(
        self,
        connect: Callable[[], C],
        close_connection: Callable[[C], object],
        thread_name: str,
        due: Callable[[], bool] = lambda: True,
    ) -> None:
        self._connect = connect
        self._close_connection = close_connection
        self._thread_name = thread_name
        self._due = due
        self._thread: ThreadPoolExecutor | None = None
        self._made: Future[C] | None = None

    @property
    def under_way(self) -> bool:
        """A connect was started and its connection not taken yet."""
        return self._made is not None

    def start(self) -> None:
        """Start connecting, unless a connect is under way already. Never waits."""
        if self._made is None:
            if self._thread is None:
                self._thread = ThreadPoolExecutor(1, thread_name_prefix=self._thread_name)
            self._made = self._thread.submit(self._connect)

    def take(self) -> C | None:
        """The connection, once made; ``None`` while it is being made, or when none is under
        way (one is started if ``due()``). Raises what the connect raised. Never waits."""
        made = self._made
        if made is None:
            if self._due():
                self.start()
            return None
        if not made.done():
            return None
        self._made = None
        return made.result()

    def close(self) -> None:
        """Give up the connect under way (its connection is closed once made) and the thread."""
        made, self._made = self._made, None
        if made is not None:
            made.add_done_callback(self._close_made)
        if self._thread is not None:
            self._thread.shutdown(wait=False)
            self._thread = None

    def _close_made(self, made: Future[C]) -> None:
        with contextlib.suppress(Exception):
            self._close_connection(made.result())
