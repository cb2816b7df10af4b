"""Stream groupings: which tasks of the subscribing bolt receive each tuple.

The source is a "words" spout with tasks 1 and 2 emitting ``[word, n]``; the subscribing
"counter" bolt has tasks 3 to 6, on two nodes when placement matters.
"""

from __future__ import annotations

import base64
import json
import math
import os
import pickle
import subprocess
import sys
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayflow._context import TopologyContext
from rayflow._errors import EmitError
from rayflow._groupings import (
    UNREACHABLE,
    AllGrouping,
    CustomGrouping,
    CustomStreamGrouping,
    DirectGrouping,
    FieldsGrouping,
    GlobalGrouping,
    Grouping,
    LocalOrShuffleGrouping,
    NoneGrouping,
    PartialKeyGrouping,
    ShuffleGrouping,
    StreamId,
    stable_hash,
)

STREAM = StreamId("words", "default")
COUNTERS = [3, 4, 5, 6]
NODES = {1: "node-a", 2: "node-b", 3: "node-a", 4: "node-b", 5: "node-a", 6: "node-b"}


def context(task_id: int = 1, counters: int = 4, nodes: dict[int, str] | None = None) -> TopologyContext:
    layout = {1: "words", 2: "words"} | {3 + i: "counter" for i in range(counters)}
    return TopologyContext(task_id, layout, {"words": {"default": ("word", "n")}}, nodes)


def prepared(grouping: Grouping, task_id: int = 1, nodes: dict[int, str] | None = None) -> Grouping:
    grouping.prepare(context(task_id, nodes=nodes), STREAM, list(COUNTERS))
    return grouping


def spread(grouping: Grouping, values: list[list[Any]], task_id: int = 1) -> Counter[int]:
    """How many of ``values`` each task received."""
    return Counter(t for v in values for t in grouping.choose_tasks(task_id, v))


class TestShuffle:
    def test_spreads_evenly(self):
        """Over a multiple of the task count, every task receives exactly its share."""
        grouping = prepared(ShuffleGrouping())
        assert spread(grouping, [["w", i] for i in range(400)]) == dict.fromkeys(COUNTERS, 100)

    def test_one_task_per_tuple(self):
        """Each tuple goes to exactly one of the targets, and each round visits all of them."""
        grouping = prepared(ShuffleGrouping())
        picks = [grouping.choose_tasks(1, ["w", i]) for i in range(8)]
        assert all(len(p) == 1 for p in picks)
        assert sorted(t for p in picks[:4] for t in p) == COUNTERS

    def test_none_is_shuffle(self):
        """The none grouping spreads like shuffle, as in Storm."""
        grouping = prepared(NoneGrouping())
        assert spread(grouping, [["w", i] for i in range(400)]) == dict.fromkeys(COUNTERS, 100)


class TestDeadTargets:
    """While a task is dead (the link's backlog view says ``UNREACHABLE``), a shuffle routes to
    the live ones; a fields grouping cannot, and keeps each key's task."""

    def test_shuffle_leaves_an_unreachable_task_out_while_it_is_gone(self):
        grouping = prepared(ShuffleGrouping())
        grouping.update_load(lambda task: UNREACHABLE if task == 4 else 0)
        assert spread(grouping, [["w", i] for i in range(300)]) == {3: 100, 5: 100, 6: 100}
        grouping.update_load(lambda task: 0)  # back (restarted)
        assert spread(grouping, [["w", i] for i in range(400)]) == dict.fromkeys(COUNTERS, 100)

    def test_the_live_tasks_are_still_weighed_by_their_backlog(self):
        grouping = prepared(ShuffleGrouping())
        grouping.update_load(lambda task: {3: 1000, 4: UNREACHABLE}.get(task, 0))
        got = spread(grouping, [["w", i] for i in range(170)])
        assert 4 not in got and got[5] == got[6] == 8 * got[3]

    def test_local_or_shuffle_leaves_it_out_too(self):
        grouping = prepared(LocalOrShuffleGrouping(), task_id=1, nodes=NODES)  # local: 3 and 5
        grouping.update_load(lambda task: UNREACHABLE if task == 3 else 0)
        assert spread(grouping, [["w", i] for i in range(10)]) == {5: 10}

    def test_local_or_shuffle_goes_elsewhere_while_no_local_task_is_reachable(self):
        grouping = prepared(LocalOrShuffleGrouping(), task_id=1, nodes=NODES)  # local: 3 and 5
        grouping.update_load(lambda task: UNREACHABLE if task in (3, 5) else 0)
        assert spread(grouping, [["w", i] for i in range(10)]) == {4: 5, 6: 5}
        grouping.update_load(lambda task: 0)  # a local task is back
        assert spread(grouping, [["w", i] for i in range(10)]) == {3: 5, 5: 5}

    def test_with_every_task_unreachable_the_round_is_even(self):
        grouping = prepared(ShuffleGrouping())
        grouping.update_load(lambda task: UNREACHABLE)
        assert spread(grouping, [["w", i] for i in range(400)]) == dict.fromkeys(COUNTERS, 100)

    def test_a_run_bound_for_the_unreachable_task_passes_to_a_live_one(self):
        grouping = prepared(ShuffleGrouping())
        grouping.next_run()
        dead = grouping.choose_tasks(1, ["w", 0])[0]
        grouping.update_load(lambda task: UNREACHABLE if task == dead else 0)
        assert {t for i in range(20) for t in grouping.choose_tasks(1, ["w", i])} != {dead}
        grouping.next_run()
        assert dead not in grouping.choose_tasks(1, ["w", 0])

    def test_fields_keeps_each_keys_task(self):
        """A key's state lives with its task: fields grouping has no load view, and a key whose
        task is dead still goes there (its trees fail and replay once the task is back)."""
        grouping = prepared(FieldsGrouping(["word"]))
        before = [grouping.choose_tasks(1, [f"w{i}", 1]) for i in range(50)]
        assert not hasattr(grouping, "update_load")
        assert [grouping.choose_tasks(1, [f"w{i}", 1]) for i in range(50)] == before


class TestFields:
    def test_stable_hash_is_crc32(self):
        """stable_hash of one string is its CRC-32: the same value in every process."""
        assert stable_hash(["hello"]) == zlib.crc32(b"hello") == 907060870

    def test_known_key_goes_to_known_task(self):
        """The key "hello" goes to task 5 of 3..6 (907060870 % 4 == 2), from any source task."""
        assert prepared(FieldsGrouping(["word"]), task_id=1).choose_tasks(1, ["hello", 1]) == [5]
        assert prepared(FieldsGrouping(["word"]), task_id=2).choose_tasks(2, ["hello", 2]) == [5]

    def test_equal_keys_equal_tasks(self):
        """Tuples with equal grouped fields go to the same task; other fields do not matter."""
        grouping = prepared(FieldsGrouping(["word"]))
        words = [f"w{i}" for i in range(50)]
        first = {w: grouping.choose_tasks(1, [w, 0]) for w in words}
        assert all(grouping.choose_tasks(1, [w, n]) == first[w] for w in words for n in range(1, 4))
        assert all(len(t) == 1 and t[0] in COUNTERS for t in first.values())

    def test_many_keys_reach_every_task(self):
        """Distinct keys spread over all the tasks."""
        grouping = prepared(FieldsGrouping(["word"]))
        assert set(spread(grouping, [[f"w{i}", 0] for i in range(200)])) == set(COUNTERS)

    def test_several_fields(self):
        """Grouping on two fields keys on both: a key of (word, n) always lands on one task."""
        grouping = prepared(FieldsGrouping(["n", "word"]))
        for i in range(20):
            assert grouping.choose_tasks(1, ["w", i % 3]) == grouping.choose_tasks(1, ["w", i % 3])
        assert len(spread(grouping, [["w", i] for i in range(100)])) > 1

    def test_any_string_is_routed(self):
        """Strings that are not valid UTF-8 text (lone surrogates, from os.fsdecode) still route."""
        grouping = prepared(FieldsGrouping(["word"]))
        assert grouping.choose_tasks(1, ["\udc80", 0]) == grouping.choose_tasks(1, ["\udc80", 1])

    def test_stable_across_processes(self):
        """Processes with different PYTHONHASHSEED route every key exactly as this one does."""
        keys: list[Any] = ["hello", "wörld", "", 7, -3, 2.5, None, ("a", 1), ["b", [2, 3]]]
        script = (
            "import json, sys\n"
            "from rayflow._context import TopologyContext\n"
            "from rayflow._groupings import FieldsGrouping, StreamId\n"
            "ctx = TopologyContext(1, {1: 'words', 2: 'words', 3: 'counter', 4: 'counter', 5: 'counter',"
            " 6: 'counter'}, {'words': {'default': ('word', 'n')}})\n"
            "g = FieldsGrouping(['word'])\n"
            "g.prepare(ctx, StreamId('words', 'default'), [3, 4, 5, 6])\n"
            "keys = json.loads(sys.argv[1])\n"
            "keys[7] = tuple(keys[7])\n"
            "print(json.dumps({'salted': hash('word'), 'tasks': [g.choose_tasks(1, [k, 0]) for k in keys]}))\n"
        )
        root = Path(__file__).resolve().parent.parent
        env = os.environ | {"PYTHONPATH": str(root)}
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, json.dumps(keys)],
                env=env | {"PYTHONHASHSEED": seed},
                stdout=subprocess.PIPE,
                text=True,
            )
            for seed in ("1", "2")
        ]
        outputs = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
        assert outputs[0]["salted"] != outputs[1]["salted"], "the seeds should salt str hashes differently"
        grouping = prepared(FieldsGrouping(["word"]))
        here = [grouping.choose_tasks(1, [k, 0]) for k in keys]
        assert outputs[0]["tasks"] == outputs[1]["tasks"] == here


class TestAll:
    def test_every_task_gets_a_copy(self):
        """Each tuple goes to every task of the bolt."""
        grouping = prepared(AllGrouping())
        assert grouping.choose_tasks(1, ["w", 1]) == COUNTERS


class TestGlobal:
    def test_lowest_task(self):
        """The whole stream goes to the bolt's lowest task id, however the targets were listed."""
        grouping = GlobalGrouping()
        grouping.prepare(context(), STREAM, [5, 3, 6, 4])
        assert {tuple(grouping.choose_tasks(1, ["w", i])) for i in range(20)} == {(3,)}


class TestDirect:
    def test_regular_emit_reaches_no_task(self):
        """A direct subscription receives nothing from the grouping: the emitter picks the task."""
        assert prepared(DirectGrouping()).choose_tasks(1, ["w", 1]) == []


class TestLocalOrShuffle:
    @pytest.mark.parametrize(("task_id", "local"), [(1, [3, 5]), (2, [4, 6])])
    def test_prefers_tasks_on_the_same_node(self, task_id: int, local: list[int]):
        """With bolt tasks on this task's node, tuples are shuffled among those only, evenly."""
        grouping = prepared(LocalOrShuffleGrouping(), task_id=task_id, nodes=NODES)
        assert spread(grouping, [["w", i] for i in range(100)], task_id) == dict.fromkeys(local, 50)

    def test_no_local_task_shuffles_over_all(self):
        """With no bolt task on this node, it shuffles over all of them."""
        nodes = NODES | {1: "node-c"}
        grouping = prepared(LocalOrShuffleGrouping(), nodes=nodes)
        assert spread(grouping, [["w", i] for i in range(400)]) == dict.fromkeys(COUNTERS, 100)

    def test_unplaced_tasks_shuffle_over_all(self):
        """Outside Ray (no node known), it is a shuffle."""
        grouping = prepared(LocalOrShuffleGrouping())
        assert spread(grouping, [["w", i] for i in range(400)]) == dict.fromkeys(COUNTERS, 100)


class TestPartialKey:
    def test_skewed_key_is_split_over_two_tasks(self):
        """A single hot key is balanced over exactly two tasks."""
        grouping = prepared(PartialKeyGrouping(["word"]))
        load = spread(grouping, [["hot", i] for i in range(1000)])
        assert sorted(load.values()) == [500, 500]

    @settings(max_examples=200, deadline=None)
    @given(key=st.text(max_size=8), counters=st.integers(2, 6))
    def test_every_key_gets_two_candidates(self, key: str, counters: int):
        """For any key and any number of tasks (2 or more), a stream of only that key is split
        evenly over two tasks."""
        grouping = PartialKeyGrouping(["word"])
        grouping.prepare(context(counters=counters), STREAM, [3 + i for i in range(counters)])
        load = spread(grouping, [[key, i] for i in range(20)])
        assert sorted(load.values()) == [10, 10]

    def test_source_tasks_agree_on_the_candidates(self):
        """Every source task sends a key to the same two tasks."""
        by_task = [prepared(PartialKeyGrouping(["word"]), task_id=t) for t in (1, 2)]
        assert set(spread(by_task[0], [["hot", 0]] * 10, 1)) == set(spread(by_task[1], [["hot", 0]] * 10, 2))

    def test_single_task(self):
        """With one task, everything goes to it."""
        grouping = PartialKeyGrouping(["word"])
        grouping.prepare(context(counters=1), STREAM, [3])
        assert spread(grouping, [["hot", i] for i in range(10)]) == {3: 10}


class EvenOdd:
    """Even n to the first task, odd n to the last."""

    def prepare(self, context: TopologyContext, stream: StreamId, target_tasks: list[int]) -> None:
        self.seen = (context.this_task_id, stream, target_tasks)
        self.targets = target_tasks

    def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]:
        return [self.targets[0] if values[1] % 2 == 0 else self.targets[-1]]


class Stray:
    def prepare(self, context: TopologyContext, stream: StreamId, target_tasks: list[int]) -> None:
        pass

    def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]:
        return [3, 99]


class TestCustom:
    def test_user_grouping_decides(self):
        """The user object is prepared with the context, stream and targets, then picks the tasks."""
        user = EvenOdd()
        assert isinstance(user, CustomStreamGrouping)
        grouping = prepared(CustomGrouping(user))
        assert user.seen == (1, STREAM, COUNTERS)
        assert [grouping.choose_tasks(1, ["w", n]) for n in range(3)] == [[3], [6], [3]]

    def test_task_outside_targets_raises(self):
        """Choosing a task that does not subscribe is an EmitError naming it."""
        grouping = prepared(CustomGrouping(Stray()))
        with pytest.raises(EmitError, match=r"Stray chose task\(s\) \[99\]"):
            grouping.choose_tasks(1, ["w", 1])


HASHER = """\
import base64, json, pickle, sys
from rayflow._groupings import stable_hash
print(json.dumps([hash("salted"), list({str(i) for i in range(20)})]), flush=True)
for line in sys.stdin:
    keys = pickle.loads(base64.b64decode(line))
    print(json.dumps([stable_hash([k]) for k in keys]), flush=True)
"""


@pytest.fixture(scope="module")
def hashers() -> Iterator[list[subprocess.Popen[str]]]:
    """Two processes that hash the keys they are sent, with PYTHONHASHSEED 1 and 2."""
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", HASHER],
            env=env | {"PYTHONHASHSEED": seed},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed in ("1", "2")
    ]
    try:
        first = [json.loads(p.stdout.readline()) for p in procs if p.stdout is not None]
        assert first[0][0] != first[1][0], "the seeds should salt str hashes differently"
        assert first[0][1] != first[1][1], "the seeds should order a set of strings differently"
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.communicate()


@dataclass
class Point:
    x: float
    y: float
    note: str = field(default="", compare=False)


_NUMBERS = (
    st.integers()
    | st.floats(allow_nan=False)
    | st.decimals(min_value=-(10**6), max_value=10**6, allow_nan=False)
    | st.fractions(max_denominator=1000)
)
_ATOMS = st.none() | st.booleans() | _NUMBERS | st.text(max_size=6) | st.binary(max_size=6)
_HASHABLE = st.recursive(_NUMBERS | st.text(max_size=6), lambda inner: st.tuples(inner, inner), max_leaves=4)
KEYS = st.recursive(
    _ATOMS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.frozensets(_HASHABLE, max_size=6)
        | st.sets(st.text(max_size=4), max_size=8)
        | st.dictionaries(_HASHABLE, inner, max_size=4)
    ),
    max_leaves=12,
)
"""Keys a fields grouping may be given: numbers of every type, text, bytes, and containers."""


@st.composite
def twins(draw: st.DrawFn, key: Any) -> Any:
    """A value equal to ``key`` (``==``) built of other types, or in another order."""
    if isinstance(key, bool) or key is None or isinstance(key, (str, bytes)):
        return key
    if isinstance(key, (int, float, Decimal, Fraction)):
        exact: list[Any] = [key, Decimal(key)] if isinstance(key, (int, float)) else [key]
        if math.isfinite(key):
            exact.append(Fraction(key))
        if isinstance(key, int) and abs(key) < 2**53:
            exact += [float(key), complex(key, 0)]
        if key in (0, 1):
            exact.append(bool(key))
        return draw(st.sampled_from(exact))
    if isinstance(key, (list, tuple)):
        return type(key)(draw(twins(item)) for item in key)
    if isinstance(key, (set, frozenset)):
        items = [draw(twins(item)) for item in key]
        return draw(st.sampled_from([set, frozenset]))(reversed(items))
    assert isinstance(key, dict)
    return {draw(twins(k)): draw(twins(v)) for k, v in reversed(key.items())}


class TestEqualKeys:
    def test_equal_numbers_hash_alike(self):
        """1, 1.0 and True are equal keys in Python, so a fields grouping sends them to one task."""
        assert stable_hash([1]) == stable_hash([1.0]) == stable_hash([True])
        assert stable_hash([0]) == stable_hash([False]) == stable_hash([0.0])
        assert stable_hash([1.5]) != stable_hash([1])

    @settings(max_examples=300, deadline=None)
    @given(data=st.data())
    def test_equal_keys_of_any_type_meet(self, data: st.DataObject):
        """A key and an equal key of other types (``2``, ``2.0``, ``Decimal(2)``,
        ``Fraction(2)``), in containers, sets and dicts built in another order: one task, for
        fields and partial-key groupings alike."""
        key = data.draw(KEYS, label="key")
        twin = data.draw(twins(key), label="twin")
        assert twin == key
        assert stable_hash([twin, 1]) == stable_hash([key, 1])
        assert prepared(FieldsGrouping(["word"])).choose_tasks(1, [twin, 0]) == prepared(
            FieldsGrouping(["word"])
        ).choose_tasks(1, [key, 0])
        original, other = prepared(PartialKeyGrouping(["word"])), prepared(PartialKeyGrouping(["word"]))
        assert [other.choose_tasks(1, [twin, i]) for i in range(4)] == [
            original.choose_tasks(1, [key, i]) for i in range(4)
        ]

    def test_equal_instants_meet(self):
        """Aware datetimes are equal when they are the same instant, whatever their zones."""
        utc = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)
        assert stable_hash([utc]) == stable_hash([utc.astimezone(timezone(timedelta(hours=5, minutes=30)))])
        assert stable_hash([utc]) != stable_hash([utc + timedelta(seconds=1)])

    def test_dataclasses_key_on_their_compared_fields(self):
        assert stable_hash([Point(1, 2.0, note="a")]) == stable_hash([Point(1.0, 2, note="b")])
        assert stable_hash([Point(1, 2)]) != stable_hash([Point(2, 1)])

    @settings(max_examples=150, deadline=None)
    @given(keys=st.lists(KEYS, min_size=1, max_size=8))
    def test_every_process_hashes_alike(self, keys: list[Any], hashers: list[subprocess.Popen[str]]):
        """Processes started with other PYTHONHASHSEEDs, given the same keys (pickled: their
        sets and dicts are rebuilt there, in those processes' order), hash them as this one."""
        here = [stable_hash([k]) for k in keys]
        line = base64.b64encode(pickle.dumps(keys)).decode() + "\n"
        for proc in hashers:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(line)
            proc.stdin.flush()
            assert json.loads(proc.stdout.readline()) == here


class TestFixedTargets:
    """Where a grouping's answer cannot vary, routes take it without asking: ``fixed_targets``
    must then be exactly what ``choose_tasks`` answers for any tuple, turn and load."""

    def one_counter(self, grouping: Grouping) -> Grouping:
        grouping.prepare(context(1, counters=1), STREAM, [3])
        return grouping

    @pytest.mark.parametrize(
        "make",
        [
            ShuffleGrouping,
            NoneGrouping,
            LocalOrShuffleGrouping,
            lambda: FieldsGrouping(["word"]),
            lambda: FieldsGrouping(["word", "n"]),
            lambda: PartialKeyGrouping(["word"]),
        ],
        ids=["shuffle", "none", "local_or_shuffle", "fields", "fields2", "partial_key"],
    )
    def test_one_target_task_is_every_answer(self, make: Any) -> None:
        grouping = self.one_counter(make())
        assert grouping.fixed_targets() == [3]
        if isinstance(grouping, ShuffleGrouping):
            grouping.update_load(lambda task: UNREACHABLE)  # unreachable: sent there all the same
            grouping.next_run()
        assert {tuple(grouping.choose_tasks(1, [w, i])) for i, w in enumerate("a b c d e f".split())} == {(3,)}

    @pytest.mark.parametrize(
        "make", [ShuffleGrouping, LocalOrShuffleGrouping, lambda: FieldsGrouping(["word"])], ids=str
    )
    def test_several_target_tasks_are_chosen(self, make: Any) -> None:
        assert prepared(make(), nodes=NODES).fixed_targets() is None

    def test_all_and_global_answer_the_same_for_any_number_of_tasks(self) -> None:
        every, lowest = prepared(AllGrouping()), prepared(GlobalGrouping())
        assert every.fixed_targets() == every.choose_tasks(1, ["a", 1]) == COUNTERS
        assert lowest.fixed_targets() == lowest.choose_tasks(1, ["a", 1]) == [3]

    def test_a_choice_of_ones_own_is_asked(self) -> None:
        """A custom grouping, or a subclass of a built-in one that chooses in its own way, is
        asked for every tuple even with one target task."""

        class Mine:
            def prepare(self, context: TopologyContext, stream: StreamId, target_tasks: list[int]) -> None:
                pass

            def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]:
                return []

        class Skipping(ShuffleGrouping):
            def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]:
                return [] if values[0] == "skip" else super().choose_tasks(task_id, values)

        assert self.one_counter(CustomGrouping(Mine())).fixed_targets() is None
        assert self.one_counter(Skipping()).fixed_targets() is None
