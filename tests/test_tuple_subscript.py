"""``tup[key]`` on both builds: the C kernel installs its own subscript on ``Tuple``
(``rayflow/_speedups.c``), and ``_tuple.py``'s ``Tuple.__getitem__`` is its contract. Every key a
bolt may use, and every one it may get wrong, gives the same value or the same error as the
Python method; ``tests/test_kernel.py`` runs this file on the build this process did not load."""

from __future__ import annotations

from typing import Any

import pytest

from rayflow._executors import kernel
from rayflow._tuple import Tuple, TupleSource

SOURCE = TupleSource("split", "default", 3, ["word", "n"])
NO_FIELD = "tuple from 'split' stream 'default' has no field {!r}; its fields are ['word', 'n']"


class Word(Tuple):
    """A subclass, made after the kernel loaded: it inherits the subscript."""

    __slots__ = ()


def subscript(tup: Tuple, key: Any) -> Any:
    """``tup[key]``, or the type and message of what it raised."""
    try:
        return tup[key]
    except Exception as exc:
        return type(exc), str(exc)


@pytest.mark.parametrize("tuple_type", [Tuple, Word])
@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (0, "cow"),
        (1, 2),
        (-1, 2),
        (-2, "cow"),
        ("word", "cow"),
        ("n", 2),
        (True, 2),
        (slice(0, 1), ["cow"]),
        (2, (IndexError, "list index out of range")),
        (-3, (IndexError, "list index out of range")),
        (2**70, (IndexError, "cannot fit 'int' into an index-sized integer")),
        ("count", (KeyError, repr(NO_FIELD.format("count")))),
        (1.0, (TypeError, "list indices must be integers or slices, not float")),
        (None, (TypeError, "list indices must be integers or slices, not NoneType")),
    ],
)
def test_a_key_gives_what_the_python_method_gives(tuple_type: type[Tuple], key: Any, expected: Any) -> None:
    tup = tuple_type(["cow", 2], SOURCE, 7, 9)
    assert subscript(tup, key) == expected
    assert subscript(tup, key) == expected  # again: where CPython specialized the first


def test_a_str_subclass_is_not_a_field_name() -> None:
    """``type(key) is str`` decides: a str subclass indexes the list, as the Python method does."""

    class Name(str):
        pass

    tup = Tuple(["cow", 2], SOURCE)
    assert subscript(tup, Name("word")) == (TypeError, "list indices must be integers or slices, not Name")


def test_values_of_another_kind_are_indexed_as_they_index() -> None:
    """A tuple made by hand with other values (a tuple, a dict): the Python method indexes them."""
    assert Tuple(("cow", 2), SOURCE)[1] == 2
    assert Tuple(("cow", 2), SOURCE)["word"] == "cow"
    assert Tuple({0: "zero"}, SOURCE)[0] == "zero"  # type: ignore[arg-type]


def test_iterating_a_tuple_goes_through_the_subscript() -> None:
    """No ``__iter__``: iteration calls ``__getitem__`` until ``IndexError``."""
    assert list(iter(Tuple(["cow", 2, None], SOURCE))) == ["cow", 2, None]


def test_the_method_called_as_a_method() -> None:
    tup = Tuple(["cow", 2], SOURCE)
    assert Tuple.__getitem__(tup, "n") == tup.__getitem__(1) == 2


@pytest.mark.skipif(kernel.KERNEL is None, reason=f"the C kernel does not run here: {kernel.BUILD}")
def test_on_the_kernel_int_and_str_keys_are_served_in_c_and_the_rest_by_python() -> None:
    assert kernel.KERNEL is not None
    tup = Tuple(["cow", 2], SOURCE)
    before = kernel.KERNEL.counters()
    for key in (0, -1, "word", "n"):
        tup[key]
    middle = kernel.KERNEL.counters()
    for key in (True, slice(0, 1), 2, "count", 1.0):
        subscript(tup, key)
    after = kernel.KERNEL.counters()
    assert middle["getitem_fast"] - before["getitem_fast"] == 4
    assert middle["getitem_fallback"] == before["getitem_fallback"]
    assert after["getitem_fallback"] - middle["getitem_fallback"] == 5
    assert after["getitem_fast"] == middle["getitem_fast"]
