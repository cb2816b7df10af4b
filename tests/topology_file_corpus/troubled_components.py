"""Components that misbehave on purpose, for the ``rayflow run`` tests: what the summary, the
live view and the exit code say about them."""

from __future__ import annotations

from typing import Any

from rayflow import BasicBolt, FailedException, Spout


class UntrackedSpout(Spout):
    """Emits ``count`` numbers without a msg_id (untracked: never acked or failed), then is exhausted."""

    outputs = ["n"]

    def __init__(self, count: int = 50) -> None:
        self.count = count

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.n = 0

    def next_tuple(self) -> None:
        if self.n < self.count:
            self.collector.emit([self.n])
            self.n += 1
        else:
            self.collector.exhausted()


class OddRaiser(BasicBolt):
    """Raises on odd numbers: a component error, reported in the metrics."""

    def execute(self, tup: Any, collector: Any) -> None:
        if tup[0] % 2:
            raise ValueError(f"odd number {tup[0]}")


class Rejecter(BasicBolt):
    """Fails every input on purpose (``FailedException``: a failed tree, not an error)."""

    def execute(self, tup: Any, collector: Any) -> None:
        raise FailedException("rejected")
