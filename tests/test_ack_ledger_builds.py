"""The two ledgers side by side: the C one (``_acking/_ledger.c``) answers every message sequence
as the Python one (the contract) does, and ``ledger_build`` picks between them.

The sequences are random acker traffic -- payloads of inits, acks and fails (as arrays, as the
outbox sends them, or as lists), single messages, timeout resets and rotations -- on roots that
collide in the table, with duplicates, acks that overtake their inits, messages after a tree
settled or expired, and trees played with real edge ids in a random delivery order. Both get the
same calls; every answer must be equal: the settled dict with its order (spout tasks in settling
order, roots in settling order), outcomes, resets, the roots forgotten (as a set: the tables lay
them out differently), and the count of trees pending.
"""

from __future__ import annotations

import random
from array import array
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayflow._acking import ledger as python_ledger
from rayflow._acking import ledger_build
from rayflow._acking.anchoring import ID_TYPECODE
from rayflow._acking.executor import AckerExecutor
from rayflow._acking.ledger import AckLedger, Outcome
from rayflow._executors.kernel import PURE_PYTHON_ENV

C_LEDGER, C_LEDGER_BUILD = ledger_build.load({})
needs_c = pytest.mark.skipif(C_LEDGER is python_ledger.AckLedger, reason=C_LEDGER_BUILD)

_colliding_roots = st.integers(1, 24).map(lambda k: (k << 32) | 0xC0FFEE)  # one home slot
_roots = st.one_of(_colliding_roots, st.integers(1, 2**64 - 1))
_vals = st.one_of(st.integers(0, 3), st.integers(0, 2**64 - 1))
_pairs = st.lists(st.tuples(_roots, _vals), max_size=12)
_operations = st.lists(
    st.one_of(
        st.tuples(st.just("apply"), st.integers(0, 5), _pairs, _pairs, st.lists(_roots, max_size=3), st.booleans()),
        st.tuples(st.just("init"), _roots, _vals, st.integers(0, 5)),
        st.tuples(st.just("ack"), _roots, _vals),
        st.tuples(st.just("fail"), _roots),
        st.tuples(st.just("reset_timeout"), _roots),
        st.tuples(st.just("rotate")),
    ),
    max_size=120,
)


def flat(pairs: list[tuple[int, int]], as_array: bool) -> list[int] | array[int]:
    values = [x for pair in pairs for x in pair]
    return array(ID_TYPECODE, values) if as_array else values


def answer(ledger: AckLedger, name: str, *args: Any) -> Any:
    """What ``ledger`` answers to one operation, in a form to compare (order kept where the
    contract fixes it)."""
    if name == "apply":
        sender, inits, acks, fails, as_array = args
        settled = ledger.apply(sender, flat(inits, as_array), flat(acks, as_array), fails)
        return [(task, acked, failed) for task, (acked, failed) in settled.items()]
    if name == "rotate":
        return sorted(ledger.rotate())
    return getattr(ledger, name)(*args)


def play_both(operations: list[tuple[Any, ...]], young: int = python_ledger.YOUNG_TREES, buckets: int = 3) -> None:
    python, c = python_ledger.AckLedger(buckets, young), C_LEDGER(buckets, young)
    for step, (name, *args) in enumerate(operations):
        assert answer(c, name, *args) == answer(python, name, *args), (step, name, args)
        assert len(c) == len(python), (step, name, args)


@needs_c
class TestSameAnswers:
    @pytest.mark.parametrize("young", [1, 2, python_ledger.YOUNG_TREES])
    @settings(max_examples=400, deadline=None)
    @given(operations=_operations, buckets=st.integers(2, 4))
    def test_random_traffic(self, young: int, operations: list[tuple[Any, ...]], buckets: int):
        """Any sequence of payloads, messages and rotations: the same answer to every call.
        (``young`` moves the Python ledger's trees to its table early; the C one has no young.)"""
        play_both(operations, young, buckets)

    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_trees_played_out_of_order(self, seed: int):
        """Thousands of trees with real-looking edge ids (an init's checksum is cleared by its acks),
        their messages shuffled across payloads -- acks before inits, fails, duplicates and late
        messages after expiry -- with rotations between: the same answers throughout."""
        rng = random.Random(seed)
        messages: list[tuple[Any, ...]] = []
        for _ in range(3000):
            root = rng.getrandbits(64) | 1 if rng.random() < 0.8 else (rng.randrange(1, 200) << 40) | 0xABC
            edges = [rng.getrandbits(64) for _ in range(rng.randrange(1, 4))]
            checksum = 0
            for edge in edges:
                checksum ^= edge
            spout = rng.randrange(1, 6)
            messages.append(("init", root, checksum, spout))
            messages += [("ack", root, edge) for edge in edges]
            if rng.random() < 0.05:
                messages.append(("fail", root))
            if rng.random() < 0.05:
                messages.append(("ack", root, edges[0]))  # a duplicate: the tree stays or re-opens
            if rng.random() < 0.05:
                messages.append(("reset_timeout", root))
        # Deliver them nearly in order: each message moves a few hundred places at most.
        order = sorted(range(len(messages)), key=lambda i: i + rng.randrange(600))
        python, c = python_ledger.AckLedger(young=256), C_LEDGER()
        k = 0
        while k < len(order):
            batch = [messages[i] for i in order[k : k + rng.randrange(1, 400)]]
            k += len(batch)
            singles = [m for m in batch if m[0] == "reset_timeout"]
            senders = sorted({m[3] for m in batch if m[0] == "init"}) or [0]
            for sender in senders:
                inits = [(m[1], m[2]) for m in batch if m[0] == "init" and m[3] == sender]
                acks = [(m[1], m[2]) for m in batch if m[0] == "ack"] if sender == senders[0] else []
                fails = [m[1] for m in batch if m[0] == "fail"] if sender == senders[0] else []
                operation = ("apply", sender, inits, acks, fails, rng.random() < 0.8)
                assert answer(c, *operation) == answer(python, *operation)
            for name, *args in singles:
                assert answer(c, name, *args[:1]) == answer(python, name, *args[:1])
            if rng.random() < 0.1:
                assert answer(c, "rotate") == answer(python, "rotate")
            assert len(c) == len(python)
        for _ in range(3):
            assert answer(c, "rotate") == answer(python, "rotate")
        assert len(c) == len(python) == 0
        assert c.capacity == python.capacity

    def test_settled_dict_shape(self):
        """A dict of spout task -> (acked, failed), two lists each, tasks in settling order."""
        c = C_LEDGER()
        settled = c.apply(7, array(ID_TYPECODE, [5, 0, 6, 1]), [], [])
        assert settled == {7: ([5], [])}
        settled = c.apply(1, [], [6, 1], [])
        assert type(settled) is dict and [type(v) for v in settled[7]] == [list, list]
        c.apply(2, [9, 1, 10, 1], [], [])
        c.apply(3, [11, 1], [], [])
        assert list(c.apply(1, [], [11, 1, 9, 1], [10])) == [3, 2]


@needs_c
class TestCLedgerEdges:
    """What the C ledger refuses, and says so, where the Python one has no check of its own."""

    def test_root_zero_is_refused(self):
        c = C_LEDGER()
        with pytest.raises(ValueError, match="root id 0 is reserved"):
            c.apply(1, array(ID_TYPECODE, [0, 5]), [], [])
        with pytest.raises(ValueError, match="root id 0 is reserved"):
            c.ack(0, 5)
        assert len(c) == 0

    def test_bad_arguments_raise_without_harm(self):
        c = C_LEDGER()
        c.init(5, 1, 2)
        with pytest.raises(TypeError):
            c.apply(1, ["x", 1], [], [])
        with pytest.raises(OverflowError):
            c.ack(-1, 1)
        with pytest.raises(OverflowError):
            c.apply(-1, [], [], [])
        assert c.ack(5, 1) == Outcome(2, 5, True)

    def test_needs_two_buckets(self):
        with pytest.raises(ValueError, match="at least 2 buckets"):
            C_LEDGER(buckets=1)
        with pytest.raises(ValueError, match="at least 2 buckets"):
            python_ledger.AckLedger(buckets=1)

    def test_any_id_array_or_sequence(self):
        """Unsigned 64-bit arrays are read as buffers; anything else as a sequence of ints."""
        strided = memoryview(array("Q", [5, 9, 1, 9]))[::2]  # no contiguous buffer: read as a sequence
        for inits in (array("Q", [5, 1]), array("L", [5, 1]) if array("L").itemsize == 8 else [5, 1], (5, 1), strided):
            c = C_LEDGER()
            assert c.apply(1, inits, [], []) == {}
            assert c.apply(2, [], array("q", [5, 1]), []) == {1: ([5], [])}


class TestLoad:
    def test_pure_python_switch(self):
        """``RAYFLOW_PURE_PYTHON=1`` runs the Python ledger even where the C one is built."""
        cls, build = ledger_build.load({PURE_PYTHON_ENV: "1"})
        assert cls is python_ledger.AckLedger and build == f"pure Python ledger: {PURE_PYTHON_ENV}=1"

    def test_falls_back_when_not_built(self):
        def missing() -> ModuleType:
            raise ImportError("No module named 'rayflow._acking._ledger_kernel'")

        cls, build = ledger_build.load({}, missing)
        assert cls is python_ledger.AckLedger and build.startswith("pure Python ledger: no C ledger (No module")

    def test_falls_back_when_the_build_does_not_fit(self):
        cls, build = ledger_build.load({}, lambda: ModuleType("rayflow._acking._ledger_kernel"))
        assert cls is python_ledger.AckLedger and "does not fit" in build

    @needs_c
    def test_loads_the_c_ledger(self):
        assert C_LEDGER_BUILD == "C ledger"
        assert C_LEDGER.__module__ == "rayflow._acking._ledger_kernel"

    def test_the_acker_runs_the_loaded_ledger(self):
        assert AckerExecutor.__init__.__globals__["AckLedger"] is ledger_build.AckLedger
