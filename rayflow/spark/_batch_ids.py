"""Batch ids for every ``DataFrameSink`` task: one counter for the cluster, apart from Spark.

A sink task claims blocks of ids (``claim_batch_ids``) from one named, detached Ray actor, so
that ids never repeat between the tasks of a sink, nor for a task restarted on any node whatever
its clock (issue 20: ids from a restarted task's clock could replace an acked batch). It is not
the shared Spark's: a sink whose writer takes Arrow tables (``write_parquet``) writes without
Spark, and must not start a 1.6 GB application to number its batches.

The counter starts from the time in microseconds when the actor starts, above any id an earlier
counter handed out unless this node's clock is behind that one's by more than the time between
them. It lives as long as the Ray cluster (``stop_spark`` leaves it: a sink may still hold
ids from it). Without Ray (a topology run in one process), one counter per process does the same.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

__all__ = ["BATCH_IDS_NAME", "BatchIds", "batch_id_counter", "claim_batch_ids"]

BATCH_IDS_NAME = "rayflow-batch-ids"
"""The counter actor's name, in the shared Spark's namespace (``rayflow``)."""


class BatchIds:
    """The counter: ``claim_batch_ids(count)`` is the first of ``count`` ids no one else got."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next_id = time.time_ns() // 1000

    def claim_batch_ids(self, count: int) -> int:
        with self._lock:
            first = self._next_id
            self._next_id += count
        return first


def claim_batch_ids(count: int) -> int:
    """The first of ``count`` batch ids no one else got: from the cluster's counter, or from
    this process's own when Ray is not initialized (a topology run in one process)."""
    import ray

    if not ray.is_initialized():
        return _process_counter().claim_batch_ids(count)
    # A future, not ray.get: a sink task's ``prepare`` runs in an async actor.
    first: int = batch_id_counter().claim_batch_ids.remote(count).future().result()
    return first


def batch_id_counter() -> Any:
    """The handle of the cluster's counter actor, started if it is not running (it takes no CPU)."""
    from ._shared import SHARED_NAMESPACE

    return (
        _remote_class()
        .options(name=BATCH_IDS_NAME, namespace=SHARED_NAMESPACE, lifetime="detached", get_if_exists=True, num_cpus=0)
        .remote()
    )


@functools.cache
def _process_counter() -> BatchIds:
    return BatchIds()


@functools.cache
def _remote_class() -> Any:
    import ray

    return ray.remote(BatchIds)
