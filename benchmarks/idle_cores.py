"""Where the cores go on Ray: for the reliable word count (1 x 1 unless ``tasks`` is given), each
actor process's time in the steady state split into running, waiting for a core (runnable,
another process on it) and sleeping (its event loop had nothing to do), and what the spout's
actor and the count's waited for meanwhile. Configurations run interleaved, as in
``compare.py``. Linux only.

    python benchmarks/idle_cores.py [--rounds 3] [--sentences 300000] [NAME=JSON ...]

Each ``NAME=JSON`` is config settings as ``compare.py`` takes them (``{}``, the default config,
when none is given), e.g. ``'pending20k={"topology.max.spout.pending": 20000}'``.

Why these figures. Words/s on a shared box says little about why a topology is slow. The
scheduler's own accounting (``/proc/PID/task/TID/schedstat``: nanoseconds on a core, nanoseconds
runnable but waiting for one) tells apart a process that has work but no core -- the box is
busy, or the topology has more busy processes than cores -- from one that sleeps because nothing
was sent to it yet: only the second is the topology's own idle time. Who waits for whom is read
inside the actors: the spout and the count install a ``Watcher`` that times the actor's waits
(the pending budget, credits from downstream, the chained bolt's queue, input). The window is
the middle of the run: its first and last ``EDGE_SECS`` (start-up, the last trees draining) are
left out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: find benchmarks/

from benchmarks.compare import Configuration, parse_config  # noqa: E402
from benchmarks.wordcount import BenchSpout, words_in  # noqa: E402
from examples.wordcount import SplitSentence, WordCount  # noqa: E402
from rayflow import Config, LocalCluster, TopologyBuilder  # noqa: E402

SAMPLE_SECS = 0.1
"""How often the driver snapshots the actors' scheduler counters."""
WRITE_SECS = 0.5
"""How often a ``Watcher`` writes its samples."""
EDGE_SECS = 1.0
"""Left out at each end of a run."""
RUN_SECS = 600.0
"""A run that has not acked every tree by then has failed."""


class Watcher:
    """Adds up, in the task actor of the process it is installed in, how long its coroutines
    waited at each of the actor's waits, and writes the running totals over time (a JSON list
    of ``[time.perf_counter(), {wait: seconds}]``) to ``path`` every ``WRITE_SECS``:

    - ``budget``: the spout loop, with ``next_tuple`` not allowed (in the steady state: the
      pending budget spent);
    - ``room``: a loop waiting for credits from downstream (``StreamTransport.wait_for_room``);
    - ``chain``: the spout loop waiting for its chained bolt to work off its queue;
    - ``input``: the loop that executes data frames and chained batches, with none there.

    The actor is found on the call stack of ``open``/``prepare`` (both are called from its
    methods); its waits are wrapped on the instances, which the loops look up on every wait."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.totals = {"budget": 0.0, "room": 0.0, "chain": 0.0, "input": 0.0}
        self.series: list[tuple[float, dict[str, float]]] = []
        self.stop = threading.Event()

    def install(self) -> None:
        from rayflow._runtime.task_actor import TaskActor

        frame = sys._getframe(1)
        while frame is not None and not isinstance(frame.f_locals.get("self"), TaskActor):
            frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            raise RuntimeError("the watched component is not run by a TaskActor")
        actor = frame.f_locals["self"]
        for name, what in (("_wake", "budget"), ("_chain_room", "chain"), ("_has_data", "input")):
            event = getattr(actor, name, None)
            if event is not None:
                event.wait = self._timed(what, event.wait)
        transport = actor._transport
        transport.wait_for_room = self._timed("room", transport.wait_for_room)
        threading.Thread(target=self._sample, daemon=True).start()

    def _timed(self, what: str, wait: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
        totals, clock = self.totals, time.perf_counter

        async def timed() -> Any:
            began = clock()
            try:
                return await wait()
            finally:
                totals[what] += clock() - began

        return timed

    def _sample(self) -> None:
        written = time.perf_counter()
        while not self.stop.wait(SAMPLE_SECS):
            now = time.perf_counter()
            self.series.append((now, dict(self.totals)))
            if now - written >= WRITE_SECS:
                self.write()
                written = now
        self.write()

    def write(self) -> None:
        partial = Path(self.path + ".partial")
        partial.write_text(json.dumps(self.series))
        partial.replace(self.path)


class WatchedSpout(BenchSpout):
    """``BenchSpout`` with a ``Watcher`` in its actor; ``done`` is created once every tree it
    emitted was acked."""

    def __init__(self, total: int, watch: str, done: str) -> None:
        super().__init__(total)
        self.watch = watch
        self.done = done

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        super().open(conf, context, collector)
        self.acked = 0
        self.watcher = Watcher(self.watch)
        self.watcher.install()

    def ack(self, msg_id: Any) -> None:
        self.acked += 1
        if self.acked == self.total:
            self.watcher.stop.set()
            Path(self.done).touch()


class WatchedCount(WordCount):
    """``WordCount`` with a ``Watcher`` in its actor."""

    def __init__(self, watch: str) -> None:
        super().__init__()
        self.watch = watch

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        super().prepare(conf, context)
        Watcher(self.watch).install()


def schedstat(pid: int) -> dict[int, tuple[int, int]]:
    """Per thread of ``pid``: nanoseconds on a core and nanoseconds runnable, waiting for one."""
    found: dict[int, tuple[int, int]] = {}
    for thread in Path(f"/proc/{pid}/task").iterdir():
        try:
            run, wait, _ = (thread / "schedstat").read_text().split()
        except (OSError, ValueError):  # the thread ended meanwhile
            continue
        found[int(thread.name)] = (int(run), int(wait))
    return found


def breakdown(first: dict[int, tuple[int, int]], last: dict[int, tuple[int, int]], wall: float) -> dict[str, float]:
    """Shares of ``wall`` of the busiest thread (the event loop): running, waiting for a core,
    sleeping; and the CPU of every thread, in cores."""
    deltas = {
        tid: (run - first.get(tid, (0, 0))[0], wait - first.get(tid, (0, 0))[1]) for tid, (run, wait) in last.items()
    }
    loop_run, loop_wait = max(deltas.values())
    ns = wall * 1e9
    return {
        "run": loop_run / ns,
        "runq": loop_wait / ns,
        "sleep": max(0.0, 1.0 - (loop_run + loop_wait) / ns),
        "cores": sum(run for run, _ in deltas.values()) / ns,
    }


def waited(path: Path, t0: float, t1: float) -> dict[str, float]:
    """Shares of ``[t0, t1]`` a ``Watcher``'s actor spent at each wait (its samples nearest)."""
    series = json.loads(path.read_text())
    inside = [(t, totals) for t, totals in series if t0 <= t <= t1]
    if len(inside) < 2:
        return {}
    (a, first), (b, last) = inside[0], inside[-1]
    return {what: (last[what] - first[what]) / (b - a) for what in first}


def run_once(cluster: LocalCluster, sentences: int, c: Configuration, scratch: Path) -> dict[str, Any] | None:
    """One run of ``c``; ``None`` when it was too short to have a steady state."""
    tag = f"{c.name}-{time.monotonic_ns()}"
    done, spout_waits, count_waits = (scratch / f"{tag}-{what}" for what in ("done", "spout", "count"))
    builder = TopologyBuilder()
    builder.set_spout("sentences", WatchedSpout(sentences, str(spout_waits), str(done)))
    builder.set_bolt("split", SplitSentence(), parallelism=c.tasks).shuffle_grouping("sentences")
    builder.set_bolt("count", WatchedCount(str(count_waits)), parallelism=c.tasks).fields_grouping("split", ["word"])
    conf = Config.of({"ackers": c.ackers, "max_spout_pending": c.max_pending, **c.tuning})
    handle = cluster.submit_topology(f"idle-{c.name}", conf, builder.create_topology(), active=False)
    tm = handle.task_metrics()
    hosts = {t: m.get("host", t) for t, m in tm.items()}
    names = {t: "+".join(tm[g]["component"] for g in sorted(tm) if hosts[g] == t) for t in tm if hosts[t] == t}
    pids = {names[t]: tm[t]["pid"] for t in names}
    time.sleep(1.0)  # every task up and idle
    snapshots: list[tuple[float, dict[str, dict[int, tuple[int, int]]]]] = []
    cpu_before = {name: psutil.Process(pid).cpu_times() for name, pid in pids.items()}
    started = time.perf_counter()
    handle.activate()
    while not done.exists():
        if time.perf_counter() - started > RUN_SECS:
            raise SystemExit(f"{c.name}: not every tree was acked within {RUN_SECS:.0f} s")
        snapshots.append((time.perf_counter(), {name: schedstat(pid) for name, pid in pids.items()}))
        time.sleep(SAMPLE_SECS)
    elapsed = time.perf_counter() - started
    cpu_after = {name: psutil.Process(pid).cpu_times() for name, pid in pids.items()}
    time.sleep(2 * WRITE_SECS)  # the count's watcher writes its last samples
    if not handle.wait(timeout=60, poll_secs=0.05):
        raise SystemExit(f"{c.name}: the spout did not finish")
    metrics = handle.metrics()
    spout = metrics["sentences"]
    handle.kill()
    words = words_in(sentences)
    window = [s for s in snapshots if started + EDGE_SECS <= s[0] <= started + elapsed - EDGE_SECS]
    if len(window) < 2:
        return None
    (t0, first), (t1, last) = window[0], window[-1]
    cpu = {
        name: (cpu_after[name].user + cpu_after[name].system - cpu_before[name].user - cpu_before[name].system)
        / words
        * 1e6
        for name in pids
    }
    return {
        "words_per_s": words / elapsed,
        "actors": {name: breakdown(first[name], last[name], t1 - t0) for name in pids},
        "cpu_us_per_word": cpu,
        "spout_waits": waited(spout_waits, t0, t1),
        "count_waits": waited(count_waits, t0, t1) if c.tasks == 1 else {},
        "acker_messages_per_tree": metrics["__acker"]["executed"] / sentences,
        "frames_per_1000_words": sum(m["calls_out"] for m in metrics.values()) / words * 1000,
        "p50": spout["complete_latency_ms"]["p50"],
        "p99": spout["complete_latency_ms"]["p99"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="*", metavar="NAME=JSON")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=300_000, help="sentences per run")
    args = parser.parse_args(argv)
    configs = [parse_config(text) for text in args.configs or ["default={}"]]
    if len({c.name for c in configs}) != len(configs):
        raise SystemExit("every configuration needs a name of its own")
    runs: dict[str, list[dict[str, Any]]] = {c.name: [] for c in configs}
    with tempfile.TemporaryDirectory(prefix="rayflow-idle-") as scratch, LocalCluster() as cluster:
        warm = Configuration("warm-up", 1, 1, configs[0].max_pending, {})
        run_once(cluster, min(args.sentences, 60_000), warm, Path(scratch))
        for r in range(args.rounds):
            for c in configs if r % 2 == 0 else reversed(configs):
                out = run_once(cluster, args.sentences, c, Path(scratch))
                if out is None:
                    raise SystemExit(f"{c.name}: a run is too short to have a steady state; give more --sentences")
                runs[c.name].append(out)
                print(f"round {r + 1} {c.name}: {_line(out)}", flush=True)
    print()
    baseline = runs[configs[0].name]
    for c in configs:
        mine = runs[c.name]
        ratio = statistics.median(m["words_per_s"] / b["words_per_s"] for m, b in zip(mine, baseline, strict=True))
        median = sorted(mine, key=lambda m: m["words_per_s"])[len(mine) // 2]
        print(f"{c.name:>14s} {ratio:6.3f}x (paired)  median run: {_line(median)}")
    return 0


def _line(out: dict[str, Any]) -> str:
    actors = "  ".join(
        f"{name} run {a['run']:.0%} runq {a['runq']:.0%} sleep {a['sleep']:.0%} ({a['cores']:.2f} cores, "
        f"{out['cpu_us_per_word'][name]:.2f} us/word)"
        for name, a in out["actors"].items()
    )

    def shares(waits: dict[str, float]) -> str:
        return " ".join(f"{what} {share:.0%}" for what, share in waits.items() if share >= 0.005) or "-"

    return (
        f"{out['words_per_s']:,.0f} words/s, p50/p99 {out['p50']:.1f}/{out['p99']:.1f} ms, "
        f"{out['acker_messages_per_tree']:.2f} acker messages per tree, "
        f"{out['frames_per_1000_words']:.2f} frames per 1,000 words | {actors}"
        f" | spout actor waited: {shares(out['spout_waits'])}; count: {shares(out['count_waits'])}"
    )


if __name__ == "__main__":
    if os.name != "posix" or not Path("/proc/self/task").is_dir():
        raise SystemExit("idle_cores.py reads /proc: Linux only")
    sys.exit(main())
