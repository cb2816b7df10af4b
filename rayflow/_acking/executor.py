"""The acker task: feeds acker traffic to an ``AckLedger`` and tells spouts how trees ended."""

from __future__ import annotations

from typing import Any

from .._executors.base import Executor, Timer
from .._outbox import AckerPayload
from .._state.checkpoint import CHECKPOINT_COMPONENT
from .ledger_build import AckLedger

__all__ = ["AckerExecutor"]


class AckerExecutor(Executor):
    kind = "acker"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ledger = AckLedger()
        checkpointer = self.context.get_component_tasks(CHECKPOINT_COMPONENT) if self.topology.stateful else []
        self._checkpointer = checkpointer[0] if checkpointer else None
        """The checkpoint spout's task: what settles its trees is sent at once (``Outbox.urgent``)."""

    def receive_control(self, payload: AckerPayload) -> None:
        """One payload from one sender: its inits, acks and fails go to the ledger in one call
        (``AckLedger.apply``), and each spout task's settled trees join its mail in one step."""
        sender, inits, acks, fails, resets = payload
        ledger, metrics, outbox = self.ledger, self.metrics, self.outbox
        if inits or acks or fails:
            for spout_task, (acked, failed) in ledger.apply(sender, inits, acks, fails).items():
                if spout_task == self._checkpointer:
                    outbox.urgent = True
                mail = outbox.spout(spout_task)
                mail.acked += acked
                mail.failed += failed
                metrics.acked += len(acked)
                metrics.failed += len(failed)
        for root in resets:
            owner = ledger.reset_timeout(root)
            if owner is not None:
                outbox.spout(owner).resets.append(root)
        metrics.executed += (len(inits) + len(acks)) // 2 + len(fails) + len(resets)

    def rotate(self) -> None:
        self.ledger.rotate()

    def timers(self) -> list[Timer]:
        return [(self.conf.message_timeout_secs, self.rotate)]

    def snapshot(self) -> dict[str, Any]:
        return self.metrics.snapshot(pending=len(self.ledger))
