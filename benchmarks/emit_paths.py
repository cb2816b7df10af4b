"""Does the BasicBolt emit path pay for being written out inline?

    python benchmarks/emit_paths.py [--sentences N] [--rounds R]

``BoltExecutor.emit_input`` (what a ``BasicBolt``'s ``collector.emit`` runs) repeats the fast
path of ``BoltExecutor.emit`` instead of calling it. This runs the in-process word count
(``benchmarks/inprocess.py``: every task's executor, every payload pickled) with the inline path
and with a one-line ``emit_input`` that calls ``emit``, alternating the order every round, and
prints the CPU per word of each and the median of the rounds' paired ratios. The inline copy
stays only while the ratio says it pays; ``tests/test_emit_paths.py`` keeps the copies from
drifting apart.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.inprocess import measure  # noqa: E402
from rayflow._executors.bolt import BoltExecutor  # noqa: E402
from rayflow._tuple import DEFAULT_STREAM  # noqa: E402

INLINE = BoltExecutor.emit_input


def delegating(self: BoltExecutor, values: list[Any], stream: str = DEFAULT_STREAM) -> list[int]:
    return self.emit(stream, values, self._input_collector.input, None)


def run(variant: Any, sentences: int) -> float:
    BoltExecutor.emit_input = variant  # type: ignore[method-assign]
    try:
        return measure(sentences, 1, 1, {"max_spout_pending": 4000})
    finally:
        BoltExecutor.emit_input = INLINE  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    inline, calling, ratios = [], [], []
    for round_ in range(args.rounds):
        order = [(INLINE, inline), (delegating, calling)]
        if round_ % 2:
            order.reverse()
        for variant, figures in order:
            figures.append(run(variant, args.sentences))
        ratios.append(calling[-1] / inline[-1])
    print(f"inline emit_input:     median {statistics.median(inline):.2f} us/word (best {min(inline):.2f})")
    print(f"emit_input -> emit:    median {statistics.median(calling):.2f} us/word (best {min(calling):.2f})")
    print(f"CPU per word, calling / inline: median of {args.rounds} paired rounds {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
