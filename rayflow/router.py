"""``Router``: turns one emit into the list of tasks that receive it, after checking the emit
against the component's declared streams."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .context import TopologyContext
from .errors import EmitError
from .groupings import DirectGrouping, Grouping, StreamId
from .topology import Topology

__all__ = ["Router"]


def _no_targets(task_id: int, values: list[Any]) -> list[int]:
    return []


class _Route:
    __slots__ = ("stream", "arity", "direct", "groupings", "direct_targets", "choose")

    def __init__(self, stream: str, arity: int, direct: bool) -> None:
        self.stream = stream
        self.arity = arity
        self.direct = direct
        self.groupings: list[Grouping] = []
        self.direct_targets: set[int] = set()
        self.choose: Callable[[int, list[Any]], list[int]] = _no_targets

    def seal(self) -> None:
        """Pick the cheapest way to choose targets for this stream's subscribers."""
        groupings = self.groupings
        if len(groupings) == 1:
            self.choose = groupings[0].choose_tasks
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
        self._routes: dict[str, _Route] = {
            stream: _Route(stream, len(decl.fields), decl.direct) for stream, decl in spec.streams.items()
        }
        for stream, subscribers in topology.subscribers(self.component_id).items():
            route = self._routes[stream]
            for bolt_id, grouping in subscribers:
                targets = context.get_component_tasks(bolt_id)
                if isinstance(grouping, DirectGrouping):
                    route.direct_targets.update(targets)
                else:
                    grouping.prepare(context, StreamId(self.component_id, stream), targets)
                    route.groupings.append(grouping)
        for route in self._routes.values():
            route.seal()

    def _route(self, stream: str, values: list[Any]) -> _Route:
        route = self._routes.get(stream)
        if route is None:
            declared = ", ".join(sorted(self._routes)) or "none"
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
        route = self._routes.get(stream)
        if route is not None and len(values) == route.arity and not route.direct:
            return route.choose(self.task_id, values)
        self._route(stream, values)  # raises for an undeclared stream or the wrong arity
        raise EmitError(f"{self.component_id!r} stream {stream!r} is direct: use emit_direct(task_id, ...)")

    def direct_target(self, task_id: int, stream: str, values: list[Any]) -> list[int]:
        """``[task_id]`` if an ``emit_direct`` to it on ``stream`` is allowed."""
        route = self._route(stream, values)
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
