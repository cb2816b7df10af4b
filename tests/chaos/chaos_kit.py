"""The chaos tests' topology and monkey.

    source (broker spout) --shuffle--> split --fields(word)--> count --shuffle--> record

Message ``n`` is the text ``"n w1 w2 w3 w4"``. ``split`` emits ``(n, word)`` for each word,
``count`` counts words and passes ``n`` on, ``record`` adds one to ``n``'s entry in a Redis hash
(which outlives every kill) and acks only once the write is done: an id in the hash reached the
end of the topology, and the number stored says how often (4 per processing, more on replays).

``Monkey`` kills task processes (SIGKILL of the pid that ``handle.task_metrics()`` gives) at
points spread over the run and measures, for each kill, how long until the task is alive again
and until the ids reaching the sink grow again.
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


@dataclass
class Kill:
    kind: str
    task: int
    component: str
    pid: int
    at_seen: int
    at: float
    alive_after: float | None = None
    progress_after: float | None = None


@dataclass
class Monkey:
    """Kills ``plan`` (a list of kinds: "spout", "bolt", "acker"), one at a time: kill ``i`` once
    ``seen()`` has passed ``(i + 1) / (len(plan) + 1)`` of ``total`` and the previous victim is
    alive again."""

    handle: Any
    seen: Callable[[], int]
    total: int
    plan: list[str]
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    kills: list[Kill] = field(default_factory=list)

    def step(self) -> bool:
        """Do what is due now; ``True`` once every kill was done and its victim is back."""
        now = time.monotonic()
        seen = self.seen()
        tasks = self.handle.task_metrics()
        if self.kills:
            last = self.kills[-1]
            if last.progress_after is None and seen >= min(self.total, last.at_seen + 100):
                last.progress_after = now - last.at
            if last.alive_after is None:
                info = tasks[last.task]
                if info.get("alive", True) and info.get("pid") != last.pid:
                    last.alive_after = now - last.at
                else:
                    return False
        if len(self.kills) == len(self.plan):
            return self.kills[-1].progress_after is not None or seen >= self.total
        i = len(self.kills)
        if seen < self.total * (i + 1) / (len(self.plan) + 1):
            return False
        kind = self.plan[i]
        task = self.rng.choice(sorted(t for t, info in tasks.items() if info["kind"] == kind))
        pid = int(tasks[task]["pid"])
        os.kill(pid, signal.SIGKILL)
        self.kills.append(Kill(kind, task, tasks[task]["component"], pid, seen, now))
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
        progress = f"{k.progress_after:.1f} s" if k.progress_after is not None else "-"
        lines.append(
            f"  kill {k.kind:<5} {k.component}:{k.task} pid {k.pid} at {k.at_seen:,} seen: "
            f"alive again after {alive}, sink growing again after {progress}"
        )
    if monkey.kills:
        chaos_secs = finished - monkey.kills[0].at
        done_during = total - monkey.kills[0].at_seen
        lines.append(
            f"throughput: {total / (finished - started):,.0f} msg/s overall, "
            f"{done_during / chaos_secs:,.0f} msg/s from the first kill to the end ({chaos_secs:.1f} s)"
        )
    return "\n".join(lines)
