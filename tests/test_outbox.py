"""The outbox's wire forms: ``AckerMail.take`` folds acks of trees whose inits wait in the same
mail into those inits; ``ValueColumn`` pickles a column of plain strings as one string."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayflow._executors import kernel
from rayflow._outbox import SEPARATOR, AckerMail, ValueColumn, _split, c_flat_mail, flat_mail, join_strings

on_the_kernel = pytest.mark.skipif(kernel.KERNEL is None, reason=f"the C kernel does not run here: {kernel.BUILD}")
C_FLAT_MAIL = None if kernel.KERNEL is None else c_flat_mail(kernel.KERNEL.flat_mail, kernel.KERNEL.IdBuffer)
FLATTENERS = [pytest.param((flat_mail, list), id="python")] + [
    pytest.param((C_FLAT_MAIL, getattr(kernel.KERNEL, "IdBuffer", list)), id="c", marks=on_the_kernel)
]
JOINERS = [pytest.param(join_strings, id="python")] + [
    pytest.param(
        getattr(kernel.KERNEL, "join_strings", None),
        id="c",
        marks=on_the_kernel,
    )
]


class Word(str):
    """A subclass of ``str``, which the joined form would turn into a plain ``str``."""


def pairs(flat: object) -> dict[int, int]:
    values = list(flat)  # type: ignore[call-overload]
    return dict(zip(values[::2], values[1::2], strict=True))


@pytest.fixture(params=FLATTENERS)
def build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each mail test runs on either build's ``AckerMail.flatten`` and ``raw_acks`` (pure Python,
    or the C kernel's)."""
    flatten, new_ids = request.param
    monkeypatch.setattr(AckerMail, "flatten", flatten)
    monkeypatch.setattr(AckerMail, "new_ids", new_ids)


def test_every_ack_folds_into_its_init(build: None) -> None:
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


def test_acks_of_other_trees_stay_acks(build: None) -> None:
    """Acks of trees inited elsewhere go as acks; those of the mail's own trees still fold."""
    mail = AckerMail()
    mail.inits.update({1: 5, 2: 6})
    mail.acks.update({2: 6, 40: 9, 41: 3})
    _, inits, acks, _, _ = mail.take(9)
    assert pairs(inits) == {1: 5, 2: 0}
    assert pairs(acks) == {40: 9, 41: 3}
    assert len(mail) == 0


def test_only_acks_or_only_inits(build: None) -> None:
    """A bolt's mail (acks alone) and a spout's (inits alone) go as they are, 64-bit ids whole."""
    top = 2**64 - 1
    mail = AckerMail()
    mail.acks.update({top: 1, 5: top})
    _, inits, acks, _, _ = mail.take(3)
    assert len(inits) == 0 and pairs(acks) == {top: 1, 5: top}
    mail.inits.update({7: top})
    _, inits, acks, _, _ = mail.take(3)
    assert pairs(inits) == {7: top} and len(acks) == 0


@on_the_kernel
def test_the_run_loops_raw_acks_fold_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The C run loop appends its acks raw (``raw_acks``): those of the mail's own trees fold
    into their inits, those of a root the dict has into its ack, and the others into one ack
    per root after the dict's."""
    monkeypatch.setattr(AckerMail, "flatten", C_FLAT_MAIL)
    monkeypatch.setattr(AckerMail, "new_ids", kernel.KERNEL.IdBuffer)  # type: ignore[union-attr]
    mail = AckerMail()
    mail.inits.update({1: 0b1100, 2: 0b0011})
    mail.acks.update({1: 0b0001, 50: 4})
    mail.raw_acks += (2, 0b0011, 60, 1, 1, 0b1000, 60, 2, 50, 1, 70, 5)
    assert len(mail) == 2 + 2 + 6
    _, inits, acks, _, _ = mail.take(9)
    assert pairs(inits) == {1: 0b0101, 2: 0}
    assert list(acks) == [50, 5, 60, 3, 70, 5]
    assert len(mail) == 0


@on_the_kernel
@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.integers(1, 40), st.integers(0, 2**64 - 1), max_size=30),
    st.dictionaries(st.integers(1, 60), st.integers(0, 2**64 - 1), max_size=30),
    st.lists(st.tuples(st.integers(1, 60), st.integers(0, 2**64 - 1)), max_size=30),
)
def test_both_builds_fold_alike(inits: dict[int, int], acks: dict[int, int], raw: list[tuple[int, int]]) -> None:
    """Any mail: the C kernel's arrays are the pure Python's, pair for pair and in order."""
    assert C_FLAT_MAIL is not None
    raw_acks = kernel.KERNEL.IdBuffer()  # type: ignore[union-attr]
    raw_acks += [i for pair in raw for i in pair]
    c_inits, c_acks = C_FLAT_MAIL(dict(inits), dict(acks), raw_acks)
    py_inits, py_acks = flat_mail(dict(inits), dict(acks), [i for pair in raw for i in pair])
    assert list(c_inits) == list(py_inits) and list(c_acks) == list(py_acks)
    assert list(raw_acks) == [i for pair in raw for i in pair]  # left as it was


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
