"""Word-count benchmark: rayflow with acking, without acking, one Ray call per tuple, bytewax
(when installed: the ``bench`` extra) and a bare Python loop, measured side by side in one run.
Not a test: run it on a quiet machine.

    python benchmarks/wordcount.py [--sentences N] [--tasks 1 2 4] [--rounds 5] [--json results.json]

Every configuration splits and counts the same 5 sentences (those of examples/wordcount.py,
whose bolts rayflow runs here). rayflow runs spout -> split (shuffle) -> count (fields on word),
1 acker when acking: with 1, 2 and 4 tasks per bolt (the sweep; one spout task, so only 1 x 1
chains the split to the spout: ``rayflow/_chaining.py``), with as many spout tasks as bolt
tasks (2 and 4: every split chained to its spout), and, 1 x 1, with ``ackers=0``, with
chaining off, and with each task actor pinned to a core of its own
(``rayflow.worker.cpu.pinning``, off by default).
bytewax runs the same split and count (``flat_map`` then a keyed ``stateful_map``) without any
acking, on one worker in this process and on a cluster of 2 worker processes
(``--bytewax-workers``). All of them run ``--rounds`` times, interleaved, and each is reported
by its median run; every ratio against bytewax or between two configurations is the median of
each round's ratio of two runs made in that round, as a shared machine's speed drifts. The
latency run feeds the reliable topology at half the rate it reached and reports the complete
latency (spout emit to spout ack) percentiles, beside those of the saturated 1 x 1 runs.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
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
    spouts: int = 1,
) -> dict[str, Any]:
    """``spouts`` tasks emit ``sentences // spouts`` sentences each."""
    sentences -= sentences % spouts
    builder = TopologyBuilder()
    builder.set_spout("sentences", BenchSpout(sentences // spouts, rate), parallelism=spouts)
    builder.set_bolt("split", SplitSentence(), parallelism=tasks).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), parallelism=tasks).fields_grouping("split", ["word"])
    conf = Config.of({"ackers": ackers, "max_spout_pending": max_pending, **(tuning or {})})
    name = f"wordcount-ackers{ackers}-tasks{tasks}-spouts{spouts}"
    handle = cluster.submit_topology(name, conf, builder.create_topology(), active=False)
    expected = words_in(sentences // spouts) * spouts
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


def _bytewax_flow(sentences: int, batch_size: int, counted: list[float]) -> Any:
    """The word count as a bytewax dataflow: each worker reads every ``worker_count``-th
    sentence (a source partition per worker), splits it (``flat_map``) and counts the words
    by key (``stateful_map``, words exchanged between workers); ``counted[0]`` adds up the
    counts this process wrote, ``counted[1]`` is when (``time.time``) it read its first
    sentence."""
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import DynamicSource, StatelessSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition

    class Share(StatelessSourcePartition[str]):
        def __init__(self, first: int, step: int) -> None:
            self.next = first
            self.step = step

        def next_batch(self) -> list[str]:
            if self.next >= sentences:
                raise StopIteration
            if not counted[1]:
                counted[1] = time.time()
            end = min(self.next + batch_size * self.step, sentences)
            batch = [SENTENCES[i % 5] for i in range(self.next, end, self.step)]
            self.next += len(batch) * self.step
            return batch

    class Sentences(DynamicSource[str]):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> Share:
            return Share(worker_index, worker_count)

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
    words = op.flat_map("split", op.input("sentences", flow, Sentences()), str.split)
    counts = op.stateful_map("count", op.key_on("word", words, lambda word: word), count)
    op.output("out", counts, TallySink())
    return flow


def _bytewax_process(addresses: list[str], proc_id: int, sentences: int, batch_size: int, ready: Any, go: Any) -> None:
    """One process of a bytewax cluster (spawned): built, then run once ``go`` is set; puts
    ``(words its sink wrote, when it read its first sentence, when it ended)`` on ``ready``."""
    from bytewax.testing import cluster_main

    counted = [0.0, 0.0]
    flow = _bytewax_flow(sentences, batch_size, counted)
    ready.put(None)
    go.wait()
    cluster_main(flow, addresses, proc_id)
    ready.put((counted[0], counted[1], time.time()))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run_bytewax(sentences: int, batch_size: int, workers: int = 1) -> dict[str, Any] | None:
    """The same split and count on bytewax 0.21, without acking; ``None`` when bytewax is not
    installed. One worker runs in this process; ``workers`` > 1 is a cluster of that many
    processes of one worker each (bytewax's workers are threads under one GIL, so only
    processes can use more than one core), timed from the first sentence read to the last
    process's end (the time its processes take to connect to each other is left out)."""
    try:
        from bytewax.testing import run_main
    except ImportError:
        return None
    expected = words_in(sentences)
    if workers == 1:
        counted = [0.0, 0.0]
        flow = _bytewax_flow(sentences, batch_size, counted)
        started = time.perf_counter()
        run_main(flow)
        elapsed = time.perf_counter() - started
    else:
        spawn = multiprocessing.get_context("spawn")
        ready, go = spawn.Queue(), spawn.Event()
        addresses = [f"127.0.0.1:{_free_port()}" for _ in range(workers)]
        processes = [
            spawn.Process(target=_bytewax_process, args=(addresses, i, sentences, batch_size, ready, go))
            for i in range(workers)
        ]
        for process in processes:
            process.start()
        for _ in processes:
            ready.get(timeout=120)
        go.set()
        ends = [ready.get(timeout=600) for _ in processes]
        counted = [sum(words for words, _, _ in ends)]
        elapsed = max(end for _, _, end in ends) - min(first for _, first, _ in ends if first)
        for process in processes:
            process.join()
    assert counted[0] == expected, (counted, expected)
    return {"words": expected, "seconds": elapsed, "words_per_s": expected / elapsed, "batch_size": batch_size}


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
    parser.add_argument("--bytewax-batch", type=int, default=1000, help="sentences per bytewax source batch")
    parser.add_argument(
        "--bytewax-workers", type=int, nargs="*", default=[1, 2], help="bytewax runs with this many worker processes"
    )
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
    rayflow_keys = [f"{n}x{n}" for n in sweep] + [f"chained{n}" for n in sweep[1:]] + ["pinned", "unchained", "ackers0"]
    bytewax_keys = [f"bytewax{w}" for w in args.bytewax_workers]
    runs: dict[str, list[dict[str, Any]]] = {key: [] for key in rayflow_keys + bytewax_keys}
    with LocalCluster() as cluster:
        # Rounds interleave the configurations, so that a slow spell of a shared machine weighs
        # on all of them alike; each is reported by its median run. The order turns round every
        # round (bytewax 2, ackers=0, pinned, bytewax 1, 1 x 1, 2 x 2, 4 x 4, then back): 1 x 1
        # always runs next to bytewax 1 and to 2 x 2, and a machine slowing down through a
        # round favours none.
        order = [*bytewax_keys[1:], "ackers0", "pinned", *bytewax_keys[:1], *rayflow_keys[:-3], "unchained"]
        for round_ in range(args.rounds):
            for key in order if round_ % 2 == 0 else reversed(order):
                if key.startswith("bytewax"):
                    run = run_bytewax(args.sentences, args.bytewax_batch, int(key[len("bytewax") :]))
                    if run is None:
                        continue
                elif key == "ackers0":
                    run = run_rayflow(cluster, args.sentences, 0, max_pending=pending, tuning=tuning)
                elif key.startswith("chained"):
                    n = int(key[len("chained") :])
                    run = run_rayflow(cluster, args.sentences, 1, max_pending=pending, tuning=tuning, tasks=n, spouts=n)
                elif key == "pinned":
                    pinned = {**tuning, "cpu_pinning": True}
                    run = run_rayflow(cluster, args.sentences, 1, max_pending=pending, tuning=pinned)
                elif key == "unchained":
                    unchained = {**tuning, "chaining": False}
                    run = run_rayflow(cluster, args.sentences, 1, max_pending=pending, tuning=unchained)
                else:
                    tasks = int(key.split("x")[0])
                    run = run_rayflow(cluster, args.sentences, 1, max_pending=pending, tuning=tuning, tasks=tasks)
                runs[key].append(run)
        results["tasks"] = {str(n): _median(runs[f"{n}x{n}"]) for n in sweep}
        results["chained_tasks"] = {str(n): _median(runs[f"chained{n}"]) for n in sweep[1:]}
        results["reliable"] = results["tasks"]["1"]
        results["unreliable"] = _median(runs["ackers0"])
        results["unchained"] = _median(runs["unchained"])
        results["pinned"] = _median(runs["pinned"])
        results["per_call"] = run_per_call(args.per_call_sentences)
        half_rate = results["reliable"]["words_per_s"] / WORDS_PER_CYCLE * len(SENTENCES) / 2
        results["half_rate"] = run_rayflow(
            cluster, int(half_rate * args.latency_secs), 1, rate=half_rate, max_pending=pending, tuning=tuning
        )
        results["half_rate"]["sentences_per_s"] = half_rate
    results["bytewax_workers"] = {key[len("bytewax") :]: _median(runs[key]) for key in bytewax_keys if runs[key]}
    results["bytewax"] = results["bytewax_workers"].get("1")
    results["bare_loop"] = run_bare_loop(args.sentences * 5)

    reliable = results["reliable"]["words_per_s"]
    results["ratios"] = {
        "reliable_vs_per_call": reliable / results["per_call"]["words_per_s"],
        "reliable_vs_bare_loop": reliable / results["bare_loop"]["words_per_s"],
    }
    # The ratios the targets are about are medians of per-round ratios, each of two runs made
    # in the same round: a shared box's speed drifts by a third within minutes, which a ratio
    # of two medians (taken from different moments) would carry.
    paired: dict[str, dict[str, Any]] = {
        "reliable_vs_unreliable": paired_ratio(runs["1x1"], runs["ackers0"]),
        "chained_vs_unchained": paired_ratio(runs["1x1"], runs["unchained"]),
        "pinned_vs_unpinned": paired_ratio(runs["pinned"], runs["1x1"]),
    }
    for key in bytewax_keys:
        if runs[key]:
            workers = key[len("bytewax") :]
            suffix = "" if workers == "1" else f"_{workers}w"
            paired[f"reliable_vs_bytewax{suffix}"] = paired_ratio(runs["1x1"], runs[key])
            paired[f"pinned_vs_bytewax{suffix}"] = paired_ratio(runs["pinned"], runs[key])
            for n in sweep[1:]:
                paired[f"{n}x{n}_vs_bytewax{suffix}"] = paired_ratio(runs[f"{n}x{n}"], runs[key])
    for n in sweep[1:]:
        paired[f"{n}x{n}_vs_1x1"] = paired_ratio(runs[f"{n}x{n}"], runs["1x1"])
        paired[f"chained{n}_vs_1x1"] = paired_ratio(runs[f"chained{n}"], runs["1x1"])
    results["paired_ratios"] = paired
    results["ratios"].update({name: figure["median"] for name, figure in paired.items()})

    def each(key: str) -> str:
        return ", ".join(f"{r['words_per_s'] / 1000:.0f}k" for r in runs[key])

    labels = {
        **{f"{n}x{n}": f"acking, {n} split x {n} count" for n in sweep},
        **{f"chained{n}": f"acking, {n} spouts, {n} x {n} chained" for n in sweep[1:]},
        "pinned": "acking, 1 x 1, pinned",
        "unchained": "acking, 1 x 1, not chained",
        "ackers0": "rayflow, ackers=0 (1 x 1)",
        **{f"bytewax{w}": f"bytewax 0.21, {w} worker{'s' if w > 1 else ''}" for w in args.bytewax_workers},
    }
    header = "".join(f"{'/ ' + labels[key][len('bytewax 0.21, ') :]:>14}" for key in bytewax_keys if runs[key])
    print(f"{'configuration':<32}{'words/s':>12}{header}   runs")
    for key in [*rayflow_keys, *bytewax_keys]:
        if not runs[key]:
            print(f"{labels[key]:<32}{'not installed':>12}")
            continue
        ratios = "".join(f"{paired_ratio(runs[key], runs[b])['median']:>13.3f}x" for b in bytewax_keys if runs[b])
        print(f"{labels[key]:<32}{_median(runs[key])['words_per_s']:>12,.0f}{ratios}   ({each(key)})")
    for key, label in [("per_call", "one Ray call per tuple"), ("bare_loop", "bare Python loop")]:
        print(f"{label:<32}{results[key]['words_per_s']:>12,.0f}")
    print("ratios: paired medians of each round's ratio; a bare figure is a ratio of medians")
    for name, ratio in results["ratios"].items():
        rounds = paired.get(name, {}).get("rounds")
        spread = f"   (rounds: {', '.join(f'{r:.3f}' for r in rounds)})" if rounds else ""
        print(f"  {name:<30}{ratio:>8.3f}{spread}")
    for key, label in (("reliable", "saturated"), ("half_rate", "half rate")):
        lat = results[key]["complete_latency_ms"]
        print(
            f"complete latency ({label}): p50 {lat['p50']:.1f} ms  p99 {lat['p99']:.1f} ms  mean {lat['mean']:.1f} ms"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
