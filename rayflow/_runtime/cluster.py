"""Placing a topology on Ray: ``submit_topology``, and how rayflow starts a local Ray
(``local_ray_options``) for ``LocalCluster`` and ``rayflow run``."""

from __future__ import annotations

import logging
import os
import pickle
import sys
import sysconfig
from typing import Any

import ray
from ray import cloudpickle

from .._chaining import chain_plan
from .._config import Config
from .._errors import RayflowError, TopologyError
from .._exactly_once.wiring import with_guarantee
from .._groupings import CustomGrouping
from .._run_checks import config_to_run
from .._topology import Topology
from .._windows.validation import pending_advice
from . import ray_calls
from .control import ControlLink, release, reserve
from .handle import TopologyHandle
from .placement import Placement
from .stream_keys import TopologyKeys
from .streams import ListenError
from .supervisor import Supervisor
from .task_actor import TaskActor

__all__ = ["local_ray_options", "no_usage_stats", "submit_topology"]

logger = logging.getLogger("rayflow")

_RemoteTaskActor = ray_calls.Creating(ray.remote(TaskActor))
"""Started by the supervisor's thread too: never starts Ray (``ray_calls``)."""

DEFAULT_OBJECT_STORE_BYTES = 300 * 1024 * 1024


_INSTALLED = tuple({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], sys.prefix + os.sep + "lib"})


def _ship_user_code_by_value(topology: Topology) -> None:
    """Make the workers receive the code of components defined outside installed packages.

    A class from a test module or a script next to the driver is pickled by reference, and a
    worker cannot import ``test_something``; registering its module by value ships the code.
    """
    objects: list[object] = []
    for spec in topology.components.values():
        objects.append(spec.component)
        objects += [sub.grouping.grouping for sub in spec.inputs if isinstance(sub.grouping, CustomGrouping)]
    for obj in objects:
        module = sys.modules.get(type(obj).__module__)
        path = getattr(module, "__file__", None)
        if module is None or path is None or module.__name__ == "__main__":
            continue
        if module.__name__.split(".")[0] == "rayflow" or os.path.abspath(path).startswith(_INSTALLED):
            continue
        cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]


def _check_picklable(topology: Topology) -> None:
    problems = []
    for cid, spec in topology.components.items():
        try:
            cloudpickle.dumps(spec.component)  # type: ignore[no-untyped-call]
        except Exception as exc:
            problems.append(f"component {cid!r}: cannot be copied to its tasks (pickling failed: {exc})")
    if problems:
        raise TopologyError(problems)


def _rebuild_problems(topology: Topology) -> list[str]:
    """Which components cannot be re-built from their pickles in a Ray worker, and why."""

    @ray.remote(num_cpus=0)
    def rebuild(blobs: dict[str, bytes]) -> dict[str, str]:
        problems = {}
        for cid, blob in blobs.items():
            try:
                pickle.loads(blob)
            except Exception as exc:
                problems[cid] = f"{type(exc).__name__}: {exc}"
        return problems

    dumps: Any = cloudpickle.dumps  # untyped in Ray
    blobs = {cid: dumps(spec.component) for cid, spec in topology.components.items()}
    found = ray.get(rebuild.remote(blobs))
    return [f"component {cid!r}: cannot be re-built in its task ({why})" for cid, why in sorted(found.items())]


def submit_topology(
    name: str, conf: Config | dict[str, Any] | None, topology: Topology, *, active: bool = True
) -> TopologyHandle:
    """Start ``topology`` on the Ray cluster this process is connected to.

    Every task becomes an actor holding its own copy of its component, spread over the
    cluster's nodes, except a task chained to another, which runs in the other's actor
    (``rayflow/_chaining.py``); a task whose actor dies is started again (see ``Supervisor``). With
    ``active=False`` the spouts are not opened until ``handle.activate()``.

    Other processes find it by ``name`` (``rayflow list``, ``rayflow kill``: see ``control.py``);
    a name that already runs on the cluster is refused with ``TopologyNameTaken``.
    """
    if not ray.is_initialized():
        raise RayflowError("not connected to Ray: call ray.init() first, or use rayflow.LocalCluster()")
    if not isinstance(topology, Topology):
        raise TopologyError(
            [f"expected a Topology from TopologyBuilder.create_topology(), got {type(topology).__name__}"]
        )
    # As in Storm, components find the name the topology was submitted under in their config.
    config = Config.of(conf).merged({"topology.name": name})
    for advice in config.storm_settings_without_effect():
        logger.warning("topology %r: %s", name, advice)
    config = config_to_run(topology, config, reach=True)
    topology = with_guarantee(topology, config)
    for advice in pending_advice(topology, config):
        logger.warning("topology %r: %s", name, advice)
    _ship_user_code_by_value(topology)
    _check_picklable(topology)
    layout = topology.task_layout(config.ackers)
    chains = chain_plan(topology, config, layout)
    topology = chains.topology
    own_actors = {task: component for task, component in layout.items() if task not in chains.hosts}
    """The tasks that get an actor: all but those chained to another (they run in its actor)."""
    placement = Placement(name, topology, config, own_actors)
    placement.check()  # what the cluster can never hold is refused before anything starts
    control = reserve(name, len(layout), config.message_timeout_secs)  # refuses a name that runs already
    shared = ray.put(topology)
    keys = TopologyKeys()  # the topology's own authority: its key stays in this process
    nodes: dict[int, str] = {}
    """Where each task runs: filled in as they start, kept current by the supervisor."""

    def make_actor(task: int) -> Any:  # every start of a task gets a fresh certificate and its resources
        options = placement.options(task, nodes)
        return _RemoteTaskActor.options(**options).remote(
            shared, config, task, layout, keys.issue(task), chains.guests(task)
        )

    try:
        started = placement.start(make_actor, nodes)  # what waits for resources is the supervisor's to start
    except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
        release(control, name)
        cause = exc.cause if isinstance(exc, ray.exceptions.RayTaskError) else None
        if isinstance(cause, ListenError):  # e.g. rayflow.stream.bind.host names no address of a node
            raise TopologyError([str(cause)]) from None
        raise TopologyError(_rebuild_problems(topology) or [f"a task could not start: {exc}"]) from None
    actors, addresses = started.actors, started.addresses
    # A task still waiting is not dialled until it joins: the supervisor then tells every peer.
    ray.get([a.give_up.remote(task) for a in actors.values() for task in started.waiting])
    ray.get([a.connect.remote(addresses, nodes) for a in actors.values()])
    spouts = {s.id for s in topology.spouts}
    supervisor = Supervisor(
        name,
        own_actors,
        actors,
        nodes,
        addresses,
        make_actor,
        lambda task: layout[task] in spouts,
        config.max_task_restarts,
        placement,
        {
            host: ", ".join(f"task {t} ({layout[t]!r})" for t in chains.guests(host))
            for host in set(chains.hosts.values())
        },
    )
    for task, (actor, listen) in started.waiting.items():
        supervisor.adopt(task, actor, listen)
    supervisor.start()
    handle = TopologyHandle(name, supervisor, layout, spouts, chains.hosts)
    handle.control = ControlLink(control, handle, sorted(spouts), lambda: supervisor.active)
    handle.control.start()
    if active:
        handle.activate()
    return handle


def no_usage_stats() -> None:
    """Ray asks to send usage statistics unless told not to; rayflow starts and joins Ray for a
    user who never chose to, so it says no (a user's own ``RAY_USAGE_STATS_ENABLED`` wins)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def local_ray_options(num_cpus: int | None = None) -> dict[str, Any]:
    """``ray.init`` settings that start a new local Ray sized for a small machine.

    ``address="local"`` makes ``ray.init`` start its own instance even when ``RAY_ADDRESS`` is
    set or a ``ray start`` cluster runs on the machine (joining one of those with ``num_cpus``
    given fails).

    Quiet: Ray's own INFO and WARNING lines ("Started a local Ray instance", the token
    authentication notice) are not printed (``logging_level``), nor are the workers' logs
    (``log_to_driver``); errors still are, and so is what rayflow logs in each task (a
    component's errors, ``topology.debug``): the supervisor carries it (``task_logs.py``)."""
    no_usage_stats()
    return {
        "address": "local",
        "num_cpus": num_cpus or os.cpu_count() or 2,
        "include_dashboard": False,
        "object_store_memory": DEFAULT_OBJECT_STORE_BYTES,
        "log_to_driver": False,
        "logging_level": logging.ERROR,
    }
