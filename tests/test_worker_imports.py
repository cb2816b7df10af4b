"""What a task actor's process imports to start: its class's module and what a task needs, not
the driver's side (placing, supervising, steering a topology) nor ``cryptography`` (only the
driver makes certificates). Every worker of every topology start pays for each module it loads
(``docs/performance.md``, *Starting a topology*)."""

from __future__ import annotations

import json
import subprocess
import sys

DRIVER_SIDE = (
    "rayflow._runtime.cluster",
    "rayflow._runtime.handle",
    "rayflow._runtime.supervisor",
    "rayflow._runtime.placement",
    "rayflow._runtime.control",
    "rayflow._local_cluster",
    "rayflow._ui",
)


def _loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter has loaded after ``statement``."""
    code = f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_a_task_actor_loads_none_of_the_drivers_side_nor_cryptography() -> None:
    loaded = _loaded_after("import rayflow._runtime.task_actor")
    assert "rayflow._runtime.task_actor" in loaded
    assert not loaded & set(DRIVER_SIDE)
    assert not {name for name in loaded if name.split(".")[0] == "cryptography"}


def test_the_runtimes_public_names_still_load_on_first_use() -> None:
    from rayflow._runtime import TopologyHandle, submit_topology
    from rayflow._runtime.cluster import submit_topology as defined
    from rayflow._runtime.handle import TopologyHandle as handle_class

    assert submit_topology is defined
    assert TopologyHandle is handle_class


def test_a_local_cluster_without_pages_loads_no_web_server() -> None:
    loaded = _loaded_after("from rayflow import LocalCluster")
    assert "rayflow._local_cluster" in loaded
    assert "rayflow._ui" not in loaded
    assert "aiohttp" not in loaded
