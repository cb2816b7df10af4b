"""CPU per word per actor (psutil) for the word count on Ray: full rate, then optionally a fixed
rate, so that a change can be judged on a noisy machine by CPU rather than wall time. On Linux it
also prints how often each actor's busiest thread (its event loop) woke up per second.

    python benchmarks/actor_cpu.py [--sentences N] [--rate SENTENCES_PER_S --secs S] [--tasks N] [--no-chaining]
        [--pinning]   # rayflow.worker.cpu.pinning on
        [--pyspy DIR [--native]]   # also py-spy record every task actor during the full-rate run
                                   # (--native: with C frames, the kernel's and CPython's)
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.wordcount import SENTENCES, WORDS_PER_CYCLE, BenchSpout, words_in  # noqa: E402
from examples.wordcount import SplitSentence, WordCount  # noqa: E402
from rayflow import Config, LocalCluster, TopologyBuilder  # noqa: E402

TUNING: dict[str, Any] = {}


def thread_switches(pid: int) -> dict[int, tuple[float, int]]:
    """Per thread of ``pid`` (Linux ``/proc``): CPU seconds so far and voluntary context
    switches (the times it blocked, so woke up again); empty where ``/proc`` is missing."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    found: dict[int, tuple[float, int]] = {}
    tasks = Path(f"/proc/{pid}/task")
    if not tasks.is_dir():
        return found
    for thread in tasks.iterdir():
        try:
            stat = (thread / "stat").read_text()
            status = (thread / "status").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / tick
        switches = int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0])
        found[int(thread.name)] = (cpu, switches)
    return found


def busiest_wakes(before: dict[int, tuple[float, int]], after: dict[int, tuple[float, int]], secs: float) -> float:
    """Wake-ups per second of the thread that used the most CPU between two snapshots."""
    if not after:
        return float("nan")
    busiest = max(after, key=lambda t: after[t][0] - before.get(t, (0.0, 0))[0])
    return (after[busiest][1] - before.get(busiest, (0.0, 0))[1]) / secs


def run(
    cluster: LocalCluster, sentences: int, rate: float | None, tasks: int, pyspy: str | None, native: bool = False
) -> dict[str, Any]:
    builder = TopologyBuilder()
    builder.set_spout("sentences", BenchSpout(sentences, rate))
    builder.set_bolt("split", SplitSentence(), parallelism=tasks).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), parallelism=tasks).fields_grouping("split", ["word"])
    conf = Config.of({"ackers": 1, **TUNING})
    handle = cluster.submit_topology(f"cpu-{rate}-{tasks}", conf, builder.create_topology(), active=False)
    tm = handle.task_metrics()
    # One process per actor: a task chained to another runs in its host's (``host``), and is
    # counted there, under both names ("sentences+split").
    hosts = {t: m.get("host", t) for t, m in tm.items()}
    procs = {t: psutil.Process(m["pid"]) for t, m in tm.items() if hosts[t] == t}
    names = {t: "+".join(tm[g]["component"] for g in sorted(tm, key=lambda g: g != t) if hosts[g] == t) for t in procs}
    before = {t: p.cpu_times() for t, p in procs.items()}
    spies = []
    if pyspy:
        Path(pyspy).mkdir(parents=True, exist_ok=True)
        for t, p in procs.items():
            out = f"{pyspy}/{names[t]}-{t}.txt"
            spies.append(
                subprocess.Popen(
                    ["py-spy", "record", "--pid", str(p.pid), "--format", "raw", "-o", out, "--rate", "100"]
                    + (["--native"] if native else []),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        time.sleep(1.0)
    expected = words_in(sentences)
    threads_before = {t: thread_switches(p.pid) for t, p in procs.items()}
    started = time.perf_counter()
    handle.activate()
    # Ask only the spout (polling every task's metrics would cost each of them CPU).
    if not handle.wait(timeout=600, poll_secs=0.05):
        raise RuntimeError("the word count did not finish in 600 s")
    elapsed = time.perf_counter() - started
    metrics = handle.metrics()
    after = {t: p.cpu_times() for t, p in procs.items()}
    wakes = {
        f"{names[t]}-{t}": busiest_wakes(threads_before[t], thread_switches(p.pid), elapsed) for t, p in procs.items()
    }
    calls = {t: m["calls_out"] for t, m in handle.task_metrics().items()}
    for s in spies:
        s.send_signal(2)
    for s in spies:
        s.wait()
    handle.kill()
    per: dict[str, float] = {}
    for t in procs:
        cpu = (after[t].user + after[t].system) - (before[t].user + before[t].system)
        key = f"{names[t]}-{t}"
        per[key] = cpu / expected * 1e6
    lat = metrics["sentences"]["complete_latency_ms"]
    return {
        "words_per_s": expected / elapsed,
        "cpu_us_per_word": per,
        "wakes_per_s": wakes,
        "total_cpu_us_per_word": sum(per.values()),
        "calls_out": sum(calls.values()),
        "p50": lat["p50"],
        "p99": lat["p99"],
    }


def report(title: str, r: dict[str, Any]) -> None:
    per_task = ("cpu_us_per_word", "wakes_per_s")
    print(title, {k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items() if k not in per_task})
    print("  cpu us/word:", {k: round(v, 2) for k, v in r["cpu_us_per_word"].items()})
    print("  event-loop wakes/s:", {k: round(v) for k, v in r["wakes_per_s"].items() if not math.isnan(v)})


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--rate", type=float, help="sentences/s for the rate-limited run")
    parser.add_argument("--secs", type=float, default=8.0)
    parser.add_argument("--tasks", type=int, default=1)
    parser.add_argument("--pyspy", metavar="DIR")
    parser.add_argument("--native", action="store_true", help="py-spy records C frames too")
    parser.add_argument("--skip-full", action="store_true")
    parser.add_argument("--linger-ms", type=float)
    parser.add_argument("--control-linger-ms", type=float)
    parser.add_argument("--no-chaining", action="store_true", help="rayflow.chaining off")
    parser.add_argument("--pinning", action="store_true", help="rayflow.worker.cpu.pinning on")
    args = parser.parse_args()
    if args.linger_ms:
        TUNING["linger_ms"] = args.linger_ms
    if args.control_linger_ms:
        TUNING["control_linger_ms"] = args.control_linger_ms
    if args.no_chaining:
        TUNING["chaining"] = False
    if args.pinning:
        TUNING["cpu_pinning"] = True
    with LocalCluster() as cluster:
        if not args.skip_full:
            r = run(cluster, args.sentences, None, args.tasks, args.pyspy, args.native)
            report("full:", r)
        if args.rate:
            n = int(args.rate * args.secs)
            r = run(cluster, n, args.rate, args.tasks, args.pyspy if args.skip_full else None, args.native)
            report(f"rate {args.rate:.0f} sent/s ({args.rate * WORDS_PER_CYCLE / len(SENTENCES):.0f} words/s):", r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
