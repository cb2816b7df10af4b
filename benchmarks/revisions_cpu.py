"""The reliable word count on Ray at several git revisions (or trees), side by side in one run,
per task actor process: CPU per word, where its event loop's time went, and the acker's messages
per tree. Not a test: ``revisions.py`` compares words/s; this says which process a change made
cheaper or busier, which words/s on a shared 2-core box cannot.

    python benchmarks/revisions_cpu.py BASE HEAD [MORE ...] [--rounds 3] [--runs 3] [--sentences 300000]

Each argument is a revision (exported with ``git archive`` and its C kernels built in place, as
``revisions.py`` does) or the path of a tree already built. A round starts one process per
revision, the order turned round every round, each with its own local Ray; every process runs
a warm-up topology, then ``--runs`` word counts (1 split x 1 count, one acker, default config).
For each run and each actor process (a chained task counts in its host's):

- CPU microseconds per word (psutil: user + system) and the system part alone;
- its busiest thread's (the event loop's) voluntary context switches per second (each time it
  blocked: input waits, credits, a GIL handed over by force);
- that thread's share of the run spent on a core, runnable but waiting for one, and asleep
  (``/proc/PID/task/TID/schedstat``; Linux only);
- the acker's messages per tree (its ``executed``: inits and acks applied, one per root each).

The summary is each revision's medians over all its runs; the raw figures go to a JSON file.
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: find benchmarks/

from benchmarks.revisions import build_kernel, export  # noqa: E402

RESULT = "RESULT "


def child(tree: str, runs: int, sentences: int) -> None:
    """Run in a process of its own: the word counts of the rayflow in ``tree``."""
    sys.path.insert(0, tree)
    os.chdir(tree)
    import psutil

    import rayflow
    from benchmarks.actor_cpu import thread_switches
    from benchmarks.idle_cores import schedstat
    from benchmarks.wordcount import BenchSpout, words_in
    from examples.wordcount import SplitSentence, WordCount
    from rayflow import Config, LocalCluster, TopologyBuilder

    if not str(Path(rayflow.__file__).resolve()).startswith(str(Path(tree).resolve())):
        raise SystemExit(f"imported rayflow from {rayflow.__file__}, not from {tree}")

    def once(cluster: Any, name: str, n: int) -> dict[str, Any]:
        builder = TopologyBuilder()
        builder.set_spout("sentences", BenchSpout(n, None))
        builder.set_bolt("split", SplitSentence()).shuffle_grouping("sentences")
        builder.set_bolt("count", WordCount()).fields_grouping("split", ["word"])
        handle = cluster.submit_topology(name, Config.of({"ackers": 1}), builder.create_topology(), active=False)
        tm = handle.task_metrics()
        hosts = {t: m.get("host", t) for t, m in tm.items()}
        procs = {t: psutil.Process(m["pid"]) for t, m in tm.items() if hosts[t] == t}
        names = {
            t: "+".join(tm[g]["component"] for g in sorted(tm, key=lambda g: g != t) if hosts[g] == t) for t in procs
        }
        time.sleep(1.0)  # every task up and idle
        cpu0 = {t: p.cpu_times() for t, p in procs.items()}
        switches0 = {t: thread_switches(p.pid) for t, p in procs.items()}
        sched0 = {t: schedstat(p.pid) for t, p in procs.items()}
        started = time.perf_counter()
        handle.activate()
        if not handle.wait(timeout=600, poll_secs=0.1):
            raise SystemExit(f"{name}: not done after 600 s")
        elapsed = time.perf_counter() - started
        cpu1 = {t: p.cpu_times() for t, p in procs.items()}
        switches1 = {t: thread_switches(p.pid) for t, p in procs.items()}
        sched1 = {t: schedstat(p.pid) for t, p in procs.items()}
        metrics = handle.metrics()
        handle.kill()
        spout = metrics["sentences"]
        if spout["acked"] != n or spout["failed"]:
            raise SystemExit(f"{name}: {spout['acked']} acked and {spout['failed']} failed of {n}")
        words = words_in(n)
        result: dict[str, Any] = {
            "words_per_s": words / elapsed,
            "acker_messages_per_tree": metrics["__acker"]["executed"] / n,
            "p99": spout["complete_latency_ms"]["p99"],
            "cpu": {},
            "system": {},
            "wakes": {},
            "loop": {},
        }
        for t in procs:
            key = names[t]
            result["cpu"][key] = (cpu1[t].user + cpu1[t].system - cpu0[t].user - cpu0[t].system) / words * 1e6
            result["system"][key] = (cpu1[t].system - cpu0[t].system) / words * 1e6
            after, before = switches1[t], switches0[t]
            busiest = max(after, key=lambda k: after[k][0] - before.get(k, (0.0, 0))[0])
            result["wakes"][key] = (after[busiest][1] - before.get(busiest, (0.0, 0))[1]) / elapsed
            s1, s0 = sched1[t], sched0[t]
            loop = max(s1, key=lambda k: s1[k][0] - s0.get(k, (0, 0))[0])
            run = (s1[loop][0] - s0.get(loop, (0, 0))[0]) / 1e9 / elapsed
            wait = (s1[loop][1] - s0.get(loop, (0, 0))[1]) / 1e9 / elapsed
            result["loop"][key] = [run, wait, 1.0 - run - wait]
        return result

    with LocalCluster() as cluster:
        once(cluster, "warm-up", min(sentences, 20_000))
        results = [once(cluster, f"run-{i}", sentences) for i in range(runs)]
    print(RESULT + json.dumps(results), flush=True)


def measure(tree: Path, runs: int, sentences: int) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(tree), str(runs), str(sentences)],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    for line in done.stdout.splitlines():
        if line.startswith(RESULT):
            found: list[dict[str, Any]] = json.loads(line[len(RESULT) :])
            return found
    raise SystemExit(f"the run of {tree} failed:\n{done.stderr[-3000:]}")


def summary(name: str, runs: list[dict[str, Any]]) -> None:
    def med(values: Any) -> float:
        return statistics.median(values)

    procs = list(runs[0]["cpu"])
    print(
        f"{name}: {med(r['words_per_s'] for r in runs):,.0f} words/s, "
        f"{med(r['acker_messages_per_tree'] for r in runs):.3f} acker messages per tree, "
        f"p99 {med(r['p99'] for r in runs):.1f} ms (medians of {len(runs)} runs)"
    )
    for p in procs:
        loop = [med(r["loop"][p][i] for r in runs) for i in range(3)]
        print(
            f"   {p:>16s}: {med(r['cpu'][p] for r in runs):.3f} CPU us/word "
            f"(system {med(r['system'][p] for r in runs):.3f}); loop on a core {loop[0]:.1%}, "
            f"waiting for one {loop[1]:.1%}, asleep {loop[2]:.1%}; "
            f"blocked {med(r['wakes'][p] for r in runs):.0f}/s"
        )
    print(f"   {'total':>16s}: {med(sum(r['cpu'].values()) for r in runs):.3f} CPU us/word")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revisions", nargs="+", help="revisions (or paths of built trees) to compare")
    parser.add_argument("--rounds", type=int, default=3, help="processes per revision, interleaved")
    parser.add_argument("--runs", type=int, default=3, help="topologies per process")
    parser.add_argument("--sentences", type=int, default=300_000, help="sentences per topology")
    args = parser.parse_args()
    into = Path(tempfile.mkdtemp(prefix="rayflow-revisions-cpu-"))
    trees: dict[str, Path] = {}
    for revision in args.revisions:
        if Path(revision).is_dir():
            trees[revision] = Path(revision).resolve()
            continue
        trees[revision] = export(revision, into)
        failed = build_kernel(trees[revision])
        if failed:
            print(f"{revision}: the C kernel did not build, pure Python runs ({failed.splitlines()[-1:]})")
    results: dict[str, list[dict[str, Any]]] = {r: [] for r in args.revisions}
    for i in range(args.rounds):
        order = args.revisions if i % 2 == 0 else list(reversed(args.revisions))
        for revision in order:
            got = measure(trees[revision], args.runs, args.sentences)
            results[revision] += got
            shown = ", ".join(f"{r['words_per_s']:,.0f} words/s {sum(r['cpu'].values()):.3f} us" for r in got)
            print(f"round {i + 1} {revision}: {shown}", flush=True)
    print()
    for revision in args.revisions:
        summary(revision, results[revision])
    raw = into / "results.json"
    raw.write_text(json.dumps(results))
    print(f"raw figures: {raw}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
