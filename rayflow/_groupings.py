"""Stream groupings: which task(s) of a subscribing bolt receive each tuple.

A grouping object is declared once in the builder, then every source task gets its own copy
(the topology is pickled per task) and calls ``prepare`` once, then ``choose_tasks`` per tuple.
Hashing is stable across processes (CRC-32 of ``key_bytes``, never Python's salted ``hash`` of
a string), so every task of a source agrees on where a key goes, and equal keys (``1``, ``1.0``,
``Decimal(1)``; ``{"a", "b"}`` and ``{"b", "a"}``) go to one task.

Public: ``CustomStreamGrouping`` (the protocol a user's grouping implements) and ``StreamId``,
both re-exported by ``rayflow``. The built-in groupings are chosen through ``BoltDeclarer``'s
methods (``shuffle_grouping``, ``fields_grouping``, ...), as in Storm, and their classes stay
private: they may change without notice.
"""

from __future__ import annotations

import dataclasses
import datetime
import numbers
import random
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from ._errors import EmitError

if TYPE_CHECKING:
    from ._context import TopologyContext

__all__ = [
    "AllGrouping",
    "CustomGrouping",
    "CustomStreamGrouping",
    "DirectGrouping",
    "FieldsGrouping",
    "GlobalGrouping",
    "Grouping",
    "LocalOrShuffleGrouping",
    "NoneGrouping",
    "PartialKeyGrouping",
    "ShuffleGrouping",
    "StreamId",
    "UNREACHABLE",
    "key_bytes",
    "stable_hash",
]


LOAD_LEVELS = 8
"""A load-aware shuffle gives the most backlogged target one turn for this many of an idle one."""
UNREACHABLE = -1
"""What a backlog view (``ShuffleGrouping.update_load``'s ``backlog``) answers for a task that
cannot take tuples now: it died and is not back yet, or was given up on. Read as a backlog of
0, such a task would get the most turns, and every tuple sent to it is lost (its tree times out
and replays, holding the spout's pending budget meanwhile)."""


class StreamId(NamedTuple):
    """A stream named globally: the component that emits it and its id."""

    component: str
    stream: str


@runtime_checkable
class CustomStreamGrouping(Protocol):
    """What ``custom_grouping`` accepts: any object with these two methods."""

    def prepare(self, context: TopologyContext, stream: StreamId, target_tasks: list[int]) -> None: ...

    def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]: ...


def key_bytes(value: Any) -> bytes:
    """The bytes a grouped value is hashed by: equal values (``==``) give equal bytes, in every
    process whatever its ``PYTHONHASHSEED``.

    Strings and bytes are their own bytes. Numbers are keyed by Python's numeric hash, which the
    language defines alike for equal numbers of any type (``1``, ``1.0``, ``True``,
    ``Decimal(1)``, ``Fraction(1)``, ``numpy.int64(1)``) and which is not salted. Tuples and
    lists key on their items in order; sets and dicts on their items in any order (their
    iteration order differs between processes). An aware ``datetime`` keys on its UTC time, a
    dataclass on its compared fields. Any other value is keyed by its ``repr``: a key of a
    class of your own needs a ``repr`` that equal values share."""
    kind = type(value)
    if kind is str:
        return value.encode("utf-8", "surrogatepass")  # type: ignore[no-any-return]
    if kind is int or kind is bool:
        return hash(value).to_bytes(8, "little", signed=True)
    if kind is float:
        return b"nan" if value != value else hash(value).to_bytes(8, "little", signed=True)
    if isinstance(value, str):
        return str.encode(value, "utf-8", "surrogatepass")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (tuple, list)):
        return b"(" + b"\x1f".join(
            [item.encode("utf-8", "surrogatepass") if type(item) is str else key_bytes(item) for item in value]
        )
    if isinstance(value, numbers.Number):
        try:
            return b"nan" if value != value else hash(value).to_bytes(8, "little", signed=True)
        except Exception:  # a signalling NaN can be neither compared nor hashed
            return repr(value).encode()
    if isinstance(value, (set, frozenset)):
        return b"{" + _sum_bytes(zlib.crc32(key_bytes(item)) for item in value)
    if isinstance(value, dict):
        return b"<" + _sum_bytes(zlib.crc32(_crc_bytes(k) + _crc_bytes(v)) for k, v in value.items())
    if isinstance(value, datetime.datetime):
        if value.utcoffset() is not None:
            value = value.astimezone(datetime.timezone.utc)
        value = value.replace(fold=0)  # == ignores fold; repr shows it
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        compared = [getattr(value, f.name) for f in dataclasses.fields(value) if f.compare]
        return kind.__qualname__.encode() + key_bytes(compared)
    elif kind.__module__ == "numpy" and getattr(value, "ndim", None) == 0:  # numpy.bool_: not a Number
        return key_bytes(value.item())
    return repr(value).encode("utf-8", "surrogatepass")


def _crc_bytes(value: Any) -> bytes:
    return zlib.crc32(key_bytes(value)).to_bytes(4, "little")


def _sum_bytes(hashes: Iterable[int]) -> bytes:
    """An order-independent digest of the items' hashes."""
    return (sum(hashes) & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little")


def stable_hash(values: Sequence[Any]) -> int:
    """A process-independent hash of ``values``, equal for equal ``values`` (see ``key_bytes``)."""
    h = 0
    for v in values:
        h = zlib.crc32(key_bytes(v), h)
    return h


class Grouping:
    """Base of the built-in groupings. ``kind`` names it in configs and drawings."""

    kind = ""
    fields: tuple[str, ...] = ()

    def prepare(self, context: TopologyContext, stream: StreamId, target_tasks: list[int]) -> None:
        self.targets = sorted(target_tasks)

    def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]:
        raise NotImplementedError

    def keyed_by(self) -> int | None:
        """The position of the one field whose value alone decides ``choose_tasks`` (always the
        same answer for the same value), if there is one: routes then remember the answers."""
        return None

    def fixed_targets(self) -> list[int] | None:
        """What ``choose_tasks`` answers for every tuple, when that depends on neither the tuple,
        the turn nor the load (a grouping with one target task, ``all``, ``global``): a route
        then sends there without asking, the same as asking would. ``None`` where it may vary,
        and on any class that chooses in a way of its own."""
        mro = type(self).__mro__
        chooses = next(c for c in mro if "choose_tasks" in vars(c))
        answers = next(c for c in mro if "_fixed" in vars(c))
        if not issubclass(answers, chooses):
            return None  # a subclass chooses in its own way and says nothing of it
        return self._fixed()

    def _fixed(self) -> list[int] | None:
        """``fixed_targets`` of a built-in grouping, after ``prepare``."""
        return None

    def describe(self) -> str:
        return f"{self.kind}({', '.join(self.fields)})" if self.fields else self.kind


class ShuffleGrouping(Grouping):
    """Spread tuples evenly: round-robin over the targets in a random order per source task.

    Load-aware, as Storm 2's shuffle: given each target's backlog (``update_load``), a target
    with a backlog gets fewer turns in the round -- down to one in ``LOAD_LEVELS`` of an idle
    one's -- so that tuples go where they are worked off. With equal backlogs it is a plain
    round-robin again. A target the view says is ``UNREACHABLE`` gets no turn until it is
    back, while any target is reachable (a fields grouping cannot do that: a key's task is the
    only one that may see it).

    In runs, when its emitter asks (``next_run``): every tuple goes to one target until the
    next run passes the turn to the next in the round. A spout does that while it is
    saturated (see ``SpoutExecutor.run_burst``): each fill of its pending budget then reaches
    one task as one frame, instead of every task as a frame of a few tuples -- frames, not
    tuples, are what parallelism multiplies."""

    kind = "shuffle"
    rng: random.Random | None = None
    """What shuffles the round in ``prepare``: ``None`` is the ``random`` module (on Ray, each
    task its own order); the in-process runner sets a seeded generator so that a run repeats."""

    def prepare(self, context: TopologyContext, stream: StreamId, target_tasks: list[int]) -> None:
        super().prepare(context, stream, target_tasks)
        self._even = self._order(context)
        self._elsewhere = [[t] for t in self.targets if [t] not in self._even]
        """The targets outside the round (``local_or_shuffle``'s remote ones): taken while no
        target of the round is reachable."""
        self._choices = self._even
        self._weights: tuple[list[list[int]], list[int]] = ([], [])
        """The reachable targets and their turns in the round, as ``update_load`` last set them."""
        self._next = 0
        self._run: list[int] | None = None
        """The target of the current run (``None``: not in runs, one turn per tuple)."""

    def _order(self, context: TopologyContext) -> list[list[int]]:
        order = [[t] for t in self.targets]
        (self.rng or random).shuffle(order)
        return order

    def _fixed(self) -> list[int] | None:
        # One target: every turn, run, weight and fallback comes to it.
        return self._even[0] if len(self.targets) == 1 else None

    def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]:
        if self._run is not None:
            return self._run
        i = self._next
        self._next = (i + 1) % len(self._choices)
        return self._choices[i]

    def next_run(self) -> None:
        """The target whose turn it is takes every tuple from now on (until the next run, or
        ``stop_runs``)."""
        i = self._next
        self._next = (i + 1) % len(self._choices)
        self._run = self._choices[i]

    def stop_runs(self) -> None:
        """Back to one turn per tuple."""
        self._run = None

    def update_load(self, backlog: Callable[[int], int]) -> None:
        """Re-weigh the round from ``backlog(task)``: tuples sent to ``task`` not yet processed,
        or ``UNREACHABLE`` (no turn while another target is reachable)."""
        order, loads = _reachable(self._even, backlog)
        if not order and self._elsewhere:  # local_or_shuffle: no local target is reachable
            order, loads = _reachable(self._elsewhere, backlog)
        if not order:  # none reachable: what is sent anywhere is lost alike
            order, loads = self._even, [0] * len(self._even)
        most = max(loads)
        weights = [LOAD_LEVELS - (LOAD_LEVELS - 1) * load // most if most else 1 for load in loads]
        if (order, weights) == self._weights:
            return
        self._weights = (order, weights)
        if len(set(weights)) == 1:
            self._choices = order
        else:
            # Interleaved, not bunched: round r takes every target with more than r turns.
            self._choices = [
                choice for r in range(max(weights)) for choice, w in zip(order, weights, strict=True) if w > r
            ]
        self._next = 0
        if self._run is not None and self._run not in order:  # the run's target is gone: pass the turn
            self.next_run()


def _reachable(choices: list[list[int]], backlog: Callable[[int], int]) -> tuple[list[list[int]], list[int]]:
    """The ``choices`` whose target is not ``UNREACHABLE``, and their backlogs."""
    loads = [backlog(choice[0]) for choice in choices]
    kept = [(choice, load) for choice, load in zip(choices, loads, strict=True) if load != UNREACHABLE]
    return [choice for choice, _ in kept], [load for _, load in kept]


class NoneGrouping(ShuffleGrouping):
    """ "Don't care": currently the same as shuffle, as in Storm."""

    kind = "none"


class LocalOrShuffleGrouping(ShuffleGrouping):
    """Shuffle among the targets on this task's node; among all of them if none is local, or
    while none of the local ones is reachable (``update_load``)."""

    kind = "local_or_shuffle"

    def _order(self, context: TopologyContext) -> list[list[int]]:
        here = context.get_task_node(context.this_task_id)
        local = [t for t in self.targets if here is not None and context.get_task_node(t) == here]
        order = [[t] for t in (local or self.targets)]
        (self.rng or random).shuffle(order)
        return order


class FieldsGrouping(Grouping):
    """Tuples with equal values in ``fields`` always go to the same task."""

    kind = "fields"
    key_groups = 0
    """Into a keyed stateful bolt, the number of key groups (``_state/key_groups.py``): a tuple
    goes to the task owning its key's group, as its state does; 0: to hash mod tasks."""

    def __init__(self, fields: Sequence[str]) -> None:
        self.fields = tuple(fields)

    def prepare(self, context: TopologyContext, stream: StreamId, target_tasks: list[int]) -> None:
        super().prepare(context, stream, target_tasks)
        declared = context.get_output_fields(stream.component, stream.stream)
        self._positions = [declared.index(f) for f in self.fields]
        self._singles = [[t] for t in self.targets]

    def keyed_by(self) -> int | None:
        return self._positions[0] if len(self._positions) == 1 else None

    def _fixed(self) -> list[int] | None:
        return self._singles[0] if len(self._singles) == 1 else None

    def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]:
        if len(self._positions) == 1:
            v = values[self._positions[0]]
            h = zlib.crc32(v.encode("utf-8", "surrogatepass") if type(v) is str else key_bytes(v))
        else:
            h = stable_hash([values[p] for p in self._positions])
        if self.key_groups:
            return self._singles[(h % self.key_groups) * len(self._singles) // self.key_groups]
        return self._singles[h % len(self._singles)]


class PartialKeyGrouping(FieldsGrouping):
    """Key grouping with two candidate tasks per key: the less loaded one (as seen by this
    source task) takes the tuple. Balances skewed keys; a bolt must merge partial results."""

    kind = "partial_key"

    def prepare(self, context: TopologyContext, stream: StreamId, target_tasks: list[int]) -> None:
        super().prepare(context, stream, target_tasks)
        self._load = [0] * len(self.targets)

    def keyed_by(self) -> int | None:
        return None  # the choice depends on the load too

    _fixed = FieldsGrouping._fixed  # one target: both candidates are it

    def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]:
        h = stable_hash([values[p] for p in self._positions])
        n = len(self._singles)
        # The second candidate is another task, picked by the hash's high part. (Two CRCs of
        # the key with different seeds would not do: CRC is affine, so their difference hardly
        # depends on the key and most keys would get the same task twice.)
        first = h % n
        second = (first + 1 + (h // n) % (n - 1)) % n if n > 1 else first
        pick = first if self._load[first] <= self._load[second] else second
        self._load[pick] += 1
        return self._singles[pick]


class AllGrouping(Grouping):
    """Every task of the bolt gets a copy."""

    kind = "all"

    def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]:
        return self.targets

    def _fixed(self) -> list[int] | None:
        return self.targets


class GlobalGrouping(Grouping):
    """The whole stream goes to the bolt's lowest task id."""

    kind = "global"

    def prepare(self, context: TopologyContext, stream: StreamId, target_tasks: list[int]) -> None:
        super().prepare(context, stream, target_tasks)
        self._lowest = self.targets[:1]

    def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]:
        return self._lowest

    def _fixed(self) -> list[int] | None:
        return self._lowest


class DirectGrouping(Grouping):
    """The emitter picks the task with ``emit_direct``; regular emits never reach it."""

    kind = "direct"

    def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]:
        return []


class CustomGrouping(Grouping):
    """Adapter for a user object implementing ``prepare`` and ``choose_tasks``."""

    kind = "custom"

    def __init__(self, grouping: CustomStreamGrouping) -> None:
        self.grouping = grouping

    def prepare(self, context: TopologyContext, stream: StreamId, target_tasks: list[int]) -> None:
        super().prepare(context, stream, target_tasks)
        self._allowed = frozenset(self.targets)
        self.grouping.prepare(context, stream, list(self.targets))

    def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]:
        chosen = list(self.grouping.choose_tasks(task_id, values))
        stray = [t for t in chosen if t not in self._allowed]
        if stray:
            raise EmitError(
                f"custom grouping {type(self.grouping).__name__} chose task(s) {stray}, "
                f"which are not among its targets {self.targets}"
            )
        return chosen

    def describe(self) -> str:
        return f"custom({type(self.grouping).__name__})"
