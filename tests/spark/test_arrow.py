"""Tuples to Arrow tables (no Spark): types inferred once per field and held; a value that does
not fit sets its row aside with an error naming the field, and is never coerced or dropped."""

from __future__ import annotations

import math

import pytest

pa = pytest.importorskip("pyarrow")

from rayflow import ConfigError  # noqa: E402
from rayflow.spark._arrow import SchemaMismatchError, TableBuilder, parse_schema  # noqa: E402


class TestInference:
    def test_types_come_from_the_values(self) -> None:
        """Strings, ints, floats, bools and lists get their Arrow types; rows keep their order."""
        rows = [["a", 1, 0.5, True, ["p"]], ["b", 2, 1.5, False, []]]
        built = TableBuilder(["w", "n", "x", "ok", "tags"]).build(rows)
        assert built.errors == []
        assert built.table.schema.types == [pa.string(), pa.int64(), pa.float64(), pa.bool_(), pa.list_(pa.string())]
        assert built.table.to_pylist()[1] == {"w": "b", "n": 2, "x": 1.5, "ok": False, "tags": []}

    def test_ints_and_floats_in_one_batch_make_a_float_column(self) -> None:
        built = TableBuilder(["x"]).build([[1], [2.5]])
        assert built.table.column("x").to_pylist() == [1.0, 2.5] and built.errors == []

    def test_a_field_that_is_always_none_is_a_string_column_until_it_has_a_value(self) -> None:
        builder = TableBuilder(["x"])
        assert builder.build([[None], [None]]).table.schema.types == [pa.string()]
        assert builder.build([[7], [None]]).table.schema.types == [pa.int64()]
        assert builder.build([[None]]).table.schema.types == [pa.int64()]

    def test_nan_is_a_value_like_any_other(self) -> None:
        builder = TableBuilder(["x"])
        builder.build([[1.0]])
        built = builder.build([[float("nan")], [2]])
        assert built.errors == [] and math.isnan(built.table.column("x").to_pylist()[0])


class TestOneSchemaPerSink:
    def test_later_batches_are_held_to_the_first_batchs_types(self) -> None:
        """A str where the first batch had ints: that row is set aside, the others go on."""
        builder = TableBuilder(["word", "count"])
        builder.build([["a", 1]])
        built = builder.build([["b", 2], ["c", "three"], ["d", 4]])
        assert built.table.to_pylist() == [{"word": "b", "count": 2}, {"word": "d", "count": 4}]
        [error] = built.errors
        assert isinstance(error, SchemaMismatchError) and error.field == "count" and error.rows == [1]
        assert "field 'count'" in str(error) and "'three' (str)" in str(error) and "earlier batch" in str(error)

    def test_a_float_is_never_truncated_into_an_int_column(self) -> None:
        """pyarrow alone would turn 2.5 into 2 for an int64 column: here the row is set aside."""
        builder = TableBuilder(["n"])
        builder.build([[1]])
        built = builder.build([[2.5]])
        assert built.table is None and built.rejected == {0}

    def test_ints_fit_a_float_column(self) -> None:
        builder = TableBuilder(["x"])
        builder.build([[0.5]])
        assert builder.build([[3]]).table.column("x").to_pylist() == [3.0]

    def test_mixed_values_in_a_first_batch_follow_the_first_value(self) -> None:
        built = TableBuilder(["n"]).build([[1], ["x"], [True], [2]])
        assert built.table.column("n").to_pylist() == [1, 2]
        assert built.rejected == {1, 2} and "its first value in this batch" in str(built.errors[0])

    def test_an_int_too_big_for_int64_is_an_error_not_a_crash(self) -> None:
        built = TableBuilder(["n"]).build([[1], [2**70]])
        assert built.rejected == {1} and built.table.num_rows == 1

    def test_every_field_with_bad_rows_is_reported(self) -> None:
        builder = TableBuilder(["a", "b"])
        builder.build([[1, "x"]])
        built = builder.build([["no", "y"], [2, 3], [3, "z"]])
        assert [e.field for e in built.errors] == ["a", "b"] and built.rejected == {0, 1}
        assert built.table.to_pylist() == [{"a": 3, "b": "z"}]


class TestDeclaredSchema:
    def test_declared_types_win_over_inference(self) -> None:
        builder = TableBuilder(["n", "w"], parse_schema({"n": "double"}))
        built = builder.build([[1, "a"], [2.5, "b"]])
        assert built.table.schema.types == [pa.float64(), pa.string()]
        assert "declared with schema=" in str(TableBuilder(["n"], {"n": pa.int64()}).build([["x"]]).errors[0])

    def test_a_pyarrow_schema_is_accepted(self) -> None:
        assert parse_schema(pa.schema([("n", pa.int32())])) == {"n": pa.int32()}

    def test_an_unknown_type_name_is_a_clear_error(self) -> None:
        with pytest.raises(ConfigError, match="field 'n': unknown Arrow type 'int65'"):
            parse_schema({"n": "int65"})
