"""The supervisor's own promises, on stand-in tasks (actors that only answer its calls):

- restarts run side by side, each attempt bounded: a task that cannot be placed anywhere is
  tried again and again, and meanwhile another dead task is back at once;
- a task given up on (``max_task_restarts`` reached) is given up on by every live peer, and by
  a peer that joins later;
- a peer that is unavailable when told a task's new address is told again until it takes it;
- ``stop`` ends the watch and kills the new actor of a restart under way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import ray
from ray.exceptions import ActorUnavailableError

from rayflow._runtime import supervisor as supervisor_module
from rayflow._runtime.supervisor import Supervisor

from .conftest import eventually

pytestmark = pytest.mark.ray


class StandIn:
    """Answers what the supervisor asks a task, and records what it was told."""

    def __init__(self, task: int) -> None:
        self.task = task
        self.told: list[tuple[Any, ...]] = []

    async def lifeline(self) -> None:
        await asyncio.Event().wait()

    async def next_logs(self) -> None:
        await asyncio.Event().wait()

    async def listen(self) -> tuple[str, tuple[str, int]]:
        return ray.get_runtime_context().get_node_id(), ("127.0.0.1", 10_000 + self.task)

    async def connect(self, addresses: dict[int, Any], nodes: dict[int, str], restarted: bool = False) -> None:
        self.told.append(("connect", sorted(addresses)) + (("restarted",) if restarted else ()))

    async def replace(self, task: int, address: Any) -> None:
        self.told.append(("replace", task))

    async def give_up(self, task: int) -> None:
        self.told.append(("give_up", task))

    async def activate(self) -> None:
        self.told.append(("activate",))

    async def seen(self) -> list[tuple[Any, ...]]:
        return list(self.told)


RemoteStandIn = ray.remote(num_cpus=0)(StandIn)


class UnavailableAtFirst(StandIn):
    """A peer that does not answer the first ``replace`` it is sent: as one on a node cut off for
    a moment (Ray's ``ActorUnavailableError``)."""

    def __init__(self, task: int) -> None:
        super().__init__(task)
        self.missed = 0

    async def replace(self, task: int, address: Any) -> None:
        if not self.missed:
            self.missed += 1
            self.told.append(("missed replace", task))
            raise ActorUnavailableError("the peer's node does not answer", None)
        await super().replace(task, address)


RemoteUnavailableAtFirst = ray.remote(num_cpus=0)(UnavailableAtFirst)


def start(
    tasks: int, max_restarts: int = -1, make: Callable[[int], Any] | None = None
) -> tuple[Supervisor, dict[int, Any]]:
    make_actor = make or (lambda task: RemoteStandIn.remote(task))
    actors = {task: make_actor(task) for task in range(tasks)}
    placed = {task: ray.get(actor.listen.remote()) for task, actor in actors.items()}
    supervisor = Supervisor(
        "stand-ins",
        dict.fromkeys(actors, "bolt"),
        actors,
        {t: node for t, (node, _) in placed.items()},
        {t: address for t, (_, address) in placed.items()},
        make_actor,
        lambda task: False,
        max_restarts,
    )
    supervisor.start()
    return supervisor, dict(actors)


@pytest.fixture
def quick_attempts(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(supervisor_module, "ATTEMPT_SECS", 10.0)  # a new worker process may take seconds on a busy box
    monkeypatch.setattr(supervisor_module, "QUICK_DEATH_SECS", 0.0)  # no back-off: attempts follow each other
    yield


def test_a_task_that_cannot_be_placed_does_not_hold_up_another(ray_cluster: str, quick_attempts: None) -> None:
    placeable = {0: True, 1: True}
    unplaced: list[Any] = []

    def make(task: int) -> Any:
        if placeable[task]:
            return RemoteStandIn.remote(task)
        unplaced.append(RemoteStandIn.options(resources={"a node nobody has": 1}).remote(task))
        return unplaced[-1]

    supervisor, first = start(2, make=make)
    try:
        placeable[0] = False
        for actor in first.values():
            ray.kill(actor)
        assert eventually(lambda: supervisor.actors[1] is not first[1] and 1 not in supervisor.dead, timeout=60)
        assert eventually(lambda: supervisor.restarts[0] >= 2, timeout=60), "the unplaceable task was not retried"
        assert supervisor.dead.keys() == {0} and "not started within" in supervisor.dead[0]
        told = ray.get(supervisor.actors[1].seen.remote())
        assert told[0] == ("connect", [0, 1], "restarted")  # it takes over a task that died
    finally:
        supervisor.stop()
    with pytest.raises(ray.exceptions.RayActorError):  # killed by stop, not left waiting for a node
        ray.get(unplaced[-1].seen.remote(), timeout=20)


def test_a_task_given_up_on_is_given_up_by_its_peers(ray_cluster: str) -> None:
    supervisor, first = start(3, max_restarts=0)
    try:
        ray.kill(first[2])
        assert eventually(lambda: 2 in supervisor.given_up, timeout=30)
        for task in (0, 1):
            assert eventually(lambda t=task: ("give_up", 2) in ray.get(supervisor.actors[t].seen.remote()), timeout=10)
        assert supervisor.restarts[2] == 0
    finally:
        supervisor.stop()


def test_a_restarted_task_is_told_of_peers_given_up_on(ray_cluster: str) -> None:
    supervisor, first = start(3, max_restarts=1)
    try:
        ray.kill(first[2])
        assert eventually(lambda: supervisor.actors[2] is not first[2] and 2 not in supervisor.dead, timeout=30)
        ray.kill(supervisor.actors[2])  # restarted once: given up on now
        assert eventually(lambda: 2 in supervisor.given_up, timeout=30)
        ray.kill(first[0])
        assert eventually(lambda: supervisor.actors[0] is not first[0] and 0 not in supervisor.dead, timeout=30)
        assert eventually(lambda: ("give_up", 2) in ray.get(supervisor.actors[0].seen.remote()), timeout=10)
    finally:
        supervisor.stop()


def test_a_peer_unavailable_when_told_a_new_address_is_told_again(ray_cluster: str) -> None:
    """Task 1 dies and is restarted; task 0 misses the ``replace`` that names task 1's new address.
    Had it missed it for good, it would send to the dead actor forever."""
    supervisor, first = start(
        2, make=lambda task: (RemoteUnavailableAtFirst if task == 0 else RemoteStandIn).remote(task)
    )
    try:
        ray.kill(first[1])
        assert eventually(lambda: supervisor.actors[1] is not first[1] and 1 not in supervisor.dead, timeout=30)
        assert eventually(lambda: ("replace", 1) in ray.get(first[0].seen.remote()), timeout=30)
        assert ray.get(first[0].seen.remote()) == [("missed replace", 1), ("replace", 1)]
    finally:
        supervisor.stop()
