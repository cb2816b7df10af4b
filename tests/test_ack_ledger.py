"""The acker's ledger: Storm's XOR tree tracking, driven message by message.

Every test runs on both ledgers -- the Python one (the contract) and the C one where it is built
(``ledger_build.load({})``: whatever ``RAYFLOW_PURE_PYTHON`` says, so that one suite run checks
both); ``tests/test_ack_ledger_builds.py`` compares the two on the same random traffic.
"""

from __future__ import annotations

import random
from array import array
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayflow._acking import ledger as python_ledger
from rayflow._acking.anchoring import ID_TYPECODE, anchor, new_id, tree_acks
from rayflow._acking.ledger import YOUNG_TREES, AckLedger, Outcome, Settled
from rayflow._acking.ledger_build import LedgerClass, load
from rayflow._outbox import Outbox
from rayflow._tuple import Tuple, TupleSource

from .strategies import Emit, Fail, TupleDag, failing_dags, multi_rooted_dags, tuple_dags

ROOT = 0x5EED
OTHER_ROOT = 0xBEEF
SPOUT_TASK = 3
ACKER_TASK = 9

dags = settings(max_examples=200, deadline=None)

C_LEDGER, C_LEDGER_BUILD = load({})
"""The C ledger where it is built (``python_ledger.AckLedger`` where not: that case is skipped)."""
LEDGERS = [
    pytest.param(python_ledger.AckLedger, id="python"),
    pytest.param(
        C_LEDGER,
        id="c",
        marks=pytest.mark.skipif(C_LEDGER is python_ledger.AckLedger, reason=C_LEDGER_BUILD),
    ),
]


@pytest.fixture(scope="module", params=LEDGERS)
def ledger_type(request: pytest.FixtureRequest) -> LedgerClass:
    """Each ledger implementation in turn (module-scoped: hypothesis tests may use it)."""
    cls: LedgerClass = request.param
    return cls


@dataclass(frozen=True)
class Message:
    """One message to the acker about one root."""

    kind: str  # "init", "ack" or "fail"
    root: int
    val: int = 0
    spout_task: int = 0


def deliver(ledger: AckLedger, msg: Message) -> Outcome | None:
    if msg.kind == "init":
        return ledger.init(msg.root, msg.val, msg.spout_task)
    if msg.kind == "ack":
        return ledger.ack(msg.root, msg.val)
    return ledger.fail(msg.root)


def spout_task_of(root_index: int) -> int:
    return 10 + root_index


def play(dag: TupleDag) -> tuple[list[int], list[Message]]:
    """Run the plan as the spout and bolt executors do, with the real edge-id code: every copy
    of a tuple gets an edge id per root (``anchoring.anchor``, which XORs it into each anchor's
    ack value), and an ack sends what ``anchoring.tree_acks`` says. Returns the root ids and
    every message the acker receives, in the order they were sent."""
    roots = [new_id() for _ in dag.spout_fanouts]
    tuples: list[Tuple] = []
    messages: list[Message] = []
    for r, (root, fanout) in enumerate(zip(roots, dag.spout_fanouts, strict=True)):
        val = 0
        for _ in range(fanout):
            edge = new_id()
            val ^= edge
            tuples.append(_tuple(root, edge))
        messages.append(Message("init", root, val, spout_task_of(r)))
    for step in dag.steps:
        if isinstance(step, Emit):
            anchors = [tuples[a] for a in step.anchors]
            for _ in range(step.fanout):
                tuples.append(_tuple(*anchor(anchors)))
        elif isinstance(step, Fail):
            messages += [Message("fail", root) for root, _ in tree_acks(tuples[step.tup])]
        else:
            messages += [Message("ack", root, val) for root, val in tree_acks(tuples[step.tup])]
    return roots, messages


_SOURCE = TupleSource("bolt", "default", 1, [])


def _tuple(tree: int | dict[int, int], val: int) -> Tuple:
    return Tuple([], _SOURCE, tree, val)


def expected_outcomes(dag: TupleDag, roots: list[int], order: list[Message]) -> dict[int, Outcome]:
    """Position in ``order`` -> what the ledger must report there (nothing anywhere else).

    A tree in which a tuple failed is reported failed as soon as the init and a fail are both
    in; any other tree is reported acked at its last message."""
    failed = {roots[r] for r in dag.failed_roots}
    expected = {}
    for r, root in enumerate(roots):
        positions = [i for i, m in enumerate(order) if m.root == root]
        if root in failed:
            init = next(i for i in positions if order[i].kind == "init")
            fail = next(i for i in positions if order[i].kind == "fail")
            expected[max(init, fail)] = Outcome(spout_task_of(r), root, False)
        else:
            expected[positions[-1]] = Outcome(spout_task_of(r), root, True)
    return expected


def flat(pairs: dict[int, int]) -> list[int]:
    """``{root: val}`` as the wire carries it: root, val, root, val, ..."""
    return [x for pair in pairs.items() for x in pair]


def settled_outcomes(settled: Settled) -> list[Outcome]:
    """``AckLedger.apply``'s answer as the ``Outcome`` list of the one-message calls."""
    return [
        Outcome(task, root, ok)
        for task, (acked, failed) in settled.items()
        for ok, roots in ((True, acked), (False, failed))
        for root in roots
    ]


def apply_one_by_one(ledger: AckLedger, sender: int, inits: list[int], acks: list[int], fails: list[int]) -> Settled:
    """What ``apply`` must answer, from the one-message calls in its order: inits, acks, fails."""
    pairs = iter(inits)
    outcomes = [ledger.init(root, val, sender) for root, val in zip(pairs, pairs, strict=False)]
    pairs = iter(acks)
    outcomes += [ledger.ack(root, val) for root, val in zip(pairs, pairs, strict=False)]
    outcomes += [ledger.fail(root) for root in fails]
    settled: Settled = {}
    for outcome in filter(None, outcomes):
        settled.setdefault(outcome.spout_task, ([], []))[0 if outcome.acked else 1].append(outcome.root)
    return settled


class TestInit:
    def test_zero_checksum_acks_at_once(self, ledger_type: LedgerClass):
        """A tree whose init carries checksum zero (sent to no task) is acked to its spout task."""
        ledger = ledger_type()
        assert ledger.init(ROOT, 0, SPOUT_TASK) == Outcome(SPOUT_TASK, ROOT, True)
        assert len(ledger) == 0

    def test_nonzero_checksum_pends(self, ledger_type: LedgerClass):
        """An init with a non-zero checksum opens a pending tree."""
        ledger = ledger_type()
        assert ledger.init(ROOT, 0x1234, SPOUT_TASK) is None
        assert len(ledger) == 1


class TestAck:
    def test_fan_out_walk_through(self, ledger_type: LedgerClass):
        """Spout -> A -> (B, C): the tree completes when C, the last tuple, is acked."""
        ledger = ledger_type()
        assert ledger.init(ROOT, 100, SPOUT_TASK) is None  # the spout tuple to A
        assert ledger.ack(ROOT, 100 ^ 200 ^ 300) is None  # A acks, having emitted to B and C
        assert ledger.ack(ROOT, 200) is None  # B acks
        assert ledger.ack(ROOT, 300) == Outcome(SPOUT_TASK, ROOT, True)  # C acks
        assert len(ledger) == 0

    def test_ack_before_init_is_kept(self, ledger_type: LedgerClass):
        """Acks that overtake the init are kept; the tree completes when the init arrives."""
        ledger = ledger_type()
        assert ledger.ack(ROOT, 0xA) is None
        assert ledger.ack(ROOT, 0xB) is None
        assert ledger.init(ROOT, 0xA ^ 0xB, SPOUT_TASK) == Outcome(SPOUT_TASK, ROOT, True)

    def test_zero_before_init_is_not_an_ack(self, ledger_type: LedgerClass):
        """Acks that XOR to zero before the init report nothing: only the init names the spout."""
        ledger = ledger_type()
        assert ledger.ack(ROOT, 0xA) is None
        assert ledger.ack(ROOT, 0xA) is None
        assert ledger.init(ROOT, 0xC, SPOUT_TASK) is None
        assert ledger.ack(ROOT, 0xC) == Outcome(SPOUT_TASK, ROOT, True)

    def test_trees_are_independent(self, ledger_type: LedgerClass):
        """Two trees on one acker are tracked apart and reported to their own spout tasks."""
        ledger = ledger_type()
        ledger.init(ROOT, 0xA, SPOUT_TASK)
        ledger.init(OTHER_ROOT, 0xA, SPOUT_TASK + 1)
        assert ledger.ack(OTHER_ROOT, 0xA) == Outcome(SPOUT_TASK + 1, OTHER_ROOT, True)
        assert len(ledger) == 1
        assert ledger.ack(ROOT, 0xA) == Outcome(SPOUT_TASK, ROOT, True)


class TestFail:
    def test_fail_reports_at_once(self, ledger_type: LedgerClass):
        """A fail is reported to the owning spout task immediately, whatever the checksum."""
        ledger = ledger_type()
        ledger.init(ROOT, 0xA ^ 0xB, SPOUT_TASK)
        assert ledger.fail(ROOT) == Outcome(SPOUT_TASK, ROOT, False)
        assert len(ledger) == 0

    def test_fail_before_init_is_kept(self, ledger_type: LedgerClass):
        """A fail that overtakes the init is reported when the init arrives."""
        ledger = ledger_type()
        assert ledger.fail(ROOT) is None
        assert ledger.init(ROOT, 0xA, SPOUT_TASK) == Outcome(SPOUT_TASK, ROOT, False)

    def test_fail_wins_over_zero_checksum(self, ledger_type: LedgerClass):
        """A tree that failed is reported failed even if its checksum also reached zero."""
        ledger = ledger_type()
        ledger.fail(ROOT)
        ledger.ack(ROOT, 0xA)
        assert ledger.init(ROOT, 0xA, SPOUT_TASK) == Outcome(SPOUT_TASK, ROOT, False)

    def test_reported_once(self, ledger_type: LedgerClass):
        """Messages that arrive after a tree was reported failed report nothing more."""
        ledger = ledger_type()
        ledger.init(ROOT, 0xA ^ 0xB, SPOUT_TASK)
        ledger.fail(ROOT)
        assert ledger.ack(ROOT, 0xA) is None
        assert ledger.fail(ROOT) is None
        assert ledger.ack(ROOT, 0xB) is None


class TestResetTimeout:
    def test_names_the_spout_task(self, ledger_type: LedgerClass):
        """reset_timeout returns the spout task to forward the reset to, once the init is in."""
        ledger = ledger_type()
        assert ledger.reset_timeout(ROOT) is None
        ledger.init(ROOT, 0xA, SPOUT_TASK)
        assert ledger.reset_timeout(ROOT) == SPOUT_TASK

    def test_keeps_the_tree_alive(self, ledger_type: LedgerClass):
        """A reset restarts the tree's expiry like any other message."""
        ledger = ledger_type()
        ledger.init(ROOT, 0xA, SPOUT_TASK)
        ledger.rotate()
        ledger.rotate()
        ledger.reset_timeout(ROOT)
        assert ledger.rotate() == []
        assert ledger.rotate() == []
        assert ledger.ack(ROOT, 0xA) == Outcome(SPOUT_TASK, ROOT, True)


class TestRotate:
    def test_forgets_after_three_rotations(self, ledger_type: LedgerClass):
        """A tree that sees no message is forgotten at the third rotation, not before."""
        ledger = ledger_type()
        ledger.init(ROOT, 0xA, SPOUT_TASK)
        assert ledger.rotate() == []
        assert ledger.rotate() == []
        assert ledger.rotate() == [ROOT]
        assert len(ledger) == 0

    def test_any_message_restarts_expiry(self, ledger_type: LedgerClass):
        """An ack moves the tree to the newest cohort: three more rotations to forget it."""
        ledger = ledger_type()
        ledger.init(ROOT, 0xA ^ 0xB, SPOUT_TASK)
        ledger.rotate()
        ledger.rotate()
        ledger.ack(ROOT, 0xA)
        assert ledger.rotate() == []
        assert ledger.rotate() == []
        assert ledger.rotate() == [ROOT]

    def test_forgotten_tree_is_never_reported(self, ledger_type: LedgerClass):
        """The spout has failed a forgotten tree already; its late acks report nothing."""
        ledger = ledger_type()
        ledger.init(ROOT, 0xA, SPOUT_TASK)
        for _ in range(3):
            ledger.rotate()
        assert ledger.ack(ROOT, 0xA) is None

    def test_bucket_count(self, ledger_type: LedgerClass):
        """With two buckets a tree is forgotten at the second rotation."""
        ledger = ledger_type(buckets=2)
        ledger.init(ROOT, 0xA, SPOUT_TASK)
        assert ledger.rotate() == []
        assert ledger.rotate() == [ROOT]


class TestRandomDags:
    """Random tuple DAGs played with the real edge ids, every message delivered in any order."""

    @dags
    @given(dag=tuple_dags(), data=st.data())
    def test_completes_exactly_at_the_last_message(self, ledger_type: LedgerClass, dag: TupleDag, data: Any):
        """Every tree is acked at its last message, never before, whatever the arrival order."""
        roots, messages = play(dag)
        order = data.draw(st.permutations(messages))
        ledger = ledger_type()
        expected = expected_outcomes(dag, roots, order)
        assert [deliver(ledger, m) for m in order] == [expected.get(i) for i in range(len(order))]
        assert len(ledger) == 0

    @dags
    @given(dag=multi_rooted_dags(), data=st.data())
    def test_multi_rooted_trees_complete_independently(self, ledger_type: LedgerClass, dag: TupleDag, data: Any):
        """With tuples anchored across two spout trees, each tree completes at its own last message."""
        roots, messages = play(dag)
        order = data.draw(st.permutations(messages))
        ledger = ledger_type()
        expected = expected_outcomes(dag, roots, order)
        assert [deliver(ledger, m) for m in order] == [expected.get(i) for i in range(len(order))]

    @dags
    @given(dag=failing_dags(), data=st.data())
    def test_a_fail_anywhere_fails_the_tree(self, ledger_type: LedgerClass, dag: TupleDag, data: Any):
        """A failed tuple fails every tree it is in, reported once the init is in, and only once;
        trees it is not in still complete."""
        roots, messages = play(dag)
        order = data.draw(st.permutations(messages))
        ledger = ledger_type()
        expected = expected_outcomes(dag, roots, order)
        assert [deliver(ledger, m) for m in order] == [expected.get(i) for i in range(len(order))]

    @pytest.mark.parametrize("chained", [False, True], ids=["own mail", "chained to a spout"])
    @dags
    @given(dag=st.one_of(tuple_dags(), failing_dags()), data=st.data())
    def test_combined_acks_give_the_same_outcome(
        self, ledger_type: LedgerClass, chained: bool, dag: TupleDag, data: Any
    ):
        """Acks batched through an Outbox, which XORs the acks of one root into one number, settle
        every tree in the batch holding its deciding message, exactly as one by one. Chained
        to a spout task, the bolt's acks go in that spout's mail and fold into the inits
        waiting there: still the same outcomes, in the same batches."""
        roots, messages = play(dag)
        order = data.draw(st.permutations(messages))
        cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(order) - 1)))))
        batches = [order[a:b] for a, b in zip([0, *cuts], [*cuts, len(order)], strict=True) if order[a:b]]

        decided_in = {}
        position = 0
        expected = expected_outcomes(dag, roots, order)
        for b, batch in enumerate(batches):
            for _ in batch:
                if position in expected:
                    decided_in[expected[position]] = b
                position += 1

        sent: list[tuple[int, Any]] = []

        def outbox(task: int) -> Outbox:
            return Outbox(task, 1000, lambda dest, p: None, lambda dest, p: sent.append((dest, p)), [ACKER_TASK])

        # Inits come from the spout tasks' outboxes, acks and fails from one bolt's.
        spouts = {spout_task_of(r): outbox(spout_task_of(r)) for r in range(len(roots))}
        bolt = outbox(1)
        if chained:
            bolt.share_acker_mails(spouts[spout_task_of(0)])
        ledger = ledger_type()
        reported = {}
        for b, batch in enumerate(batches):
            for m in batch:
                if m.kind == "init":
                    spouts[m.spout_task].acker(m.root).inits[m.root] = m.val
                elif m.kind == "ack":
                    bolt.ack(m.root, m.val)
                else:
                    bolt.fail_tree(m.root)
            for box in [*spouts.values(), bolt]:
                box.flush_control()
            outcomes = []
            for dest, (sender, inits, acks, fails, _resets) in sent:
                assert dest == ACKER_TASK
                assert sender != 1 or not chained, "a chained bolt's host sends its acker traffic"
                if sender == 1:
                    assert len(acks) == 2 * len({m.root for m in batch if m.kind == "ack"})
                outcomes += settled_outcomes(ledger.apply(sender, inits, acks, fails))
            sent.clear()
            for outcome in outcomes:
                assert outcome not in reported, "a tree was reported twice"
                reported[outcome] = b
        assert reported == decided_in


class ModelLedger:
    """The ledger's contract in a few lines of dict: the reference the flat arrays must match."""

    def __init__(self, buckets: int = 3) -> None:
        self.buckets = buckets
        self.trees: dict[int, list[Any]] = {}  # root -> [checksum, spout task, failed, rotations untouched]

    def _touch(self, root: int) -> list[Any]:
        tree = self.trees.setdefault(root, [0, 0, False, 0])
        tree[3] = 0
        return tree

    def _settle(self, root: int, tree: list[Any]) -> Outcome | None:
        if tree[1] and (tree[2] or not tree[0]):
            del self.trees[root]
            return Outcome(tree[1], root, not tree[2])
        return None

    def init(self, root: int, val: int, spout_task: int) -> Outcome | None:
        tree = self._touch(root)
        tree[0] ^= val
        tree[1] = spout_task
        return self._settle(root, tree)

    def ack(self, root: int, val: int) -> Outcome | None:
        tree = self._touch(root)
        tree[0] ^= val
        return self._settle(root, tree)

    def fail(self, root: int) -> Outcome | None:
        tree = self._touch(root)
        tree[2] = True
        return self._settle(root, tree)

    def reset_timeout(self, root: int) -> int | None:
        return self._touch(root)[1] or None

    def rotate(self) -> list[int]:
        for tree in self.trees.values():
            tree[3] += 1
        expired = [root for root, tree in self.trees.items() if tree[3] >= self.buckets]
        for root in expired:
            del self.trees[root]
        return expired


# Roots that share their low bits, so that they collide in the table and probe past each other.
_colliding_roots = st.integers(1, 40).map(lambda k: (k << 24) | 0x5EED)
_operations = st.lists(
    st.one_of(
        st.tuples(st.just("init"), _colliding_roots, st.integers(0, 3), st.integers(1, 4)),
        st.tuples(st.just("ack"), _colliding_roots, st.integers(0, 3)),
        st.tuples(st.just("fail"), _colliding_roots),
        st.tuples(st.just("reset_timeout"), _colliding_roots),
        st.tuples(st.just("rotate")),
    ),
    max_size=300,
)


class TestFlatTable:
    """The open-addressing table under collisions, deletions, expiry, growth and shrinking."""

    @pytest.mark.parametrize("young", [1, 3, YOUNG_TREES])
    @settings(max_examples=300, deadline=None)
    @given(operations=_operations)
    def test_matches_the_model(self, ledger_type: LedgerClass, young: int, operations: list[tuple[Any, ...]]):
        """Every message and rotation answers as the dict model does, whatever collides, and
        wherever the trees are (young, or moved to the table by a rotation or by the young
        being too many)."""
        ledger, model = ledger_type(young=young), ModelLedger()
        for name, *args in operations:
            got, expected = getattr(ledger, name)(*args), getattr(model, name)(*args)
            if name == "rotate":
                got, expected = sorted(got), sorted(expected)
            assert got == expected, (name, args)
            assert len(ledger) == len(model.trees)

    def test_full_64_bit_ids(self, ledger_type: LedgerClass):
        """Roots and checksums use all 64 bits (the arrays' typecode holds them unsigned)."""
        assert array(ID_TYPECODE).itemsize == 8
        ledger = ledger_type()
        top = 2**64 - 1
        assert ledger.apply(SPOUT_TASK, [top, top, top - 1, 1 << 63], [], []) == {}
        assert ledger.apply(1, [], [top, top, top - 1, 1 << 63], []) == {SPOUT_TASK: ([top, top - 1], [])}

    def test_many_trees_then_none(self, ledger_type: LedgerClass):
        """The table grows to hold many trees and gives the memory back once they are gone."""
        ledger = ledger_type()
        roots = [new_id() for _ in range(50_000)]
        for root in roots:
            ledger.init(root, 1, SPOUT_TASK)
        assert len(ledger) == len(roots)
        assert all(ledger.ack(root, 1) == Outcome(SPOUT_TASK, root, True) for root in roots)
        for _ in range(3):
            ledger.rotate()
        assert len(ledger) == 0 and ledger.capacity == 1024


# A control payload: (sender, inits, acks, fails), on colliding roots.
_payloads = st.lists(
    st.tuples(
        st.integers(1, 4),
        st.lists(st.tuples(_colliding_roots, st.integers(0, 3)), max_size=8),
        st.dictionaries(_colliding_roots, st.integers(0, 3), max_size=8),
        st.lists(_colliding_roots, max_size=2),
    ),
    max_size=40,
)


class TestApply:
    """``apply`` (a whole payload at once, what the acker runs) against the one-message calls."""

    @pytest.mark.parametrize("young", [1, 3, YOUNG_TREES])
    @settings(max_examples=300, deadline=None)
    @given(payloads=_payloads, rotate_every=st.integers(1, 10))
    def test_matches_one_message_at_a_time(
        self, ledger_type: LedgerClass, young: int, payloads: list[tuple[Any, ...]], rotate_every: int
    ):
        """Same trees settled, per spout task and in the same order; same trees left pending and
        forgotten, whatever collides, overtakes, fails or expires, young or in the table."""
        batched, single = ledger_type(young=young), ledger_type(young=young)
        for n, (sender, init_pairs, ack_of, fails) in enumerate(payloads):
            inits = [x for pair in init_pairs for x in pair]
            acks = [x for pair in ack_of.items() for x in pair]
            assert batched.apply(sender, inits, acks, fails) == apply_one_by_one(single, sender, inits, acks, fails)
            assert len(batched) == len(single)
            if n % rotate_every == 0:
                assert sorted(batched.rotate()) == sorted(single.rotate())

    @pytest.mark.parametrize("colliding", [False, True])
    def test_grows_in_the_middle_of_a_payload(self, ledger_type: LedgerClass, colliding: bool):
        """A payload of more new trees than the table has room for grows it as it goes; acks
        that overtook their inits, split over several payloads, still settle right."""
        rng = random.Random(7)
        roots = [(k << 20 | 0xACE) if colliding else new_id() for k in range(1, 3001)]
        edges = {root: rng.getrandbits(64) | 1 for root in roots}
        early = {root: edges[root] for root in roots[::3]}  # these acks overtake the inits
        failing = [root for root in roots[1::7] if root not in early]
        late = {root: edges[root] for root in roots if root not in early and root not in failing}
        batched, single = ledger_type(), ledger_type()
        plays = [
            (7, [], flat(early), []),
            (5, flat({root: edges[root] for root in roots}), [], failing),
            (8, [], flat(late), []),
        ]
        for sender, inits, acks, fails in plays:
            assert batched.apply(sender, inits, acks, fails) == apply_one_by_one(single, sender, inits, acks, fails)
        assert len(batched) == len(single) == 0
