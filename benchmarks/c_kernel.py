"""A hand-written C kernel for a BasicBolt's emit and run loop against pure Python, side by side
in one run: would C written by hand pay where mypyc did not? Not a test, and not shipped: run it
on a quiet machine.

    python benchmarks/c_kernel.py [REVISION] [--kernels emit both] [--rounds 4] [--runs 5] [--sentences 50000]
    python benchmarks/c_kernel.py [REVISION] --tests    # the in-process semantics tests on a kernel build

The kernel is ``benchmarks/c_kernel/speedups.c`` (its header says what it does). A revision
(``HEAD`` by default) is exported with ``git archive`` into a temporary directory once for pure
Python and once per kernel build (the working tree is never touched: no extension module ever
lands beside a source file someone is editing). In a kernel copy the C file becomes
``rayflow/_speedups.c``, ``PATCHES`` wire it in -- after ``BoltExecutor.wire_input_emits`` the
input collector's ``emit`` is the C ``EmitKernel``, falling back to ``emit_input``, and with
``both`` kernels ``BasicBoltAdapter.run_inline`` is the C loop -- and setuptools builds it in
place (``build_ext --inplace``). A child process then checks that ``rayflow._speedups`` loads
from the copy and that a short word count takes the C paths (the module's counters). Then:

- instructions per word of the in-process word count (``benchmarks/inprocess.py`` under
  callgrind, two sizes, as ``benchmarks/revisions.py --instructions`` counts them), each build:
  deterministic, so one count each;
- CPU microseconds per word (``inprocess.py``), a process per build and round, the order turned
  round every round; the verdict per kernel build is the median of the rounds' ratios of their
  best runs against pure.

``--tests`` builds the ``both`` kernels only and runs ``SEMANTICS_TESTS`` (not the Ray ones)
from that copy, printing pytest's summary and the counters: the kernels must keep what the
Python paths promise, and the counters show the C paths were taken.

Child processes get ``PYTHONHASHSEED=0`` unless it is set: string hashes then lay dicts out the
same in every run, so instruction counts repeat. A ``PATCHES`` entry that no longer applies
stops the run, naming its file: the wiring follows the Python it replaces, which may have moved.
"""

from __future__ import annotations

import argparse
import json
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

SOURCE = Path(__file__).resolve().parent / "c_kernel" / "speedups.c"
"""The kernel's C source, copied into a kernel build as ``MODULE_SOURCE``."""
MODULE_SOURCE = "rayflow/_speedups.c"
KERNELS = {"emit": "emit kernel", "both": "both kernels"}
"""The kernel builds and their labels: the collector's emit in C alone, or the emit and
``run_inline``."""
KERNELS_LINE = 'KERNELS = "both"'
"""The line of the wiring that names the build's kernels (``patch`` rewrites it for ``emit``)."""

_LOADER = f'''
# -- The C kernel experiment (benchmarks/c_kernel.py wrote this into an exported copy) ---------
import os as _os

from .. import _speedups
from .._outbox import AckerMail, DataBatch
from .._router import Route
from .._tuple import DEFAULT_STREAM

{KERNELS_LINE}
"""Which C kernels this copy runs: "emit" (the input collector's emit) or "both" (and run_inline)."""
_speedups.setup(Tuple, TupleSource, DataBatch, Route, AckerMail, _os.urandom(32))


def kernel_emit(task: BoltExecutor, collector: BasicOutputCollector) -> Any:
    """The input collector's emit in C; anything off its fast path goes to ``task.emit_input``."""
    return _speedups.EmitKernel(task, collector, task.emit_input, DEFAULT_STREAM)

'''

_RUN_INLINE_C = '''    def _run_inline_c(
        self, column: list[Any], trees: Iterator[int], source: TupleSource, joined: list[Any]
    ) -> int:
        """``run_inline`` by the C kernel: one Python frame per stream segment."""
        task = self._task
        return _speedups.run_inline(  # type: ignore[no-any-return]
            task,
            self.user_component.execute,
            self.basic_collector,
            task.outbox.acker_mails,
            column,
            trees,
            source,
            joined,
            self._execute_raised,
        )

    def _execute_raised(self, tup: Tuple, exc: Exception) -> None:
        """What ``run_inline`` does when ``execute`` raises (called back by the C loop)."""
        if not isinstance(exc, FailedException):
            self._task.report_error(exc, f"execute raised on {tup!r}")
        self._task.fail(tup)

    def run_inline(self, column: list[Any], trees: Iterator[int], source: TupleSource, joined: list[Any]) -> int:
'''

PATCHES: dict[str, list[tuple[str, str]]] = {
    "rayflow/_executors/basic_bolt.py": [
        # the module loaded and set up at import (its slot offsets), and the emit kernel's maker
        (
            "from .bolt_kind import BoltKind\n",
            "from .bolt_kind import BoltKind\n" + _LOADER,
        ),
        # run_inline in C, when both kernels run
        (
            "        task.wire_input_emits()\n",
            "        task.wire_input_emits()\n"
            '        if KERNELS == "both":\n'
            "            self.run_inline = self._run_inline_c  # type: ignore[method-assign]\n",
        ),
        (
            "    def run_inline(self, column: list[Any], trees: Iterator[int], source: TupleSource,"
            " joined: list[Any]) -> int:\n",
            _RUN_INLINE_C,
        ),
    ],
    "rayflow/_executors/bolt.py": [
        # after the Python emits are bound (at wiring, and again when an observer comes or goes),
        # the collector's emit is the C kernel
        (
            "            collector.emit = self.emit_input  # type: ignore[method-assign]\n\n"
            "    def _watch_changed(self) -> None:\n",
            "            collector.emit = self.emit_input  # type: ignore[method-assign]\n"
            "        from .basic_bolt import kernel_emit  # the C kernel experiment\n\n"
            "        collector.emit = kernel_emit(self, collector)  # type: ignore[method-assign]\n\n"
            "    def _watch_changed(self) -> None:\n",
        ),
    ],
}
SIZES = (1000, 6000)
"""Sentences of the two callgrind runs whose difference is divided by the words between them."""
CHECK_SENTENCES = 200
"""Sentences of the word count that checks a build takes the C paths."""
SEMANTICS_TESTS = [
    "tests/test_ack_ledger.py",
    "tests/test_scenarios.py",
    "tests/test_bolt_executor.py",
    "tests/test_router.py",
    "tests/test_emit.py",
    "tests/test_basic_bolt.py",
    "tests/test_spout_executor.py",
    "tests/test_emit_paths.py",
    "tests/test_exactly_once.py",
    "tests/test_chaining.py",
]
"""What ``--tests`` runs on a kernel build (``-m "not ray"``): the in-process semantics of the
emit and ack paths the kernels replace."""

_BUILD = """
import sys
from setuptools import Distribution, Extension

# A bare Distribution: setup() would read the copy's pyproject.toml and build the project too.
extension = Extension("rayflow._speedups", [sys.argv[1]], extra_compile_args=["-O2", "-Wall"])
dist = Distribution({"name": "rayflow-c-kernel", "ext_modules": [extension]})
command = dist.get_command_obj("build_ext")
command.inplace = True
dist.run_command("build_ext")
"""

_CHECK = """
import json, runpy, sys
from pathlib import Path

import rayflow._speedups as speedups
from rayflow._executors import basic_bolt

tree = Path.cwd().resolve()
assert Path(speedups.__file__).resolve().is_relative_to(tree), f"rayflow._speedups from {speedups.__file__}"
assert basic_bolt.KERNELS == sys.argv[1], basic_bolt.KERNELS
sys.argv = ["inprocess.py", "--runs", "1", "--sentences", sys.argv[2]]
try:
    runpy.run_path("benchmarks/inprocess.py", run_name="__main__")  # asserts every sentence acked
except SystemExit as end:
    if end.code:
        raise
print("COUNTERS " + json.dumps(speedups.counters()))
"""

_TESTS = """
import json, sys

import pytest
import rayflow._speedups as speedups

code = pytest.main(["-q", "-p", "no:cacheprovider", "-m", "not ray", *sys.argv[1:]])
print("COUNTERS " + json.dumps(speedups.counters()))
sys.exit(code)
"""


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def patch(tree: Path, kernels: str = "both") -> None:
    """Copy the kernel into ``tree`` and apply ``PATCHES`` there, for ``kernels`` (one of
    ``KERNELS``); ``SystemExit`` naming the file if a patch no longer applies."""
    if kernels not in KERNELS:
        raise ValueError(f"kernels: one of {', '.join(KERNELS)}, not {kernels!r}")
    for module, patches in PATCHES.items():
        path = tree / module
        text = path.read_text(encoding="utf-8")
        for old, new in patches:
            if old not in text:
                raise SystemExit(f"benchmarks/c_kernel.py PATCHES: {module} no longer contains {old!r}")
            text = text.replace(old, new, 1)
        text = text.replace(KERNELS_LINE, f'KERNELS = "{kernels}"', 1)
        path.write_text(text, encoding="utf-8")
    (tree / MODULE_SOURCE).write_text(SOURCE.read_text(encoding="utf-8"), encoding="utf-8")


def build(tree: Path, kernels: str = "both") -> float:
    """Patch ``tree`` and build the kernel in place; the wall-clock seconds the build took."""
    patch(tree, kernels)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _BUILD, MODULE_SOURCE], cwd=tree, capture_output=True, text=True, env=_env(tree)
    )
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"building the C kernel in {tree} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return took


def check(tree: Path, kernels: str, sentences: int = CHECK_SENTENCES) -> dict[str, int]:
    """In a child process: ``rayflow._speedups`` loads from ``tree``, which runs ``kernels``, and
    a word count of ``sentences`` acks every sentence through the C paths; its counters."""
    done = subprocess.run(
        [sys.executable, "-c", _CHECK, kernels, str(sentences)],
        cwd=tree,
        capture_output=True,
        text=True,
        env=_env(tree),
    )
    counters = _counters(done.stdout)
    if done.returncode != 0 or counters is None:
        raise SystemExit(f"the C kernel of {tree} does not load or run:\n{done.stderr[-3000:]}")
    if not counters["emit_fast"] or (kernels == "both") != bool(counters["run_inline"]):
        raise SystemExit(f"the word count of {tree} did not take the C paths it should: {counters}")
    return counters


def _counters(stdout: str) -> dict[str, int] | None:
    for line in stdout.splitlines():
        if line.startswith("COUNTERS "):
            found: dict[str, int] = json.loads(line.removeprefix("COUNTERS "))
            return found
    return None


def per_word(trees: dict[str, Path]) -> dict[str, float]:
    """Instructions per word of each tree's in-process word count, all counted at once."""
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        counts = {(name, n): pool.submit(instructions, tree, n, 1) for name, tree in trees.items() for n in SIZES}
    words = words_in(SIZES[1]) - words_in(SIZES[0])
    return {name: (counts[name, SIZES[1]].result() - counts[name, SIZES[0]].result()) / words for name in trees}


def run_tests(tree: Path) -> int:
    """``SEMANTICS_TESTS`` from ``tree`` (a ``both`` build), Ray's left out; pytest's exit code."""
    done = subprocess.run(
        [sys.executable, "-c", _TESTS, *SEMANTICS_TESTS], cwd=tree, capture_output=True, text=True, env=_env(tree)
    )
    lines = [line for line in done.stdout.splitlines() if not line.startswith("COUNTERS ")]
    print("\n".join(lines[-15:]))
    print(f"C kernel counters over the tests: {_counters(done.stdout)}")
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
    return done.returncode


def cpu_rounds(trees: dict[str, Path], rounds: int, runs: int, sentences: int) -> None:
    """CPU per word, a process per build and round, the order turned round every round."""
    best: dict[str, list[float]] = {name: [] for name in trees}
    names = list(trees)
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else reversed(names):
            figure = cpu_per_word(trees[name], runs, sentences, 1)
            best[name].append(figure[0])
            print(f"round {round_ + 1} {name}: best {figure[0]:.3f}, median {figure[1]:.3f} us/word", flush=True)
    for name in names[1:]:
        ratios = [k / p for p, k in zip(best["pure"], best[name], strict=True)]
        print(
            f"{name} / pure: {statistics.median(ratios):.3f}x CPU per word "
            f"(pure {statistics.median(best['pure']):.3f}, {name} {statistics.median(best[name]):.3f} us/word; "
            f"rounds: {', '.join(f'{r:.3f}' for r in ratios)})"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revision", nargs="?", default="HEAD", help="the revision measured (default HEAD)")
    parser.add_argument("--kernels", nargs="+", choices=KERNELS, default=["both"], help="the kernel builds measured")
    parser.add_argument("--rounds", type=int, default=4, help="processes per build, interleaved (0: none)")
    parser.add_argument("--runs", type=int, default=5, help="word counts per process")
    parser.add_argument("--sentences", type=int, default=50_000, help="sentences per word count")
    parser.add_argument("--tests", action="store_true", help="run the semantics tests on a 'both' build instead")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    kernels: list[str] = ["both"] if args.tests else list(dict.fromkeys(args.kernels))
    with tempfile.TemporaryDirectory(prefix="rayflow-c-kernel-") as scratch:
        trees: dict[str, Path] = {}
        for name in ([] if args.tests else ["pure"]) + [KERNELS[k] for k in kernels]:
            (Path(scratch) / str(len(trees))).mkdir()
            trees[name] = export(args.revision, Path(scratch) / str(len(trees)))
        for which in kernels:
            seconds = build(trees[KERNELS[which]], which)
            counters = check(trees[KERNELS[which]], which)
            print(f"{KERNELS[which]}: built in {seconds:.1f} s; {CHECK_SENTENCES} sentences: {counters}", flush=True)
        if args.tests:
            return run_tests(trees[KERNELS["both"]])
        figures = per_word(trees)
        print()
        for name, value in figures.items():
            print(f"{value:>10,.0f} instructions per word ({value / figures['pure']:.3f}x)  {name}")
        if args.rounds:
            print()
            cpu_rounds(trees, args.rounds, args.runs, args.sentences)
    return 0


if __name__ == "__main__":
    sys.exit(main())
