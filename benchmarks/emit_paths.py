"""Does the BasicBolt emit path pay for being written out per stream?

    python benchmarks/emit_paths.py [--sentences N] [--rounds R]

A ``BasicBolt``'s ``collector.emit`` is bound to an emit built for its stream
(``rayflow/_executors/input_emit.py``), which repeats the fast path of ``BoltExecutor.emit``
with the stream's route bound instead of calling it. This runs the in-process word count
(``benchmarks/inprocess.py``: every task's executor, every payload pickled) with those emits and
with none built, so that ``collector.emit`` runs ``BoltExecutor.emit_input``, which calls
``emit``, alternating the order every round, and prints the CPU per word of each and the median
of the rounds' paired ratios. The copy stays only while the ratio says it pays;
``tests/test_emit_paths.py`` keeps the copies from drifting apart. Both run on pure Python, as if
``RAYFLOW_PURE_PYTHON=1`` were set: where the C kernel is built, its emit would stand in for both
(``benchmarks/c_kernel.py`` measures it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.inprocess import measure  # noqa: E402
from rayflow._executors import bolt, kernel  # noqa: E402

BOUND = getattr(bolt, "input_emits")  # noqa: B009 (imported there, not exported)


def none_built(*args: Any) -> dict[str, Any]:
    return {}


def run(variant: Any, sentences: int) -> float:
    setattr(bolt, "input_emits", variant)  # noqa: B010
    try:
        return measure(sentences, 1, 1, {"max_spout_pending": 4000})
    finally:
        setattr(bolt, "input_emits", BOUND)  # noqa: B010


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    kernel.KERNEL = None  # the Python emits measured, not the C one (this process only)
    bound: list[float] = []
    calling: list[float] = []
    ratios: list[float] = []
    for round_ in range(args.rounds):
        order = [(BOUND, bound), (none_built, calling)]
        if round_ % 2:
            order.reverse()
        for variant, figures in order:
            figures.append(run(variant, args.sentences))
        ratios.append(calling[-1] / bound[-1])
    print(f"emit bound per stream:  median {statistics.median(bound):.2f} us/word (best {min(bound):.2f})")
    print(f"emit_input -> emit:     median {statistics.median(calling):.2f} us/word (best {min(calling):.2f})")
    print(f"CPU per word, calling / bound: median of {args.rounds} paired rounds {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
