"""Top words per 10-second window, on event time: Storm's windowed bolt on rayflow.

    sentences (TimedSentenceSpout) --shuffle--> split (SplitWords) --global--> top (TopWords)
                                                                                 |-- late --> late (CountLate)

Every sentence carries its own time (``ts``, ms since the epoch): the spout stamps them 100 ms
apart, a little out of order. Every 50th one arrives late, as a phone back from a tunnel sends
what it wrote inside: the spout holds it back until a sentence stamped 30 s after it was acked,
and only then emits it -- its window has fired by then, so it is too late for any open window,
whatever the clock and the pending budget. ``top`` keeps tumbling 10 s windows on that time,
with a 5 s lag: a window closes once every split task has sent a word stamped 5 s past its end,
and prints its top words then. Late words go to the ``late`` stream and are counted: 40
sentences of 2,000, their 240 words (on a machine so busy that a split task stalls for longer
than the idle timeout, the words it sends next come late too). Every sentence is acked once the
window holding its words has fired, the late ones at once. When the spout runs dry the split
tasks go quiet, and after the idle timeout (2 s) the last windows close too.

Settings that matter (``build`` and ``CONF``): a tuple's tree stays pending until its window
fires, so ``max_spout_pending`` must cover the sentences of a window and the watermark's delay
(here 5,000), and ``message_timeout_secs`` the window plus slide plus lag plus watermark
interval (26 s: here 60).

Run it:  python examples/windowed_wordcount.py             (on Ray)
         python examples/windowed_wordcount.py --in-process (no Ray, the simulated clock)
The same topology as a file: examples/windowed_wordcount.yaml (``rayflow run`` it).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter, deque
from typing import Any

from rayflow import (
    BasicBolt,
    BasicOutputCollector,
    Config,
    Duration,
    OutputCollector,
    Spout,
    SpoutOutputCollector,
    Topology,
    TopologyBuilder,
    TopologyContext,
    Tuple,
    TupleWindow,
    WindowedBolt,
)

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]
START_MS = 1_700_000_000_000
CONF = Config(message_timeout_secs=60, max_spout_pending=5_000)


LATE_EVERY = 50
"""Every 50th sentence arrives late."""
LATE_BY_MS = 30_000
"""It is emitted once a sentence stamped this much after it was acked."""


def stamp(i: int) -> int:
    """Sentence ``i``'s time: ``START_MS + 100 ms * i``, give or take 2 s (out of order)."""
    return START_MS + 100 * i + (i * 7919 % 41 - 20) * 100


class TimedSentenceSpout(Spout):
    """Emits ``total`` sentences stamped by ``stamp``, each tracked by its index; every
    ``LATE_EVERY``-th is held back until a sentence ``LATE_BY_MS`` newer was acked (or, at the
    end, until every other one was), so that it arrives after its window fired. Never replays:
    a failed sentence is only counted."""

    outputs = ["sentence", "ts"]

    def __init__(self, total: int = 2_000) -> None:
        self.total = total

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.next = 0
        self.failed = 0
        self.collector = collector
        self.held: deque[int] = deque()
        self.newest_acked = 0
        """The newest stamp acked: its window fired, and every window before it."""
        self.in_flight = 0
        """Sentences emitted on time and not yet acked or failed."""

    def next_tuple(self) -> None:
        if self.held and self._is_late(self.held[0]):
            i = self.held.popleft()
        elif self.next < self.total:
            i, self.next = self.next, self.next + 1
            if i % LATE_EVERY == LATE_EVERY - 1:
                self.held.append(i)
                return
            self.in_flight += 1
        else:
            if not self.held:
                self.collector.exhausted()
            return
        self.collector.emit([SENTENCES[i % len(SENTENCES)], stamp(i)], msg_id=i)

    def _is_late(self, i: int) -> bool:
        done = self.next >= self.total and self.in_flight == 0  # every other window fired
        return done or stamp(i) + LATE_BY_MS <= self.newest_acked

    def ack(self, msg_id: Any) -> None:
        self.newest_acked = max(self.newest_acked, stamp(msg_id))
        self._settled(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.failed += 1
        self._settled(msg_id)

    def _settled(self, msg_id: int) -> None:
        if msg_id % LATE_EVERY != LATE_EVERY - 1:
            self.in_flight -= 1


class SplitWords(BasicBolt):
    outputs = ["word", "ts"]

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        for word in tup["sentence"].split():
            collector.emit([word, tup["ts"]])


class TopWords(WindowedBolt):
    """The ``n`` most frequent words of each window, printed and emitted as the window closes."""

    outputs = ["window_end", "top"]

    def __init__(self, n: int = 3) -> None:
        self.n = n

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, window: TupleWindow) -> None:
        counts = Counter(tup["word"] for tup in window.get())
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: self.n]
        start = ((window.start_ts or 0) - START_MS) / 1000
        logger.info("window [%5.0f s, %5.0f s): %5d words, top %s", start, start + 10, len(window.get()), top)
        self.collector.emit([window.end_ts, top])


class CountLate(BasicBolt):
    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self.late = 0

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        self.late += 1
        logger.info("late: %s", tup["late_tuple"])


logger = logging.getLogger("rayflow.examples.windowed_wordcount")
"""Under ``rayflow``: what a task logs there reaches the driver, so windows show as they close."""


def build(sentences: int = 2_000) -> Topology:
    builder = TopologyBuilder()
    builder.set_spout("sentences", TimedSentenceSpout(sentences))
    builder.set_bolt("split", SplitWords(), parallelism=2).shuffle_grouping("sentences")
    top = (
        TopWords()
        .with_tumbling_window(Duration(10))
        .with_timestamp_field("ts")
        .with_lag(Duration(5))
        .with_watermark_interval(Duration(0.5))
        .with_idle_timeout(Duration(2))
        .with_late_tuple_stream("late")
    )
    builder.set_bolt("top", top).global_grouping("split")
    builder.set_bolt("late", CountLate()).shuffle_grouping("top", "late")
    return builder.create_topology()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=2_000)
    parser.add_argument("--in-process", action="store_true", help="run without Ray, on the simulated clock")
    parser.add_argument("--timeout", type=float, default=120.0, help="give up after this many seconds (Ray)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    if args.in_process:
        from rayflow.testing import complete_topology

        result = complete_topology(build(args.sentences), CONF)
        finished, metrics = result.finished, result.metrics()
    else:
        from rayflow import LocalCluster

        print("starting a local Ray, then the topology (20-45 s on a busy box)...", flush=True)
        with LocalCluster() as cluster:
            handle = cluster.submit_topology("windowed-wordcount", CONF, build(args.sentences))
            finished = handle.wait(timeout=args.timeout)
            metrics = handle.metrics()
            handle.kill()
    acked, late = metrics["sentences"]["acked"], metrics["late"]["executed"]
    print(
        f"sentences: {args.sentences:,}  acked: {acked:,}  late words: {late:,}  "
        f"finished: {'yes' if finished else 'NO'}"
    )
    return 0 if finished and acked == args.sentences else 1


if __name__ == "__main__":
    sys.exit(main())
