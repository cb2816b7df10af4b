"""What a task knows about the topology it runs in."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["TopologyContext"]


class TopologyContext:
    """Read-only view of the running topology, from the point of view of one task.

    Task ids are global across the topology and assigned as Storm does: components sorted by
    id, each given consecutive ids starting from 1.
    """

    def __init__(
        self,
        task_id: int,
        task_components: Mapping[int, str],
        stream_fields: Mapping[str, Mapping[str, tuple[str, ...]]],
        task_nodes: Mapping[int, str] | None = None,
    ) -> None:
        self.this_task_id = task_id
        self.this_component_id = task_components[task_id]
        self._task_components = dict(task_components)
        self._stream_fields = stream_fields
        self._task_nodes = dict(task_nodes or {})
        tasks: dict[str, list[int]] = {}
        for task, component in sorted(self._task_components.items()):
            tasks.setdefault(component, []).append(task)
        self._component_tasks = tasks

    @property
    def this_task_index(self) -> int:
        """This task's place among its component's tasks (0, 1, ...), Storm's
        ``getThisTaskIndex``: unlike the task id, it does not move when another component's
        parallelism changes, so what a task keeps across a resume is kept under it."""
        return self._component_tasks[self.this_component_id].index(self.this_task_id)

    @property
    def component_ids(self) -> list[str]:
        return sorted(c for c in self._component_tasks if not c.startswith("__"))

    def get_component_tasks(self, component_id: str) -> list[int]:
        return list(self._component_tasks.get(component_id, []))

    def get_component_id(self, task_id: int) -> str:
        return self._task_components[task_id]

    def get_output_fields(self, component_id: str, stream: str) -> tuple[str, ...]:
        return self._stream_fields[component_id][stream]

    def get_task_node(self, task_id: int) -> str | None:
        """The Ray node a task runs on (``None`` when not placed on Ray)."""
        return self._task_nodes.get(task_id)
