"""The checkpoint spout's task: a spout task that also runs the checkpoint interval and takes
requests for an early checkpoint (the protocol: ``_state/checkpoint.py``). Its metrics add
``checkpoint_latency_ms``: from a checkpoint's PREPARE to its COMMIT having been acted on by
every task."""

from __future__ import annotations

from typing import Any

from .._acking.anchoring import getrandbits, new_id
from .._exactly_once.barrier import ROLLBACK_REQUEST, Barrier
from .._exactly_once.wiring import exactly_once
from .._state.checkpoint import CHECKPOINT_COMPONENT, CHECKPOINT_REQUEST, CheckpointSpout
from .base import Timer
from .spout import SpoutExecutor

__all__ = ["CheckpointSpoutExecutor"]


class CheckpointSpoutExecutor(SpoutExecutor):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spout: CheckpointSpout
        self._checkpointer = None
        self._took = self.metrics.latency("checkpoint_latency_ms")
        self._spout_tasks: list[int] = []
        """Exactly-once: the spout tasks every step goes through (``_exactly_once``)."""
        if exactly_once(self.conf):
            for spec in self.topology.spouts:
                if spec.id != CHECKPOINT_COMPONENT:
                    self._spout_tasks += self.context.get_component_tasks(spec.id)

    def timers(self) -> list[Timer]:
        return [(self.conf.checkpoint_interval_ms / 1000.0, self._tick), *super().timers()]

    def _tick(self) -> None:
        if self.opened:
            self._call("tick")

    def peer_restarted(self, task_id: int) -> None:
        """The checkpoint in flight may have died with that task: recover now, not after the
        message timeout (a restarted stateful task also waits for this INITSTATE)."""
        if self.opened:
            self._call("restart_seen")

    def receive_control(self, payload: Any) -> None:
        if payload == CHECKPOINT_REQUEST:
            if self.opened:
                self._call("request")
        elif payload == ROLLBACK_REQUEST:
            if self.opened:
                self._call("request_rollback")
        else:
            super().receive_control(payload)

    def emit(self, stream: str, values: list[Any], msg_id: Any, direct_task: int | None) -> list[int]:
        """Exactly-once: a step goes to every spout task as a ``Barrier`` (control traffic),
        each with an edge of one tree whose root the acker tracks as any spout tuple's; the
        spout tasks emit it on anchored to their edge. At-least-once: emitted as any tuple."""
        if not self._spout_tasks:
            return super().emit(stream, values, msg_id, direct_task)
        txid, action = values
        root = self.root_bits(64) or new_id()
        val = 0
        for task in self._spout_tasks:
            edge = getrandbits(64) or new_id()
            val ^= edge
            self._link.send_control(task, Barrier(txid, action, root, edge))
        mails = self.outbox.acker_mails
        mails[root % len(mails)].inits[root] = val
        self.outbox.urgent = True
        self.pending.newest[root] = msg_id
        self.exhausted = False
        self.metrics.python_emits += 1
        return []

    def snapshot(self) -> dict[str, Any]:
        took = getattr(self.spout, "took", None)
        if took:
            for seconds in took:
                self._took.add(seconds)
            took.clear()
        snap = super().snapshot()
        snap.update(checkpoints=getattr(self.spout, "commits", 0), rollbacks=getattr(self.spout, "rollbacks", 0))
        return snap
