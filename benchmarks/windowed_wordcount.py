"""Word count through a windowed count against the plain count, side by side in one local Ray.
Not a test: run it on a quiet machine.

    python benchmarks/windowed_wordcount.py [--sentences N] [--rounds 3]

Topology (every run): sentences -> split (shuffle) -> count (fields on word), one task each,
one acker. ``count`` is ``examples.wordcount.WordCount`` for the plain run and a
``WindowedBolt`` counting the words of a 10 s window sliding every 2 s (processing time) for the
windowed one. A window holds its tuples' trees pending until its last window fires (12 s), so
both run with an unbounded pending budget and the figure is the rate at which ``count`` took
its input: words executed / seconds until the last word reached it. Rounds alternate their
order; the ratio is the median of the rounds' ratios.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: find examples/

from benchmarks.wordcount import BenchSpout, paired_ratio, words_in  # noqa: E402
from examples.wordcount import SplitSentence, WordCount  # noqa: E402
from rayflow import (  # noqa: E402
    Config,
    Duration,
    LocalCluster,
    OutputCollector,
    TopologyBuilder,
    TopologyContext,
    TupleWindow,
    WindowedBolt,
)


class WindowedCount(WindowedBolt):
    """Counts the words of each window and emits the top one, anchored to the window."""

    outputs = ["word", "count"]

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, window: TupleWindow) -> None:
        word, count = Counter(tup[0] for tup in window.get_new()).most_common(1)[0]
        self.collector.emit([word, count])


def run(cluster: LocalCluster, sentences: int, windowed: bool) -> dict[str, Any]:
    builder = TopologyBuilder()
    builder.set_spout("sentences", BenchSpout(sentences))
    builder.set_bolt("split", SplitSentence()).shuffle_grouping("sentences")
    count = WindowedCount().with_window(Duration(10), Duration(2)) if windowed else WordCount()
    builder.set_bolt("count", count).fields_grouping("split", ["word"])
    conf = Config(max_spout_pending=None, message_timeout_secs=60)
    handle = cluster.submit_topology(f"bench-{'windowed' if windowed else 'plain'}", conf, builder.create_topology())
    words = words_in(sentences)
    started = time.perf_counter()
    while handle.metrics()["count"]["executed"] < words:
        if time.perf_counter() - started > 600:
            raise RuntimeError("not done after 600 s")
        time.sleep(0.05)
    elapsed = time.perf_counter() - started
    handle.kill()
    return {"words_per_s": words / elapsed}


def memory(words_per_s: float, secs: float) -> None:
    """A 60 s window sliding every 10 s fed ``words_per_s`` words for ``secs``: the count task's
    resident memory every 10 s (it should stop growing once the window is full, at 60-70 s)."""
    import psutil

    sentences_per_s = words_per_s / (words_in(1000) / 1000)
    builder = TopologyBuilder()
    builder.set_spout("sentences", BenchSpout(int(sentences_per_s * secs), rate=sentences_per_s))
    builder.set_bolt("split", SplitSentence()).shuffle_grouping("sentences")
    builder.set_bolt("count", WindowedCount().with_window(Duration(60), Duration(10))).fields_grouping(
        "split", ["word"]
    )
    conf = Config(max_spout_pending=None, message_timeout_secs=120)
    with LocalCluster() as cluster:
        handle = cluster.submit_topology("bench-window-memory", conf, builder.create_topology())
        pid = next(i["pid"] for i in handle.task_metrics().values() if i["component"] == "count")
        process = psutil.Process(pid)
        started = time.perf_counter()
        before = process.memory_info().rss
        while time.perf_counter() - started < secs:
            time.sleep(10)
            executed = handle.metrics()["count"]["executed"]
            rss = process.memory_info().rss
            held = max(1, min(executed, 60 * words_per_s))
            print(
                f"{time.perf_counter() - started:5.0f} s: {executed:>10,} words in, count task RSS "
                f"{rss / 2**20:7.0f} MiB ({(rss - before) / held:.0f} B per held word)"
            )
        handle.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory", type=float, default=None, metavar="WORDS_PER_S", help="the memory run instead")
    parser.add_argument("--secs", type=float, default=120.0, help="how long the memory run feeds")
    args = parser.parse_args(argv)
    if args.memory:
        memory(args.memory, args.secs)
        return 0
    plain: list[dict[str, Any]] = []
    windowed: list[dict[str, Any]] = []
    with LocalCluster() as cluster:
        run(cluster, args.sentences // 10, False)  # warm up the workers
        for round_ in range(args.rounds):
            for kind in (False, True) if round_ % 2 == 0 else (True, False):
                (windowed if kind else plain).append(run(cluster, args.sentences, kind))
            rates = f"plain {plain[-1]['words_per_s']:,.0f}, windowed {windowed[-1]['words_per_s']:,.0f}"
            print(f"round {round_ + 1}: {rates} words/s")
    ratio = paired_ratio(windowed, plain)
    print(
        f"windowed (10 s, sliding 2 s) / plain count: {ratio['median']:.2f}x "
        f"(rounds {', '.join(f'{r:.2f}' for r in ratio['rounds'])})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
