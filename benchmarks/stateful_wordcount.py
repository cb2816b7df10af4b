"""Stateful word count against the plain one, side by side in one local Ray, and what a
checkpoint costs the state providers. Not a test: run it on a quiet machine.

    python benchmarks/stateful_wordcount.py [--sentences N] [--rounds 3] [--providers sqlite redis]
                                            [--exactly-once sqlite]

Topology (every run): sentences -> split (shuffle) -> count (fields on word), one task each, one
acker, every other setting at its default (``Config()``: the default pending budget and
checkpoint interval), so the figures say what a user gets without tuning. ``count`` is
``examples.wordcount.WordCount`` (a ``BasicBolt``, counts in a dict) for the plain run and
``examples.stateful_wordcount.StatefulWordCount`` (counts in a ``KeyValueState``, acks deferred
to the commit) for each provider, and with ``--exactly-once P`` the same stateful count with
``processing_guarantee="exactly_once"`` on provider P (its spout can ``seek``). Rounds alternate
their order; each ratio is the median of the rounds' ratios of runs made one after the other.

The checkpoint part does what one task of a fields-grouped stateful bolt does at a checkpoint
with N changed keys (word -> int): split them by key group, stage them, commit every group the
task owns (one task: all 128), directly against each provider; and, in the same run, alternating
with it, what the providers of ``--baseline REV`` (default: the commit before the bulk forms)
did for the same keys in one per-task namespace. It reports the p50/p99 of the whole checkpoint
(split + stage + commit) of both and the bytes of pickled keys and values.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: find examples/

from benchmarks.wordcount import BenchSpout, paired_ratio, words_in  # noqa: E402
from examples.stateful_wordcount import StatefulWordCount  # noqa: E402
from examples.wordcount import SplitSentence, WordCount  # noqa: E402
from rayflow import Config, LocalCluster, TopologyBuilder  # noqa: E402
from rayflow._state.key_groups import DEFAULT_MAX_PARALLELISM, group_namespace, split_changes  # noqa: E402
from rayflow._state.provider import BUILT_IN, StateProvider, open_provider  # noqa: E402

REDIS_URL = "redis://127.0.0.1:6379/0"
BASELINE = "64d6049"
"""The last commit before the providers' bulk forms, per key group staging and bulk pickling."""


def provider_settings(provider: str, state_dir: str) -> dict[str, Any]:
    if provider == "sqlite":
        return {"state_provider": "sqlite", "state_provider_config": {"dir": state_dir}}
    if provider == "redis":
        return {"state_provider": "redis", "state_provider_config": {"url": REDIS_URL, "key_prefix": "rayflow:bench"}}
    return {"state_provider": provider}


class SeekableBenchSpout(BenchSpout):
    """``BenchSpout`` that can go back: it stands at the next sentence to emit."""

    def position(self) -> int:
        return self.sent

    def seek(self, position: int) -> None:
        self.sent = position


EXACTLY_ONCE = "+eo"
"""Suffix of a configuration that runs its provider exactly-once (``sqlite+eo``)."""


def run(
    cluster: LocalCluster, sentences: int, configuration: str | None, state_dir: str, settings: dict[str, Any]
) -> dict[str, Any]:
    provider = configuration.removesuffix(EXACTLY_ONCE) if configuration else None
    exactly_once = bool(configuration and configuration.endswith(EXACTLY_ONCE))
    builder = TopologyBuilder()
    builder.set_spout("sentences", SeekableBenchSpout(sentences))
    builder.set_bolt("split", SplitSentence()).shuffle_grouping("sentences")
    count = StatefulWordCount() if provider else WordCount()
    builder.set_bolt("count", count).fields_grouping("split", ["word"])
    name = f"bench-{(configuration or 'plain').replace('+', '-')}-{uuid.uuid4().hex[:8]}"  # fresh state every run
    conf = Config.of({**settings, **(provider_settings(provider, state_dir) if provider else {})})
    if exactly_once:
        conf = conf.merged({"processing_guarantee": "exactly_once"})
    handle = cluster.submit_topology(name, conf, builder.create_topology(), active=False)
    started = time.perf_counter()
    handle.activate()
    if not handle.wait(timeout=600, poll_secs=0.1):
        raise RuntimeError(f"{name}: not done after 600 s")
    elapsed = time.perf_counter() - started
    metrics = handle.metrics()
    handle.kill()
    spout = metrics["sentences"]
    assert spout["failed"] == 0 and spout["acked"] == sentences, spout
    words = words_in(sentences)
    return {
        "words_per_s": words / elapsed,
        "seconds": elapsed,
        "complete_p50_ms": spout["complete_latency_ms"]["p50"],
        "checkpoints": metrics.get("__checkpoint", {}).get("checkpoints", 0),
    }


def baseline_provider(name: str, revision: str, config: dict[str, Any]) -> StateProvider:
    """Provider ``name`` as it was at ``revision`` (its module read from git, loaded beside
    today's ``rayflow._state`` so that its relative imports resolve)."""
    path = BUILT_IN[name].rsplit(".", 1)[0].replace(".", "/") + ".py"
    root = Path(__file__).resolve().parents[1]
    source = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=root, capture_output=True, check=True).stdout
    module_name = f"rayflow._state._baseline_{name}"
    spec = importlib.util.spec_from_loader(module_name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "rayflow._state"
    exec(compile(source, f"{revision}:{path}", "exec"), module.__dict__)  # noqa: S102 -- our own file from git
    cls: type[StateProvider] = getattr(module, BUILT_IN[name].rsplit(".", 1)[1])
    return cls(config, "bench")


def forget(name: str, settings: dict[str, Any], topology: str) -> None:
    """Delete what a checkpoint-cost run of ``topology`` left in Redis (100,000 keys are tens of
    MB); SQLite's files are in a temporary directory."""
    if name != "redis":
        return
    import redis

    client = redis.Redis.from_url(settings["url"])
    keys = list(client.scan_iter(f"{settings['key_prefix']}:{topology}/*", count=1000))
    for start in range(0, len(keys), 1000):
        client.delete(*keys[start : start + 1000])
    client.close()


def checkpoint_cost(
    today: StateProvider, before: StateProvider, keys: int, repeats: int, topology: str
) -> dict[str, Any]:
    """``repeats`` checkpoints of ``keys`` changed keys each, today's way and ``before``'s,
    alternating which goes first; milliseconds per checkpoint (p50, p99) and this process's
    CPU microseconds per key (median) of each, and the bytes pickled."""
    groups = range(DEFAULT_MAX_PARALLELISM)
    namespaces = [group_namespace(topology, "count", g) for g in groups]
    old_namespace = f"{topology}/count/1"

    def now(changes: dict[str, int], txid: int) -> None:
        staged, _ = split_changes(changes, 1, DEFAULT_MAX_PARALLELISM, groups, namespaces)
        today.stage_many(txid, staged)
        today.commit_many(namespaces, txid)

    def then(changes: dict[str, int], txid: int) -> None:
        before.stage(old_namespace, txid, changes)
        before.commit(old_namespace, txid)

    times: dict[str, list[float]] = {"today": [], "before": []}
    cpu: dict[str, list[float]] = {"today": [], "before": []}
    written = 0
    now({"warm": 0}, 1)  # connections opened and scripts loaded before the clock runs
    then({"warm": 0}, 1)
    for txid in range(2, repeats + 2):
        changes = {f"word{i}": txid * i for i in range(keys)}
        written = sum(len(pickle.dumps(k, 5)) + len(pickle.dumps(v, 5)) for k, v in changes.items())
        order = [("today", now), ("before", then)]
        for which, checkpoint in order if txid % 2 else reversed(order):
            started, started_cpu = time.perf_counter(), time.process_time()
            checkpoint(changes, txid)
            times[which].append(time.perf_counter() - started)
            cpu[which].append(time.process_time() - started_cpu)
    result: dict[str, Any] = {"bytes": written}
    for which, taken in times.items():
        taken.sort()
        p99 = taken[min(len(taken) - 1, int(0.99 * len(taken)))]
        result[which] = (1000 * statistics.median(taken), 1000 * p99, 1e6 * statistics.median(cpu[which]) / keys)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--providers", nargs="+", default=["sqlite", "redis"])
    parser.add_argument(
        "--exactly-once", nargs="*", default=[], metavar="PROVIDER", help="also run these providers exactly-once"
    )
    parser.add_argument("--skip-topology", action="store_true", help="only the checkpoint costs")
    parser.add_argument("--baseline", default=BASELINE, help="the git revision whose providers to compare with")
    parser.add_argument("--config", default="{}", help="settings for every run, as JSON (default: none)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rayflow-bench-state-") as state_dir:  # tens of MB of SQLite files
        return measure(args, state_dir)


def measure(args: argparse.Namespace, state_dir: str) -> int:
    print(f"checkpoint cost (N changed keys: today over {DEFAULT_MAX_PARALLELISM} key groups | {args.baseline}):")
    for name in args.providers:
        settings = provider_settings(name, state_dir)["state_provider_config"]
        today = open_provider(name, settings, "bench")
        before = baseline_provider(name, args.baseline, settings)
        for keys, repeats in ((1_000, 50), (100_000, 7)):
            topology = f"bench-checkpoint-{uuid.uuid4().hex[:8]}"
            cost = checkpoint_cost(today, before, keys, repeats, topology)
            forget(name, settings, topology)
            (p50, p99, us), (old_p50, old_p99, old_us) = cost["today"], cost["before"]
            print(
                f"  {name:7} {keys:>7,} keys: today p50 {p50:7.1f} ms p99 {p99:7.1f} ms {us:5.2f} CPU-us/key | "
                f"before p50 {old_p50:7.1f} ms p99 {old_p99:7.1f} ms {old_us:5.2f} CPU-us/key | "
                f"p50 {old_p50 / p50:4.1f}x  {cost['bytes'] / 1e6:5.2f} MB pickled"
            )
        today.close()
        before.close()
    if args.skip_topology:
        return 0

    configurations: list[str | None] = [None, *args.providers, *(p + EXACTLY_ONCE for p in args.exactly_once)]
    runs: dict[str | None, list[dict[str, Any]]] = {c: [] for c in configurations}
    with LocalCluster() as cluster:
        settings = json.loads(args.config)
        run(cluster, args.sentences // 10, None, state_dir, settings)  # warm up the workers
        for round_ in range(args.rounds):
            order = configurations if round_ % 2 == 0 else list(reversed(configurations))
            for configuration in order:
                runs[configuration].append(run(cluster, args.sentences, configuration, state_dir, settings))
            print(
                f"round {round_ + 1}: "
                + ", ".join(f"{c or 'plain'} {runs[c][-1]['words_per_s']:,.0f} words/s" for c in configurations)
            )
    print(f"\nword count, {args.sentences:,} sentences, config {args.config}, {args.rounds} rounds (median):")
    for configuration in configurations:
        best = sorted(runs[configuration], key=lambda r: r["words_per_s"])[len(runs[configuration]) // 2]
        line = f"  {configuration or 'plain':7} {best['words_per_s']:>10,.0f} words/s"
        line += f"  p50 complete {best['complete_p50_ms']:6.1f} ms"
        if configuration:
            ratio = paired_ratio(runs[configuration], runs[None])
            rounds = ", ".join(f"{r:.2f}" for r in ratio["rounds"])
            line += f"  {ratio['median']:.2f}x of plain (rounds {rounds}), {best['checkpoints']} checkpoints"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
