"""RotatingMap: a dict whose entries expire in cohorts, one cohort per rotation."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayflow._rotating_map import RotatingMap


def recording_map(buckets: int) -> tuple[RotatingMap[str, int], list[tuple[str, int]]]:
    expired: list[tuple[str, int]] = []
    return RotatingMap(buckets, lambda k, v: expired.append((k, v))), expired


class TestDictBehaviour:
    def test_put_get_contains_len(self):
        """A put entry is found by get and ``in`` and counted by len."""
        m: RotatingMap[str, int] = RotatingMap(2)
        m.put("a", 1)
        m.put("b", 2)
        assert m.get("a") == 1
        assert "b" in m
        assert "c" not in m
        assert len(m) == 2
        assert sorted(m) == ["a", "b"]

    def test_get_missing_returns_default(self):
        """get of a missing key returns the default, None unless given."""
        m: RotatingMap[str, int] = RotatingMap(2)
        assert m.get("a") is None
        assert m.get("a", 7) == 7

    def test_pop(self):
        """pop removes and returns the value, from whichever cohort holds it."""
        m: RotatingMap[str, int] = RotatingMap(3)
        m.put("old", 1)
        m.rotate()
        m.put("new", 2)
        assert m.pop("old") == 1
        assert m.pop("new") == 2
        assert m.pop("new", -1) == -1
        assert len(m) == 0

    def test_put_replaces(self):
        """Putting a key again replaces its value; it is held once."""
        m: RotatingMap[str, int] = RotatingMap(2)
        m.put("a", 1)
        m.rotate()
        m.put("a", 2)
        assert m.get("a") == 2
        assert len(m) == 1

    def test_needs_two_buckets(self):
        """A single bucket could not tell old from new: refused."""
        with pytest.raises(ValueError, match="at least 2 buckets"):
            RotatingMap(1)


class TestExpiry:
    @pytest.mark.parametrize("buckets", [2, 3, 5])
    def test_expires_at_the_nth_rotation(self, buckets: int):
        """An untouched entry is handed to the callback at rotation N (the bucket count), not before."""
        m, expired = recording_map(buckets)
        m.put("a", 1)
        for _ in range(buckets - 1):
            assert m.rotate() == {}
        assert expired == []
        assert m.rotate() == {"a": 1}
        assert expired == [("a", 1)]
        assert "a" not in m

    def test_put_resets_expiry(self):
        """Putting a key again starts its clock over."""
        m, expired = recording_map(2)
        m.put("a", 1)
        m.rotate()
        m.put("a", 2)
        m.rotate()
        assert expired == []
        m.rotate()
        assert expired == [("a", 2)]

    def test_get_does_not_reset_expiry(self):
        """Reading an entry leaves its clock alone."""
        m, expired = recording_map(2)
        m.put("a", 1)
        m.rotate()
        m.get("a")
        m.rotate()
        assert expired == [("a", 1)]

    def test_popped_entry_never_expires(self):
        """An entry popped before its time is not handed to the callback."""
        m, expired = recording_map(2)
        m.put("a", 1)
        m.pop("a")
        m.rotate()
        m.rotate()
        assert expired == []

    def test_cohorts_expire_together(self):
        """Entries put between the same two rotations expire at the same rotation."""
        m, expired = recording_map(2)
        m.put("a", 1)
        m.put("b", 2)
        m.rotate()
        m.put("c", 3)
        m.rotate()
        assert sorted(expired) == [("a", 1), ("b", 2)]
        m.rotate()
        assert expired[-1] == ("c", 3)

    def test_without_callback(self):
        """With no callback, rotate still returns what expired."""
        m: RotatingMap[str, int] = RotatingMap(2)
        m.put("a", 1)
        m.rotate()
        assert m.rotate() == {"a": 1}

    @settings(max_examples=200, deadline=None)
    @given(thousandths=st.integers(0, 999))
    def test_two_buckets_live_between_one_and_two_periods(self, thousandths: int):
        """Rotating every period, a 2-bucket entry expires after more than one period and at most two."""
        put_at = Fraction(thousandths, 1000)
        m, expired = recording_map(2)
        m.put("a", 1)  # at put_at periods after the rotation at time 0
        rotation = 1
        while not expired:
            m.rotate()  # at time ``rotation`` periods
            rotation += 1
        age = (rotation - 1) - put_at
        assert 1 < age <= 2


operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from("abcd"), st.integers()),
        st.tuples(st.just("pop"), st.sampled_from("abcd")),
        st.tuples(st.just("pop_each"), st.lists(st.sampled_from("abcd"), max_size=5)),
        st.tuples(st.just("rotate")),
    ),
    max_size=40,
)


class TestAgainstAModel:
    @settings(max_examples=200, deadline=None)
    @given(buckets=st.integers(2, 4), ops=operations)
    def test_behaves_like_a_dict_with_ages(self, buckets: int, ops: list[tuple]):
        """Any sequence of puts, pops and rotations matches a dict of (value, rotations since put)."""
        m, expired = recording_map(buckets)
        model: dict[str, tuple[int, int]] = {}
        for op in ops:
            if op[0] == "put":
                model[op[1]] = (op[2], 0)
                m.put(op[1], op[2])
            elif op[0] == "pop":
                assert m.pop(op[1]) == model.pop(op[1], (None, 0))[0]
            elif op[0] == "pop_each":
                assert m.pop_each(op[1]) == [model.pop(k, (None, 0))[0] for k in op[1]]
            else:
                aged = {k: (v, age + 1) for k, (v, age) in model.items()}
                due = {k: v for k, (v, age) in aged.items() if age == buckets}
                model = {k: va for k, va in aged.items() if k not in due}
                expired.clear()
                assert m.rotate() == due
                assert dict(expired) == due
            assert {k: m.get(k) for k in m} == {k: v for k, (v, _) in model.items()}
            assert len(m) == len(model)
            assert sorted(m.newest) == sorted(k for k, (_, age) in model.items() if age == 0)
