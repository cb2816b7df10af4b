"""What a component asks of the Ray cluster: ``Resources``, checked here in plain Python.

``set_spout(..., resources={...})`` and a topology file's ``resources:`` take Ray's own actor
options, spelled as Ray spells them (``num_cpus``, ``num_gpus``, ``memory`` in bytes,
``resources`` for custom ones, ``accelerator_type``, ``runtime_env``, ``scheduling_strategy``),
and one of rayflow's: ``beside``, a component whose nodes this one's tasks start on. Every task
of the component is an actor with those options, at its first start and at every restart.

Two kinds of check live here, neither needing Ray:

- ``Resources.problems``: the keys and values of one mapping (an unknown key gets a "did you
  mean"), one ``ResourceProblem`` per key, so that a topology file can put each on its line;
- ``unmet``: the requests of a whole topology against the nodes' totals. A task needs one node
  that has all it asks for, and the tasks together cannot hold more than the cluster has: what
  fails either can never be placed, and Ray would keep it pending without a word.

The runtime (``_runtime/placement.py``) asks Ray for the nodes and turns what ``unmet`` finds
into a ``TopologyError`` at submit.
"""

from __future__ import annotations

import graphlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from ._suggest import did_you_mean

__all__ = ["Ask", "ResourceProblem", "Resources", "beside_problems", "unmet"]

STRATEGIES = ("SPREAD", "DEFAULT")
"""The scheduling strategies that are strings; rayflow's default is ``SPREAD``."""
RAYFLOW_SETS = {
    "max_concurrency": "every task runs 1000 calls at once on its event loop",
    "max_restarts": "the supervisor restarts tasks (rayflow.max.task.restarts)",
    "max_task_retries": "the supervisor restarts tasks (rayflow.max.task.restarts)",
    "name": "tasks are found by the topology, not by name",
    "namespace": "tasks are found by the topology, not by name",
    "lifetime": "tasks live as long as the driver that owns them",
    "get_if_exists": "every start of a task is a new actor",
    "placement_group": "give scheduling_strategy a PlacementGroupSchedulingStrategy",
}
"""Ray actor options that are not a component's to give, and why."""
_PRECISION = 1e-4
"""Ray counts resources in units of 0.0001."""
_ACCELERATOR = "accelerator_type:"
"""Ray turns ``accelerator_type='A100'`` into a request for 0.001 of ``accelerator_type:A100``."""

Quantity = Annotated[float, Field(ge=0, strict=True)]


class Resources(BaseModel):
    """What each task of one component asks of the Ray cluster (Ray's actor options).

    Unset options are Ray's defaults, except ``num_cpus``: rayflow's ``task_cpus``
    (``rayflow.task.cpus``), so that a small machine places a topology of many tasks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_cpus: Quantity | None = Field(None, description="CPUs per task; default rayflow.task.cpus")
    num_gpus: Quantity | None = Field(
        None, description="GPUs per task (above 1: a whole number); a task sees its own in ray.get_gpu_ids()"
    )
    memory: int | None = Field(None, ge=0, strict=True, description="bytes of memory per task (Ray's logical memory)")
    resources: dict[str, Quantity] = Field(
        default_factory=dict, description="custom resources per task, as the nodes declare them, e.g. {reader: 1}"
    )
    accelerator_type: str | None = Field(None, min_length=1, description="e.g. A100: only nodes with that accelerator")
    runtime_env: dict[str, Any] | None = Field(None, description="Ray's runtime environment for the task's process")
    scheduling_strategy: Any = Field(
        None,
        description="Ray's: SPREAD (rayflow's default) or DEFAULT; from Python also a Ray scheduling strategy object",
        json_schema_extra={"enum": list(STRATEGIES)},
    )
    beside: str | None = Field(
        None,
        min_length=1,
        description="rayflow's: start each task on the node of the task of this component with the same index",
    )

    @field_validator("num_cpus", "num_gpus")
    @classmethod
    def _fine_enough(cls, value: float | None) -> float | None:
        if value is not None:
            _check_precision(value)
        return value

    @field_validator("num_gpus")
    @classmethod
    def _whole_above_one(cls, value: float | None) -> float | None:
        if value is not None and value > 1 and not float(value).is_integer():
            raise ValueError(f"more than one GPU must be a whole number, got {value}")
        return value

    @field_validator("resources")
    @classmethod
    def _custom(cls, value: dict[str, float]) -> dict[str, float]:
        for name, amount in value.items():
            if not name:
                raise ValueError("a resource name must not be empty")
            if name in ("CPU", "GPU", "memory"):
                raise ValueError(f"ask for {name} with {_OPTION_OF[name]}, not in resources")
            _check_precision(amount)
        return value

    @field_validator("scheduling_strategy")
    @classmethod
    def _strategy(cls, value: Any) -> Any:
        if value is None or value in STRATEGIES:
            return value
        if not isinstance(value, str) and type(value).__module__.startswith("ray.util.scheduling_strategies"):
            return value
        raise ValueError(f"must be one of {', '.join(STRATEGIES)}, or a Ray scheduling strategy object, got {value!r}")

    @model_validator(mode="after")
    def _one_placement(self) -> Resources:
        if self.beside is not None and self.scheduling_strategy is not None:
            raise ValueError("give beside or scheduling_strategy, not both: beside decides the strategy")
        return self

    @classmethod
    def problems(cls, data: Mapping[Any, Any]) -> list[ResourceProblem]:
        """Everything wrong with ``data`` as resources, one problem per key, in key order. An
        empty list means ``Resources.of(data)`` succeeds."""
        problems: list[ResourceProblem] = []
        known: dict[str, Any] = {}
        for key, value in data.items():
            if not isinstance(key, str):
                problems.append(ResourceProblem(repr(key), f"keys must be strings, got {key!r}"))
            elif key in RAYFLOW_SETS:
                problems.append(ResourceProblem(key, f"rayflow sets {key} itself: {RAYFLOW_SETS[key]}"))
            elif key not in cls.model_fields:
                problems.append(ResourceProblem(key, "unknown key" + did_you_mean(key, cls.model_fields)))
            else:
                known[key] = value
        try:
            cls.model_validate(known)
        except ValidationError as exc:
            # An error with no key is the one check across keys (``_one_placement``): on ``beside``.
            problems += [
                ResourceProblem(".".join(map(str, err["loc"])) or "beside", _described(err), err)
                for err in exc.errors()
            ]
        return problems

    @classmethod
    def of(cls, data: Resources | Mapping[str, Any] | None) -> Resources:
        """``data`` as ``Resources``; raises ``pydantic.ValidationError`` (``problems`` says it better)."""
        if isinstance(data, Resources):
            return data
        return cls.model_validate(dict(data or {}))

    def actor_options(self, task_cpus: float) -> dict[str, Any]:
        """The Ray actor options of a task of this component, its scheduling left out (the
        runtime decides it: ``scheduling_strategy``, ``beside``, or ``SPREAD``)."""
        options: dict[str, Any] = {"num_cpus": task_cpus if self.num_cpus is None else self.num_cpus}
        for name in ("num_gpus", "memory", "accelerator_type", "runtime_env"):
            value = getattr(self, name)
            if value is not None:
                options[name] = value
        if self.resources:
            options["resources"] = dict(self.resources)
        return options

    def request(self, task_cpus: float) -> dict[str, float]:
        """What one task takes from a node, in Ray's resource names (``CPU``, ``GPU``,
        ``memory``, custom names); what is zero is left out, as Ray leaves it out."""
        asked = {
            "CPU": task_cpus if self.num_cpus is None else self.num_cpus,
            "GPU": self.num_gpus or 0.0,
            "memory": float(self.memory or 0),
            **self.resources,
        }
        if self.accelerator_type is not None:
            asked[_ACCELERATOR + self.accelerator_type] = 0.001
        return {name: float(amount) for name, amount in asked.items() if amount > 0}

    def asked(self, task_cpus: float) -> str:
        """What a task asks for, in the user's spelling (``num_gpus=1, resources={'reader': 1}``)."""
        given = self.model_dump(exclude_none=True, exclude={"runtime_env", "scheduling_strategy", "beside"})
        if not given.get("resources"):
            given.pop("resources", None)
        if not given:
            return f"num_cpus={_number(task_cpus)} (rayflow.task.cpus)"
        shown = {
            name: {k: _number(v) for k, v in value.items()} if isinstance(value, dict) else _number(value)
            for name, value in given.items()
        }
        return ", ".join(f"{name}={value!r}" for name, value in shown.items())


_OPTION_OF = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory"}


def _check_precision(amount: float) -> None:
    if amount and abs(round(amount / _PRECISION) * _PRECISION - amount) > 1e-9:
        raise ValueError(f"Ray counts resources in steps of {_PRECISION:g}, got {amount}")


def _number(value: Any) -> Any:
    """``1.0`` -> ``1``: what the user most likely wrote."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _described(err: ErrorDetails) -> str:
    """pydantic's message; with the value given, unless rayflow's own message says it."""
    if err["type"] == "value_error":
        return err["msg"].removeprefix("Value error, ")
    return f"{err['msg']}, got {err['input']!r}"


@dataclass(frozen=True)
class ResourceProblem:
    """One thing wrong with a ``resources`` mapping: the ``key`` (dotted below ``resources``)
    and what is wrong; ``error`` is pydantic's account of a bad value, for callers that word it
    their own way."""

    key: str
    message: str
    error: ErrorDetails | None = None

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


def beside_problems(components: Mapping[str, tuple[str, str | None]]) -> list[str]:
    """``beside`` checked across the topology: ``components`` maps each id to its kind
    (``spout``/``bolt``) and the component it asks to be beside. It must name another
    component, and the ``beside`` links must not go round (the tasks start in their order)."""
    problems = []
    order: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter()
    for cid, (kind, other) in components.items():
        if other is None:
            continue
        if other == cid:
            problems.append(f"{kind} {cid!r}: resources.beside: a component cannot be beside itself")
        elif other not in components:
            known = sorted(c for c in components if c != cid)
            problems.append(
                f"{kind} {cid!r}: resources.beside: no component {other!r}{did_you_mean(other, known)}"
                f" (components: {', '.join(known) or 'none'})"
            )
        else:
            order.add(cid, other)
    try:
        order.prepare()
    except graphlib.CycleError as exc:
        cycle = " -> ".join(map(repr, reversed(exc.args[1])))
        problems.append(f"resources.beside goes round: {cycle}; one of them must start first")
    return problems


@dataclass(frozen=True)
class Ask:
    """What one component's tasks ask of the cluster: ``tasks`` tasks, each taking ``request``
    (Ray's names); ``asked`` is the same in the user's spelling."""

    component: str
    kind: str
    tasks: int
    request: Mapping[str, float]
    asked: str

    @property
    def who(self) -> str:
        return f"{self.kind} {self.component!r}"


def unmet(asks: Sequence[Ask], nodes: Sequence[Mapping[str, float]]) -> list[str]:
    """What the cluster of ``nodes`` (each node's total resources) can never give: a task that
    no node can hold, and a resource the tasks ask more of together than the nodes have. One
    line per finding, naming the components, what they ask for and what the cluster has."""
    found = []
    short = set()
    for ask in asks:
        if not any(_fits(ask.request, node) for node in nodes):
            short.add(ask.component)
            found.append(f"{ask.who} asks for {ask.asked} per task, and {_no_node_has(ask.request, nodes)}")
    totals = _totals(nodes)
    for name in dict.fromkeys(name for ask in asks for name in ask.request):
        takers = [ask for ask in asks if name in ask.request and ask.component not in short]
        wanted = sum(ask.tasks * ask.request[name] for ask in takers)
        if wanted > totals.get(name, 0.0) + 1e-9:
            parts = ", ".join(f"{a.who} {a.tasks} x {_amount(name, a.request[name])}" for a in takers)
            found.append(
                f"{_resource(name)}: the tasks ask for {_amount(name, wanted)} in all ({parts}), "
                f"and the cluster has {_amount(name, totals.get(name, 0.0))}"
            )
    return found


def _totals(nodes: Sequence[Mapping[str, float]]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for node in nodes:
        for name, amount in node.items():
            totals[name] = totals.get(name, 0.0) + amount
    return totals


def _fits(request: Mapping[str, float], node: Mapping[str, float]) -> bool:
    return all(node.get(name, 0.0) + 1e-9 >= amount for name, amount in request.items())


def _no_node_has(request: Mapping[str, float], nodes: Sequence[Mapping[str, float]]) -> str:
    """Why no node fits ``request``: the resources no node has, the amounts more than any has,
    or (each fits somewhere) that no node has them all."""
    absent = [name for name in request if not any(name in node for node in nodes)]
    if absent:
        return f"no node has {' or '.join(map(_resource, absent))} (the cluster has {_summary(nodes)})"
    most = {name: max(node.get(name, 0.0) for node in nodes) for name in request}
    short = [name for name, amount in request.items() if amount > most[name] + 1e-9]
    if short:
        at_most = ", ".join(f"{_resource(n)} {_amount(n, most[n])}" for n in short)
        return f"no node has that much: the most on one node is {at_most} (the cluster has {_summary(nodes)})"
    return f"no node has all of it at once (the nodes have {'; '.join(_amounts(node) for node in nodes)})"


def _summary(nodes: Sequence[Mapping[str, float]]) -> str:
    return f"{len(nodes)} node(s): {_amounts(_totals(nodes))}" if nodes else "no node"


def _amounts(resources: Mapping[str, float]) -> str:
    shown = {n: a for n, a in sorted(resources.items()) if not n.startswith("node:") and n != "object_store_memory"}
    return ", ".join(f"{_resource(n)} {_amount(n, a)}" for n, a in shown.items()) or "nothing"


def _resource(name: str) -> str:
    if name.startswith(_ACCELERATOR):
        return f"accelerator_type {name[len(_ACCELERATOR) :]!r}"
    return name if name in ("CPU", "GPU", "memory") else repr(name)


def _amount(name: str, amount: float) -> str:
    if name == "memory":
        return f"{amount / 2**30:.3g} GiB"
    return f"{amount:.4g}"
