"""The acker task: feeds acker traffic to an ``AckLedger`` and tells spouts how trees ended."""

from __future__ import annotations

from typing import Any

from ..ack_ledger import AckLedger, Outcome
from .base import Executor, Timer

__all__ = ["AckerExecutor"]


class AckerExecutor(Executor):
    kind = "acker"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ledger = AckLedger()

    def _report(self, outcome: Outcome | None) -> None:
        if outcome is None:
            return
        mail = self.outbox.spout(outcome.spout_task)
        if outcome.acked:
            mail.acked.append(outcome.root)
            self.metrics.acked += 1
        else:
            mail.failed.append(outcome.root)
            self.metrics.failed += 1

    def receive_control(self, payload: tuple[int, list[int], dict[int, int], list[int], list[int]]) -> None:
        sender, inits, acks, fails, resets = payload
        ledger, report = self.ledger, self._report
        pairs = iter(inits)
        for root, val in zip(pairs, pairs, strict=False):
            report(ledger.init(root, val, sender))
        for root, val in acks.items():
            report(ledger.ack(root, val))
        for root in fails:
            report(ledger.fail(root))
        for root in resets:
            spout_task = ledger.reset_timeout(root)
            if spout_task is not None:
                self.outbox.spout(spout_task).resets.append(root)
        self.metrics.executed += len(inits) // 2 + len(acks) + len(fails) + len(resets)

    def rotate(self) -> None:
        self.ledger.rotate()

    def timers(self) -> list[Timer]:
        return [(self.conf.message_timeout_secs, self.rotate)]

    def snapshot(self) -> dict[str, Any]:
        return self.metrics.snapshot(pending=len(self.ledger))
