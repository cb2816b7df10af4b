"""Windowed bolts: exactly-once against at-least-once, and at-least-once against the windows' code
of an older revision, in process: CPU per tuple, side by side.

    python benchmarks/windows_exactly_once.py [--tuples N] [--rounds R] [--windows-from REV]

numbers -> windows (a count window 1,000 long sliding by 100, emitting each window's sum) ->
sink (a plain bolt that acks), one task each, one acker, state in memory, run by
``InProcessTopology`` (its recorder switched off) on its simulated clock (a checkpoint every
simulated second) until every tree is done. Each run is a fresh process; the rounds alternate
the order of the variants. Figures: CPU microseconds (``time.process_time``) per tuple for the
whole topology, and the windowed task's own busy time per tuple (wall clock: noisy on a busy
box); the ratios are medians of each round's ratios.

``--windows-from REV`` adds at-least-once with the windows' code of ``REV`` (``WINDOW_CODE``
from ``git archive``, the rest of ``rayflow/`` as in this checkout, in a temporary directory put
first on ``PYTHONPATH``): what the windows' own changes did to the at-least-once path.

Then the size and the time of one checkpoint's contents (``dump``) for a window holding 1,000
and 100,000 tuples.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WINDOW_CODE = ("rayflow/_windows", "rayflow/_executors/windowed_bolt.py", "rayflow/_exactly_once/wiring.py")


def windows_from(rev: str, into: Path) -> None:
    """This checkout's ``rayflow/`` in ``into``, with the windows' code of ``rev``."""
    shutil.copytree(ROOT / "rayflow", into / "rayflow", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(into / WINDOW_CODE[0])
    archive = subprocess.run(["git", "archive", rev, *WINDOW_CODE], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)


def worker(tuples: int, guarantee: str) -> dict[str, float]:
    """One run in this process (the ``rayflow`` on ``sys.path``)."""
    from rayflow import Bolt, Config, Count, Spout, TopologyBuilder, WindowedBolt
    from rayflow.testing import InProcessTopology

    class Numbers(Spout):
        outputs = ["n"]

        def open(self, conf: Any, context: Any, collector: Any) -> None:
            self.collector, self.i = collector, 0

        def next_tuple(self) -> None:
            if self.i < tuples:
                self.collector.emit([self.i], msg_id=self.i)
                self.i += 1
            else:
                self.collector.exhausted()

        def position(self) -> int:
            return self.i

        def seek(self, position: int) -> None:
            self.i = position

    class Sums(WindowedBolt):
        outputs = ["sum"]

        def prepare(self, conf: Any, context: Any, collector: Any) -> None:
            self.collector = collector

        def execute(self, window: Any) -> None:
            self.collector.emit([sum(t[0] for t in window.get())])

    class Sink(Bolt):
        def prepare(self, conf: Any, context: Any, collector: Any) -> None:
            self.collector = collector

        def execute(self, tup: Any) -> None:
            self.collector.ack(tup)

    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers())
    builder.set_bolt("windows", Sums().with_window(Count(1000), Count(100))).shuffle_grouping("numbers")
    builder.set_bolt("sink", Sink()).shuffle_grouping("windows")
    conf = Config.model_validate({"processing_guarantee": guarantee, "max_spout_pending": None})
    run = InProcessTopology(builder.create_topology(), conf)
    for executor in run.executors.values():
        executor.observer = None  # the runner's recorder of every emit: not what is measured
    started = time.process_time()
    while True:
        run.run()
        if run.finished:
            break
        run.advance(1.0)
    cpu = time.process_time() - started
    busy = run.task("windows").metrics.busy_secs
    return {"cpu_us": cpu / tuples * 1e6, "windows_us": busy / tuples * 1e6}


def contents_figures(held: int) -> tuple[int, float]:
    """Bytes and ms of ``dump`` for a count window holding ``held`` one-integer tuples."""
    from rayflow._tuple import Tuple, TupleSource
    from rayflow._windows.bolt import WindowSettings
    from rayflow._windows.contents import WindowContents, dump
    from rayflow._windows.lengths import Count
    from rayflow._windows.manager import CountWindows

    length = Count(held)
    windows: CountWindows[Tuple] = CountWindows(length, Count(held))
    source = TupleSource("numbers", "default", 1, ["n"])
    for i in range(held - 1):  # one short of firing: everything held
        tup = Tuple([i], source)
        tup._tree = None  # acked on arrival
        windows.add(0.0, tup)
    contents = WindowContents(WindowSettings(length, length), 1, windows)
    started = time.perf_counter()
    blob = dump(contents)
    return len(blob), (time.perf_counter() - started) * 1000


def spawn(variant: str, tuples: int, pythonpath: str | None) -> dict[str, float]:
    guarantee = "exactly_once" if variant == "exactly_once" else "at_least_once"
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, __file__, "--worker", guarantee, "--tuples", str(tuples)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir() if pythonpath is not None else ROOT,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tuples", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--windows-from", help="a git revision whose windows' code to measure at-least-once too")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.tuples, args.worker)))
        return
    sys.path.insert(0, str(ROOT))
    variants: dict[str, str | None] = {"at_least_once": None, "exactly_once": None}
    with tempfile.TemporaryDirectory() as before_dir:
        if args.windows_from:
            windows_from(args.windows_from, Path(before_dir))
            variants = {f"at_least_once, windows@{args.windows_from}": before_dir, **variants}
        results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
        names = list(variants)
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                results[name].append(spawn(name, args.tuples, variants[name]))
    print(f"{args.tuples:,} tuples, {args.rounds} rounds, medians per tuple: topology CPU us / windowed task busy us")
    for name, runs in results.items():
        cpu = statistics.median(r["cpu_us"] for r in runs)
        own = statistics.median(r["windows_us"] for r in runs)
        print(f"  {name:36} {cpu:7.2f} / {own:6.2f}")
    base = results["at_least_once"]
    for name, runs in results.items():
        if name != "at_least_once":
            ratio = statistics.median(b["cpu_us"] / o["cpu_us"] for b, o in zip(base, runs, strict=True))
            own = statistics.median(b["windows_us"] / o["windows_us"] for b, o in zip(base, runs, strict=True))
            print(f"  at_least_once / {name}: {ratio:.2f}x topology CPU, {own:.2f}x windowed task busy (median ratios)")
    for held in (1_000, 100_000):
        size, ms = contents_figures(held)
        print(f"  one checkpoint's window contents, {held:,} tuples held: {size / 1e6:.2f} MB, dump {ms:.1f} ms")


if __name__ == "__main__":
    main()
