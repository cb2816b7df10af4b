"""Compare configurations of the word count on Ray side by side: each runs ``--rounds`` times,
interleaved with the others in one local Ray (the order reversed every round), and is reported
by its median; its ratio to the first configuration is the median of the rounds' ratios, as in
``wordcount.py``. Not a test: a
tool for judging a change or a setting on a noisy shared machine, where only runs made side by
side mean anything.

    python benchmarks/compare.py [--rounds 5] [--sentences 600000] NAME=JSON [NAME=JSON ...]

Each ``JSON`` is an object of config settings (by name or Storm key, as ``Config.of`` takes
them) plus ``"tasks"``, the tasks per bolt (default 1). The first configuration is the
baseline of the ratios. For example, 1 x 1 against 2 x 2, and 2 x 2 with a bigger budget::

    python benchmarks/compare.py '1x1={}' '2x2={"tasks": 2}' \\
        '2x2-10k={"tasks": 2, "topology.max.spout.pending": 10000}'

Besides words/s it prints the complete latency (p50), the frames sent, and, where
``/proc/stat`` exists, how many cores were busy during the run and the CPU per word that makes:
the machine's, so other processes on a shared box count too -- read it side by side only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: find benchmarks/

from benchmarks.wordcount import paired_ratio, run_rayflow  # noqa: E402
from rayflow import Config, LocalCluster  # noqa: E402
from rayflow._errors import ConfigError  # noqa: E402

PROC_STAT = Path("/proc/stat")
RUN_ARGUMENTS = ("ackers", "max_spout_pending")
"""Settings ``run_rayflow`` takes as arguments rather than as tuning (under either spelling)."""


@dataclass(frozen=True)
class Configuration:
    """One configuration to run, as ``run_rayflow`` takes it."""

    name: str
    tasks: int
    ackers: int
    max_pending: int | None
    tuning: dict[str, Any]


def busy_and_total() -> tuple[int, int] | None:
    """Jiffies the machine's CPUs spent busy, and in all, so far (``None`` off Linux)."""
    try:
        fields = [int(x) for x in PROC_STAT.read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + fields[4]  # idle and iowait
    return sum(fields) - idle, sum(fields)


def parse_config(text: str) -> Configuration:
    """``NAME=JSON`` -> a ``Configuration``; a bad one exits with a message."""
    name, sep, body = text.partition("=")
    if not sep or not name:
        raise SystemExit(f"{text!r}: expected NAME=JSON, e.g. '2x2={{\"tasks\": 2}}'")
    try:
        settings = json.loads(body or "{}")
    except json.JSONDecodeError as exc:
        raise SystemExit(f"{name}: not JSON: {exc}") from None
    if not isinstance(settings, dict):
        raise SystemExit(f"{name}: expected a JSON object, got {body!r}")
    tasks = settings.pop("tasks", 1)
    if not isinstance(tasks, int) or tasks < 1:
        raise SystemExit(f"{name}: tasks must be a positive integer, got {tasks!r}")
    try:
        config = Config.of(settings)  # a typo or bad value is reported now, not mid-run
    except ConfigError as exc:
        raise SystemExit(f"{name}: {exc}") from None
    tuning = {k: v for k, v in settings.items() if Config.setting(k) not in RUN_ARGUMENTS}
    return Configuration(name, tasks, config.ackers, config.max_spout_pending, tuning)


def run_once(cluster: LocalCluster, sentences: int, c: Configuration) -> dict[str, Any]:
    before = busy_and_total()
    out = run_rayflow(cluster, sentences, c.ackers, max_pending=c.max_pending, tuning=c.tuning, tasks=c.tasks)
    after = busy_and_total()
    if before and after and after[1] > before[1]:
        cores = (os.cpu_count() or 1) * (after[0] - before[0]) / (after[1] - before[1])
        out["cores_busy"] = cores
        out["cpu_us_per_word"] = cores / out["words_per_s"] * 1e6
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="+", metavar="NAME=JSON")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sentences", type=int, default=600_000, help="sentences per run")
    args = parser.parse_args(argv)
    configs = [parse_config(text) for text in args.configs]
    runs: dict[str, list[dict[str, Any]]] = {c.name: [] for c in configs}
    if len(runs) != len(configs):
        raise SystemExit("every configuration needs a name of its own")
    with LocalCluster() as cluster:
        run_rayflow(cluster, min(args.sentences, 50_000), 1)  # warm up: workers started, code loaded
        for r in range(args.rounds):
            for c in configs if r % 2 == 0 else reversed(configs):
                out = run_once(cluster, args.sentences, c)
                runs[c.name].append(out)
                print(f"round {r + 1} {c.name}: {out['words_per_s']:,.0f} words/s", flush=True)
    print()
    baseline = runs[configs[0].name]
    for name, mine in runs.items():
        rate = statistics.median(r["words_per_s"] for r in mine)
        line = f"{name:16s} {rate:>11,.0f} words/s  {paired_ratio(mine, baseline)['median']:5.3f}x"
        latencies = [r["complete_latency_ms"]["p50"] for r in mine if r["complete_latency_ms"]]
        if latencies:
            line += f"  p50 {statistics.median(latencies):6.1f} ms"
        line += f"  frames {statistics.median(r['frames'] for r in mine):>7,.0f}"
        if all("cores_busy" in r for r in mine):
            line += f"  cores busy {statistics.median(r['cores_busy'] for r in mine):.2f}"
            line += f"  {statistics.median(r['cpu_us_per_word'] for r in mine):.2f} us CPU/word"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
