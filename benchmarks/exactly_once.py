"""Exactly-once against at-least-once state, in process: CPU per word of the stateful word count.

    python benchmarks/exactly_once.py [--sentences N] [--rounds R]

sentences -> split -> count (``StatefulWordCount``, a ``KeyValueState``), one task each, one
acker, state in memory, run by ``InProcessTopology`` (its recorder switched off) on its
simulated clock (a checkpoint every simulated second, as the default interval) until every tree
is committed. The figure is CPU
seconds (``time.process_time``) per word, for both guarantees in alternating order; the ratio is
the median of each round's at-least-once / exactly-once time. The Ray figures (words/s side by
side, checkpoint latency) come from ``benchmarks/stateful_wordcount.py --exactly-once sqlite``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: find examples/

from benchmarks.stateful_wordcount import SeekableBenchSpout  # noqa: E402
from benchmarks.wordcount import words_in  # noqa: E402
from examples.stateful_wordcount import StatefulWordCount  # noqa: E402
from examples.wordcount import SplitSentence  # noqa: E402
from rayflow import Config, TopologyBuilder  # noqa: E402
from rayflow.testing import InProcessTopology  # noqa: E402


def cpu_seconds(sentences: int, guarantee: str) -> float:
    builder = TopologyBuilder()
    builder.set_spout("sentences", SeekableBenchSpout(sentences))
    builder.set_bolt("split", SplitSentence()).shuffle_grouping("sentences")
    builder.set_bolt("count", StatefulWordCount()).fields_grouping("split", ["word"])
    run = InProcessTopology(builder.create_topology(), Config.of({"processing_guarantee": guarantee}))
    for executor in run.executors.values():
        executor.observer = None  # the runner's recorder of every emit: not what is measured
    started = time.process_time()
    for _ in range(100_000):
        run.run()
        if run.finished:
            break
        run.advance(0.25)
    took = time.process_time() - started
    acked = run.metrics()["sentences"]["acked"]
    assert acked == sentences, f"{guarantee}: {acked} of {sentences} acked"
    return took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    words = words_in(args.sentences)
    cpu_seconds(args.sentences // 10, "exactly_once")  # warm up
    times: dict[str, list[float]] = {"at_least_once": [], "exactly_once": []}
    for round_ in range(args.rounds):
        order = list(times) if round_ % 2 == 0 else list(reversed(times))
        for guarantee in order:
            times[guarantee].append(cpu_seconds(args.sentences, guarantee))
        print(f"round {round_ + 1}: " + ", ".join(f"{g} {1e6 * times[g][-1] / words:.2f} us/word" for g in times))
    ratios = [a / e for a, e in zip(times["at_least_once"], times["exactly_once"], strict=True)]
    print(
        f"\n{args.sentences:,} sentences ({words:,} words), {args.rounds} rounds, median CPU per word: "
        + ", ".join(f"{g} {1e6 * statistics.median(t) / words:.2f} us" for g, t in times.items())
        + f"; exactly-once runs at {statistics.median(ratios):.2f}x the speed of at-least-once state "
        f"(rounds {', '.join(f'{r:.2f}' for r in ratios)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
