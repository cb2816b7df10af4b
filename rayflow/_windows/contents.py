"""``WindowContents``: what a windowed task holds, as exactly-once puts it in a checkpoint's cut.

Under ``processing_guarantee="exactly_once"`` a windowed task acks each input as it takes it
into its windows (``_executors/windowed_bolt.py``), so no spout replays what a window held when
something fails: the topology rolls back to the last committed cut instead, and the task must
find its windows there as they were at the cut. The contents are everything the windows need
to fire the same windows again:

- the manager (``manager.py``): the tuples held, their timestamps, and its own bookkeeping --
  the next window end, the tuples a window already delivered (for ``get_new``), those that
  expired (for ``get_expired``), the arrivals counted towards a count slide;
- the bolt's clock (ms: processing time is counted in the bolt's timer steps, so it goes back
  with the rest);
- on event time, the watermark and, per input, the largest timestamp it sent and when it was
  last heard (``watermark.py``).

They are pickled whole (``dump``): each tuple as its values and its ``TupleSource`` (pickled once
per source; a restored tuple reads its fields by name, as the one that arrived), which takes
about half the time and two thirds of the bytes of pickling its slots; a restored tuple is
settled (``_tree`` is ``None``), since every tuple held was acked when it arrived, so the acks
the windows give it when it leaves them are no-ops. They live in one namespace per task, by the task's
place among the bolt's tasks (``namespace``), not its task id, which moves when another
component's parallelism changes. The window settings and the bolt's parallelism go with them,
and ``load`` refuses contents written under others: open windows cannot be moved to another
window or between tasks, and silently starting empty would lose the inputs they held (which the
spouts will not replay: their positions were committed past them).
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from .._errors import StateError
from .._tuple import Tuple, TupleSource
from .bolt import WindowSettings
from .manager import Manager

__all__ = ["WindowContents", "dump", "load", "namespace"]

KEY = "windows"
"""The one key of a task's namespace: its pickled ``WindowContents``."""


def namespace(topology_name: str, component: str, index: int) -> str:
    """Where task ``index`` (its place among ``component``'s tasks) keeps its windows."""
    return f"{topology_name}/{component}/windows-{index}"


@dataclass
class WindowContents:
    """One windowed task's windows at a checkpoint (see the module doc)."""

    settings: WindowSettings
    parallelism: int
    windows: Manager[Tuple]
    clock: float = 0.0
    watermark: float | None = None
    """Event time: the watermark (``None`` on processing time)."""
    latest: dict[Hashable, float] = field(default_factory=dict)
    heard: dict[Hashable, float] = field(default_factory=dict)


def dump(contents: WindowContents) -> bytes:
    """``contents`` as bytes: a copy taken now, which later arrivals do not change."""
    out = io.BytesIO()
    _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(contents)
    return out.getvalue()


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if obj.__class__ is Tuple:
            return _held, (obj.values, obj._source)
        return NotImplemented


def _held(values: list[Any], source: TupleSource) -> Tuple:
    """A tuple as the windows held it: acked already."""
    tup = Tuple(values, source)
    tup._tree = None
    return tup


def load(blob: bytes, settings: WindowSettings, parallelism: int, where: str) -> WindowContents:
    """The contents ``dump`` wrote; ``where`` names the task for the error.

    Raises:
        StateError: the contents were written under other window settings than ``settings``, or
            by a bolt of another parallelism.
    """
    contents: WindowContents = pickle.loads(blob)
    if contents.parallelism != parallelism:
        raise StateError(
            f"{where}: the committed windows were kept by {contents.parallelism} task(s), but the bolt now has "
            f"{parallelism}: open windows cannot move between tasks; submit the topology with parallelism "
            f"{contents.parallelism} for this bolt, or under another topology.name to start afresh"
        )
    if contents.settings != settings:
        raise StateError(
            f"{where}: the committed windows were written with {contents.settings}, but the bolt now has "
            f"{settings}: open windows cannot be carried over to another window; submit the topology with "
            "its old window settings until its windows are empty, or under another topology.name to start afresh"
        )
    return contents
