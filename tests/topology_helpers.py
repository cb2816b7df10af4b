"""Components and helpers shared by the topology tests (they run on the session's Ray)."""

from __future__ import annotations

from typing import Any

import ray

from rayflow import BasicBolt, Bolt, FailedException, OutputCollector, TopologyContext, Tuple


@ray.remote(num_cpus=0)
class Board:
    """A test's blackboard: flags the test sets, and records tasks hand in."""

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


class Relay(BasicBolt):
    """Passes every input on, anchored (BasicBolt)."""

    def __init__(self, fields: list[str]) -> None:
        self.fields = fields

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(self.fields)

    def execute(self, tup: Tuple, collector: Any) -> None:
        collector.emit(list(tup.values))


class Sink(BasicBolt):
    """Acks everything; emits nothing."""

    def execute(self, tup: Tuple, collector: Any) -> None:
        pass


class Holder(Bolt):
    """Holds its inputs unacked until the board's ``release`` flag is set (checked on ticks),
    then acks them. With ``reset`` it calls reset_timeout on every tick while holding."""

    def __init__(self, board: Any, release: str = "release", reset: bool = False) -> None:
        self.board = board
        self.release = release
        self.reset = reset

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector
        self.held: list[Tuple] = []

    def execute(self, tup: Tuple) -> None:
        if not tup.is_tick():
            self.held.append(tup)
            return
        if self.held and ray.get(self.board.is_set.remote(self.release)):
            for held in self.held:
                self.collector.ack(held)
            self.held = []
        elif self.reset:
            for held in self.held:
                self.collector.reset_timeout(held)


class Recorder(BasicBolt):
    """Records (task id, first value) of every input and hands them to the board on cleanup."""

    def __init__(self, board: Any) -> None:
        self.board = board

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.task = context.this_task_id
        self.seen: list[tuple[int, Any]] = []

    def execute(self, tup: Tuple, collector: Any) -> None:
        if not tup.is_tick():
            self.seen.append((self.task, tup[0]))

    def cleanup(self) -> None:
        ray.get(self.board.add.remote(self.seen))


class Judge(BasicBolt):
    """Acks "ok", raises FailedException on "fail", and a plain error on "boom"."""

    def execute(self, tup: Tuple, collector: Any) -> None:
        if tup[0] == "fail":
            raise FailedException("asked to fail")
        if tup[0] == "boom":
            raise ValueError("user code blew up")
