"""``Router``: turns one emit into the list of tasks that receive it, after checking the emit
against the component's declared streams."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._context import TopologyContext
from ._errors import EmitError
from ._groupings import DirectGrouping, Grouping, StreamId
from ._topology import Topology

__all__ = ["KNOWN_KEYS", "Route", "Router"]

KNOWN_KEYS = 65_536
"""String keys whose targets a route remembers (it forgets them all past this)."""


def _no_targets(task_id: int, values: list[Any]) -> list[int]:
    return []


class Route:
    """One declared stream of the emitting component: its shape, and how to pick the tasks a
    tuple on it goes to. The emit paths look a route up once per emit and use its fields
    directly; ``stream`` is the route's own copy of the name (compared by identity)."""

    __slots__ = (
        "stream",
        "arity",
        "emit_arity",
        "single",
        "direct",
        "groupings",
        "direct_targets",
        "choose",
        "tasks",
        "subscribed",
        "key",
        "known",
        "fixed",
    )

    def __init__(self, stream: str, arity: int, direct: bool) -> None:
        self.stream = stream
        self.tasks: set[int] = set()
        """Every task a tuple on this stream may go to."""
        self.subscribed = False
        """Whether any regular (not direct) grouping reads this stream."""
        self.arity = arity
        self.direct = direct
        self.emit_arity = -1 if direct else arity
        """How many values a regular emit on this stream carries: -1 on a direct stream, where
        a regular emit is an error, so that the emit paths check both with one comparison."""
        self.single = arity == 1
        """One field: a batch carries the value itself, not a list of one (``DataPayload``)."""
        self.groupings: list[Grouping] = []
        self.direct_targets: set[int] = set()
        self.choose: Callable[[int, list[Any]], list[int]] = _no_targets
        self.key = -1
        """When one field's value alone decides the targets (one fields grouping on one field):
        its position. The emit paths then look a string value up in ``known`` before calling
        ``choose``, and ``remember`` what it chose."""
        self.known: dict[str, list[int]] = {}
        self.fixed: list[int] | None = None
        """The targets of every tuple on this stream, where no grouping's choice can vary
        (``Grouping.fixed_targets``): the emit paths then take them without asking ``choose``
        or hashing a key. Shared: do not modify it."""

    def remember(self, value: str, targets: list[int]) -> list[int]:
        """Keep where a key went (keys repeat: words, user ids), up to ``KNOWN_KEYS`` of them."""
        known = self.known
        if len(known) >= KNOWN_KEYS:
            known.clear()
        known[value] = targets
        return targets

    def seal(self) -> None:
        """Pick the cheapest way to choose targets for this stream's subscribers."""
        groupings = self.groupings
        self.subscribed = bool(groupings)
        fixed = [g.fixed_targets() for g in groupings]
        if groupings and all(f is not None for f in fixed):
            self.fixed = [t for f in fixed for t in f or ()] if len(fixed) > 1 else fixed[0]
        if len(groupings) == 1:
            self.choose = groupings[0].choose_tasks
            key = groupings[0].keyed_by()
            self.key = -1 if key is None else key
        elif groupings:

            def choose(task_id: int, values: list[Any]) -> list[int]:
                chosen: list[int] = []
                for grouping in groupings:
                    chosen.extend(grouping.choose_tasks(task_id, values))
                return chosen

            self.choose = choose


class Router:
    def __init__(self, topology: Topology, context: TopologyContext) -> None:
        self.component_id = context.this_component_id
        self.task_id = context.this_task_id
        spec = topology.components[self.component_id]
        self.routes: dict[str, Route] = {
            stream: Route(stream, len(decl.fields), decl.direct) for stream, decl in spec.streams.items()
        }
        for stream, subscribers in topology.subscribers(self.component_id).items():
            route = self.routes[stream]
            for bolt_id, grouping in subscribers:
                targets = context.get_component_tasks(bolt_id)
                route.tasks.update(targets)
                if isinstance(grouping, DirectGrouping):
                    route.direct_targets.update(targets)
                else:
                    grouping.prepare(context, StreamId(self.component_id, stream), targets)
                    route.groupings.append(grouping)
        for route in self.routes.values():
            route.seal()

    def groupings(self) -> list[Grouping]:
        """Every grouping this task routes through."""
        return [g for route in self.routes.values() for g in route.groupings]

    def check(self, stream: str, values: list[Any]) -> Route:
        route = self.routes.get(stream)
        if route is None:
            declared = ", ".join(sorted(self.routes)) or "none"
            raise EmitError(f"{self.component_id!r} emitted on undeclared stream {stream!r} (declared: {declared})")
        if len(values) != route.arity:
            raise EmitError(
                f"{self.component_id!r} emitted {len(values)} value(s) on stream {stream!r}, "
                f"which declares {route.arity} field(s)"
            )
        return route

    def targets(self, stream: str, values: list[Any]) -> list[int]:
        """The tasks a regular emit on ``stream`` goes to. The list may be shared: do not
        modify it."""
        route = self.routes.get(stream)
        if route is not None and len(values) == route.arity and not route.direct:
            return route.choose(self.task_id, values)
        self.check(stream, values)  # raises for an undeclared stream or the wrong arity
        raise EmitError(f"{self.component_id!r} stream {stream!r} is direct: use emit_direct(task_id, ...)")

    def direct_target(self, task_id: int, stream: str, values: list[Any]) -> list[int]:
        """``[task_id]`` if an ``emit_direct`` to it on ``stream`` is allowed."""
        route = self.check(stream, values)
        if not route.direct:
            raise EmitError(
                f"{self.component_id!r} called emit_direct on stream {stream!r}, which is not "
                f"declared direct (declare_stream(..., direct=True))"
            )
        if task_id not in route.direct_targets:
            raise EmitError(
                f"{self.component_id!r} emit_direct to task {task_id}, which does not subscribe to "
                f"stream {stream!r} with a direct grouping (subscribers: {sorted(route.direct_targets)})"
            )
        return [task_id]
