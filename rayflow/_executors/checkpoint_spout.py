"""The checkpoint spout's task: a spout task that also runs the checkpoint interval and takes
requests for an early checkpoint (the protocol: ``_state/checkpoint.py``)."""

from __future__ import annotations

from typing import Any

from .._state.checkpoint import CHECKPOINT_REQUEST, CheckpointSpout
from .base import Timer
from .spout import SpoutExecutor

__all__ = ["CheckpointSpoutExecutor"]


class CheckpointSpoutExecutor(SpoutExecutor):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spout: CheckpointSpout
        self._checkpointer = None

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
        else:
            super().receive_control(payload)

    def snapshot(self) -> dict[str, Any]:
        snap = super().snapshot()
        snap.update(checkpoints=getattr(self.spout, "commits", 0), rollbacks=getattr(self.spout, "rollbacks", 0))
        return snap
