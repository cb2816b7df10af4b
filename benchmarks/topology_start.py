"""How long a topology takes to start on a new local Ray, and what the start costs in CPU.

    python benchmarks/topology_start.py [--rounds 5] [--submits 2]
        [--variant NAME=JSON ...] [--tree NAME=PATH ...]

Each run is a child process that does what a user of ``LocalCluster`` does: ``ray.init`` with
``local_ray_options`` (updated with the variant's JSON, e.g.
``'conc4={"_system_config": {"worker_maximum_startup_concurrency": 4}}'``), then submits the
6-task word count (1 spout, 2 split, 2 count, 1 acker: six task actors, nothing chained, and
the topology's control actor) and kills it, ``--submits`` times in a row on the same Ray: the
first submit finds the workers Ray started with the driver, a later one starts every worker
afresh, as the tests' session Ray does for each test. ``--tree NAME=PATH`` runs that variant
on another checkout of rayflow (e.g. ``git archive`` of an older commit, with its C kernels
copied in): its ``local_ray_options``, its task actors, its imports.

Reported per variant, as the median over the rounds:

- ``init``: wall time of ``ray.init``;
- ``submit1``, ``submit2``...: wall time of ``submit_topology`` until it returns (every task
  listens, is connected to its peers and the spouts are activated);
- ``start``: ``init + submit1``, what a ``LocalCluster`` user waits before the first tuple;
- ``cpu_init``, ``cpu1``, ``cpu2``...: CPU seconds the driver and every process under it
  (Ray's own and its workers) spent during ``ray.init`` and during each submit (read from
  ``/proc``: Linux only);
- ``workers``: how many worker processes Ray started in the run (more than the actors means
  Ray started workers that nothing used).

Variants run interleaved (round by round, in a rotating order) so that a neighbour's load
falls on all of them alike; compare variants within one run only, and trust the CPU figures
over the wall times on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TREE_VARIABLE = "RAYFLOW_START_TREE"
"""Set by the parent for a ``--tree`` variant: the child imports rayflow and the examples there."""
sys.path.insert(0, os.environ.get(TREE_VARIABLE) or str(REPO))  # run from anywhere: find examples/

DEFAULT_VARIANTS = {"current": "{}"}


def _cpu_by_process() -> dict[int, float]:
    """CPU seconds (user + system) of this process and of every process under it, by pid."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # gone between the listing and the read
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / ticks
    mine = {os.getpid()}
    grew = True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in mine} - mine
        mine |= found
        grew = bool(found)
    return {pid: cpu[pid] for pid in mine}


def _cpu_since(before: dict[int, float]) -> float:
    """CPU seconds spent since ``before`` by the processes alive now (all of a new one's)."""
    now = _cpu_by_process()
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in now.items())


def _workers_started() -> int:
    """How many worker processes Ray started in this session (each leaves its own log)."""
    import ray._private.worker as ray_worker

    node: Any = ray_worker._global_node
    return len(list((Path(node.get_session_dir_path()) / "logs").glob("worker-*.out")))


def child(options: dict[str, Any], submits: int) -> dict[str, float]:
    """One run: ray.init, then ``submits`` x (submit the word count, kill it)."""
    started = time.perf_counter()
    import ray

    from examples.wordcount import build
    from rayflow import Config
    from rayflow._runtime.cluster import local_ray_options, submit_topology

    kwargs = local_ray_options()
    kwargs.update(options)
    imported = time.perf_counter()
    cpu = _cpu_by_process()
    ray.init(**kwargs)
    result = {"import": imported - started, "init": time.perf_counter() - imported, "cpu_init": _cpu_since(cpu)}
    conf = Config(message_timeout_secs=30)
    for n in range(1, submits + 1):
        topology = build(None, 0.0, 2, 2)  # type: ignore[arg-type]  # None: an endless spout
        cpu = _cpu_by_process()
        begun = time.perf_counter()
        handle = submit_topology(f"start-{n}", conf, topology)
        result[f"submit{n}"] = time.perf_counter() - begun
        result[f"cpu{n}"] = _cpu_since(cpu)
        handle.kill()
    result["start"] = result["init"] + result["submit1"]
    result["workers"] = float(_workers_started())
    ray.shutdown()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--submits", type=int, default=2, help="topologies submitted in a row on one Ray")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="ray.init options over local_ray_options (repeat; default: current={})",
    )
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="run variant NAME on the rayflow checkout at PATH (default: this one)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help="also write every run as JSON lines here")
    args = parser.parse_args(argv)
    if args.child is not None:
        print("RESULT " + json.dumps(child(json.loads(args.child), args.submits)), flush=True)
        return 0
    variants = dict(v.split("=", 1) for v in args.variant) or dict(DEFAULT_VARIANTS)
    trees = dict(t.split("=", 1) for t in args.tree)
    for name in trees:
        variants.setdefault(name, "{}")
    names = list(variants)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            cmd = [sys.executable, __file__, "--child", variants[name], "--submits", str(args.submits)]
            env = dict(os.environ)
            if name in trees:  # the workers find rayflow there too: they inherit the driver's environment
                tree = str(Path(trees[name]).resolve())
                env[TREE_VARIABLE] = tree
                env["PYTHONPATH"] = os.pathsep.join(filter(None, [tree, env.get("PYTHONPATH")]))
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
            line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if line is None:
                print(f"{name}: run failed\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}", file=sys.stderr)
                continue
            run = json.loads(line[len("RESULT ") :])
            runs[name].append(run)
            print(f"round {round_} {name}: " + " ".join(f"{k} {v:.2f}" for k, v in run.items()), flush=True)
            if args.out:
                with args.out.open("a") as f:
                    f.write(json.dumps({"variant": name, **run}) + "\n")
    print("\nmedians (s):")
    for name in names:
        if not runs[name]:
            continue
        keys = list(runs[name][0])
        medians = {k: statistics.median(r[k] for r in runs[name]) for k in keys}
        print(f"  {name:<12} n={len(runs[name])} " + " ".join(f"{k} {v:.2f}" for k, v in medians.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
