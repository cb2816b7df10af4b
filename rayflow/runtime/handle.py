"""``TopologyHandle``: the driver's grip on a running topology."""

from __future__ import annotations

import logging
import time
from typing import Any

import ray

from ..metrics import merge
from ..topology import ACKER_COMPONENT

__all__ = ["TopologyHandle"]

logger = logging.getLogger("rayflow")

SHUTDOWN_TIMEOUT_SECS = 10.0


class TopologyHandle:
    def __init__(self, name: str, actors: dict[int, Any], layout: dict[int, str], spout_ids: set[str]) -> None:
        self.name = name
        self._actors = actors
        self._layout = layout
        self._spout_tasks = [t for t, c in layout.items() if c in spout_ids]
        self.killed = False

    def __repr__(self) -> str:
        return f"TopologyHandle({self.name!r}, tasks={len(self._actors)}, killed={self.killed})"

    def _on_spouts(self, method: str) -> None:
        ray.get([getattr(self._actors[t], method).remote() for t in self._spout_tasks])

    def activate(self) -> None:
        """Open the spouts (the first time) and let them emit."""
        self._on_spouts("activate")

    def deactivate(self) -> None:
        """Stop calling ``next_tuple``; acks and fails of pending trees still arrive."""
        self._on_spouts("deactivate")

    def kill(self) -> None:
        """Deactivate and close the spouts, clean up the bolts, then stop every actor."""
        if self.killed:
            return
        self.killed = True
        refs = [a.shutdown.remote() for a in self._actors.values()]
        try:
            ray.get(refs, timeout=SHUTDOWN_TIMEOUT_SECS)
        except Exception as exc:  # a stuck or dead task must not keep the others alive
            logger.warning("topology %r: not every task shut down cleanly: %s", self.name, exc)
        for actor in self._actors.values():
            ray.kill(actor)

    def task_metrics(self) -> dict[int, dict[str, Any]]:
        """Each task's raw counters, keyed by task id."""
        tasks = list(self._actors)
        snaps = ray.get([self._actors[t].metrics.remote() for t in tasks])
        return dict(zip(tasks, snaps, strict=True))

    def metrics(self) -> dict[str, dict[str, Any]]:
        """Counters and latencies per component (``"__acker"`` included), summed over tasks."""
        by_component: dict[str, list[dict[str, Any]]] = {}
        for task, snap in self.task_metrics().items():
            by_component.setdefault(self._layout[task], []).append(snap)
        return {
            cid: merge(snaps) for cid, snaps in sorted(by_component.items(), key=lambda kv: kv[0] == ACKER_COMPONENT)
        }

    def wait(self, timeout: float | None = None, poll_secs: float = 0.05) -> bool:
        """Block until every spout task is exhausted with no tree pending (``True``), or until
        ``timeout`` seconds pass (``False``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if all(ray.get([self._actors[t].finished.remote() for t in self._spout_tasks])):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(poll_secs)
