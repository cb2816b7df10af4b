"""The executors alone: word count through the real executors and the real wire format, no Ray.

    python benchmarks/inprocess.py [--sentences N] [--runs R] [--profile] [--no-chaining] [--bytewax]

Every task of spout -> split (shuffle) -> count (fields on word), acking on with one acker, is
built as the runtime builds it, and every payload is pickled by its sender and unpickled by its
receiver exactly as ``StreamTransport`` and ``TaskActor`` do -- but for a task chained to its
sender (1 x 1: the split, unless ``--no-chaining``), which is handed the payload as it is. What
is left out is only the stream itself. Deliveries follow the runtime's order: control (acker
traffic) ahead of data, the spout emitting bursts while its pending budget allows. The figure is CPU microseconds
(``time.process_time``) per word counted, best and median of ``--runs`` runs: the floor the
executors put under any end-to-end throughput (a 2-core box can at most run two of them at once).

``--bytewax`` runs bytewax's one-worker dataflow of the same split and count (no acking;
``wordcount.py``'s, in this process) between the runs, timed the same way, and prints its CPU
per word beside ours and the ratio of the two medians: what each engine's own code costs a
word on one core of this box, without any crossing between processes.

On a shared, noisy machine, count instructions instead (repeatable to a fraction of a percent):
run under ``valgrind --tool=callgrind`` with two sizes and divide the difference by the words::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null python benchmarks/inprocess.py --sentences 1000 --runs 1
    valgrind --tool=callgrind --callgrind-out-file=/dev/null python benchmarks/inprocess.py --sentences 6000 --runs 1
    # (Ir(6000) - Ir(1000)) / (5000 * 6.4) = instructions per word
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import gc
import pickle
import pstats
import statistics
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: find examples/

from examples.wordcount import SENTENCES, SplitSentence, WordCount  # noqa: E402
from rayflow import Config, Spout, TopologyBuilder  # noqa: E402
from rayflow._chaining import chain_plan  # noqa: E402
from rayflow._context import TopologyContext  # noqa: E402
from rayflow._executors import make_executor  # noqa: E402
from rayflow._topology import Topology  # noqa: E402

SPOUT_BURST = 256
"""``next_tuple`` calls per turn, as the runtime's spout loop makes them."""
GC_THRESHOLD = (50_000, 20, 100)
"""The cycle collector's thresholds a task actor runs with (``rayflow._runtime.task_actor``)."""


def words_in(sentences: int) -> int:
    full, rest = divmod(sentences, len(SENTENCES))
    return full * sum(len(s.split()) for s in SENTENCES) + sum(len(s.split()) for s in SENTENCES[:rest])


class CountingSpout(Spout):
    """Emits ``total`` sentences, tracked; a failure would make the figure meaningless."""

    outputs = ["sentence"]

    def __init__(self, total: int) -> None:
        self.total = total

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.sent = 0
        self.acked = 0

    def next_tuple(self) -> None:
        if self.sent >= self.total:
            self.collector.exhausted()
            return
        self.collector.emit([SENTENCES[self.sent % 5]], msg_id=self.sent)
        self.sent += 1

    def ack(self, msg_id: Any) -> None:
        self.acked += 1

    def fail(self, msg_id: Any) -> None:
        raise RuntimeError(f"sentence {msg_id} failed: the benchmark expects no failures")


def wordcount(sentences: int, split: int = 1, count: int = 1) -> Topology:
    builder = TopologyBuilder()
    builder.set_spout("sentences", CountingSpout(sentences))
    builder.set_bolt("split", SplitSentence(), parallelism=split).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), parallelism=count).fields_grouping("split", ["word"])
    return builder.create_topology()


class PickleLink:
    """The wire: every payload pickled (protocol 5) on send and queued for its destination;
    a payload to a chained task (``local``) handed to it at once, as ``ChainLink`` does."""

    def __init__(self, data: deque[tuple[int, bytes]], control: deque[tuple[int, bytes]]) -> None:
        self._data = data
        self._control = control
        self.local: dict[int, Any] = {}

    def send_data(self, dest: int, payload: Any) -> None:
        executor = self.local.get(dest)
        if executor is not None:
            executor.receive(payload)
            return
        self._data.append((dest, pickle.dumps(payload, protocol=5)))

    def send_control(self, dest: int, payload: Any) -> None:
        self._control.append((dest, pickle.dumps(payload, protocol=5)))

    def backlog(self, dest: int) -> int:
        return 0


class Run:
    """Every task of the word count, wired through pickled queues."""

    def __init__(self, sentences: int, split: int, count: int, conf: dict[str, Any]) -> None:
        topology = wordcount(sentences, split, count)
        self.conf = Config.of({"ackers": 1, **conf})
        self.data: deque[tuple[int, bytes]] = deque()
        self.control: deque[tuple[int, bytes]] = deque()
        link = PickleLink(self.data, self.control)
        layout = topology.task_layout(self.conf.ackers)
        plan = chain_plan(topology, self.conf, layout)  # as the runtime runs it
        topology = plan.topology
        self.executors: dict[int, Any] = {}
        for task in layout:
            context = TopologyContext(task, layout, topology.stream_fields())
            self.executors[task] = make_executor(copy.deepcopy(topology), self.conf, context, link)
        self.spouts = [e for e in self.executors.values() if e.kind == "spout"]
        link.local.update((task, self.executors[task]) for task in plan.hosts)
        self.order = [e for task, e in self.executors.items() if task not in plan.hosts]
        self.order += [self.executors[task] for task in plan.hosts]  # a chained task flushes after its host
        for executor in self.executors.values():
            executor.start()
            executor.activate()

    def drain(self) -> None:
        """Deliver until nothing moves: control first, then one data batch, as a task actor
        serves them; acker traffic is flushed once per round (the runtime lingers on it)."""
        executors, data, control = self.executors, self.data, self.control
        while True:
            while control:
                dest, payload = control.popleft()
                executors[dest].receive_control(pickle.loads(payload))
            if data:
                dest, payload = data.popleft()
                executors[dest].receive(pickle.loads(payload))
                continue
            for executor in self.order:
                executor.outbox.flush()
            if not (control or data):
                return

    def run(self) -> None:
        spouts = self.spouts
        while True:
            moved = False
            for spout in spouts:
                while spout.wants_next_tuple():
                    if not spout.run_burst(SPOUT_BURST):
                        break
                    moved = True
                spout.outbox.flush()
                for executor in self.order:  # what the spout's flush handed a chained task
                    executor.outbox.flush()
            self.drain()
            if not moved and all(s.finished for s in spouts):
                return


def measure(sentences: int, split: int, count: int, conf: dict[str, Any]) -> float:
    """CPU microseconds per word for one run (set-up excluded)."""
    run = Run(sentences, split, count, conf)
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)
    started = time.process_time()
    run.run()
    elapsed = time.process_time() - started
    spout = run.spouts[0].spout
    assert spout.acked == sentences, (spout.acked, sentences)
    return elapsed / words_in(sentences) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--split", type=int, default=1, help="split tasks")
    parser.add_argument("--count", type=int, default=1, help="count tasks")
    parser.add_argument("--max-pending", type=int, default=4000, help="max_spout_pending")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one run instead")
    parser.add_argument("--no-chaining", action="store_true", help="rayflow.chaining off")
    parser.add_argument("--bytewax", action="store_true", help="bytewax (1 worker) interleaved, CPU per word")
    args = parser.parse_args(argv)
    conf = {"max_spout_pending": args.max_pending, "chaining": not args.no_chaining}
    if args.profile:
        run = Run(args.sentences, args.split, args.count, conf)
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLD)
        profiler = cProfile.Profile()
        profiler.runcall(run.run)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return 0
    figures, theirs = [], []
    for _ in range(args.runs):
        figures.append(measure(args.sentences, args.split, args.count, conf))
        if args.bytewax:
            theirs.append(measure_bytewax(args.sentences))
    print(
        f"in-process word count ({args.split} split x {args.count} count, 1 acker, pickled"
        f"{', not chained' if args.no_chaining else ''}): "
        f"best {min(figures):.2f} us/word, median {statistics.median(figures):.2f} us/word "
        f"({1e6 / min(figures):,.0f} words/s of one core)"
    )
    if theirs:
        ratio = statistics.median(figures) / statistics.median(theirs)
        print(
            f"bytewax, 1 worker, no acking: best {min(theirs):.2f} us/word, median {statistics.median(theirs):.2f}"
            f" us/word; rayflow / bytewax, CPU per word (medians): {ratio:.3f}"
        )
    return 0


def measure_bytewax(sentences: int, batch_size: int = 1000) -> float:
    """CPU microseconds per word of bytewax's one-worker word count (``wordcount.py``'s flow)."""
    from bytewax.testing import run_main

    from benchmarks.wordcount import _bytewax_flow

    counted = [0.0, 0.0]
    flow = _bytewax_flow(sentences, batch_size, counted)
    gc.collect()
    started = time.process_time()
    run_main(flow)
    elapsed = time.process_time() - started
    assert counted[0] == words_in(sentences), (counted, sentences)
    return elapsed / words_in(sentences) * 1e6


if __name__ == "__main__":
    sys.exit(main())
