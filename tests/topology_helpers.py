"""Components shared by the topology tests.

They are plain components: in-process tests (``rayflow.testing``) read their state back through
``InProcessTopology.components(...)`` / ``CompletedTopology.components(...)`` and drive them
directly (``Feeder.feed``, ``Holder.release``). On Ray, where a test cannot reach a task's
objects, ``Board`` -- a small actor -- carries flags from the test to the tasks and records back;
this module imports Ray only when ``Board`` is first used, so in-process tests never load it.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from rayflow import (
    BasicBolt,
    BasicOutputCollector,
    Bolt,
    FailedException,
    OutputCollector,
    Spout,
    SpoutOutputCollector,
    TopologyContext,
    Tuple,
)

if TYPE_CHECKING:
    from ray.actor import ActorHandle


class _Board:
    """A test's blackboard on Ray: flags the test sets, and records tasks hand in."""

    def __init__(self) -> None:
        self.flags: dict[str, bool] = {}
        self.records: list[Any] = []

    def set(self, flag: str) -> None:
        self.flags[flag] = True

    def is_set(self, flag: str) -> bool:
        return self.flags.get(flag, False)

    def add(self, records: list[Any]) -> None:
        self.records.extend(records)

    def all(self) -> list[Any]:
        return list(self.records)


def __getattr__(name: str) -> Any:
    # ``Board`` is a Ray actor class: build it (and import Ray) on first use only.
    if name == "Board":
        import ray

        board = ray.remote(num_cpus=0)(_Board)
        globals()["Board"] = board
        return board
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Feeder(Spout):
    """Emits what the test feeds it, one tuple per ``next_tuple``, tracked by the msg id given;
    records the msg ids it is told were acked and failed. Never replays and is never exhausted
    (an in-process ``FeederSpout``: feed it through ``topology.components(spout_id)[i]``, even
    before it is opened)."""

    def __init__(self, fields: list[str]) -> None:
        self.fields = list(fields)
        self.queue: deque[tuple[list[Any], Any]] = deque()
        self.acked: list[Any] = []
        self.failed: list[Any] = []

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(self.fields)

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector = collector

    def feed(self, values: list[Any], msg_id: Any = None) -> None:
        self.queue.append((list(values), msg_id))

    def next_tuple(self) -> None:
        if self.queue:
            values, msg_id = self.queue.popleft()
            self.collector.emit(values, msg_id=msg_id)

    def ack(self, msg_id: Any) -> None:
        self.acked.append(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.failed.append(msg_id)


class Bounded(Spout):
    """Emits ids 0..n-1 (the id is the value and the msg id), replays a failed id, and says
    ``exhausted`` when nothing is left to emit."""

    outputs = ["id"]

    def __init__(self, n: int) -> None:
        self.n = n

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector = collector
        self.todo = list(range(self.n))
        self.acked: list[int] = []

    def next_tuple(self) -> None:
        if not self.todo:
            self.collector.exhausted()
            return
        msg_id = self.todo.pop(0)
        self.collector.emit([msg_id], msg_id=msg_id)

    def ack(self, msg_id: Any) -> None:
        self.acked.append(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.todo.append(msg_id)


class Flaky(Spout):
    """Raises on every other ``next_tuple``; emits ids 0..2 on the others, then is exhausted."""

    outputs = ["id"]

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector = collector
        self.calls = 0
        self.sent = 0

    def next_tuple(self) -> None:
        self.calls += 1
        if self.calls % 2:
            raise RuntimeError("flaky source")
        if self.sent < 3:
            self.collector.emit([self.sent], msg_id=self.sent)
            self.sent += 1
        else:
            self.collector.exhausted()


class Endless(Spout):
    """Emits 1, 2, 3, ... on every call, forever: tracked (msg id = the number) unless
    ``tracked=False``."""

    outputs = ["n"]

    def __init__(self, tracked: bool = True) -> None:
        self.tracked = tracked

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector = collector
        self.n = 0

    def next_tuple(self) -> None:
        self.n += 1
        self.collector.emit([self.n], msg_id=self.n if self.tracked else None)


class Relay(BasicBolt):
    """Passes every input on, anchored (BasicBolt)."""

    def __init__(self, fields: list[str]) -> None:
        self.fields = fields

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(self.fields)

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit(list(tup.values))


class Sink(BasicBolt):
    """Acks everything; emits nothing."""

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        pass


class Holder(Bolt):
    """Holds its inputs unacked until released, then acks them; with ``reset`` it calls
    ``reset_timeout`` on every held tuple at every tick while holding.

    In-process the test calls ``release()`` on the task's object. On Ray, give it a ``board``:
    it releases on the first tick after the board's ``release`` flag is set."""

    def __init__(self, board: ActorHandle[Any] | None = None, release: str = "release", reset: bool = False) -> None:
        self.board = board
        self.release_flag = release
        self.reset = reset

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector
        self.held: list[Tuple] = []
        self.resets = 0

    def execute(self, tup: Tuple) -> None:
        if not tup.is_tick():
            self.held.append(tup)
            return
        if self.held and self.board is not None and self._flag_set():
            self.release()
        elif self.reset:
            for held in self.held:
                self.collector.reset_timeout(held)
                self.resets += 1

    def _flag_set(self) -> bool:
        import ray

        assert self.board is not None
        return bool(ray.get(self.board.is_set.remote(self.release_flag)))

    def release(self) -> int:
        """Ack every held tuple; returns how many."""
        released, self.held = self.held, []
        for held in released:
            self.collector.ack(held)
        return len(released)


class Recorder(BasicBolt):
    """Records (task id, first value) of every input in ``seen``; with a ``board`` (on Ray) it
    hands them in on cleanup."""

    def __init__(self, board: ActorHandle[Any] | None = None) -> None:
        self.board = board

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.task = context.this_task_id
        self.seen: list[tuple[int, Any]] = []

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        if not tup.is_tick():
            self.seen.append((self.task, tup[0]))

    def cleanup(self) -> None:
        if self.board is not None:
            import ray

            ray.get(self.board.add.remote(self.seen))


class Judge(BasicBolt):
    """Acks "ok", raises FailedException on "fail", and a plain error on "boom"."""

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        if tup[0] == "fail":
            raise FailedException("asked to fail")
        if tup[0] == "boom":
            raise ValueError("user code blew up")
