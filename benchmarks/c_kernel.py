"""The C kernel of a BasicBolt's emit and run loop and of a spout's emit (``rayflow/_speedups.c``) against pure Python
(``RAYFLOW_PURE_PYTHON=1``), side by side in one run, on one build of one revision. Not a test:
run it on a quiet machine.

    python benchmarks/c_kernel.py [REVISION] [--rounds 4] [--runs 5] [--sentences 50000]
    python benchmarks/c_kernel.py [REVISION] --ray [--rounds 3] [--runs 3] [--sentences 300000]
    python benchmarks/c_kernel.py [REVISION] --tests    # the semantics tests on both builds
    python benchmarks/c_kernel.py [REVISION] --asan     # ... on a kernel built with AddressSanitizer
    python benchmarks/c_kernel.py [REVISION] --leaks    # memory growth per run, both builds

A revision (``HEAD`` by default) is exported with ``git archive`` into a temporary directory
and its kernel built in place, as the README's install builds it (``revisions.py``'s
``build_kernel``); the working tree is never touched. Every child process imports rayflow from
that copy, and runs the kernel or, with ``RAYFLOW_PURE_PYTHON=1``, pure Python: the same files,
the same build, one environment variable apart. A child first checks that its build loaded and
that a short word count takes the C paths (the module's counters). Then, by default:

- instructions per word of the in-process word count (``benchmarks/inprocess.py`` under
  callgrind, two sizes, as ``benchmarks/revisions.py --instructions`` counts them), each build:
  deterministic, so one count each;
- CPU microseconds per word (``inprocess.py``), a process per build and round, the order turned
  round every round; the verdict is the median of the rounds' ratios of their best runs.

``--ray`` runs the reliable word count on a local Ray instead (``revisions.py``'s child: a
process per build and round, each with its own Ray whose workers inherit the child's
environment, interleaved); the verdict is the ratio of the medians of words/s.

``--tests`` runs ``SEMANTICS_TESTS`` (``-m "not ray"``) on each build and prints the kernel's
counters over them. ``--asan`` builds the kernel with ``-fsanitize=address
-fno-omit-frame-pointer`` and runs ``SEMANTICS_TESTS`` and a word count on it, with gcc's
``libasan`` preloaded (Python itself is not instrumented), ``PYTHONMALLOC=malloc`` (so that
every Python object is a malloc block ASan watches: a reference the kernel drops once too often
frees an object early, and the next touch is a use after free) and leak detection off
(CPython's own allocations would drown it): any invalid read or write, use after free or double
free in the kernel stops the run with ASan's report. ``--leaks`` runs ``LEAK_WORDS`` words three times
in one process per build and prints, for the second and third run, what stayed allocated
after it (``sys.getallocatedblocks``, ``len(gc.get_objects())``) and how the reference counts of
``None``, ``True``, ``False``, ``0`` and ``1`` moved (not immortal on CPython 3.11: a reference the
kernel takes and never gives back shows there, or as blocks, per word).

Child processes get ``PYTHONHASHSEED=0`` unless it is set: string hashes then lay dicts out the
same in every run, so instruction counts repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: find benchmarks/

from benchmarks.revisions import build_kernel, cpu_per_word, export, instructions, measure  # noqa: E402
from benchmarks.wordcount import words_in  # noqa: E402

BUILDS = {"pure": {"RAYFLOW_PURE_PYTHON": "1"}, "kernel": {"RAYFLOW_PURE_PYTHON": ""}}
"""Each build and what its child processes get in their environment."""
SIZES = (1000, 6000)
"""Sentences of the two callgrind runs whose difference is divided by the words between them."""
CHECK_SENTENCES = 200
"""Sentences of the word count that checks a build runs what it should."""
LEAK_WORDS = 20_000
"""Words per run of ``--leaks`` (sentences enough for them)."""
SEMANTICS_TESTS = [
    "tests/test_scenarios.py",
    "tests/test_bolt_executor.py",
    "tests/test_emit.py",
    "tests/test_basic_bolt.py",
    "tests/test_spout_executor.py",
    "tests/test_emit_paths.py",
    "tests/test_random_topologies.py",
    "tests/test_state.py",
    "tests/test_exactly_once.py",
    "tests/test_tuple_subscript.py",
]
"""The in-process semantics tests of the paths the kernel replaces (``-m "not ray"``): the files
of the suite whose topologies reach it (its counters move; ``test_ack_ledger``, ``test_router``
and ``test_chaining`` do not, in process; ``test_exactly_once`` reaches the spout's emit, with its
exactly-once record). ``tests/test_kernel.py`` runs
them on the build the suite did not load."""

_CHECK = """
import json, runpy, sys
from pathlib import Path

from rayflow._executors import kernel

tree = Path.cwd().resolve()
want = sys.argv[1]
assert (kernel.KERNEL is not None) == (want == "kernel"), kernel.BUILD
if kernel.KERNEL is not None:
    assert Path(kernel.KERNEL.__file__).resolve().is_relative_to(tree), kernel.KERNEL.__file__
sys.argv = ["inprocess.py", "--runs", "1", "--sentences", sys.argv[2]]
try:
    runpy.run_path("benchmarks/inprocess.py", run_name="__main__")  # asserts every sentence acked
except SystemExit as end:
    if end.code:
        raise
print("COUNTERS " + json.dumps(kernel.KERNEL.counters() if kernel.KERNEL is not None else {}))
"""

_TESTS = """
import json, sys

import pytest
from rayflow._executors import kernel

code = pytest.main(["-q", "-p", "no:cacheprovider", "-m", "not ray", *sys.argv[1:]])
print("BUILD " + kernel.BUILD)
print("COUNTERS " + json.dumps(kernel.KERNEL.counters() if kernel.KERNEL is not None else {}))
sys.exit(code)
"""

_LEAKS = """
import gc, json, sys

sys.path.insert(0, ".")
from benchmarks.inprocess import Run
from rayflow._executors import kernel

sentences = int(sys.argv[1])
watched = {"None": None, "True": True, "False": False, "0": 0, "1": 1}


def state():
    gc.collect()
    return sys.getallocatedblocks(), len(gc.get_objects()), {k: sys.getrefcount(v) for k, v in watched.items()}


def once():
    run = Run(sentences, 1, 1, {"max_spout_pending": 4000})
    run.run()
    assert run.spouts[0].spout.acked == sentences


growth = []
before = state()
for _ in range(3):
    once()
    after = state()
    growth.append([after[0] - before[0], after[1] - before[1], {k: after[2][k] - before[2][k] for k in watched}])
    before = after
print("LEAKS " + json.dumps({"build": kernel.BUILD, "growth": growth}))
"""


def _env(tree: Path, build: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree), **BUILDS[build]}


def _line(stdout: str, tag: str) -> str | None:
    for line in stdout.splitlines():
        if line.startswith(tag + " "):
            return line.removeprefix(tag + " ")
    return None


def check(
    tree: Path, build: str, sentences: int = CHECK_SENTENCES, env: dict[str, str] | None = None
) -> dict[str, int]:
    """In a child process: ``build`` loads from ``tree`` and a word count of ``sentences`` acks
    every sentence, on the kernel through its C paths; the kernel's counters (``{}`` on pure)."""
    done = subprocess.run(
        [sys.executable, "-c", _CHECK, build, str(sentences)],
        cwd=tree,
        capture_output=True,
        text=True,
        env={**_env(tree, build), **(env or {})},
    )
    found = _line(done.stdout, "COUNTERS")
    if done.returncode != 0 or found is None:
        raise SystemExit(f"the {build} build of {tree} does not load or run:\n{done.stderr[-3000:]}")
    counters: dict[str, int] = json.loads(found)
    if build == "kernel" and not (counters["emit_fast"] and counters["run_inline"]):
        raise SystemExit(f"the word count of {tree} did not take the C paths: {counters}")
    return counters


def per_word(tree: Path) -> dict[str, float]:
    """Instructions per word of the in-process word count on each build, all counted at once."""
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        counts = {(build, n): pool.submit(instructions, tree, n, 1, BUILDS[build]) for build in BUILDS for n in SIZES}
    words = words_in(SIZES[1]) - words_in(SIZES[0])
    return {build: (counts[build, SIZES[1]].result() - counts[build, SIZES[0]].result()) / words for build in BUILDS}


def run_tests(tree: Path, build: str, env: dict[str, str] | None = None) -> int:
    """``SEMANTICS_TESTS`` on ``build`` from ``tree``, Ray's left out; pytest's exit code."""
    done = subprocess.run(
        [sys.executable, "-c", _TESTS, *SEMANTICS_TESTS],
        cwd=tree,
        capture_output=True,
        text=True,
        env={**_env(tree, build), **(env or {})},
    )
    lines = [line for line in done.stdout.splitlines() if not line.startswith(("COUNTERS ", "BUILD "))]
    print(f"-- {_line(done.stdout, 'BUILD')}: " + (lines[-1] if lines else "no output"))
    print(f"   kernel counters over the tests: {_line(done.stdout, 'COUNTERS')}")
    if done.returncode != 0:
        print("\n".join(lines[-40:]))
        print(done.stderr[-6000:], file=sys.stderr)
    return done.returncode


def asan(tree: Path) -> int:
    """The kernel built with AddressSanitizer, the semantics tests and a word count on it."""
    flags = "-fsanitize=address -fno-omit-frame-pointer -g -O1"
    failed = build_kernel(tree, flags)
    if failed:
        raise SystemExit(f"building the kernel with ASan failed:\n{failed}")
    libasan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not Path(libasan).is_file():
        raise SystemExit(f"no libasan.so from gcc ({libasan!r}): apt-get install gcc")
    (built,) = (tree / "rayflow").glob("_speedups.*.so")
    if b"__asan_" not in built.read_bytes():
        raise SystemExit(f"{built} is not instrumented: the build ignored CFLAGS")
    env = {"LD_PRELOAD": libasan, "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1", "PYTHONMALLOC": "malloc"}
    print(f"kernel built with {flags}; LD_PRELOAD={libasan}, PYTHONMALLOC=malloc", flush=True)
    counters = check(tree, "kernel", 3000, env)
    print(f"3000 sentences under ASan, every one acked: {counters}", flush=True)
    return run_tests(tree, "kernel", env)


def leaks(tree: Path) -> None:
    """What stays allocated per run of ``LEAK_WORDS`` words, each build in a process of its own."""
    sentences = next(n for n in range(LEAK_WORDS // 8, LEAK_WORDS) if words_in(n) >= LEAK_WORDS)
    for build in BUILDS:
        done = subprocess.run(
            [sys.executable, "-c", _LEAKS, str(sentences)],
            cwd=tree,
            capture_output=True,
            text=True,
            env=_env(tree, build),
        )
        found = _line(done.stdout, "LEAKS")
        if done.returncode != 0 or found is None:
            raise SystemExit(f"--leaks on {build} failed:\n{done.stderr[-3000:]}")
        report = json.loads(found)
        print(f"{report['build']}, {words_in(sentences):,} words a run:")
        for i, (blocks, objects, refs) in enumerate(report["growth"]):
            print(f"  after run {i + 1}: {blocks:+,} blocks, {objects:+,} gc objects, refcounts {refs}")


def cpu_rounds(tree: Path, rounds: int, runs: int, sentences: int) -> None:
    """CPU per word, a process per build and round, the order turned round every round."""
    best: dict[str, list[float]] = {build: [] for build in BUILDS}
    names = list(BUILDS)
    for round_ in range(rounds):
        for build in names if round_ % 2 == 0 else reversed(names):
            figure = cpu_per_word(tree, runs, sentences, 1, BUILDS[build])
            best[build].append(figure[0])
            print(f"round {round_ + 1} {build}: best {figure[0]:.3f}, median {figure[1]:.3f} us/word", flush=True)
    ratios = [k / p for p, k in zip(best["pure"], best["kernel"], strict=True)]
    print(
        f"kernel / pure: {statistics.median(ratios):.3f}x CPU per word "
        f"(pure {statistics.median(best['pure']):.3f}, kernel {statistics.median(best['kernel']):.3f} us/word; "
        f"rounds: {', '.join(f'{r:.3f}' for r in ratios)})"
    )


def ray_rounds(tree: Path, rounds: int, runs: int, sentences: int) -> None:
    """Words/s of the reliable word count on Ray, a process (and a Ray) per build and round."""
    rates: dict[str, list[list[float]]] = {build: [] for build in BUILDS}
    names = list(BUILDS)
    for round_ in range(rounds):
        for build in names if round_ % 2 == 0 else reversed(names):
            rates[build].append(measure(tree, runs, sentences, BUILDS[build]))
            print(f"round {round_ + 1} {build}: " + ", ".join(f"{r:,.0f}" for r in rates[build][-1]), flush=True)
    medians = {build: statistics.median(r for process in rates[build] for r in process) for build in names}
    per_round = [
        statistics.median(k) / statistics.median(p) for p, k in zip(rates["pure"], rates["kernel"], strict=True)
    ]
    print(
        f"kernel / pure on Ray: {medians['kernel'] / medians['pure']:.3f}x words/s "
        f"(pure {medians['pure']:,.0f}, kernel {medians['kernel']:,.0f}; "
        f"rounds: {', '.join(f'{r:.3f}' for r in per_round)})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revision", nargs="?", default="HEAD", help="the revision measured (default HEAD)")
    parser.add_argument("--rounds", type=int, help="processes per build, interleaved (4; --ray 3; 0: none)")
    parser.add_argument("--runs", type=int, help="word counts per process (5; --ray 3)")
    parser.add_argument("--sentences", type=int, help="sentences per word count (50,000; --ray 300,000)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--ray", action="store_true", help="words/s on a local Ray instead of in process")
    mode.add_argument("--tests", action="store_true", help="run the semantics tests on both builds instead")
    mode.add_argument("--asan", action="store_true", help="... on a kernel built with AddressSanitizer")
    mode.add_argument("--leaks", action="store_true", help="memory left after each run, both builds")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    with tempfile.TemporaryDirectory(prefix="rayflow-c-kernel-") as scratch:
        tree = export(args.revision, Path(scratch))
        if args.asan:
            return asan(tree)
        failed = build_kernel(tree)
        if failed:
            raise SystemExit(f"the kernel of {args.revision} does not build here:\n{failed}")
        for build in BUILDS:
            print(f"{build}: {CHECK_SENTENCES} sentences, every one acked; counters {check(tree, build)}", flush=True)
        if args.tests:
            return max(run_tests(tree, build) for build in BUILDS)
        if args.leaks:
            leaks(tree)
            return 0
        if args.ray:
            ray_rounds(tree, args.rounds or 3, args.runs or 3, args.sentences or 300_000)
            return 0
        figures = per_word(tree)
        print()
        for build, value in figures.items():
            print(f"{value:>10,.0f} instructions per word ({value / figures['pure']:.3f}x)  {build}")
        rounds = 4 if args.rounds is None else args.rounds
        if rounds:
            print()
            cpu_rounds(tree, rounds, args.runs or 5, args.sentences or 50_000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
