"""The notice that something slow is under way (Ray starting, task actors being placed)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from . import console

__all__ = ["PROGRESS_EVERY_SECS", "progress"]

PROGRESS_EVERY_SECS = 5.0
"""Without a terminal, how often a line says that Ray is still starting."""


@contextmanager
def progress(doing: str, waiting_for: str, done: str) -> Iterator[None]:
    """Something slow is under way (Ray starting, task actors being placed): on a terminal a
    spinner with the seconds elapsed, otherwise a line now and every few seconds, so that a
    start of 10-30 s never looks like a hang. Says how long it took once it is done."""
    err = console.err
    started = time.monotonic()
    finished = threading.Event()
    status = err.status(f"{doing} ({waiting_for}) ...") if err.is_terminal else None

    def tick() -> None:
        while not finished.wait(0.2 if status else PROGRESS_EVERY_SECS):
            elapsed = f"{doing}: {time.monotonic() - started:.0f}s ({waiting_for}) ..."
            if status is not None:
                status.update(elapsed)
            else:
                err.print(elapsed, markup=False, soft_wrap=True)

    if status is None:
        err.print(f"{doing} ({waiting_for}) ...", markup=False, soft_wrap=True)
    ticker = threading.Thread(target=tick, name="rayflow-progress", daemon=True)
    with status or nullcontext():
        ticker.start()
        try:
            yield
        finally:
            finished.set()
            ticker.join()
    err.print(f"{done} in {time.monotonic() - started:.1f}s", style="dim", markup=False, soft_wrap=True)
