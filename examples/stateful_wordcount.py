"""Word count whose counts survive a kill: a StatefulBolt checkpointed through the acker.

    sentences (SentenceSpout) --shuffle--> split --fields(word)--> count (StatefulWordCount)

``count`` keeps its counts in a ``KeyValueState``. Every ``checkpoint_interval_ms`` a checkpoint
travels the topology behind the data: each count task writes the words it changed since the last
one to the state provider (here SQLite files under ``--state-dir``: no server), and only then are
the sentences it counted acked. Kill a count task and it comes back with its last committed
counts before it sees another word; the sentences counted since that commit were never acked,
so the spout replays them into the restored counts. Nothing committed is lost; a replayed
sentence may be counted twice (at-least-once state).

Run it, and kill a count task while it runs, either by letting the example do it::

    python examples/stateful_wordcount.py --kill-after 3

or yourself, in another terminal, with the pid it prints (``kill -9 <pid>``). It prints the
committed counts as they grow and, at the end, how they compare with the truth: ``lost: 0``.
Run it again with the same ``--state-dir`` and the counts go on from where they were: each line
shows the words committed in all, and of them this run's.

The ``checkpoints`` and ``rollbacks`` it prints are the count tasks' counters, which start again
at 0 in a task that was restarted, as every counter of a task does (``docs/metrics.md``): after
the kill the sum drops by what the killed task had counted, and grows again. The commits
themselves go on: ``committed words`` never drops.

With ``--exactly-once`` the topology runs with ``processing_guarantee="exactly_once"``: every
checkpoint also records where the sentence spout stood, and a kill rolls the whole topology back
to the last checkpoint, so no sentence is counted twice either: ``counted above the truth: 0``.
Run it again with the same ``--state-dir`` and it resumes where the last run's last checkpoint
left off (``docs/concepts/guarantees.md``)::

    python examples/stateful_wordcount.py --exactly-once --kill-after 3
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from typing import Any

if not __package__:  # run as a script: make ``examples`` importable, as under ``python -m``
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from examples.wordcount import SENTENCES, SentenceSpout, SplitSentence  # noqa: E402
from rayflow import (  # noqa: E402
    Config,
    KeyValueState,
    LocalCluster,
    OutputCollector,
    StatefulBolt,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)
from rayflow._topology import Topology  # noqa: E402
from rayflow.state import SqliteStateProvider, load_component  # noqa: E402

NAME = "stateful-wordcount"


class StatefulWordCount(StatefulBolt):
    """The contract's stateful word count: counts in a ``KeyValueState``, each emit anchored."""

    outputs = ["word", "count"]

    def init_state(self, state: KeyValueState) -> None:
        self.counts = state  # empty the first time; the last committed counts after a restart

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        word = tup["word"]
        n = self.counts.get(word, 0) + 1
        self.counts.put(word, n)
        self.collector.emit([word, n], anchors=tup)
        self.collector.ack(tup)  # takes effect when the next checkpoint commits


def build(sentences: int, split: int = 2, count: int = 2) -> Topology:
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(sentences))
    builder.set_bolt("split", SplitSentence(), parallelism=split).shuffle_grouping("sentences")
    builder.set_bolt("count", StatefulWordCount(), parallelism=count).fields_grouping("split", ["word"])
    return builder.create_topology()


def truth(sentences: int) -> Counter[str]:
    """What the counts must be once every sentence was counted once."""
    return Counter(w for i in range(sentences) for w in SENTENCES[i % len(SENTENCES)].split())


def committed_counts(state_dir: str, count_tasks: list[int]) -> Counter[str]:
    """The counts the count tasks have committed: what a restarted task would load."""
    provider = SqliteStateProvider({"dir": state_dir}, NAME)
    total: Counter[str] = Counter(load_component(provider, NAME, "count"))
    provider.close()
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=300_000)
    parser.add_argument("--kill-after", type=float, default=None, help="SIGKILL a count task after this many s")
    parser.add_argument("--state-dir", default=os.path.join(tempfile.gettempdir(), "rayflow-stateful-wordcount"))
    parser.add_argument("--timeout", type=float, default=180.0, help="give up after this many seconds")
    parser.add_argument("--exactly-once", action="store_true", help="processing_guarantee='exactly_once'")
    args = parser.parse_args(argv)

    before_run = Counter[str]()
    conf = Config.of(
        {
            "message_timeout_secs": 10,
            "state_provider": "sqlite",
            "state_provider_config": {"dir": args.state_dir},
            "checkpoint_interval_ms": 500,
            "processing_guarantee": "exactly_once" if args.exactly_once else "at_least_once",
        }
    )
    print("starting a local Ray, then the topology (20-45 s on a busy box)...", flush=True)
    with LocalCluster() as cluster:
        topology = build(args.sentences)
        handle = cluster.submit_topology(NAME, conf, topology)
        tasks = handle.task_metrics()
        count_tasks = sorted(t for t, m in tasks.items() if m["component"] == "count")
        before_run = committed_counts(args.state_dir, count_tasks)
        if before_run:
            print(f"the counts of the last run are back: {before_run.total():,} words committed; this run adds to them")
        for task in count_tasks:
            print(f"count task {task} runs as pid {tasks[task]['pid']} (kill -9 it: its counts come back)")
        started = time.monotonic()
        killed = args.kill_after is None
        finished = False
        while time.monotonic() - started < args.timeout and not finished:
            finished = handle.wait(timeout=1.0)
            if not killed and time.monotonic() - started >= args.kill_after:
                pid = handle.task_metrics()[count_tasks[0]]["pid"]
                os.kill(pid, signal.SIGKILL)
                killed = True
                print(
                    f"killed count task {count_tasks[0]} (pid {pid}) with SIGKILL. Ray reports the death, "
                    "with its guesses at a cause (the OOM killer, ray stop --force, a crash): here it is this "
                    "kill. The task restarts with its committed counts, its checkpoints counter from 0."
                )
            metrics = handle.metrics()["count"]
            committed = committed_counts(args.state_dir, count_tasks).total()
            print(
                f"{time.monotonic() - started:5.1f} s  committed words {committed:>9,} "
                f"(this run {committed - before_run.total():,})  checkpoints {metrics['checkpoints']:>4}  "
                f"rollbacks {metrics['rollbacks']}  restarts {metrics['restarts']}"
            )
        handle.kill()
    counts = committed_counts(args.state_dir, count_tasks)
    # Exactly-once resumes from the last run's cut: the sentences it committed are not sent again.
    expected = truth(args.sentences) if args.exactly_once else before_run + truth(args.sentences)
    lost = sum(max(0, expected[w] - counts[w]) for w in expected)
    above = sum(counts.values()) - sum(expected.values())
    print(f"every sentence acked: {'yes' if finished else 'no'}")
    print(f"lost: {lost}  counted above the truth (replays): {above:,}")
    print(f"state lives in {SqliteStateProvider({'dir': args.state_dir}, NAME).path}")
    return 0 if finished and lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
