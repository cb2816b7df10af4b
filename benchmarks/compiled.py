"""The hot path compiled with mypyc against pure Python, side by side in one run: does a
compiled build pay? Not a test: run it on a quiet machine.

    python benchmarks/compiled.py [REVISION] [--modules M ...] [--rounds 4] [--runs 5] [--sentences 50000]
    python benchmarks/compiled.py --each [--modules M ...]   # instructions per word, one module compiled at a time

A revision (``HEAD`` by default) is exported twice with ``git archive`` into a temporary
directory (the working tree is never touched, so no compiled module ever shadows a source file
someone is editing); ``mypyc`` compiles ``--modules`` in one copy, timed, and a child process
checks that each of them imports from its extension module and not from its ``.py``. Then:

- instructions per word of the in-process word count (``benchmarks/inprocess.py`` under
  callgrind, two sizes, as ``benchmarks/revisions.py --instructions`` counts them), pure and
  compiled: deterministic, so one count each;
- CPU microseconds per word (``inprocess.py``), a process per build and round, the order turned
  round every round; the verdict is the median of the rounds' ratios of their best runs.

With ``--each`` every module is compiled alone in a copy of its own and only instructions are
counted: each module's own gain (or cost), which the all-together figure would blur.

mypyc compiles only what it can: ``PATCHES`` are the source changes a module needs first, applied
to the exported copy (a patch that no longer applies stops the run, naming its file). Modules it
cannot compile as they stand, and why, are in ``docs/performance.md`` (*A compiled hot path*).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: find benchmarks/

from benchmarks.revisions import cpu_per_word, export, instructions  # noqa: E402
from benchmarks.wordcount import words_in  # noqa: E402

HOT_PATH = ["rayflow/_acking/anchoring.py", "rayflow/_acking/ledger.py", "rayflow/_router.py", "rayflow/_outbox.py"]
"""What compiles and runs as it stands (with ``PATCHES``). ``_tuple.py`` compiles but does not
run: the executors make tuples with ``object.__new__`` (skipping ``__init__``), which a native
class refuses; ``_groupings.py`` compiles but fails at import (mypyc's class is no longer a
``Protocol`` for ``runtime_checkable``); the executors assign methods to instances
(``self.receive = ...``), which native classes forbid."""

PATCHES: dict[str, list[tuple[str, str]]] = {
    "rayflow/_outbox.py": [
        # ValueColumn subclasses list: mypyc compiles only native classes that inherit from object
        (
            "from typing import Any, ClassVar, SupportsIndex\n",
            "from typing import Any, ClassVar, SupportsIndex\n\nfrom mypy_extensions import mypyc_attr\n",
        ),
        ("class ValueColumn(list[Any]):", "@mypyc_attr(native_class=False)\nclass ValueColumn(list[Any]):"),
    ],
}
SIZES = (1000, 6000)
"""Sentences of the two callgrind runs whose difference is divided by the words between them."""


def patch(tree: Path, modules: list[str]) -> None:
    """Apply ``PATCHES`` for ``modules`` in ``tree``; ``SystemExit`` if one no longer applies."""
    for module in modules:
        path = tree / module
        text = path.read_text(encoding="utf-8")
        for old, new in PATCHES.get(module, []):
            if old not in text:
                raise SystemExit(f"benchmarks/compiled.py PATCHES: {module} no longer contains {old!r}")
            text = text.replace(old, new, 1)
        path.write_text(text, encoding="utf-8")


def build(tree: Path, modules: list[str]) -> float:
    """Compile ``modules`` in place in ``tree``; the wall-clock seconds it took."""
    patch(tree, modules)
    started = time.perf_counter()
    done = subprocess.run(["mypyc", *modules], cwd=tree, capture_output=True, text=True)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"mypyc {' '.join(modules)} in {tree} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    check = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    f = importlib.import_module(name).__file__ or ''\n"
        "    assert f.endswith('.so') or f.endswith('.pyd'), f'{name} loaded from {f}'\n"
    )
    names = [m.removesuffix(".py").replace("/", ".") for m in modules]
    loaded = subprocess.run(
        [sys.executable, "-c", check, *names],
        cwd=tree,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    if loaded.returncode != 0:
        raise SystemExit(f"the compiled modules of {tree} do not load:\n{loaded.stderr[-3000:]}")
    return took


def per_word(trees: dict[str, Path]) -> dict[str, float]:
    """Instructions per word of each tree's in-process word count, all counted at once."""
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        counts = {(name, n): pool.submit(instructions, tree, n, 1) for name, tree in trees.items() for n in SIZES}
    words = words_in(SIZES[1]) - words_in(SIZES[0])
    return {name: (counts[name, SIZES[1]].result() - counts[name, SIZES[0]].result()) / words for name in trees}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revision", nargs="?", default="HEAD", help="the revision measured (default HEAD)")
    parser.add_argument("--modules", nargs="+", default=HOT_PATH, help="source files mypyc compiles")
    parser.add_argument("--rounds", type=int, default=4, help="processes per build, interleaved")
    parser.add_argument("--runs", type=int, default=5, help="word counts per process")
    parser.add_argument("--sentences", type=int, default=50_000, help="sentences per word count")
    parser.add_argument("--each", action="store_true", help="instructions per word, each module compiled alone")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rayflow-compiled-") as scratch:
        trees: dict[str, Path] = {}
        groups = [[m] for m in args.modules] if args.each else [args.modules]
        for name in ["pure", *(" ".join(g) for g in groups)]:
            (Path(scratch) / str(len(trees))).mkdir()
            trees[name] = export(args.revision, Path(scratch) / str(len(trees)))
        for group in groups:
            seconds = build(trees[" ".join(group)], group)
            print(f"mypyc {' '.join(group)}: built in {seconds:.0f} s (wall, on {os.cpu_count()} cores)", flush=True)
        figures = per_word(trees)
        print()
        for name, value in figures.items():
            ratio = value / figures["pure"]
            print(f"{value:>10,.0f} instructions per word ({ratio:.3f}x)  {name}")
        if args.each:
            return 0
        pure, compiled = trees["pure"], trees[" ".join(args.modules)]
        best: dict[Path, list[float]] = {pure: [], compiled: []}
        print()
        for round_ in range(args.rounds):
            for tree in (pure, compiled) if round_ % 2 == 0 else (compiled, pure):
                figure = cpu_per_word(tree, args.runs, args.sentences, 1)
                best[tree].append(figure[0])
                label = "pure" if tree == pure else "compiled"
                print(f"round {round_ + 1} {label}: best {figure[0]:.3f}, median {figure[1]:.3f} us/word", flush=True)
        ratios = [c / p for p, c in zip(best[pure], best[compiled], strict=True)]
        print(
            f"compiled / pure: {statistics.median(ratios):.3f}x CPU per word "
            f"(pure {statistics.median(best[pure]):.3f}, compiled {statistics.median(best[compiled]):.3f} us/word; "
            f"rounds: {', '.join(f'{r:.3f}' for r in ratios)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
