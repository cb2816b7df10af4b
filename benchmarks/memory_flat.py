"""Is memory bounded by default? An endless tracked spout feeds a bolt that never acks.

Every tree stays pending until it times out, so without a cap on pending trees the spout's and
the acker's maps would grow for as long as the topology runs. With the default config
(``max_spout_pending`` finite) both must stay flat. Prints the resident memory of the spout and
acker processes every ``--every`` seconds for ``--minutes``, and the growth from the first
full timeout cycle to the end.

    python benchmarks/memory_flat.py --minutes 10
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import psutil

from rayflow import Bolt, Config, LocalCluster, Spout, SpoutOutputCollector, TopologyBuilder, TopologyContext, Tuple


class Endless(Spout):
    outputs = ["n"]

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self._collector = collector
        self._n = 0

    def next_tuple(self) -> None:
        self._n += 1
        self._collector.emit([self._n, "x" * 20], msg_id=self._n)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(["n", "pad"])


class NeverAck(Bolt):
    def execute(self, tup: Tuple) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--every", type=float, default=30.0)
    parser.add_argument("--timeout", type=float, default=30.0, help="message_timeout_secs (default: Storm's 30)")
    args = parser.parse_args()
    builder = TopologyBuilder()
    builder.set_spout("endless", Endless())
    builder.set_bolt("never", NeverAck()).shuffle_grouping("endless")
    with LocalCluster() as cluster:
        handle = cluster.submit_topology("memory", Config(message_timeout_secs=args.timeout), builder.create_topology())
        pids = {m["kind"]: m["pid"] for m in handle.task_metrics().values() if m["kind"] in ("spout", "acker")}
        procs = {kind: psutil.Process(pid) for kind, pid in pids.items()}
        started = time.monotonic()
        samples: list[tuple[float, dict[str, float]]] = []
        while time.monotonic() - started < args.minutes * 60:
            time.sleep(args.every)
            rss = {kind: p.memory_info().rss / 2**20 for kind, p in procs.items()}
            metrics = handle.metrics()
            samples.append((time.monotonic() - started, rss))
            print(
                f"{samples[-1][0]:6.0f} s  spout {rss['spout']:6.1f} MB  acker {rss['acker']:6.1f} MB  "
                f"pending {metrics['endless']['pending']:6d}  emitted {metrics['endless']['emitted']:9d}  "
                f"timed out {metrics['endless']['failed']:9d}",
                flush=True,
            )
        # Compare with the first sample after two full timeout cycles (maps at steady state).
        steady = next((rss for t, rss in samples if t >= 2 * args.timeout), samples[0][1])
        end = samples[-1][1]
        for kind in ("spout", "acker"):
            print(f"{kind}: {steady[kind]:.1f} MB after two timeouts -> {end[kind]:.1f} MB at the end")


if __name__ == "__main__":
    main()
