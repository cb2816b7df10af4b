"""Key groups: a stateful bolt's keys spread over its tasks so that a rescale can move them.

Flink's scheme, on the fields grouping's own hash. A stateful bolt's key space is cut into
``max_parallelism`` key groups (``StatefulBolt.max_parallelism``, default 128). A key belongs to

    group(key) = hash(key) mod max_parallelism

where ``hash`` is exactly what the fields grouping hashes (CRC-32 of ``key_bytes``, the same in
every process: never Python's salted ``hash``). Task ``i`` of ``n`` owns the contiguous range of
groups ``g`` with ``g * n // max_parallelism == i``. The fields grouping into a stateful bolt
sends each tuple to the task that owns its key's group (``assign_key_groups`` sets
``FieldsGrouping.key_groups``), and a task's state is stored per key group, not per task id. So
when the topology runs again (same name, durable provider) with another parallelism, each task
loads exactly the groups it owns now: the keys the fields grouping now sends it.

What a key is: the value the bolt is fields-grouped on, or the tuple of the values when it is
grouped on several fields (``("de", "berlin")`` for ``["country", "city"]``). A state key that
falls in a group the task does not own is refused at the next checkpoint (``StateError`` naming
the key): another task may write the same key, and a rescale could not place it.

A stateful bolt whose inputs are not all fields-grouped the same way (shuffle, global, ...)
has no keys to place: its state stays per task, under the task's index among the bolt's tasks
(``topology/component/task-0``; a task id would move when a component named before it changes
its parallelism), and its parallelism cannot change while that state exists.

Each component also keeps a *layout record* (namespace ``topology/component/layout``): keyed
or per task, the parallelism and ``max_parallelism`` it was committed with. A task checks it
before it loads anything (``check_layout``) and refuses, naming what to do, a change that
cannot be carried out: ``max_parallelism`` changed, or the parallelism of per-task state.
Before key groups, every stateful bolt kept its state under the task id
(``topology/component/<task id>``, ``legacy_namespaces``). A bolt that finds no layout record
but such state reads it once: a keyed one keeps the keys of its own groups from every old task,
a per-task one takes the old task of its own index (refused when the number of old tasks is not
its parallelism); its first commit writes them into their new namespaces and the record, and the
old namespaces are read no more.

It reads a ``Topology`` from ``_graph``, not from ``_topology``, whose ``create_topology`` calls
``assign_key_groups``.
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass
from typing import Any

from .._components import StatefulBolt
from .._errors import StateError, TopologyError
from .._graph import Topology
from .._groupings import FieldsGrouping, key_bytes, stable_hash
from .checkpoint import CHECKPOINT_STREAM, task_namespace
from .provider import StateProvider

__all__ = [
    "DEFAULT_MAX_PARALLELISM",
    "Layout",
    "assign_key_groups",
    "check_layout",
    "group_namespace",
    "key_group",
    "layout_namespace",
    "layout_of",
    "legacy_namespaces",
    "load_component",
    "owned_groups",
    "owner",
    "split_changes",
]

DEFAULT_MAX_PARALLELISM = StatefulBolt.max_parallelism
"""128, Flink's default: enough groups for up to 128 tasks, few enough to load quickly."""

LAYOUT = "layout"
_LAYOUT_KEY = "layout"


@dataclass(frozen=True)
class Layout:
    """How one stateful bolt keeps its state: ``fields`` > 0 when keyed (the number of fields it
    is grouped on), 0 when per task."""

    fields: int
    parallelism: int
    max_parallelism: int

    @property
    def keyed(self) -> bool:
        return self.fields > 0

    def record(self) -> dict[str, int]:
        return asdict(self)


def key_group(key: Any, fields: int, max_parallelism: int) -> int:
    """The key group of state key ``key`` of a bolt grouped on ``fields`` fields: the group of
    every tuple the fields grouping routes by that value (or tuple of values)."""
    if fields == 1:
        h = zlib.crc32(key.encode("utf-8", "surrogatepass") if type(key) is str else key_bytes(key))
    elif isinstance(key, tuple) and len(key) == fields:
        h = stable_hash(key)
    else:
        return -1  # not a key of this bolt: owned by no task
    return h % max_parallelism


def split_changes(
    changes: dict[Any, Any], fields: int, max_parallelism: int, groups: range, namespaces: list[str]
) -> tuple[dict[str, dict[Any, Any]], list[Any]]:
    """``changes`` split by the namespace of each key's group (``namespaces[i]`` holds group
    ``groups[i]``), and the keys whose group is not in ``groups``: a checkpoint's work."""
    staged: dict[str, dict[Any, Any]] = {}
    foreign: list[Any] = []
    first, crc32 = groups.start, zlib.crc32
    for key, value in changes.items():
        if fields == 1 and type(key) is str:  # most keys: ``key_group`` inlined
            group = crc32(key.encode("utf-8", "surrogatepass")) % max_parallelism
        else:
            group = key_group(key, fields, max_parallelism)
        if group in groups:
            ns = namespaces[group - first]
            if ns in staged:
                staged[ns][key] = value
            else:
                staged[ns] = {key: value}
        else:
            foreign.append(key)
    return staged, foreign


def owner(group: int, parallelism: int, max_parallelism: int) -> int:
    """The index (0-based, in task id order) of the task that owns ``group``."""
    return group * parallelism // max_parallelism


def owned_groups(index: int, parallelism: int, max_parallelism: int) -> range:
    """The groups task ``index`` of ``parallelism`` owns (those ``owner`` gives it)."""
    return range(
        (index * max_parallelism + parallelism - 1) // parallelism,
        ((index + 1) * max_parallelism + parallelism - 1) // parallelism,
    )


def group_namespace(topology_name: str, component: str, group: int) -> str:
    return f"{topology_name}/{component}/group-{group}"


def layout_namespace(topology_name: str, component: str) -> str:
    return f"{topology_name}/{component}/{LAYOUT}"


def layout_of(topology: Topology, component: str) -> Layout:
    """The layout ``component``'s inputs give it: keyed when every data input is a fields
    grouping on the same number of fields."""
    spec = topology.components[component]
    max_parallelism = int(getattr(spec.component, "max_parallelism", DEFAULT_MAX_PARALLELISM))
    groupings = [sub.grouping for sub in spec.inputs if sub.stream != CHECKPOINT_STREAM]
    counts = {len(g.fields) for g in groupings if type(g) is FieldsGrouping}
    keyed = bool(groupings) and len(counts) == 1 and all(type(g) is FieldsGrouping for g in groupings)
    return Layout(counts.pop() if keyed else 0, spec.parallelism, max_parallelism)


def assign_key_groups(topology: Topology) -> None:
    """Make every fields grouping into a keyed stateful bolt route by key group (see the module
    doc); refuse a stateful bolt with more tasks than key groups. Called by ``create_topology``."""
    for spec in topology.bolts:
        if not isinstance(spec.component, StatefulBolt):
            continue
        layout = layout_of(topology, spec.id)
        if not 1 <= layout.max_parallelism <= 32768:
            raise TopologyError(
                [f"stateful bolt {spec.id!r}: max_parallelism {layout.max_parallelism} is not between 1 and 32768"]
            )
        if layout.keyed and spec.parallelism > layout.max_parallelism:
            raise TopologyError(
                [
                    f"stateful bolt {spec.id!r}: parallelism {spec.parallelism} is above its max_parallelism "
                    f"{layout.max_parallelism} (the number of key groups its state is kept in): set "
                    f"max_parallelism = {spec.parallelism} or more on the class, before its state first commits"
                ]
            )
        if layout.keyed:
            for sub in spec.inputs:
                if type(sub.grouping) is FieldsGrouping:
                    sub.grouping.key_groups = layout.max_parallelism


def check_layout(recorded: dict[str, int] | None, layout: Layout, component: str, where: str) -> None:
    """Raise ``StateError`` when state committed with layout ``recorded`` cannot be loaded with
    ``layout``, naming what to do."""
    if recorded is None:
        return
    before = Layout(**recorded)
    fresh = "or start afresh under another topology name (or delete its state)"
    if before.keyed != layout.keyed:
        kinds = ("per task", "keyed (fields-grouped)")
        raise StateError(
            f"stateful bolt {component!r}: its state in {where} is {kinds[before.keyed]}, and the bolt is now "
            f"{kinds[layout.keyed]}: give it back its inputs' groupings, {fresh}"
        )
    if layout.keyed and before.fields != layout.fields:
        raise StateError(
            f"stateful bolt {component!r}: its state in {where} is keyed by the values of {before.fields} field(s), "
            f"and the bolt is now fields-grouped on {layout.fields}: its keys would not match; group it on "
            f"{before.fields} field(s) again, {fresh}"
        )
    if layout.keyed and before.max_parallelism != layout.max_parallelism:
        raise StateError(
            f"stateful bolt {component!r}: its state in {where} is kept in {before.max_parallelism} key groups, "
            f"and max_parallelism is now {layout.max_parallelism}: key groups cannot be split again; set "
            f"max_parallelism back to {before.max_parallelism}, {fresh}"
        )
    if not layout.keyed and before.parallelism != layout.parallelism:
        raise StateError(
            f"stateful bolt {component!r}: its state in {where} is kept per task by {before.parallelism} task(s) "
            f"(its inputs are not fields-grouped, so it has no keys to move); it cannot be spread over "
            f"{layout.parallelism}: keep parallelism {before.parallelism}, fields-group its inputs on the state's "
            f"key, {fresh}"
        )


def read_layout(provider: StateProvider, topology_name: str, component: str) -> dict[str, int] | None:
    data, _ = provider.load(layout_namespace(topology_name, component))
    record = data.get(_LAYOUT_KEY)
    return dict(record) if record is not None else None


def layout_changes(layout: Layout) -> dict[str, Any]:
    return {_LAYOUT_KEY: layout.record()}


def legacy_namespaces(provider: StateProvider, topology_name: str, component: str) -> list[str]:
    """The per-task namespaces (``topology/component/<task id>``) ``provider`` holds."""
    prefix = f"{topology_name}/{component}/"
    found = [ns for ns in provider.namespaces(prefix) if ns[len(prefix) :].isdigit()]
    return sorted(found, key=lambda ns: int(ns[len(prefix) :]))  # in task id order


def load_component(provider: StateProvider, topology_name: str, component: str) -> dict[Any, Any]:
    """The committed state of every task of stateful bolt ``component``, merged: what the
    bolt's tasks would load if the topology were submitted again.

    Args:
        provider: the provider the topology keeps its state in, e.g.
            ``SqliteStateProvider({"dir": "/data/state"}, "wordcount")``.
        topology_name: the name the topology was submitted under.
        component: the stateful bolt's id.

    Returns:
        Every committed key and its value: read from every key group of a fields-grouped bolt,
        from every task's namespace of a per-task one (a key that several of its tasks keep
        has the value of the last of them in task order), or from the namespaces under task
        ids that rayflow wrote before key groups. Empty when nothing was committed.

    Raises:
        StateError: the store cannot be read.

    Example::

        counts = load_component(SqliteStateProvider({"dir": "/data/state"}, "wc"), "wc", "count")
    """
    record = read_layout(provider, topology_name, component)
    if record is None:
        namespaces = legacy_namespaces(provider, topology_name, component)
    elif record["fields"]:
        namespaces = [group_namespace(topology_name, component, g) for g in range(record["max_parallelism"])]
    else:
        namespaces = [task_namespace(topology_name, component, i) for i in range(record["parallelism"])]
    merged: dict[Any, Any] = {}
    for data, _ in provider.load_many(namespaces).values():
        merged.update(data)
    return merged
