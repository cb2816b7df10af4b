"""Word-count benchmark: rayflow with acking, without acking, one Ray call per tuple, bytewax
(when installed: the ``bench`` extra) and a bare Python loop, measured side by side in one run.
Not a test: run it on a quiet machine.

    python benchmarks/wordcount.py [--sentences N] [--tasks 1 2 4] [--rounds 5] [--json results.json]

Every configuration splits and counts the same 5 sentences (those of examples/wordcount.py,
whose bolts rayflow runs here). rayflow runs
spout -> split (shuffle) -> count (fields on word), one task each, 1 acker when acking; the
sweep runs the reliable topology with 1, 2 and 4 tasks per bolt. The sweep and bytewax run
``--rounds`` times, interleaved, and each is reported by its median run; the two ratios with
targets (1 x 1 against bytewax, 2 x 2 against 1 x 1) are the medians of each round's ratio of
two runs made one after the other, as a shared machine's speed drifts. The latency run feeds the
reliable topology at half the rate it reached and reports the complete latency (spout emit to
spout ack) percentiles. bytewax runs the same split and count (``flat_map`` then a keyed
``stateful_map``) on one worker, without any acking.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import ray

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: find examples/

from examples.wordcount import SENTENCES, SplitSentence, WordCount  # noqa: E402
from rayflow import Config, LocalCluster, Spout, TopologyBuilder  # noqa: E402
from rayflow._pending import DEFAULT_MAX_SPOUT_PENDING  # noqa: E402

WORDS_PER_CYCLE = sum(len(s.split()) for s in SENTENCES)


def words_in(sentences: int) -> int:
    full, rest = divmod(sentences, len(SENTENCES))
    return full * WORDS_PER_CYCLE + sum(len(s.split()) for s in SENTENCES[:rest])


class BenchSpout(Spout):
    """Emits ``total`` sentences, tracked, as fast as allowed or at ``rate`` sentences/s."""

    outputs = ["sentence"]

    def __init__(self, total: int, rate: float | None = None) -> None:
        self.total = total
        self.rate = rate

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.sent = 0
        self.started = time.perf_counter()

    def next_tuple(self) -> None:
        if self.sent >= self.total:
            self.collector.exhausted()
            return
        if self.rate and self.sent >= (time.perf_counter() - self.started) * self.rate:
            return
        self.collector.emit([SENTENCES[self.sent % 5]], msg_id=self.sent)
        self.sent += 1

    def fail(self, msg_id: Any) -> None:
        raise RuntimeError(f"sentence {msg_id} failed: the benchmark expects no failures")


def run_rayflow(
    cluster: LocalCluster,
    sentences: int,
    ackers: int,
    rate: float | None = None,
    max_pending: int | None = DEFAULT_MAX_SPOUT_PENDING,
    tuning: dict[str, Any] | None = None,
    tasks: int = 1,
) -> dict[str, Any]:
    builder = TopologyBuilder()
    builder.set_spout("sentences", BenchSpout(sentences, rate))
    builder.set_bolt("split", SplitSentence(), parallelism=tasks).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), parallelism=tasks).fields_grouping("split", ["word"])
    conf = Config.of({"ackers": ackers, "max_spout_pending": max_pending, **(tuning or {})})
    name = f"wordcount-ackers{ackers}-tasks{tasks}"
    handle = cluster.submit_topology(name, conf, builder.create_topology(), active=False)
    expected = words_in(sentences)
    started = time.perf_counter()
    handle.activate()
    # Ask only the spout whether it is done: polling every task's metrics costs each of them a
    # Ray call (~0.5 ms of CPU here), which would tax a topology for its number of tasks.
    # Without ackers the spout is done once it has emitted: then wait for the last word.
    if not handle.wait(timeout=600, poll_secs=0.1):
        raise RuntimeError(f"{name}: not done after 600 s")
    metrics = handle.metrics()
    while metrics["count"]["executed"] < expected:
        time.sleep(0.1)
        metrics = handle.metrics()
    elapsed = time.perf_counter() - started
    handle.kill()
    spout = metrics["sentences"]
    assert spout["failed"] == 0 and (ackers == 0 or spout["acked"] == sentences), spout
    return {
        "words": expected,
        "seconds": elapsed,
        "words_per_s": expected / elapsed,
        "complete_latency_ms": spout["complete_latency_ms"] if ackers else None,
        "frames": sum(m["calls_out"] for m in metrics.values()),
    }


@ray.remote(num_cpus=0.01)
class CallCount:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def execute(self, word: str) -> None:
        self.counts[word] += 1

    def total(self) -> int:
        return sum(self.counts.values())


@ray.remote(num_cpus=0.01)
class CallSplit:
    def __init__(self, count: Any) -> None:
        self.count = count

    def execute(self, sentence: str) -> None:
        for word in sentence.split():
            self.count.execute.remote(word)


def run_per_call(sentences: int) -> dict[str, Any]:
    """The naive pipeline: every sentence and every word is its own Ray actor call."""
    count = CallCount.remote()
    split = CallSplit.remote(count)
    ray.get(count.total.remote())
    expected = words_in(sentences)
    started = time.perf_counter()
    refs = [split.execute.remote(SENTENCES[i % 5]) for i in range(sentences)]
    ray.get(refs)
    while ray.get(count.total.remote()) < expected:
        time.sleep(0.01)
    elapsed = time.perf_counter() - started
    ray.kill(split)
    ray.kill(count)
    return {"words": expected, "seconds": elapsed, "words_per_s": expected / elapsed}


def run_bytewax(sentences: int, batch_size: int) -> dict[str, Any] | None:
    """The same split and count on bytewax 0.21, one worker, in this process; ``None`` when
    bytewax is not installed."""
    try:
        import bytewax.operators as op
        from bytewax.dataflow import Dataflow
        from bytewax.outputs import DynamicSink, StatelessSinkPartition
        from bytewax.testing import TestingSource, run_main
    except ImportError:
        return None

    counted = [0]

    class Tally(StatelessSinkPartition[Any]):
        def write_batch(self, items: list[Any]) -> None:
            counted[0] += len(items)

    class TallySink(DynamicSink[Any]):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> Tally:
            return Tally()

    def count(state: int | None, word: str) -> tuple[int, int]:
        state = (state or 0) + 1
        return state, state

    flow = Dataflow("wordcount")
    lines = op.input("sentences", flow, TestingSource([SENTENCES[i % 5] for i in range(sentences)], batch_size))
    words = op.flat_map("split", lines, str.split)
    counts = op.stateful_map("count", op.key_on("word", words, lambda word: word), count)
    op.output("out", counts, TallySink())
    started = time.perf_counter()
    run_main(flow)
    elapsed = time.perf_counter() - started
    assert counted[0] == words_in(sentences), counted
    return {"words": counted[0], "seconds": elapsed, "words_per_s": counted[0] / elapsed, "batch_size": batch_size}


def run_bare_loop(sentences: int) -> dict[str, Any]:
    counts: dict[str, int] = {}
    started = time.perf_counter()
    for i in range(sentences):
        for word in SENTENCES[i % 5].split():
            counts[word] = counts.get(word, 0) + 1
    elapsed = time.perf_counter() - started
    return {"words": words_in(sentences), "seconds": elapsed, "words_per_s": words_in(sentences) / elapsed}


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median rate, with every run's rate under ``runs``."""
    ordered = sorted(runs, key=lambda r: r["words_per_s"])
    return {**ordered[len(ordered) // 2], "runs": [{"words_per_s": r["words_per_s"]} for r in runs]}


def paired_ratio(runs: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> dict[str, Any]:
    """Round by round, ``runs`` against ``baseline`` (same round, run next to each other): the
    median of those ratios and each of them."""
    rounds = [r["words_per_s"] / b["words_per_s"] for r, b in zip(runs, baseline, strict=True)]
    return {"median": statistics.median(rounds), "rounds": rounds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=300_000, help="sentences per rayflow run")
    parser.add_argument("--per-call-sentences", type=int, default=1_000)
    parser.add_argument("--latency-secs", type=float, default=10.0, help="length of the half-rate run")
    parser.add_argument("--max-pending", type=int, default=DEFAULT_MAX_SPOUT_PENDING, help="max_spout_pending")
    parser.add_argument("--linger-ms", type=float, help="rayflow.batch.linger.ms (default: Config's)")
    parser.add_argument("--batch-size", type=int, help="rayflow.batch.size (default: Config's)")
    parser.add_argument("--control-linger-ms", type=float, help="rayflow.control.linger.ms (default: Config's)")
    parser.add_argument("--tasks", type=int, nargs="*", default=[1, 2, 4], help="tasks per bolt in the sweep")
    parser.add_argument(
        "--rounds", type=int, default=5, help="the sweep and bytewax run this often, interleaved; medians are reported"
    )
    parser.add_argument("--bytewax-batch", type=int, default=1000, help="bytewax TestingSource batch size")
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args(argv)
    tuning = {
        key: value
        for key, value in (
            ("linger_ms", args.linger_ms),
            ("batch_size", args.batch_size),
            ("control_linger_ms", args.control_linger_ms),
        )
        if value is not None
    }
    pending = args.max_pending

    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "config": {
            "max_spout_pending": pending,
            **Config.of(tuning).model_dump(
                include={"linger_ms", "control_linger_ms", "batch_size", "max_inflight_batches"}
            ),
        },
    }
    sweep = sorted({1, *args.tasks})
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in sweep}
    bytewax_runs: list[dict[str, Any]] = []
    with LocalCluster() as cluster:
        # Rounds interleave the configurations (and bytewax), so that a slow spell of a shared
        # machine weighs on all of them alike; each is reported by its median run. The order
        # turns round every round (bytewax, 1, 2, 4, then 4, 2, 1, bytewax): 1 x 1 always runs
        # next to bytewax and to 2 x 2, and a machine slowing down through a round favours none.
        for round_ in range(args.rounds):
            order: list[int | None] = [None, *sweep]  # None: bytewax
            for n in order if round_ % 2 == 0 else reversed(order):
                if n is not None:
                    runs[n].append(run_rayflow(cluster, args.sentences, 1, max_pending=pending, tuning=tuning, tasks=n))
                    continue
                bytewax_run = run_bytewax(args.sentences, args.bytewax_batch)
                if bytewax_run is not None:
                    bytewax_runs.append(bytewax_run)
        results["tasks"] = {str(n): _median(r) for n, r in runs.items()}
        results["reliable"] = results["tasks"]["1"]
        results["unreliable"] = run_rayflow(cluster, args.sentences, 0, max_pending=pending, tuning=tuning)
        results["per_call"] = run_per_call(args.per_call_sentences)
        half_rate = results["reliable"]["words_per_s"] / WORDS_PER_CYCLE * len(SENTENCES) / 2
        results["half_rate"] = run_rayflow(
            cluster, int(half_rate * args.latency_secs), 1, rate=half_rate, max_pending=pending, tuning=tuning
        )
        results["half_rate"]["sentences_per_s"] = half_rate
    results["bytewax"] = _median(bytewax_runs) if bytewax_runs else None
    results["bare_loop"] = run_bare_loop(args.sentences * 5)

    reliable = results["reliable"]["words_per_s"]
    results["ratios"] = {
        "reliable_vs_per_call": reliable / results["per_call"]["words_per_s"],
        "reliable_vs_unreliable": reliable / results["unreliable"]["words_per_s"],
        "reliable_vs_bare_loop": reliable / results["bare_loop"]["words_per_s"],
    }
    # The ratios the targets are about are medians of per-round ratios, each of two runs made
    # next to each other: a shared box's speed drifts by a third within minutes, which a ratio
    # of two medians (taken from different moments) would carry.
    paired: dict[str, dict[str, Any]] = {}
    if bytewax_runs:
        paired["reliable_vs_bytewax"] = paired_ratio(runs[1], bytewax_runs)
    if 2 in runs:
        paired["2x2_vs_1x1"] = paired_ratio(runs[2], runs[1])
    results["paired_ratios"] = paired
    results["ratios"].update({name: figure["median"] for name, figure in paired.items()})

    print(f"{'configuration':<28}{'words/s':>14}")
    for key, label in [
        ("reliable", "rayflow, acking (1 acker)"),
        ("unreliable", "rayflow, ackers=0"),
        ("per_call", "one Ray call per tuple"),
        ("bytewax", "bytewax 0.21, 1 worker"),
        ("bare_loop", "bare Python loop"),
    ]:
        if results[key] is None:
            print(f"{label:<28}{'not installed':>14}")
            continue
        print(f"{label:<28}{results[key]['words_per_s']:>14,.0f}")
    for n, run in sorted(results["tasks"].items(), key=lambda item: int(item[0])):
        each = ", ".join(f"{r['words_per_s'] / 1000:.0f}k" for r in run["runs"])
        print(f"{f'acking, {n} split x {n} count':<28}{run['words_per_s']:>14,.0f}   (runs: {each})")
    for name, ratio in results["ratios"].items():
        rounds = paired.get(name, {}).get("rounds")
        each = f"   (median of rounds: {', '.join(f'{r:.3f}' for r in rounds)})" if rounds else ""
        print(f"{name:<28}{ratio:>14.3f}{each}")
    for key in ("reliable", "half_rate"):
        lat = results[key]["complete_latency_ms"]
        print(f"complete latency ({key}): p50 {lat['p50']:.1f} ms  p99 {lat['p99']:.1f} ms  mean {lat['mean']:.1f} ms")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
