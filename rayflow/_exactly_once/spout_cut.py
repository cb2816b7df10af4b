"""``SpoutCut``: one spout task's share of an exactly-once checkpoint.

It keeps where the spout stood at each checkpoint and what the spout emitted in between:

- ``record`` notes each tracked emit, in the *epoch* since the last PREPARE;
- PREPARE (``prepare``) stages ``position()`` in the state provider under the task's namespace
  and closes the epoch: what it emitted is what the checkpoint covers;
- COMMIT (``commit``) commits the position and returns the msg ids of every epoch the committed
  checkpoint covers, for ``Spout.ack`` (once each: they are then forgotten);
- ROLLBACK (``rollback``) drops what is staged, forgets every epoch not committed and ``seek``s
  to the committed position: the spout emits again from there;
- the first INITSTATE or ROLLBACK a task sees (``initialize``) loads the committed position and
  seeks to it before the spout emits anything -- a restarted task, and a topology submitted
  again under the same name, resume where the last committed cut left off. A spout with no
  committed position yet starts where its ``open`` put it, and a rollback before the first
  commit takes it back there;
- a spout whose messages another of its tasks may be given after a rollback (the consumers of
  one queue) can take its peers' committed positions too: ``seek_peers(positions)``, called
  after each such seek with every other task's position in the committed cut. The
  ``RabbitMQSpout`` recognises by them a message whose ack was lost with a peer.

An error from ``position``/``seek`` or from the provider propagates: the executor fails the
checkpoint's tree, which rolls the topology back.
"""

from __future__ import annotations

import logging
from typing import Any

from .._components import Spout
from .._state.checkpoint import legacy_namespaces, namespace
from .._state.provider import StateProvider, task_provider

__all__ = ["SpoutCut"]

logger = logging.getLogger("rayflow")

_POSITION = "position"


class SpoutCut:
    def __init__(self, spout: Spout, conf: dict[str, Any], component: str, index: int, tasks: int) -> None:
        """``index``: this task's place among its component's ``tasks`` tasks."""
        self._spout = spout
        self._conf = conf
        self.namespace = namespace(conf, component, index)
        self._peers = [namespace(conf, component, peer) for peer in range(tasks) if peer != index]
        """The other tasks of the spout, for ``seek_peers``."""
        self._component, self._index, self._tasks = component, index, tasks
        self._provider: StateProvider | None = None
        self.initialized = False
        """Has the task sought to the committed position? Until then it must not emit."""
        self.rolling_back = False
        """A rollback was asked for and has not come: emitting now would be wasted."""
        self.epoch: list[tuple[int, Any]] = []
        """(root, msg_id) of every tracked emit since the last PREPARE."""
        self.covered: dict[int, list[tuple[int, Any]]] = {}
        """txid -> the epoch its PREPARE closed, until that txid commits or is rolled back."""
        self._start: Any = None
        self._has_start = False
        """Where ``open`` put the spout: the cut to return to while none is committed."""

    @property
    def provider(self) -> StateProvider:
        if self._provider is None:  # opened on first use: in the task, never in the driver
            self._provider = task_provider(self._conf)
        return self._provider

    @property
    def ready(self) -> bool:
        """May the spout emit?"""
        return self.initialized and not self.rolling_back

    @property
    def uncommitted(self) -> int:
        """Trees emitted that no committed checkpoint covers yet."""
        return len(self.epoch) + sum(len(e) for e in self.covered.values())

    def record(self, root: int, msg_id: Any) -> None:
        self.epoch.append((root, msg_id))

    def prepare(self, txid: int) -> None:
        position = self._spout.position()  # type: ignore[attr-defined]
        self.provider.stage(self.namespace, txid, {_POSITION: position})
        self.covered[txid] = self.covered.get(txid, []) + self.epoch
        self.epoch = []

    def commit(self, txid: int) -> list[tuple[int, Any]]:
        self.provider.commit(self.namespace, txid)
        done: list[tuple[int, Any]] = []
        for t in sorted(t for t in self.covered if t <= txid):
            done += self.covered.pop(t)
        return done

    def rollback(self) -> list[tuple[int, Any]]:
        """Go back to the committed position; returns what was emitted since (now void)."""
        void = self.epoch + [e for t in sorted(self.covered) for e in self.covered[t]]
        self.epoch, self.covered = [], {}
        self._seek_committed()
        self.rolling_back = False
        return void

    def initialize(self) -> None:
        self._seek_committed()

    def _seek_committed(self) -> None:
        provider = self.provider
        provider.rollback(self.namespace)  # what an unfinished checkpoint staged is void
        data, txid = provider.load(self.namespace)
        if _POSITION not in data:
            data, txid = self._carried_over(provider)
        if _POSITION in data:
            self._spout.seek(data[_POSITION])  # type: ignore[attr-defined]
            logger.info("spout task %s: at the position of checkpoint %d", self.namespace, txid)
        elif self._has_start:
            self._spout.seek(self._start)  # type: ignore[attr-defined]
        else:
            self._start, self._has_start = self._spout.position(), True  # type: ignore[attr-defined]
        seek_peers = getattr(self._spout, "seek_peers", None)
        if seek_peers is not None and self._peers:
            found = [provider.load(peer)[0] for peer in self._peers]
            seek_peers([data[_POSITION] for data in found if _POSITION in data])
        self.initialized = True

    def _carried_over(self, provider: StateProvider) -> tuple[dict[Any, Any], int]:
        """The position a topology committed under this task's id before positions were kept
        by index (``legacy_namespaces``): found by the task's rank among the old ids when the
        spout has as many tasks as then; the next commit stores it under ``namespace``."""
        legacy = legacy_namespaces(provider, self._conf, self._component)
        if len(legacy) != self._tasks:
            if legacy:
                logger.warning(
                    "spout %r: positions committed by %d task(s) under the old layout, and it now has %d: "
                    "they cannot be told apart, so this task starts where its open() put it",
                    self._component,
                    len(legacy),
                    self._tasks,
                )
            return {}, 0
        data, txid = provider.load(legacy[self._index])
        if _POSITION in data:
            logger.info("spout task %s: position carried over from %s", self.namespace, legacy[self._index])
        return data, txid

    def close(self) -> None:
        if self._provider is not None:
            self._provider.close()
