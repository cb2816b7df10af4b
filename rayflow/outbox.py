"""``Outbox``: everything a task sends, batched per destination task.

Data tuples and acker traffic are kept apart. Data goes out in batches of ``batch_size``
(sent as soon as one fills, otherwise on ``flush``). Acker traffic -- inits and acks to the
ackers, results to the spouts -- is sent on the control channel, which receivers serve ahead of
data and never hold back, so a full data path cannot starve the acker. Acks for one root from
one sender are XORed together while they wait, which is exact (XOR is associative) and means a
bolt sends the acker one number per tree per batch instead of one per tuple.

The outbox only builds payloads; ``send_data``/``send_control`` put them on the wire (a Ray
call in the runtime, a list in unit tests).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["AckerMail", "Outbox", "SpoutMail"]

DataItem = tuple[str, list[Any], "dict[int, int] | None"]
"""One tuple on the wire: stream, values, {root: edge id} (``None`` when not tracked)."""


class AckerMail:
    """Pending messages for one acker task."""

    __slots__ = ("inits", "acks", "fails", "resets")

    def __init__(self) -> None:
        self.inits: list[tuple[int, int, int]] = []
        self.acks: dict[int, int] = {}
        self.fails: list[int] = []
        self.resets: list[int] = []

    def __len__(self) -> int:
        return len(self.inits) + len(self.acks) + len(self.fails) + len(self.resets)

    def payload(self) -> tuple[str, Any]:
        return ("acker", (self.inits, self.acks, self.fails, self.resets))


class SpoutMail:
    """Pending results for one spout task: trees acked, failed, or whose timeout was reset."""

    __slots__ = ("acked", "failed", "resets")

    def __init__(self) -> None:
        self.acked: list[int] = []
        self.failed: list[int] = []
        self.resets: list[int] = []

    def __len__(self) -> int:
        return len(self.acked) + len(self.failed) + len(self.resets)

    def payload(self) -> tuple[str, Any]:
        return ("spout", (self.acked, self.failed, self.resets))


class Outbox:
    def __init__(
        self,
        task_id: int,
        batch_size: int,
        send_data: Callable[[int, tuple[int, list[DataItem]]], None],
        send_control: Callable[[int, tuple[str, Any]], None],
    ) -> None:
        self.task_id = task_id
        self.batch_size = batch_size
        self._send_data = send_data
        self._send_control = send_control
        self._data: dict[int, list[DataItem]] = {}
        self._ackers: dict[int, AckerMail] = {}
        self._spouts: dict[int, SpoutMail] = {}

    # -- data ---------------------------------------------------------------------------------
    def tuple(self, dest: int, stream: str, values: list[Any], edges: dict[int, int] | None) -> None:
        buf = self._data.get(dest)
        if buf is None:
            buf = self._data[dest] = []
        buf.append((stream, values, edges))
        if len(buf) >= self.batch_size:
            self._data[dest] = []
            self._send_data(dest, (self.task_id, buf))

    # -- acker traffic ------------------------------------------------------------------------
    def acker(self, acker_task: int) -> AckerMail:
        mail = self._ackers.get(acker_task)
        if mail is None:
            mail = self._ackers[acker_task] = AckerMail()
        return mail

    def ack(self, acker_task: int, root: int, val: int) -> None:
        mail = self._ackers.get(acker_task)
        if mail is None:
            mail = self._ackers[acker_task] = AckerMail()
        acks = mail.acks
        acks[root] = acks.get(root, 0) ^ val

    def spout(self, spout_task: int) -> SpoutMail:
        mail = self._spouts.get(spout_task)
        if mail is None:
            mail = self._spouts[spout_task] = SpoutMail()
        return mail

    # -- sending ------------------------------------------------------------------------------
    def flush_control(self) -> None:
        for boxes in (self._ackers, self._spouts):
            if boxes:
                for dest, mail in boxes.items():
                    if len(mail):
                        self._send_control(dest, mail.payload())
                boxes.clear()

    def flush_data(self) -> None:
        """Send every partial data batch."""
        if self._data:
            for dest, buf in self._data.items():
                if buf:
                    self._send_data(dest, (self.task_id, buf))
            self._data.clear()

    def control_size(self) -> int:
        """How many acker messages wait to be sent."""
        return sum(map(len, self._ackers.values())) + sum(map(len, self._spouts.values()))

    def flush(self) -> None:
        """Send everything that waits. (Order is free: any subset of a tree's messages short of
        all of them XORs to non-zero, so no arrival order can complete a tree early.)"""
        self.flush_control()
        self.flush_data()

    def is_empty(self) -> bool:
        return not (self._data or self._ackers or self._spouts)
