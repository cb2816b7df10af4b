"""The reliable word count at two git revisions, side by side in one run: did a change cost
speed? Not a test: run it on a quiet machine.

    python benchmarks/revisions.py BASE [HEAD] [--rounds 4] [--runs 5] [--sentences 400000]
    python benchmarks/revisions.py BASE [HEAD] --inprocess [--tasks N]     # CPU per word, no Ray
    python benchmarks/revisions.py BASE [HEAD] --instructions [--tasks N]  # under callgrind
    python benchmarks/revisions.py BASE [HEAD] --rate 15000 [--secs 10]     # latency at a fixed rate

Each revision is exported with ``git archive`` into a temporary directory (the working tree is
not touched; ``HEAD`` by default). A round starts one process per revision, the order turned
round every round, each with its own local Ray; every process runs a warm-up topology, then
``--runs`` topologies of spout -> split (shuffle) -> count (fields), one task each and one
acker, and reports words/s for each. The verdict is the ratio of the medians over all runs,
and each round's ratio of medians, so that a machine whose speed drifts shows as spread.

``--rate`` feeds each run at that many sentences a second for ``--secs`` seconds (about half
the saturated rate is what ``wordcount.py``'s latency run does) and compares the complete
latency instead: each run's p50 and p99, and their medians side by side.

``--inprocess`` runs each revision's ``benchmarks/inprocess.py`` instead (the executors and
the pickled wire without Ray; ``--runs`` runs of ``--sentences`` per process, default 50,000),
interleaved the same way, and compares CPU microseconds per word. ``--instructions`` counts
instructions per word with valgrind's callgrind (two sizes, the difference divided by the words
between them, as ``inprocess.py`` describes): deterministic, so one count per revision, and
immune to a busy machine's noise.

A revision that ships the C kernel (``setup.py``, since 53176b9) gets it built in place, as the
README's install builds it; one that cannot build it runs pure Python, as it would for a user.
Against a revision from before the kernel, that puts the kernel's gain into the comparison: set
``RAYFLOW_PURE_PYTHON=1`` (the children inherit it) to compare pure Python with pure Python.

The child processes import rayflow, ``examples/wordcount.py`` and ``benchmarks/wordcount.py``
(or ``benchmarks/inprocess.py``) from the exported tree: a revision must have them (every
revision since the word-count benchmark was written does).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULT = "RESULT "


def export(revision: str, into: Path) -> Path:
    """The tree of ``revision`` under ``into``; a ``SystemExit`` naming a revision git does not know."""
    target = into / revision.replace("/", "_")
    target.mkdir()
    archive = into / f"{target.name}.tar"
    done = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", "-o", str(archive), revision],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"git archive {revision}: {done.stderr.strip()}")
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="data")
    return target


def build_kernel(tree: Path, cflags: str = "") -> str:
    """Build the C kernel of ``tree`` in place, as ``pip install -e`` would (revisions with a
    ``setup.py``; the build is optional, so a tree that cannot build it runs pure Python, as it
    would for a user); what the build said when it failed, else ``""``. ``cflags`` are added to
    the compiler's and linker's flags (``--asan``)."""
    if not (tree / "setup.py").is_file():
        return "no setup.py"
    env = {**os.environ, "CFLAGS": cflags, "LDFLAGS": cflags} if cflags else None
    done = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace", "--force"],
        cwd=tree,
        capture_output=True,
        text=True,
        env=env,
    )
    built = [*(tree / "rayflow").glob("_speedups.*.so"), *(tree / "rayflow").glob("_speedups.*.pyd")]
    return "" if done.returncode == 0 and built else done.stderr[-2000:] or "built nothing"


def child(tree: str, runs: int, sentences: int, rate: float | None = None) -> None:
    """Run in a process of its own: the word count of the rayflow in ``tree``; with ``rate``,
    fed at that many sentences a second, reporting each run's complete latency (p50, p99)."""
    sys.path.insert(0, tree)
    os.chdir(tree)
    import rayflow
    from benchmarks.wordcount import BenchSpout, words_in
    from examples.wordcount import SplitSentence, WordCount
    from rayflow import Config, LocalCluster, TopologyBuilder

    if not str(Path(rayflow.__file__).resolve()).startswith(str(Path(tree).resolve())):
        raise SystemExit(f"imported rayflow from {rayflow.__file__}, not from {tree}")

    def once(cluster: Any, name: str, n: int) -> Any:
        builder = TopologyBuilder()
        builder.set_spout("sentences", BenchSpout(n, rate))
        builder.set_bolt("split", SplitSentence()).shuffle_grouping("sentences")
        builder.set_bolt("count", WordCount()).fields_grouping("split", ["word"])
        handle = cluster.submit_topology(name, Config.of({"ackers": 1}), builder.create_topology(), active=False)
        time.sleep(1.0)  # every task up and idle: the clock times the stream, not the start
        started = time.perf_counter()
        handle.activate()
        if not handle.wait(timeout=600, poll_secs=0.1):
            raise SystemExit(f"{name}: not done after 600 s")
        elapsed = time.perf_counter() - started
        spout = handle.metrics()["sentences"]
        handle.kill()
        if spout["acked"] != n or spout["failed"]:
            raise SystemExit(f"{name}: {spout['acked']} acked and {spout['failed']} failed of {n}")
        if rate:
            return [spout["complete_latency_ms"]["p50"], spout["complete_latency_ms"]["p99"]]
        return float(words_in(n)) / elapsed

    with LocalCluster() as cluster:
        once(cluster, "warm-up", min(sentences, 20_000))
        rates = [once(cluster, f"run-{i}", sentences) for i in range(runs)]
    print(RESULT + json.dumps(rates), flush=True)


def measure(
    tree: Path, runs: int, sentences: int, env: dict[str, str] | None = None, rate: float | None = None
) -> list[Any]:
    """Words/s of ``runs`` word counts on Ray, in a child process with ``env`` added to its own;
    with ``rate``, each run's complete latency (p50, p99) at that many sentences a second."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(tree), str(runs), str(sentences), str(rate or 0)],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **(env or {})},
    )
    for line in done.stdout.splitlines():
        if line.startswith(RESULT):
            results: list[Any] = json.loads(line[len(RESULT) :])
            return results
    raise SystemExit(f"the run of {tree.name} failed:\n{done.stderr[-3000:]}")


def cpu_per_word(tree: Path, runs: int, sentences: int, tasks: int, env: dict[str, str] | None = None) -> list[float]:
    """The in-process word count's CPU microseconds per word: the best and the median of ``runs``
    (``env`` added to the child's environment)."""
    done = subprocess.run(
        [sys.executable, "benchmarks/inprocess.py", "--runs", str(runs), "--sentences", str(sentences)]
        + ["--split", str(tasks), "--count", str(tasks)],
        capture_output=True,
        text=True,
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree), **(env or {})},
    )
    found = re.search(r"best ([\d.]+) us/word, median ([\d.]+) us/word", done.stdout)
    if found is None:
        raise SystemExit(f"the in-process run of {tree.name} failed:\n{done.stderr[-3000:]}")
    return [float(found[1]), float(found[2])]


def instructions(tree: Path, sentences: int, tasks: int, env: dict[str, str] | None = None) -> int:
    """Instructions the in-process word count of ``sentences`` takes, set-up included (callgrind;
    ``env`` added to the child's environment). The child gets ``PYTHONHASHSEED=0`` unless it is
    set: string hashes then lay dicts out alike in every run, and counts repeat (with random
    seeds one revision measured 2% apart in two runs)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    done = subprocess.run(
        [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable]
        + ["benchmarks/inprocess.py", "--runs", "1", "--sentences", str(sentences)]
        + ["--split", str(tasks), "--count", str(tasks)],
        capture_output=True,
        text=True,
        cwd=tree,
        env={"PYTHONHASHSEED": "0", **os.environ, "PYTHONPATH": str(tree), **(env or {})},
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind on {tree.name} failed:\n{done.stderr[-3000:]}")
    return int(found[1])


def compare_instructions(trees: dict[str, Path], revisions: list[str], tasks: int) -> int:
    """Instructions per word of each revision: two sizes each, all counted at once."""
    sizes = (1000, 6000)
    sys.path.insert(0, str(REPO))
    from benchmarks.wordcount import words_in

    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        counts = {(rev, n): pool.submit(instructions, trees[rev], n, tasks) for rev in revisions for n in sizes}
    words = words_in(sizes[1]) - words_in(sizes[0])
    per_word = {rev: (counts[rev, sizes[1]].result() - counts[rev, sizes[0]].result()) / words for rev in revisions}
    for rev in revisions:
        print(f"{rev:>12s}  {per_word[rev]:>10,.0f} instructions per word")
    base, head = revisions
    print(f"{head} / {base}: {per_word[head] / per_word[base]:.3f}x instructions")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the revision compared against (a commit, tag or branch)")
    parser.add_argument("head", nargs="?", default="HEAD", help="the revision measured (default HEAD)")
    parser.add_argument("--rounds", type=int, default=4, help="processes per revision, interleaved")
    parser.add_argument("--runs", type=int, default=5, help="topologies per process")
    parser.add_argument("--sentences", type=int, help="sentences per topology (400,000; in process 50,000)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--inprocess", action="store_true", help="compare the in-process CPU per word")
    mode.add_argument("--instructions", action="store_true", help="compare instructions per word (callgrind)")
    mode.add_argument("--rate", type=float, help="compare the complete latency at this many sentences/s")
    parser.add_argument("--secs", type=float, default=10.0, help="length of each run at --rate")
    parser.add_argument("--tasks", type=int, default=1, help="split and count tasks in process")
    args = parser.parse_args(argv)
    revisions = [args.base, args.head]
    with tempfile.TemporaryDirectory(prefix="rayflow-revisions-") as scratch:
        trees = {rev: export(rev, Path(scratch)) for rev in revisions}
        for tree in trees.values():
            build_kernel(tree)
        if args.instructions:
            return compare_instructions(trees, revisions, args.tasks)
        if args.inprocess:
            return compare_inprocess(trees, revisions, args.rounds, args.runs, args.sentences or 50_000, args.tasks)
        if args.rate:
            return compare_latency(trees, revisions, args.rounds, args.runs, args.rate, args.secs)
        args.sentences = args.sentences or 400_000
        rates: dict[str, list[list[float]]] = {rev: [] for rev in revisions}
        for round_ in range(args.rounds):
            for rev in revisions if round_ % 2 == 0 else reversed(revisions):
                rates[rev].append(measure(trees[rev], args.runs, args.sentences))
                print(f"round {round_ + 1} {rev}: " + ", ".join(f"{r:,.0f}" for r in rates[rev][-1]), flush=True)
    print()
    medians = {rev: statistics.median(r for process in rates[rev] for r in process) for rev in revisions}
    for rev in revisions:
        print(f"{rev:>12s}  median {medians[rev]:>10,.0f} words/s over {sum(map(len, rates[rev]))} runs")
    rounds = [
        statistics.median(head) / statistics.median(base)
        for base, head in zip(rates[args.base], rates[args.head], strict=True)
    ]
    print(
        f"{args.head} / {args.base}: {medians[args.head] / medians[args.base]:.3f}x "
        f"(rounds: {', '.join(f'{r:.3f}' for r in rounds)})"
    )
    return 0


def compare_latency(
    trees: dict[str, Path], revisions: list[str], rounds: int, runs: int, rate: float, secs: float
) -> int:
    """Each revision's complete latency at ``rate`` sentences/s, a process per revision and
    round, interleaved: every run's p50 and p99, and their medians side by side."""
    found: dict[str, list[list[float]]] = {rev: [] for rev in revisions}
    for round_ in range(rounds):
        for rev in revisions if round_ % 2 == 0 else reversed(revisions):
            each = measure(trees[rev], runs, int(rate * secs), rate=rate)
            found[rev] += each
            shown = ", ".join(f"{p50:.1f}/{p99:.1f}" for p50, p99 in each)
            print(f"round {round_ + 1} {rev}: p50/p99 {shown} ms", flush=True)
    print()
    for rev in revisions:
        p50 = statistics.median(r[0] for r in found[rev])
        p99 = statistics.median(r[1] for r in found[rev])
        print(f"{rev:>12s}  at {rate:,.0f} sentences/s: median p50 {p50:.1f} ms, median p99 {p99:.1f} ms")
    return 0


def compare_inprocess(
    trees: dict[str, Path], revisions: list[str], rounds: int, runs: int, sentences: int, tasks: int
) -> int:
    """Each revision's in-process CPU per word, a process per revision and round, interleaved."""
    best: dict[str, list[float]] = {rev: [] for rev in revisions}
    for round_ in range(rounds):
        for rev in revisions if round_ % 2 == 0 else reversed(revisions):
            figures = cpu_per_word(trees[rev], runs, sentences, tasks)
            best[rev].append(figures[0])
            print(f"round {round_ + 1} {rev}: best {figures[0]:.3f}, median {figures[1]:.3f} us/word", flush=True)
    print()
    base, head = revisions
    for rev in revisions:
        print(f"{rev:>12s}  median of the rounds' best {statistics.median(best[rev]):.3f} us/word")
    ratios = [h / b for b, h in zip(best[base], best[head], strict=True)]
    each = ", ".join(f"{r:.3f}" for r in ratios)
    print(f"{head} / {base}: {statistics.median(ratios):.3f}x CPU per word (rounds: {each})")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]) or None)
        sys.exit(0)
    sys.exit(main())
