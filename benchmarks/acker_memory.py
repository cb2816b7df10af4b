"""The acker's memory per pending tree: a million trees opened and left pending in one ledger.

    python benchmarks/acker_memory.py [--trees N]

Each tree gets what a spout's init gives it (a random 64-bit root, a random non-zero checksum,
the spout task) and half of them one ack that does not complete them, as a live topology's
trees have. The figure is the ledger's growth per tree, from ``tracemalloc`` (Python's own
allocations, exact) and from the process's resident set (what the OS sees, including the
allocator's slack).
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rayflow._acking.ledger import AckLedger  # noqa: E402


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


def fill(ledger: AckLedger, trees: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    bits = rng.getrandbits
    for i in range(trees):
        root = bits(64)
        ledger.init(root, bits(64) | 1, 1 + i % 4)
        if i & 1:
            ledger.ack(root, bits(64) & ~1)  # leaves the low bit set: the tree stays pending


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", type=int, default=1_000_000)
    args = parser.parse_args(argv)

    gc.collect()
    rss_before = rss_bytes()
    ledger = AckLedger()
    fill(ledger, args.trees)
    gc.collect()
    rss_per_tree = (rss_bytes() - rss_before) / args.trees
    assert len(ledger) == args.trees, len(ledger)
    del ledger
    gc.collect()

    tracemalloc.start()
    ledger = AckLedger()
    base = tracemalloc.get_traced_memory()[0]
    fill(ledger, args.trees)
    traced_per_tree = (tracemalloc.get_traced_memory()[0] - base) / args.trees
    tracemalloc.stop()
    print(
        f"acker ledger, {args.trees:,} pending trees: {traced_per_tree:.0f} bytes/tree (tracemalloc), "
        f"{rss_per_tree:.0f} bytes/tree (RSS)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
