"""Word count, reliably: Storm's classic topology on rayflow.

    sentences (SentenceSpout) --shuffle--> split (SplitSentence) --fields(word)--> count (WordCount)

The spout emits a fixed number of sentences, each tracked by a message id, and replays the
ones that fail; ``split`` fails a small fraction of its inputs on purpose (``--fail-rate``) so
that you can watch replays happen. At the end every sentence has been acked. ``split`` fails a
sentence before emitting any of its words, so here the counts come out exact; a bolt that failed
after emitting would have its words counted again on the replay -- that is what at-least-once
means (``examples/test_wordcount.py`` checks the counts).

Run it:  python examples/wordcount.py
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter, deque
from typing import Any

import ray

from rayflow import (
    BasicBolt,
    BasicOutputCollector,
    Config,
    FailedException,
    LocalCluster,
    Spout,
    SpoutOutputCollector,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)
from rayflow._topology import Topology

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]


class SentenceSpout(Spout):
    """Emits ``total`` sentences (shared out among its tasks), each with a message id; a
    sentence that fails is queued and emitted again. Says ``exhausted`` when all are out.

    ``total=None`` never runs out, so the topology runs until it is stopped: what a tour of the
    web page or of a detached run needs (``configs/wordcount_endless.yaml``). ``per_sec`` paces
    each task to that many new sentences a second (replays come on top), so that an endless run
    leaves the machine to the rest: unpaced, one task emits as fast as the bolts keep up."""

    outputs = ["sentence"]

    def __init__(self, total: int | None = 10_000, per_sec: float | None = None) -> None:
        self.total = total
        self.per_sec = per_sec

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        tasks = context.get_component_tasks(context.this_component_id)
        self._next, self._stride = tasks.index(context.this_task_id), len(tasks)
        """The next new msg id of this task: task i of n emits i, i + n, i + 2n, ..."""
        self._replay: deque[int] = deque()
        self._collector = collector
        self._started, self._sent = time.monotonic(), 0

    def next_tuple(self) -> None:
        if self._replay:
            msg_id: int | None = self._replay.popleft()
        elif self.per_sec and self._sent >= (time.monotonic() - self._started) * self.per_sec:
            return  # ahead of the pace: the task sleeps a little before asking again
        else:
            msg_id = self._next if self.total is None or self._next < self.total else None
            if msg_id is not None:
                self._next += self._stride
            self._sent += 1
        if msg_id is None:
            self._collector.exhausted()
            return
        self._collector.emit([SENTENCES[msg_id % len(SENTENCES)]], msg_id=msg_id)

    def fail(self, msg_id: Any) -> None:
        self._replay.append(msg_id)

    def position(self) -> int:
        """Where this task stands, for exactly-once checkpoints: its next new msg id."""
        return self._next

    def seek(self, position: int) -> None:
        """Go back to a position taken earlier (exactly-once: a rollback, or a run resumed)."""
        self._next = position
        self._replay.clear()


class SplitSentence(BasicBolt):
    """Splits a sentence into words; fails a ``fail_rate`` fraction of sentences on purpose."""

    outputs = ["word"]

    def __init__(self, fail_rate: float = 0.0) -> None:
        self.fail_rate = fail_rate

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        if self.fail_rate and random.random() < self.fail_rate:
            raise FailedException("simulated failure: this sentence will be replayed")
        for word in tup[0].split():
            collector.emit([word])


class WordCount(BasicBolt):
    """Counts words. With ``tally`` (the name of a ``Tally`` actor) it hands its counts over
    when the topology is killed, so that the driver can print them."""

    outputs = ["word", "count"]

    def __init__(self, tally: str | None = None) -> None:
        self.tally = tally

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        # A plain dict, not a Counter: CPython looks a subclass's ``counts[word]`` up through the
        # generic slot, several times the cost of a dict's (docs/performance.md).
        self.counts: dict[str, int] = {}

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        word = tup[0]
        n = self.counts[word] = self.counts.get(word, 0) + 1
        collector.emit([word, n])

    def cleanup(self) -> None:
        if self.tally:
            ray.get(ray.get_actor(self.tally).add.remote(dict(self.counts)))


@ray.remote(num_cpus=0)
class Tally:
    """Where the count tasks leave their totals at the end."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, counts: dict[str, int]) -> None:
        self.counts.update(counts)

    def result(self) -> dict[str, int]:
        return dict(self.counts)


def build(sentences: int, fail_rate: float, split: int, count: int, tally: str | None = None) -> Topology:
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(sentences))
    builder.set_bolt("split", SplitSentence(fail_rate), parallelism=split).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(tally), parallelism=count).fields_grouping("split", ["word"])
    return builder.create_topology()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=20_000)
    parser.add_argument("--fail-rate", type=float, default=0.002, help="fraction of sentences split fails")
    parser.add_argument("--split", type=int, default=2, help="split tasks")
    parser.add_argument("--count", type=int, default=2, help="count tasks")
    parser.add_argument("--timeout", type=float, default=120.0, help="give up after this many seconds")
    args = parser.parse_args(argv)

    conf = Config(message_timeout_secs=10, max_spout_pending=2_000)
    print("starting a local Ray, then the topology (20-45 s on a busy box)...", flush=True)
    with LocalCluster() as cluster:
        tally = Tally.options(name="wordcount-tally").remote()  # type: ignore[attr-defined]  # a ray.remote class
        topology = build(args.sentences, args.fail_rate, args.split, args.count, tally="wordcount-tally")
        handle = cluster.submit_topology("wordcount", conf, topology)
        finished = handle.wait(timeout=args.timeout)
        metrics = handle.metrics()
        handle.kill()
        counts = Counter(ray.get(tally.result.remote()))

    spout = metrics["sentences"]
    print("top words:")
    for word, n in counts.most_common(10):
        print(f"  {word:<10} {n:>8,}")
    print(
        f"sentences: {args.sentences:,}  emitted: {spout['emitted']:,}  "
        f"acked: {spout['acked']:,}  failed (and replayed): {spout['failed']:,}"
    )
    print(
        f"complete latency ms: p50 {spout['complete_latency_ms']['p50']:.1f}  "
        f"p99 {spout['complete_latency_ms']['p99']:.1f}"
    )
    all_acked = finished and spout["acked"] == args.sentences and spout["pending"] == 0
    print(f"every sentence acked: {'yes' if all_acked else 'NO'}")
    return 0 if all_acked else 1


if __name__ == "__main__":
    sys.exit(main())
