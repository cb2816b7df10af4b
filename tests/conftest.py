"""One Ray cluster for the whole test session, sized for a 2-core machine."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

SESSION_GPUS = 2
SESSION_RESOURCES = {"reader": 1.0}


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """Start Ray once; yields the GCS address (for subprocesses that join with --address).

    Its node has two logical GPUs and one ``reader`` (a custom resource) besides its two CPUs,
    so that components asking for them can be placed without a GPU (``tests/test_resources.py``);
    a task that asks for nothing is given neither."""
    import ray

    from rayflow._runtime.cluster import local_ray_options

    ray.init(**local_ray_options(2), num_gpus=SESSION_GPUS, resources=dict(SESSION_RESOURCES))
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def eventually(check: Callable[[], bool], timeout: float = 20.0, interval: float = 0.05) -> bool:
    """Poll ``check`` until it is true or ``timeout`` passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return check()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that needs the session's Ray is marked ``ray`` (and one that needs the shared
    Spark ``spark`` too), so ``-m "not ray"`` selects the in-process tests whichever file they
    are in."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "ray_cluster" in fixtures:
            item.add_marker(pytest.mark.ray)
        if "spark" in fixtures or "driver_spark" in fixtures:  # the shared Spark starts the session's Ray
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.ray)
