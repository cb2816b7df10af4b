"""The node-loss scenarios' topology: a source whose progress outlives any host, and a sink.

    source (LedgerSpout) --shuffle--> relay --fields(n)--> sink (Seen)

(``relay`` is a ``CountingRelay``, a stateful bolt, in the stateful variant: the topology then
has the checkpoint spout too.)

``LedgerSpout`` plays a broker with committed offsets: message ``n`` (``0 .. total-1``, shared
among the spout's tasks by ``n % tasks``) is appended to its task's ack file once its tree
completed, and a task that starts -- the first time, or again on another host after its host
was lost -- emits every id of its share that is not in that file. The files live in a folder
every host of the test sees (the hosts are one machine's network namespaces, or a
``ray.cluster_utils.Cluster``), as a broker's log would outlive any one of them. ``Seen``
appends every id that reached the end of the topology to its task's file.

What the scenarios check: every id acked (in some ack file) and seen; none lost.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import IO, Any

from rayflow import (
    BasicBolt,
    BasicOutputCollector,
    OutputCollector,
    Spout,
    SpoutOutputCollector,
    StatefulBolt,
    TopologyContext,
    Tuple,
)
from rayflow.state import KeyValueState


def read_ids(folder: Path, prefix: str) -> set[int]:
    """The ids recorded in ``folder``'s files named ``<prefix>-*.log`` (a torn last line is skipped)."""
    ids: set[int] = set()
    for path in folder.glob(f"{prefix}-*.log"):
        for line in path.read_text().splitlines():
            if line.strip().isdigit():
                ids.add(int(line))
    return ids


class LedgerSpout(Spout):
    """Emits its share of ``0 .. total-1`` at about ``rate`` messages/s per task, each tracked;
    replays what fails; records what is acked, and skips it when it starts again."""

    outputs = ["n"]

    def __init__(self, folder: str, total: int, rate: float) -> None:
        self.folder = folder
        self.total = total
        self.rate = rate

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        tasks = context.get_component_tasks(context.this_component_id)
        index = tasks.index(context.this_task_id)
        path = Path(self.folder) / f"acked-{index}.log"
        done = read_ids(Path(self.folder), f"acked-{index}") if path.exists() else set()
        self._todo: deque[int] = deque(n for n in range(index, self.total, len(tasks)) if n not in done)
        self._acked: IO[str] = path.open("a")
        self._collector = collector
        self._next_at = time.monotonic()

    def next_tuple(self) -> None:
        if not self._todo:
            self._collector.exhausted()
            return
        now = time.monotonic()
        if now < self._next_at:
            return
        self._next_at = max(self._next_at + 1.0 / self.rate, now - 1.0)
        n = self._todo.popleft()
        self._collector.emit([n], msg_id=n)

    def ack(self, msg_id: Any) -> None:
        self._acked.write(f"{msg_id}\n")
        self._acked.flush()  # in the kernel now: outlives this process

    def fail(self, msg_id: Any) -> None:
        self._todo.appendleft(msg_id)

    def close(self) -> None:
        self._acked.close()


class Relay(BasicBolt):
    outputs = ["n"]

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tup["n"]])


class CountingRelay(StatefulBolt):
    """Passes every id on, counting ids per last digit in its state (checkpointed)."""

    outputs = ["n"]

    def init_state(self, state: KeyValueState) -> None:
        self.counts = state

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        digit = str(tup["n"] % 10)
        self.counts.put(digit, self.counts.get(digit, 0) + 1)
        self.collector.emit([tup["n"]], anchors=tup)
        self.collector.ack(tup)


class Seen(BasicBolt):
    """Records every id that reached it (then it is acked)."""

    outputs: list[str] = []

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self._seen: IO[str] = (Path(self.folder) / f"seen-{context.this_task_id}.log").open("a")

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        self._seen.write(f"{tup['n']}\n")
        self._seen.flush()

    def cleanup(self) -> None:
        self._seen.close()
