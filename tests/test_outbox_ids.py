"""``DataBatch.trees``: a list in pure Python, the kernel's ``IdBuffer`` where the C kernel runs.
Either way the emit paths extend it with ``+=``, and ``take`` puts the same array on the wire."""

from __future__ import annotations

import pickle
from array import array
from collections.abc import Callable
from typing import Any

import pytest

from rayflow._acking.anchoring import ID_TYPECODE
from rayflow._executors import kernel
from rayflow._outbox import DataBatch

on_the_kernel = pytest.mark.skipif(kernel.KERNEL is None, reason=f"the C kernel does not run here: {kernel.BUILD}")

TOP = 2**64 - 1
"""The largest id."""


def id_makers() -> list[Callable[[], Any]]:
    return [list] if kernel.KERNEL is None else [list, kernel.KERNEL.IdBuffer]


@pytest.mark.parametrize("new_ids", id_makers())
def test_take_puts_the_same_id_array_on_the_wire_whatever_holds_the_ids(
    new_ids: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(DataBatch, "new_ids", new_ids)
    batch = DataBatch()
    assert batch.trees.__class__ is new_ids
    batch.switch("default")
    for i, (root, edge) in enumerate([(1, 2), (0, 0), (TOP, 3), (7, TOP)]):
        batch.values.append(f"w{i}")
        batch.add_tree(root, edge)
    _, values, trees, streams, ends, joined = batch.take(5)
    assert trees.typecode == ID_TYPECODE
    assert list(trees) == [1, 2, 0, 0, TOP, 3, 7, TOP]
    assert pickle.loads(pickle.dumps(trees)) == trees
    assert (list(values), streams, ends, joined) == (["w0", "w1", "w2", "w3"], ["default"], [4], [])
    assert batch.trees.__class__ is new_ids and len(batch.trees) == 0  # a fresh one for the next batch
    assert list(batch.take(5)[2]) == []


@on_the_kernel
class TestIdBuffer:
    def new(self) -> Any:
        assert kernel.KERNEL is not None
        return kernel.KERNEL.IdBuffer()

    def test_it_extends_indexes_and_measures_as_a_list(self) -> None:
        ids = self.new()
        ids += (1, 2)
        ids += [TOP, 0]
        ids.append(9)
        assert len(ids) == 5
        assert list(ids) == [1, 2, TOP, 0, 9]
        assert (ids[0], ids[2], ids[4]) == (1, TOP, 9)
        with pytest.raises(IndexError):
            ids[5]
        assert repr(ids) == f"IdBuffer([1, 2, {TOP}, 0, 9])"

    def test_it_grows_past_its_first_capacity(self) -> None:
        ids = self.new()
        for i in range(1000):
            ids += (i, TOP - i)
        assert list(ids)[::2] == list(range(1000))
        assert list(ids)[1::2] == [TOP - i for i in range(1000)]

    @pytest.mark.parametrize("bad", [-1, 2**64, "1", 1.0])
    def test_it_refuses_what_is_not_an_id_and_keeps_what_it_had(self, bad: Any) -> None:
        ids = self.new()
        ids += (1, 2)
        with pytest.raises((OverflowError, TypeError)):
            ids += (3, bad)
        with pytest.raises((OverflowError, TypeError)):
            ids.append(bad)
        assert list(ids) == [1, 2]

    def test_its_buffer_is_its_ids_read_only_and_it_does_not_change_while_exported(self) -> None:
        ids = self.new()
        ids += (1, TOP)
        view = memoryview(ids)
        assert (view.format, view.itemsize, view.readonly, view.tolist()) == ("L", 8, True, [1, TOP])
        assert bytes(ids) == array(ID_TYPECODE, [1, TOP]).tobytes()
        with pytest.raises(BufferError):
            ids += (2, 3)
        with pytest.raises(BufferError):
            ids.append(2)
        view.release()
        ids += (2, 3)
        assert list(ids) == [1, TOP, 2, 3]

    def test_it_does_not_pickle_the_wire_carries_the_array(self) -> None:
        with pytest.raises(TypeError):
            pickle.dumps(self.new())


class TestReadIds:
    """A bolt executor reads a received payload's trees with ``kernel.read_ids``: the ints
    ``iter`` would give, whichever build runs (the C kernel's ``IdReader``, which its
    ``run_inline`` reads raw, is an iterator of the same ints)."""

    def test_the_ints_iter_gives(self) -> None:
        ids = array(ID_TYPECODE, [1, 2, 0, 0, TOP, 3, TOP, TOP])
        assert list(kernel.read_ids(ids)) == list(iter(ids))
        assert list(kernel.read_ids([5, 6])) == [5, 6]  # a list: as it is
        assert list(kernel.read_ids(array(ID_TYPECODE))) == []

    @on_the_kernel
    def test_the_reader_holds_the_array_while_it_reads(self) -> None:
        ids = array(ID_TYPECODE, [1, 2])
        reader = kernel.read_ids(ids)
        assert type(reader) is kernel.KERNEL.IdReader  # type: ignore[union-attr]
        assert next(reader) == 1
        with pytest.raises(BufferError):
            ids.append(3)
        assert list(reader) == [2]
        del reader
        ids.append(3)  # released with the reader

    @on_the_kernel
    def test_an_array_of_other_ids_is_refused(self) -> None:
        with pytest.raises(TypeError, match="unsigned 64-bit"):
            kernel.KERNEL.IdReader(array("i", [1, 2]))  # type: ignore[union-attr]
        assert list(kernel.read_ids(array("i", [1, 2]))) == [1, 2]  # read_ids: iter, then
