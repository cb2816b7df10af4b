"""Finding a topology by name on the cluster (``rayflow list``, ``kill NAME``, a name already
taken): rayflow's namespace also holds the Spark sink's shared actors, which are not topologies."""

from __future__ import annotations

import ray

from rayflow._runtime.control import NAMESPACE, find, running_topologies


@ray.remote(num_cpus=0)
class NotATopology:
    def ping(self) -> str:
        return "pong"


def test_another_named_actor_of_the_namespace_is_no_topology(ray_cluster: str) -> None:
    actor = NotATopology.options(name="rayflow-batch-ids-stand-in", namespace=NAMESPACE).remote()
    try:
        assert ray.get(actor.ping.remote()) == "pong"
        assert find("rayflow-batch-ids-stand-in") is None
        assert "rayflow-batch-ids-stand-in" not in running_topologies()
    finally:
        ray.kill(actor)
