"""The outbox's wire forms: ``AckerMail.take`` folds acks of trees whose inits wait in the same
mail into those inits; ``ValueColumn`` pickles a column of plain strings as one string."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import pytest

from rayflow._executors import kernel
from rayflow._outbox import SEPARATOR, AckerMail, ValueColumn, _split, join_strings

JOINERS = [pytest.param(join_strings, id="python")] + [
    pytest.param(
        getattr(kernel.KERNEL, "join_strings", None),
        id="c",
        marks=pytest.mark.skipif(kernel.KERNEL is None, reason=f"the C kernel does not run here: {kernel.BUILD}"),
    )
]


class Word(str):
    """A subclass of ``str``, which the joined form would turn into a plain ``str``."""


def pairs(flat: object) -> dict[int, int]:
    values = list(flat)  # type: ignore[call-overload]
    return dict(zip(values[::2], values[1::2], strict=True))


def test_every_ack_folds_into_its_init() -> None:
    """A chained bolt that acked only the host's new trees: one init per tree, no acks."""
    mail = AckerMail()
    mail.inits.update({1: 0b1100, 2: 0b0011, 3: 7})
    mail.acks.update({1: 0b1010, 3: 7})
    sender, inits, acks, fails, resets = mail.take(9)
    assert sender == 9
    assert pairs(inits) == {1: 0b0110, 2: 0b0011, 3: 0}
    assert list(inits[::2]) == [1, 2, 3]  # the inits' order stays
    assert pairs(acks) == {} and fails == [] and resets == []
    assert len(mail) == 0


def test_acks_of_other_trees_stay_acks() -> None:
    """Acks of trees inited elsewhere go as acks; those of the mail's own trees still fold."""
    mail = AckerMail()
    mail.inits.update({1: 5, 2: 6})
    mail.acks.update({2: 6, 40: 9, 41: 3})
    _, inits, acks, _, _ = mail.take(9)
    assert pairs(inits) == {1: 5, 2: 0}
    assert pairs(acks) == {40: 9, 41: 3}
    assert len(mail) == 0


@pytest.mark.parametrize(
    ("values", "joined"),
    [
        (["the", "cow", "", "jumped"], True),
        (["one"], True),
        (["the", Word("cow")], False),  # a subclass keeps its class
        ([Word("cow"), "the"], False),
        (["the", 3], False),
        ([3, "the"], False),
        (["a" + SEPARATOR + "b", "c"], False),  # a value holding the separator
        ([["a", 1], ["b", 2]], False),
        ([], False),
    ],
)
@pytest.mark.parametrize("joiner", JOINERS)
def test_value_column_round_trips(
    values: list[Any], joined: bool, joiner: Callable[[list[Any], str], str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Either build's check (pure Python, or the C kernel's ``join_strings``) joins the same columns."""
    monkeypatch.setattr(ValueColumn, "join_strings", joiner)
    column = ValueColumn(values)
    assert (column.__reduce_ex__(5)[0] is _split) is joined
    back = pickle.loads(pickle.dumps(column, protocol=5))
    assert back == values
    assert [type(v) for v in back] == [type(v) for v in values]
    assert type(back) is list
