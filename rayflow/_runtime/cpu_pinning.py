"""Pinning a topology's task actors to cores of their own (``rayflow.worker.cpu.pinning``).

Why: two task actors that feed each other over a socket -- a spout's process and the bolt
downstream -- are woken by each other's writes, and Linux places a task woken by a socket write
on the writer's core when it can (a *synchronous* wake-up: the kernel expects the writer to go to
sleep soon). A task actor that keeps running after its write then shares its core with the
actor it woke until the load balancer moves one of them, while another core idles or serves
anything else; on a small node the two busiest processes of a topology spend much of their time
stacked so (``benchmarks/wordcount.py``'s pinned row, ``docs/performance.md``). A process whose
threads may run on one core only cannot be stacked.

Which core: the task actors of the topology on a node (the tasks with actors of their own, not
those chained to them, and not the ackers) in task order take the cores this process may use in
turn, so each of the first *n* gets a core of its own on an *n*-core node. Ackers are left
free: they are light, and a free acker runs wherever a core is idle. Every actor computes the
same assignment from the same map of tasks to nodes, so no one has to hand it out, and a task
restarted on the same node gets the core its predecessor had.

Off by default: pinning assumes the node is the topology's own. Two pinned topologies on one
node, or other busy processes, would share the same first cores while others idle."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Collection, Mapping

__all__ = ["core_for", "pin_process"]

logger = logging.getLogger(__name__)


def core_for(task: int, task_nodes: Mapping[int, str], ackers: Collection[int], cores: Collection[int]) -> int | None:
    """The core ``task`` is pinned to, given where every task actor runs (``task_nodes``: task ->
    node id, tasks with actors of their own only) and the cores the process may use; ``None``
    for an acker, a task not in ``task_nodes``, or no core at all."""
    node = task_nodes.get(task)
    if node is None or task in ackers or not cores:
        return None
    here = sorted(t for t, n in task_nodes.items() if n == node and t not in ackers)
    ordered = sorted(cores)
    return ordered[here.index(task) % len(ordered)]


def pin_process(core: int) -> int:
    """Let every thread of this process run on ``core`` only (threads started later inherit it
    from the thread that starts them); returns how many threads were pinned. Linux only: where
    threads cannot be listed (``/proc``) or affinity cannot be set, nothing is pinned and 0 is
    returned."""
    if not sys.platform.startswith("linux") or not hasattr(os, "sched_setaffinity"):
        return 0
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        return 0
    pinned = 0
    for tid in threads:
        try:
            os.sched_setaffinity(tid, {core})
        except OSError as exc:  # a thread that ended meanwhile, or a core not ours after all
            logger.debug("could not pin thread %d to core %d: %s", tid, core, exc)
        else:
            pinned += 1
    return pinned
