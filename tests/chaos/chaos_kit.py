"""The chaos tests' topology and monkey.

    source (broker spout) --shuffle--> split --fields(word)--> count --shuffle--> record

Message ``n`` is the text ``"n w1 w2 w3 w4"``. ``split`` emits ``(n, word)`` for each word,
``count`` counts words and passes ``n`` on, ``record`` adds one to ``n``'s entry in a Redis hash
(which outlives every kill) and acks only once the write is done: an id in the hash reached the
end of the topology, and the number stored says how often (4 per processing, more on replays).

``Monkey`` kills task processes (SIGKILL of the pid that ``handle.task_metrics()`` gives) at
points spread over the run and measures, for each kill, how long until the task is alive again
and until every message the broker had delivered by the kill has reached the sink (the trees
in flight at the kill completed, replayed where the kill lost them).
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rayflow import BasicBolt, BasicOutputCollector, Bolt, OutputCollector, TopologyContext, Tuple

WORDS = ["the", "cow", "jumped", "over", "moon", "apple", "day", "keeps", "doctor", "away", "snow", "white"]
WORDS_PER_MESSAGE = 4


def message(n: int) -> str:
    return " ".join([str(n)] + [WORDS[(n * 7 + i * 3) % len(WORDS)] for i in range(WORDS_PER_MESSAGE)])


class Split(BasicBolt):
    """``"n w1 w2 ..."`` (a RabbitMQ body, or a Redis entry's ``body`` field) -> ``(n, word)``s."""

    outputs = ["n", "word"]

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        text = tup["body"] if "body" in tup.fields else tup["data"]["body"]
        n, *words = text.split()
        for word in words:
            collector.emit([int(n), word])


class Count(BasicBolt):
    outputs = ["n", "word", "count"]

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.counts: Counter[str] = Counter()

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        self.counts[tup["word"]] += 1
        collector.emit([tup["n"], tup["word"], self.counts[tup["word"]]])


class Record(Bolt):
    """Adds every input's ``n`` to the Redis hash ``key`` (HINCRBY), then acks the inputs: a
    batch is written when it reaches ``batch`` tuples or on the next tick. A failed write fails
    the batch (it is replayed)."""

    def __init__(self, key: str, url: str = "redis://127.0.0.1:6379/0", batch: int = 500) -> None:
        self.key = key
        self.url = url
        self.batch = batch

    def get_component_configuration(self) -> dict[str, Any]:
        return {"tick_tuple_freq_secs": 0.2}

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        import redis

        self.client = redis.Redis.from_url(self.url)
        self.collector = collector
        self.held: list[Tuple] = []

    def execute(self, tup: Tuple) -> None:
        if not tup.is_tick():
            self.held.append(tup)
        if self.held and (tup.is_tick() or len(self.held) >= self.batch):
            self._write()

    def _write(self) -> None:
        held, self.held = self.held, []
        try:
            pipe = self.client.pipeline(transaction=False)
            for tup in held:
                pipe.hincrby(self.key, str(tup["n"]), 1)
            pipe.execute()
        except Exception as exc:
            self.collector.report_error(exc)
            for tup in held:
                self.collector.fail(tup)
            return
        for tup in held:
            self.collector.ack(tup)


class Ledger:
    """The sink's record in Redis: id -> how many word tuples of it arrived."""

    def __init__(self, client: Any, key: str) -> None:
        self.client = client
        self.key = key

    def seen(self) -> int:
        return int(self.client.hlen(self.key))

    def ids(self) -> set[int]:
        return {int(n) for n in self.client.hkeys(self.key)}

    def missing(self, ids: list[int]) -> list[int]:
        found = self.client.hmget(self.key, [str(n) for n in ids]) if ids else []
        return [n for n, count in zip(ids, found, strict=True) if count is None]

    def counts(self) -> dict[int, int]:
        return {int(n): int(c) for n, c in self.client.hgetall(self.key).items()}


@dataclass
class Kill:
    """One SIGKILL. ``behind``: the ids the broker had delivered by the kill that had not reached
    the sink (trees in flight or buffered, some lost with the victim); recovered once all of
    them arrived -- which takes a message timeout and a replay for the trees the kill lost."""

    kind: str
    task: int
    component: str
    pid: int
    at_seen: int
    at: float
    behind: list[int]
    alive_after: float | None = None
    recovered_after: float | None = None


@dataclass
class Monkey:
    """Kills ``plan`` (a list of kinds: "spout", "bolt", "acker", or component ids), one at a time: kill ``i`` once
    the sink has seen ``(i + 1) / (len(plan) + 1)`` of ``total`` ids and the previous victim is
    alive again. The victim is a random task of that kind. ``delivered()`` says how many
    messages the broker has handed out so far: ids are published in order, so those are the ids
    below it."""

    handle: Any
    ledger: Ledger
    delivered: Callable[[], int]
    total: int
    plan: list[str]
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    kills: list[Kill] = field(default_factory=list)

    def step(self) -> bool:
        """Do what is due now; ``True`` once every kill was done and its victim is back."""
        now = time.monotonic()
        tasks = self.handle.task_metrics()
        for kill in self.kills:
            if kill.recovered_after is None:
                kill.behind = self.ledger.missing(kill.behind)
                if not kill.behind:
                    kill.recovered_after = now - kill.at
        if self.kills and self.kills[-1].alive_after is None:
            last = self.kills[-1]
            info = tasks[last.task]
            if not (info["alive"] and info["pid"] != last.pid):
                return False
            last.alive_after = now - last.at
        if len(self.kills) == len(self.plan):
            return True
        i = len(self.kills)
        ids = self.ledger.ids()
        if len(ids) < self.total * (i + 1) / (len(self.plan) + 1):
            return False
        kind = self.plan[i]
        task = self.rng.choice(sorted(t for t, info in tasks.items() if kind in (info["kind"], info["component"])))
        pid = int(tasks[task]["pid"])
        os.kill(pid, signal.SIGKILL)
        behind = sorted(set(range(self.delivered())) - ids)
        self.kills.append(Kill(kind, task, tasks[task]["component"], pid, len(ids), now, behind))
        return False


def report(title: str, total: int, counts: dict[int, int], monkey: Monkey, started: float, finished: float) -> str:
    """The figures: what was lost, duplicated, how long each recovery took, throughput."""
    lost = total - len(counts)
    replayed = sum(1 for c in counts.values() if c > WORDS_PER_MESSAGE)
    extra = sum(counts.values()) - WORDS_PER_MESSAGE * len(counts)
    lines = [
        f"== chaos: {title} ==",
        f"messages {total:,}  lost {lost}  processed more than once {replayed:,}  "
        f"extra word tuples at the sink {extra:,}",
    ]
    for k in monkey.kills:
        alive = f"{k.alive_after:.1f} s" if k.alive_after is not None else "never"
        recovered = f"{k.recovered_after:.1f} s" if k.recovered_after is not None else "never"
        lines.append(
            f"  kill {k.kind:<5} {k.component}:{k.task} pid {k.pid} at {k.at_seen:,} seen: "
            f"alive again after {alive}, every delivered id through after {recovered}"
        )
    if monkey.kills:
        chaos_secs = finished - monkey.kills[0].at
        done_during = total - monkey.kills[0].at_seen
        lines.append(
            f"throughput: {total / (finished - started):,.0f} msg/s overall, "
            f"{done_during / chaos_secs:,.0f} msg/s from the first kill to the end ({chaos_secs:.1f} s)"
        )
    return "\n".join(lines)


@dataclass
class StreamGroup:
    """A Redis stream filled with messages ``0 .. total-1`` and the consumer group reading it."""

    client: Any
    stream: str
    group: str
    total: int

    def fill(self) -> None:
        pipe = self.client.pipeline(transaction=False)
        for n in range(self.total):
            pipe.xadd(self.stream, {"body": message(n)})
        pipe.execute()

    def info(self) -> dict[str, Any]:
        groups = {g["name"].decode(): g for g in self.client.xinfo_groups(self.stream)}
        return groups.get(self.group) or {"pending": self.total, "lag": self.total, "entries-read": 0}

    def state(self) -> tuple[int, int]:
        """Entries pending (delivered, not acked) and not yet read."""
        info = self.info()
        return int(info["pending"]), int(info["lag"] or 0)

    def delivered(self) -> int:
        return int(self.info()["entries-read"] or 0)
