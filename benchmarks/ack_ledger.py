"""The acker's ledger in C (``rayflow/_acking/_ledger.c``) against the Python one
(``rayflow/_acking/ledger.py``), side by side in one run. Not a test: run it on a quiet machine.

    python benchmarks/ack_ledger.py [--rounds 6] [--trees 200000] [--payload 500]   # CPU us per tree
    python benchmarks/ack_ledger.py --instructions     # ... as instructions per tree (callgrind)
    python benchmarks/ack_ledger.py --wordcount [--rounds 4] [--sentences 50000]  # in-process word count
    python benchmarks/ack_ledger.py --memory [--trees 1000000]  # bytes per pending tree
    python benchmarks/ack_ledger.py --asan             # the ledger tests on a ledger built with ASan
    python benchmarks/ack_ledger.py --leaks            # memory left after many payloads, C ledger

Both ledgers run in one process, picked by class (``ledger_build.load({})`` for the C one,
``ledger.AckLedger`` for the Python one), never by ``RAYFLOW_PURE_PYTHON``: the C kernel of the
executors stays as loaded, so every figure is the ledger's own lever.

The default is ``AckLedger.apply`` on the word count's acker traffic: payloads of ``--payload``
new trees from one spout task (an array of root, checksum pairs, as ``AckerMail.take`` sends
them), then the count's acks that settle them, one payload per spout payload, a tree's edges
split over two acks in consecutive ack payloads for a third of the trees (the chained word count
sends its acker 2.3 messages per tree). The figure is CPU microseconds (``time.process_time``)
per tree, best of ``--runs`` per round, both ledgers every round, the order turned round every
round; the verdict is the median of the rounds' ratios. ``--instructions`` counts the same
traffic under valgrind's callgrind, two sizes per ledger, the difference divided by the trees
between them: deterministic, and immune to a busy machine.

``--wordcount`` runs ``benchmarks/inprocess.py``'s word count (the executors and the pickled
wire, no Ray) in a process per ledger and round, interleaved, the acker's ledger class swapped
in the child before the topology is built; CPU microseconds per word, and with
``--instructions`` instructions per word (callgrind, 1,000 and 6,000 sentences).

``--memory`` opens ``--trees`` trees and leaves them pending in one ledger of each kind, and
prints the growth per tree that ``tracemalloc`` sees (the C ledger allocates through PyMem, which
it traces). ``--asan`` exports ``HEAD``, builds its extensions with ``-fsanitize=address`` and
runs ``tests/test_ack_ledger.py`` and ``tests/test_ack_ledger_builds.py`` on them with gcc's
``libasan`` preloaded and ``PYTHONMALLOC=malloc`` (as ``c_kernel.py --asan``): a reference
dropped once too often frees an object early and the next touch stops the run. ``--leaks``
runs rounds of payloads, one-message calls, rotations and refused arguments through the C
ledger and prints what stayed allocated after each round (blocks, gc objects, the reference
counts of ``None``, ``True`` and ``False``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: find benchmarks/

from rayflow._acking import ledger as python_ledger  # noqa: E402
from rayflow._acking.anchoring import ID_TYPECODE  # noqa: E402
from rayflow._acking.ledger_build import LedgerClass, load  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SPOUT_TASK, COUNT_TASK = 1, 3
LEDGER_TESTS = ["tests/test_ack_ledger.py", "tests/test_ack_ledger_builds.py"]
TRAFFIC_SIZES = (20_000, 120_000)
"""Trees of the two callgrind runs of ``--instructions``."""
WORDCOUNT_SIZES = (1000, 6000)
"""Sentences of the two callgrind runs of ``--wordcount --instructions``."""


def ledgers() -> dict[str, LedgerClass]:
    c_ledger, build = load({})
    if c_ledger is python_ledger.AckLedger:
        raise SystemExit(f"the C ledger is not there: {build} (python setup.py -q build_ext --inplace)")
    return {"python": python_ledger.AckLedger, "c": c_ledger}


Traffic = list[tuple[int, "array[int]", "array[int]"]]
"""(sender, inits, acks) per payload, in delivery order."""


def traffic(trees: int, payload: int, seed: int = 1) -> Traffic:
    """The word count's acker traffic for ``trees`` trees: a spout payload of ``payload`` inits,
    then an ack payload from the count; a third of the trees get their last ack one ack payload
    later (their words went out in the next batch)."""
    rng = random.Random(seed)
    bits = rng.getrandbits
    sent: Traffic = []
    late: list[int] = []
    for start in range(0, trees, payload):
        inits: list[int] = []
        acks: list[int] = late
        late = []
        for _ in range(min(payload, trees - start)):
            root, first, second = bits(64) | 1, bits(64), bits(64)
            inits += [root, first ^ second]
            if rng.random() < 1 / 3:
                acks += [root, first]
                late += [root, second]
            else:
                acks += [root, first ^ second]
        sent.append((SPOUT_TASK, array(ID_TYPECODE, inits), array(ID_TYPECODE, [])))
        sent.append((COUNT_TASK, array(ID_TYPECODE, []), array(ID_TYPECODE, acks)))
    sent.append((COUNT_TASK, array(ID_TYPECODE, []), array(ID_TYPECODE, late)))
    return sent


def replay(ledger_type: LedgerClass, sent: Traffic) -> float:
    """CPU seconds ``apply`` takes over ``sent`` in a new ledger; every tree must settle."""
    ledger = ledger_type()
    apply = ledger.apply
    no_fails: list[int] = []
    settled = 0
    start = time.process_time()
    for sender, inits, acks in sent:
        for acked, _failed in apply(sender, inits, acks, no_fails).values():
            settled += len(acked)
    took = time.process_time() - start
    assert len(ledger) == 0 and settled == sum(len(inits) for _, inits, _ in sent) // 2, (len(ledger), settled)
    return took


def micro(rounds: int, runs: int, trees: int, payload: int) -> None:
    sent = traffic(trees, payload)
    kinds = ledgers()
    messages = sum(len(i) + len(a) for _, i, a in sent) // 2
    print(f"apply on {trees:,} trees, {payload} a payload, {messages / trees:.2f} messages a tree")
    best: dict[str, list[float]] = {name: [] for name in kinds}
    names = list(kinds)
    gc.disable()
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else reversed(names):
            best[name].append(min(replay(kinds[name], sent) for _ in range(runs)) / trees * 1e6)
        print(f"round {round_ + 1}: python {best['python'][-1]:.3f}, c {best['c'][-1]:.3f} us/tree", flush=True)
    gc.enable()
    ratios = [c / p for p, c in zip(best["python"], best["c"], strict=True)]
    print(
        f"c / python: {statistics.median(ratios):.3f}x CPU per tree (python {statistics.median(best['python']):.3f}, "
        f"c {statistics.median(best['c']):.3f} us/tree; rounds: {', '.join(f'{r:.3f}' for r in ratios)})"
    )


def callgrind(args: list[str], env: dict[str, str] | None = None, cwd: Path = REPO) -> int:
    """Instructions of ``python args`` under callgrind."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    done = subprocess.run(
        [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONHASHSEED": "0", **(env or {})},
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind {args} failed:\n{done.stderr[-3000:]}")
    return int(found[1])


def micro_instructions(payload: int) -> None:
    """Instructions per tree of ``apply`` on each ledger: each child makes the traffic and replays
    it; a third child only makes it, and its count is taken off the others'."""
    from concurrent.futures import ThreadPoolExecutor

    script = str(Path(__file__).resolve())
    kinds = ("none", "python", "c")
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        counts = {
            (kind, n): pool.submit(callgrind, [script, "--child-replay", kind, str(n), str(payload)])
            for kind in kinds
            for n in TRAFFIC_SIZES
        }
    trees = TRAFFIC_SIZES[1] - TRAFFIC_SIZES[0]
    per = {
        kind: (counts[kind, TRAFFIC_SIZES[1]].result() - counts[kind, TRAFFIC_SIZES[0]].result()) / trees
        for kind in kinds
    }
    apply = {kind: per[kind] - per["none"] for kind in ("python", "c")}
    for kind, value in apply.items():
        print(f"{value:>10,.0f} instructions per tree ({value / apply['python']:.3f}x)  {kind} ledger, apply")
    print(f"({per['none']:,.0f} instructions per tree to make the traffic, taken off both)")


_WORDCOUNT = """
import json, sys, time
sys.path.insert(0, ".")
from rayflow._acking import executor, ledger, ledger_build
from rayflow._executors import kernel

kind, runs, sentences = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
executor.AckLedger = ledger.AckLedger if kind == "python" else ledger_build.load({})[0]
assert (executor.AckLedger is ledger.AckLedger) == (kind == "python")
from benchmarks.inprocess import Run, words_in

figures = []
for _ in range(runs):
    run = Run(sentences, 1, 1, {})
    start = time.process_time()
    run.run()
    figures.append((time.process_time() - start) / words_in(sentences) * 1e6)
    assert run.spouts[0].spout.acked == sentences
    assert all(e.ledger.__class__ is executor.AckLedger for e in run.executors.values() if e.kind == "acker")
print("FIGURES " + json.dumps({"kernel": kernel.BUILD, "us": figures}))
"""


def wordcount(rounds: int, runs: int, sentences: int) -> None:
    """CPU per word of the in-process word count, a process per ledger and round."""
    best: dict[str, list[float]] = {"python": [], "c": []}
    names = list(best)
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else reversed(names):
            done = subprocess.run(
                [sys.executable, "-c", _WORDCOUNT, name, str(runs), str(sentences)],
                capture_output=True,
                text=True,
                cwd=REPO,
            )
            line = next((x for x in done.stdout.splitlines() if x.startswith("FIGURES ")), None)
            if done.returncode or line is None:
                raise SystemExit(f"the word count on the {name} ledger failed:\n{done.stderr[-3000:]}")
            found = json.loads(line.removeprefix("FIGURES "))
            best[name].append(min(found["us"]))
            print(
                f"round {round_ + 1} {name} ledger ({found['kernel']}): best {best[name][-1]:.3f} us/word", flush=True
            )
    ratios = [c / p for p, c in zip(best["python"], best["c"], strict=True)]
    print(
        f"c / python ledger: {statistics.median(ratios):.3f}x CPU per word "
        f"(python {statistics.median(best['python']):.3f}, c {statistics.median(best['c']):.3f} us/word; "
        f"rounds: {', '.join(f'{r:.3f}' for r in ratios)})"
    )


def wordcount_instructions() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from benchmarks.inprocess import words_in

    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        counts = {
            (name, n): pool.submit(callgrind, ["-c", _WORDCOUNT, name, "1", str(n)])
            for name in ("python", "c")
            for n in WORDCOUNT_SIZES
        }
    words = words_in(WORDCOUNT_SIZES[1]) - words_in(WORDCOUNT_SIZES[0])
    per = {
        name: (counts[name, WORDCOUNT_SIZES[1]].result() - counts[name, WORDCOUNT_SIZES[0]].result()) / words
        for name in ("python", "c")
    }
    for name, value in per.items():
        print(f"{value:>10,.0f} instructions per word ({value / per['python']:.3f}x)  word count, {name} ledger")


def memory(trees: int) -> None:
    """Bytes per pending tree of each ledger (tracemalloc), ``trees`` trees in one ledger."""
    for name, ledger_type in ledgers().items():
        gc.collect()
        tracemalloc.start()
        ledger = ledger_type()
        base = tracemalloc.get_traced_memory()[0]
        bits = random.Random(1).getrandbits
        for i in range(0, trees, 500):
            inits = array(ID_TYPECODE, [x for _ in range(min(500, trees - i)) for x in (bits(64) | 1, bits(64) | 1)])
            ledger.apply(SPOUT_TASK, inits, [], [])
        grown = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        assert len(ledger) == trees
        print(
            f"{name} ledger, {trees:,} pending trees: {grown / trees:.1f} bytes/tree "
            f"(table of {ledger.capacity:,} slots)"
        )
        del ledger


def asan() -> int:
    """The ledger tests on extensions built with AddressSanitizer, in an export of ``HEAD``."""
    from benchmarks.revisions import build_kernel, export

    flags = "-fsanitize=address -fno-omit-frame-pointer -g -O1"
    libasan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not Path(libasan).is_file():
        raise SystemExit(f"no libasan.so from gcc ({libasan!r}): apt-get install gcc")
    with tempfile.TemporaryDirectory(prefix="rayflow-ledger-asan-") as scratch:
        tree = export("HEAD", Path(scratch))
        failed = build_kernel(tree, flags)
        if failed:
            raise SystemExit(f"building with ASan failed:\n{failed}")
        (built,) = (tree / "rayflow" / "_acking").glob("_ledger_kernel.*.so")
        if b"__asan_" not in built.read_bytes():
            raise SystemExit(f"{built} is not instrumented: the build ignored CFLAGS")
        env = {
            **os.environ,
            "PYTHONPATH": str(tree),
            "RAYFLOW_PURE_PYTHON": "",
            "LD_PRELOAD": libasan,
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
            "PYTHONMALLOC": "malloc",
        }
        print(f"ledger built with {flags}; LD_PRELOAD={libasan}, PYTHONMALLOC=malloc", flush=True)
        leak_run = subprocess.run([sys.executable, "benchmarks/ack_ledger.py", "--leaks"], cwd=tree, env=env, text=True)
        tests = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *LEDGER_TESTS],
            cwd=tree,
            env=env,
            text=True,
        )
        return leak_run.returncode or tests.returncode


def leaks(rounds: int = 4, payloads: int = 400) -> None:
    """What stays allocated after each round of C ledger traffic (all paths, errors included)."""
    c_ledger = ledgers()["c"]
    sent = traffic(payloads * 250, 500, seed=2)
    watched = {"None": None, "True": True, "False": False}
    ledger = c_ledger()

    def one_round() -> None:
        for sender, inits, acks in sent:
            ledger.apply(sender, inits, acks, [])
            ledger.apply(sender, list(inits), list(acks), [])  # the sequence path: trees re-open, then expire
        for k in range(2000):
            root = 7 + (k << 32)
            ledger.init(root, 5, 2)
            ledger.reset_timeout(root)
            ledger.ack(root, 4)
            ledger.fail(root)
            for bad in ((1, ["x", 1], [], []), (1, [0, 1], [], []), (-1, [], [], []), (1, [], [], [None])):
                try:
                    ledger.apply(*bad)
                except (TypeError, ValueError, OverflowError):
                    pass
        for _ in range(4):
            ledger.rotate()
        assert len(ledger) == 0, len(ledger)

    def state() -> tuple[int, int, dict[str, int]]:
        gc.collect()
        return sys.getallocatedblocks(), len(gc.get_objects()), {k: sys.getrefcount(v) for k, v in watched.items()}

    one_round()  # warm-up: caches, free lists, the table at its size
    before = state()
    for r in range(rounds):
        one_round()
        after = state()
        refs = {k: after[2][k] - before[2][k] for k in watched}
        print(
            f"after round {r + 1}: {after[0] - before[0]:+,} blocks, {after[1] - before[1]:+,} gc objects, "
            f"refcounts {refs}"
        )
        before = after


def child_replay(kind: str, trees: int, payload: int) -> None:
    """Make the traffic and replay it on ``kind`` (``none``: only make it)."""
    sent = traffic(trees, payload)
    if kind != "none":
        replay(ledgers()[kind], sent)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=None, help="rounds, both ledgers each (6; --wordcount 4)")
    parser.add_argument("--runs", type=int, default=5, help="replays (word counts with --wordcount: 3) per round")
    parser.add_argument("--trees", type=int, default=None, help="trees (200,000; --memory 1,000,000)")
    parser.add_argument("--payload", type=int, default=500, help="trees per spout payload")
    parser.add_argument("--sentences", type=int, default=50_000, help="sentences per word count (--wordcount)")
    parser.add_argument("--instructions", action="store_true", help="count instructions (callgrind) instead")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--wordcount", action="store_true", help="the in-process word count, per ledger")
    mode.add_argument("--memory", action="store_true", help="bytes per pending tree")
    mode.add_argument("--asan", action="store_true", help="the ledger tests under AddressSanitizer")
    mode.add_argument("--leaks", action="store_true", help="memory left after rounds of C ledger traffic")
    mode.add_argument("--child-replay", nargs=3, metavar=("KIND", "TREES", "PAYLOAD"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_replay:
        kind, trees, payload = args.child_replay
        child_replay(kind, int(trees), int(payload))
    elif args.asan:
        return asan()
    elif args.leaks:
        leaks()
    elif args.memory:
        memory(args.trees or 1_000_000)
    elif args.wordcount and args.instructions:
        wordcount_instructions()
    elif args.wordcount:
        wordcount(args.rounds or 4, 3 if args.runs == 5 else args.runs, args.sentences)
    elif args.instructions:
        micro_instructions(args.payload)
    else:
        micro(args.rounds or 6, args.runs, args.trees or 200_000, args.payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
