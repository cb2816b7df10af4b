"""What sharing a core costs the executors: the in-process word count (``inprocess.py``), pinned
to one core, alone and then with neighbour processes on the same core that wake often and
touch a few megabytes each time, as the other task actors of a topology do. Linux only.

    python benchmarks/core_sharing.py [--pairs 3] [--neighbours 2] [--wakes 250] [--tasks 1]

The figure is the word count's own CPU per word (``time.process_time``), so the neighbours'
CPU is not in it: what grows is what the same code costs after others have used the core.
Runs alternate, alone then shared, and the ratio reported is the median of the pairs' ratios.
On a 2-core box 1 x 1 word count puts two task processes on each core and 2 x 2 three; compare
``--neighbours 1`` with ``--neighbours 2`` to see whether that difference costs anything (on box
5 it did not: 1.05x with either, see the README's *Speed*).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: find benchmarks/

from benchmarks.inprocess import measure  # noqa: E402

WORK_SECS = 0.001
"""What a neighbour does per wake-up: about a millisecond of dict and list reads."""


def neighbour(cpu: int, wakes_per_s: float, stop: multiprocessing.synchronize.Event) -> None:
    """Wake ``wakes_per_s`` times a second on ``cpu`` and read through ~2 MB of Python objects."""
    os.sched_setaffinity(0, {cpu})
    tables = [{f"k{i}": (i, str(i)) for i in range(j, j + 50)} for j in range(0, 20_000, 50)]
    pause = max(0.0, 1.0 / wakes_per_s - WORK_SECS)
    total = 0
    while not stop.is_set():
        started = time.perf_counter()
        while time.perf_counter() - started < WORK_SECS:
            for table in random.sample(tables, 20):
                for value in table.values():
                    total += value[0]
        time.sleep(pause)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3, help="alone/shared pairs of runs")
    parser.add_argument("--neighbours", type=int, default=2, help="processes sharing the core")
    parser.add_argument("--wakes", type=float, default=250.0, help="wake-ups per second of each neighbour")
    parser.add_argument("--tasks", type=int, default=1, help="split and count tasks of the word count")
    parser.add_argument("--sentences", type=int, default=50_000)
    args = parser.parse_args(argv)
    if not hasattr(os, "sched_setaffinity"):
        print("core_sharing.py needs Linux (sched_setaffinity)")
        return 1
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    conf = {"max_spout_pending": 4000}
    ratios = []
    for pair in range(args.pairs):
        alone = min(measure(args.sentences, args.tasks, args.tasks, conf) for _ in range(3))
        stop = multiprocessing.Event()
        others = [
            multiprocessing.Process(target=neighbour, args=(cpu, args.wakes, stop), daemon=True)
            for _ in range(args.neighbours)
        ]
        for process in others:
            process.start()
        time.sleep(0.5)
        try:
            shared = min(measure(args.sentences, args.tasks, args.tasks, conf) for _ in range(3))
        finally:
            stop.set()
            for process in others:
                process.join()
        ratios.append(shared / alone)
        print(f"pair {pair + 1}: alone {alone:.2f} us/word, with {args.neighbours} neighbours {shared:.2f} us/word")
    print(
        f"CPU per word with {args.neighbours} neighbours waking {args.wakes:.0f} times a second on the "
        f"same core: {statistics.median(ratios):.3f}x of alone (median of {args.pairs} pairs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
