"""Hypothesis strategies for the acker's property tests: random tuple DAGs.

A ``TupleDag`` is a plan, free of ids: which spout tuples start trees and to how many tasks
each goes, then the bolts' steps in the order they happen -- a bolt emits a tuple anchored to
one or several of the tuples it holds (joining their trees), or it acks (or fails) a tuple it
holds. Tests play the plan with the real edge-id code to get the acker's messages.

Tuples are numbered in the order they are created: first the spout tuples' copies, root by
root, then the copies of every emit, one per target task.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

__all__ = ["Ack", "Emit", "Fail", "Step", "TupleDag", "failing_dags", "multi_rooted_dags", "tuple_dags"]

MAX_FANOUT = 3
MAX_TUPLES = 24


@dataclass(frozen=True)
class Emit:
    """A bolt emits one tuple anchored to ``anchors``, sent to ``fanout`` tasks."""

    anchors: tuple[int, ...]
    fanout: int


@dataclass(frozen=True)
class Ack:
    """The bolt holding tuple ``tup`` acks it."""

    tup: int


@dataclass(frozen=True)
class Fail:
    """The bolt holding tuple ``tup`` fails it."""

    tup: int


Step = Emit | Ack | Fail


@dataclass(frozen=True)
class TupleDag:
    spout_fanouts: tuple[int, ...]
    """Per root: how many tasks the spout tuple was sent to."""
    steps: tuple[Step, ...]
    roots_of: tuple[frozenset[int], ...]
    """Per tuple: the indexes of the roots whose trees it belongs to."""

    @property
    def failed_roots(self) -> frozenset[int]:
        return frozenset().union(*(self.roots_of[s.tup] for s in self.steps if isinstance(s, Fail)))


# Built once: making strategies inside a draw loop is what makes a composite slow.
_fanouts = st.integers(1, MAX_FANOUT)
_anchor_counts = st.integers(1, 3)
_picks = st.integers(0, MAX_TUPLES)
_coins = st.booleans()


@st.composite
def tuple_dags(draw: st.DrawFn, roots: int | None = None, cross_anchor: bool = False) -> TupleDag:
    """A DAG over one or two spout trees in which every tuple is eventually acked.

    With ``cross_anchor`` the first step joins the two trees: a tuple anchored to one tuple of
    each (``roots`` must then be 2).
    """
    n_roots = roots if roots is not None else draw(st.integers(1, 2))
    fanouts = tuple(draw(_fanouts) for _ in range(n_roots))
    roots_of: list[frozenset[int]] = [frozenset({r}) for r, fan in enumerate(fanouts) for _ in range(fan)]
    held = list(range(len(roots_of)))
    steps: list[Step] = []

    def pick(among: list[int]) -> int:
        return among[draw(_picks) % len(among)]

    def emit(anchors: list[int]) -> None:
        fanout = draw(_fanouts)
        joined = frozenset().union(*(roots_of[a] for a in anchors))
        held.extend(range(len(roots_of), len(roots_of) + fanout))
        roots_of.extend([joined] * fanout)
        steps.append(Emit(tuple(anchors), fanout))

    if cross_anchor:
        assert n_roots == 2, "joining two trees needs two roots"
        emit([pick([t for t in held if roots_of[t] == {r}]) for r in (0, 1)])
    while held:
        if len(roots_of) + MAX_FANOUT <= MAX_TUPLES and draw(_coins):
            emit(sorted({pick(held) for _ in range(draw(_anchor_counts))}))
        else:
            tup = pick(held)
            held.remove(tup)
            steps.append(Ack(tup))
    return TupleDag(fanouts, tuple(steps), tuple(roots_of))


def multi_rooted_dags() -> st.SearchStrategy[TupleDag]:
    """Two spout trees joined by at least one multi-anchored tuple."""
    return tuple_dags(roots=2, cross_anchor=True)


@st.composite
def failing_dags(draw: st.DrawFn) -> TupleDag:
    """A DAG in which one or two tuples are failed instead of acked."""
    dag = draw(st.one_of(tuple_dags(), multi_rooted_dags()))
    ack_steps = {i: s.tup for i, s in enumerate(dag.steps) if isinstance(s, Ack)}
    failing = draw(st.lists(st.sampled_from(sorted(ack_steps)), min_size=1, max_size=2, unique=True))
    steps = list(dag.steps)
    for i in failing:
        steps[i] = Fail(ack_steps[i])
    return TupleDag(dag.spout_fanouts, tuple(steps), dag.roots_of)
