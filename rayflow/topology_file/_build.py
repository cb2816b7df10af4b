"""From a parsed file to a ``Topology``: references between entries, the classes they name,
then ``TopologyBuilder`` (whose problems are placed back on the lines that caused them).

Every entry is checked as far as it can be, even when others failed: one run reports a typo in
one bolt, a missing class in another and a fields grouping on an undeclared field in a stream
between two sound components (the builder then sees only the sound part of the topology).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .._components import BasicBolt, BatchBolt, Bolt, Spout
from .._errors import TopologyError
from .._suggest import did_you_mean
from .._topology import BoltDeclarer, Topology, TopologyBuilder
from .._windows.bolt import WindowedBolt
from ._classes import ClassProblem, construct, import_class
from ._document import Node
from ._errors import Problem
from ._models import KEYED_GROUPINGS, SECTIONS, ComponentEntry, StreamSpec

__all__ = ["build_topology"]

BATCH_KEYS = ("batch_size", "batch_timeout_ms")
"""A ``BatchBolt``'s class attributes a bolt entry may set."""

S = TypeVar("S", bound=BaseModel)


def build_topology(tree: Node, sound: bool) -> tuple[Topology | None, list[Problem]]:
    """Check and build. ``sound``: nothing was found wrong with the file so far (parsing,
    schema); the ``Topology`` is returned only then, and only if nothing is wrong here either."""
    assembly = _Assembly(tree)
    topology = assembly.run(sound)
    return topology, assembly.problems


class _Assembly:
    def __init__(self, tree: Node) -> None:
        self.tree = tree
        self.problems: list[Problem] = []
        self.sections: dict[str, str] = {}
        self.first_use: dict[str, Node] = {}
        self.components: dict[str, tuple[str, ComponentEntry, Node]] = {}
        self.streams = _valid_entries(tree, "streams", StreamSpec)
        self.instances: dict[str, Any] = {}
        self.groupings: dict[int, Any] = {}

    def run(self, sound: bool) -> Topology | None:
        for section in SECTIONS:
            for node in _items(self.tree, section):
                self._component(section, node)
        for section in SECTIONS:
            for node in _items(self.tree, section):
                self._check_beside(node)
        for node in _items(self.tree, "streams"):
            self._check_references(node)
        for i, (stream, node) in enumerate(self.streams):
            if stream.grouping.type == "custom":
                self._custom_grouping(i, stream, node)
        return self._build(complete=sound and not self.problems)

    def _component(self, section: str, node: Node) -> None:
        """Check one entry as far as it goes: its id, its class, then (if the entry passed the
        schema) its construction."""
        id_node = node.child("id")
        cid = id_node.value if id_node is not None and isinstance(id_node.value, str) else None
        if id_node is not None and cid is not None:
            first = self.first_use.get(cid)
            if first is not None:
                where = f"line {first.line}" if first.file == id_node.file else f"{first.file}:{first.line}"
                self.problems.append(id_node.problem(f"duplicate component id {cid!r} (first used at {where})"))
                return
            self.first_use[cid] = id_node
            self.sections[cid] = section
        class_node = node.child("class")
        if class_node is None or not isinstance(class_node.value, str):
            return
        try:
            cls = import_class(class_node.value)
            _check_kind(cls, section, class_node.value)
        except ClassProblem as exc:
            self.problems.append(class_node.problem(str(exc)))
            return
        spec = _validate_quietly(ComponentEntry, node)
        if spec is None or cid is None or node.reported_within():
            return
        try:
            self.instances[cid] = construct(cls, spec.args, spec.kwargs, spec.class_)
        except ClassProblem as exc:
            self.problems.append(node.problem(str(exc), _arguments_key(node)))
            return
        if spec.window is not None:
            if not isinstance(self.instances[cid], WindowedBolt):
                problem = f"'window' applies to a rayflow.WindowedBolt, and {spec.class_} is not one"
                self.problems.append(node.problem(problem, ("window",)))
                return
            spec.window.apply(self.instances[cid])
        batch = {key: getattr(spec, key) for key in BATCH_KEYS if getattr(spec, key) is not None}
        if batch:
            if not isinstance(self.instances[cid], BatchBolt):
                keys = " and ".join(map(repr, batch))
                problem = f"{keys}: only a rayflow.BatchBolt takes them, and {spec.class_} is not one"
                self.problems.append(node.problem(problem, (next(iter(batch)),)))
                return
            for key, value in batch.items():
                setattr(self.instances[cid], key, value)
        self.components[cid] = (section, spec, node)

    def _check_beside(self, node: Node) -> None:
        """``resources.beside`` must name a component of the file (built or not: one with
        problems of its own is reported for those)."""
        resources = node.child("resources")
        ref = resources.child("beside") if resources is not None else None
        if ref is None or ref.reported or not isinstance(ref.value, str) or ref.value in self.sections:
            return
        known = sorted(self.sections)
        hint = did_you_mean(ref.value, known)
        self.problems.append(ref.problem(f"unknown component {ref.value!r}{hint}; components: {', '.join(known)}"))

    def _resources(self, spec: ComponentEntry) -> dict[str, Any]:
        """The entry's ``resources`` for the builder, without a ``beside`` whose component was
        not built (that component's problems, or the name's, are reported already)."""
        beside = spec.resources.get("beside")
        if isinstance(beside, str) and beside in self.components:
            return spec.resources
        return {key: value for key, value in spec.resources.items() if key != "beside"}

    def _check_references(self, node: Node) -> None:
        known = sorted(self.sections)
        for key in ("from", "to"):
            ref = node.child(key)
            if ref is None or not isinstance(ref.value, str):
                continue
            section = self.sections.get(ref.value)
            if section is None:
                hint = did_you_mean(ref.value, known)
                self.problems.append(
                    ref.problem(f"unknown component {ref.value!r}{hint}; components: {', '.join(known)}")
                )
            elif key == "to" and section == "spouts":
                self.problems.append(ref.problem(f"{ref.value!r} is a spout: a stream must go to a bolt"))

    def _custom_grouping(self, index: int, stream: StreamSpec, node: Node) -> None:
        grouping = stream.grouping
        assert grouping.class_ is not None  # the schema requires it for custom groupings
        where = node.child("grouping") or node
        try:
            cls = import_class(grouping.class_)
            lacking = [m for m in ("prepare", "choose_tasks") if not callable(getattr(cls, m, None))]
            if lacking:
                raise ClassProblem(
                    f"{grouping.class_} is not a stream grouping: it lacks {' and '.join(lacking)} "
                    "(needs prepare(context, stream, target_tasks) and choose_tasks(task_id, values))"
                )
        except ClassProblem as exc:
            self.problems.append(where.problem(str(exc), ("class",)))
            return
        try:
            self.groupings[index] = construct(cls, grouping.args, grouping.kwargs, grouping.class_)
        except ClassProblem as exc:
            self.problems.append(where.problem(str(exc), _arguments_key(where)))

    def _build(self, complete: bool) -> Topology | None:
        """Build from the sound components and the streams between them; the ``Topology`` is
        returned only when that is the whole file (``complete``)."""
        builder = TopologyBuilder()
        declarers: dict[str, BoltDeclarer] = {}
        for cid, (section, spec, _) in self.components.items():
            if section == "spouts":
                builder.set_spout(
                    cid, self.instances[cid], spec.parallelism, config=spec.config, resources=self._resources(spec)
                )
            else:
                declarers[cid] = builder.set_bolt(
                    cid, self.instances[cid], spec.parallelism, config=spec.config, resources=self._resources(spec)
                )
        for i, (stream, node) in enumerate(self.streams):
            grouping = stream.grouping
            sound = stream.from_ in self.components and (grouping.type != "custom" or i in self.groupings)
            if stream.to not in declarers or not sound or node.reported_within():
                continue
            subscribe: Callable[..., BoltDeclarer] = getattr(declarers[stream.to], f"{grouping.type}_grouping")
            if grouping.type in KEYED_GROUPINGS:
                subscribe(stream.from_, grouping.fields, stream=grouping.stream)
            elif grouping.type == "custom":
                subscribe(stream.from_, self.groupings[i], stream=grouping.stream)
            else:
                subscribe(stream.from_, stream=grouping.stream)
        try:
            topology = builder.create_topology()
        except TopologyError as exc:
            placed = (self._place(p, complete) for p in exc.problems)
            self.problems += [p for p in placed if p is not None]
            return None
        return topology if complete else None

    def _place(self, problem: str, complete: bool) -> Problem | None:
        """Put one of the builder's problems on the line of the stream or component it names.
        One that names neither is about the whole graph: meaningless unless it is ``complete``."""
        for stream, node in self.streams:
            prefix = f"bolt {stream.to!r} input from {stream.from_!r} stream {stream.grouping.stream!r}: "
            if problem.startswith(prefix):
                return node.problem(problem[len(prefix) :], ("grouping",))
        for cid, (section, _, node) in self.components.items():
            prefix = f"{section[:-1]} {cid!r}: "
            if problem.startswith(prefix):
                rest = problem[len(prefix) :]
                option = re.match(r"resources\.(\w+): ", rest)  # on the line of that option
                if option:
                    return node.problem(rest[option.end() :], ("resources", option.group(1)))
                return node.problem(rest)
        for cid, (_, _, node) in self.components.items():
            if repr(cid) in problem:
                return node.problem(problem)
        return self.tree.problem(problem) if complete else None


def _check_kind(cls: type, section: str, dotted: str) -> None:
    if section == "spouts" and not issubclass(cls, Spout):
        bolt = issubclass(cls, (Bolt, BasicBolt, BatchBolt))
        raise ClassProblem(f"{dotted} is not a rayflow.Spout" + (": it is a bolt, list it under bolts" if bolt else ""))
    if section == "bolts" and not issubclass(cls, (Bolt, BasicBolt, BatchBolt, WindowedBolt)):
        spout = issubclass(cls, Spout)
        raise ClassProblem(
            f"{dotted} is not a rayflow.Bolt or rayflow.BasicBolt"
            + (": it is a spout, list it under spouts" if spout else "")
        )


def _arguments_key(node: Node) -> tuple[str, ...]:
    """Where a constructor problem goes: ``kwargs`` or ``args`` if given, else the entry itself."""
    for key in ("kwargs", "args"):
        if node.child(key) is not None:
            return (key,)
    return ()


def _items(tree: Node, section: str) -> list[Node]:
    node = tree.child(section)
    return list(node.value) if node is not None and isinstance(node.value, list) else []


def _validate_quietly(model: type[S], node: Node) -> S | None:
    try:
        return model.model_validate(node.plain())
    except ValidationError:
        return None


def _valid_entries(tree: Node, section: str, model: type[S]) -> list[tuple[S, Node]]:
    entries = ((_validate_quietly(model, node), node) for node in _items(tree, section))
    return [(spec, node) for spec, node in entries if spec is not None]
