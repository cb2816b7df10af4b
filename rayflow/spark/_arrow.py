"""Tuples to Arrow tables with one schema per sink task, and Arrow tables to Spark DataFrames.

Tuples carry Python values and no types. ``TableBuilder`` infers a field's type from the first
batch that has a non-null value for it (or takes the one declared with ``schema=``) and holds
every later batch to it, so that the batches a sink writes agree with each other. A value that
does not fit is never dropped and never coerced into something else (pyarrow would turn 2.5 into
2 for an int64 column): its row is set aside, and the sink fails that tuple and reports a
``SchemaMismatchError`` naming the field, while the batch's other rows go on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .._errors import ConfigError, RayflowError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["BuiltTable", "SchemaMismatchError", "TableBuilder", "parse_schema", "to_spark_dataframe"]

_CONVERSION_ERRORS = (
    pa.ArrowInvalid,
    pa.ArrowTypeError,
    pa.ArrowNotImplementedError,
    OverflowError,
    TypeError,
    ValueError,
)


class SchemaMismatchError(RayflowError):
    """Values of a field that do not fit the field's type; ``field`` names it, ``rows`` are the
    positions (within the batch) of the rows that were set aside."""

    def __init__(self, field: str, message: str, rows: list[int]) -> None:
        super().__init__(message)
        self.field = field
        self.rows = rows


def parse_schema(schema: Mapping[str, Any] | pa.Schema | None) -> dict[str, pa.DataType]:
    """``{"count": "int64", "when": pa.timestamp("us")}`` or a ``pyarrow.Schema`` -> field types."""
    if schema is None:
        return {}
    if isinstance(schema, pa.Schema):
        return {f.name: f.type for f in schema}
    if not isinstance(schema, Mapping):
        raise ConfigError(f"schema must map field names to Arrow types, got {type(schema).__name__}")
    types = {}
    for name, given in schema.items():
        if isinstance(given, pa.DataType):
            types[name] = given
        elif isinstance(given, str):
            try:
                types[name] = pa.type_for_alias(given)
            except ValueError:
                raise ConfigError(
                    f"schema: field {name!r}: unknown Arrow type {given!r} (e.g. int64, double, string, bool, "
                    "binary, date32, timestamp[us])"
                ) from None
        else:
            raise ConfigError(f"schema: field {name!r}: expected an Arrow type or its name, got {given!r}")
    return types


@dataclass
class BuiltTable:
    """What ``TableBuilder.build`` made of a batch: the rows that fit (``None`` if none did),
    and one error per field that had rows which did not (with those rows' positions)."""

    table: pa.Table | None
    errors: list[SchemaMismatchError] = field(default_factory=list)

    @property
    def rejected(self) -> set[int]:
        return {row for error in self.errors for row in error.rows}


class TableBuilder:
    """Builds Arrow tables from rows of ``fields``, holding every batch to one schema.

    >>> builder = TableBuilder(["word", "count"])
    >>> builder.build([["a", 1], ["b", 2]]).table.schema.types
    [DataType(string), DataType(int64)]
    >>> built = builder.build([["c", 2.5]])
    >>> built.table is None, built.errors[0].field
    (True, 'count')
    """

    def __init__(self, fields: Sequence[str], declared: Mapping[str, pa.DataType] | None = None) -> None:
        self.fields = list(fields)
        self.declared = dict(declared or {})
        self.types: dict[str, pa.DataType] = {name: t for name, t in self.declared.items() if name in self.fields}
        """The settled type of each field (declared, or inferred from an earlier batch)."""

    def build(self, rows: Sequence[Sequence[Any]]) -> BuiltTable:
        columns = [list(values) for values in zip(*rows, strict=True)] if rows else [[] for _ in self.fields]
        planned = [self._column(name, values) for name, values in zip(self.fields, columns, strict=True)]
        errors = [error for _, _, error in planned if error is not None]
        rejected = {row for error in errors for row in error.rows}
        keep = [i for i in range(len(rows)) if i not in rejected]
        if not keep:
            return BuiltTable(None, errors)
        final = []
        for values, (array, target, _) in zip(columns, planned, strict=True):
            if array is None:  # every kept value was checked to fit the target
                array = pa.array([values[i] for i in keep], type=target)
            elif rejected:
                array = array.take(keep)
            final.append(array if array.type != pa.null() else array.cast(pa.string()))
        for name, array in zip(self.fields, final, strict=True):
            if name not in self.types and array.null_count < len(array):
                self.types[name] = array.type
        return BuiltTable(pa.Table.from_arrays(final, names=self.fields), errors)

    def _target(self, name: str, values: list[Any]) -> pa.DataType:
        """The settled type, else the type of the field's first non-null value in this batch."""
        settled = self.types.get(name)
        if settled is not None:
            return settled
        for value in values:
            if value is not None:
                try:
                    return pa.array([value]).type
                except _CONVERSION_ERRORS:
                    continue
        return pa.null()

    def _column(self, name: str, values: list[Any]) -> tuple[pa.Array | None, pa.DataType, SchemaMismatchError | None]:
        """The column's type, and the column as one array when every value fits it (else
        ``None``, and the rows that do not fit if there are any)."""
        try:
            inferred: pa.Array | None = pa.array(values)
        except _CONVERSION_ERRORS:
            inferred = None
        if inferred is not None and name not in self.types:
            return inferred, inferred.type, None
        target = self._target(name, values)
        if inferred is not None:
            if inferred.type == target:
                return inferred, target, None
            if inferred.type == pa.null() or _widens(inferred.type, target):
                return inferred.cast(target), target, None
        bad = [i for i, value in enumerate(values) if not _fits(value, target)]
        return None, target, self._mismatch(name, values, bad, target) if bad else None

    def _mismatch(self, name: str, values: list[Any], bad: list[int], target: pa.DataType) -> SchemaMismatchError:
        if name in self.declared:
            source = "declared with schema="
        elif name in self.types:
            source = "inferred from an earlier batch"
        else:
            source = "the type of its first value in this batch"
        example = values[bad[0]]
        message = (
            f"field {name!r}: {len(bad)} of {len(values)} row(s) do not fit its type {target} ({source}), "
            f"e.g. {example!r} ({type(example).__name__}) in row {bad[0]}; those rows are failed, not written. "
            f"If the field should hold both, declare a type that does: DataFrameSink(..., schema={{{name!r}: ...}})"
        )
        return SchemaMismatchError(name, message, bad)


def _widens(source: pa.DataType, target: pa.DataType) -> bool:
    """Casting ``source`` to ``target`` keeps every value (ints into a float column)."""
    return bool(pa.types.is_integer(source) and pa.types.is_floating(target))


def _fits(value: Any, target: pa.DataType) -> bool:
    """``value`` converts to ``target`` and back unchanged (pyarrow alone would truncate 2.5 to 2)."""
    if value is None:
        return True
    try:
        back = pa.array([value], type=target).to_pylist()[0]
    except _CONVERSION_ERRORS:
        return False
    try:
        return bool(back == value or (back != back and value != value))  # NaN is NaN
    except Exception:  # values whose == raises or is ambiguous (arrays): not provably equal
        return False


_DIRECT_TYPES = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_string, pa.types.is_binary)
"""Arrow types whose columns Spark takes as they are; other types (timestamps, dates, decimals,
nested) go through pandas, where Spark's own conversion adjusts them."""


def to_spark_dataframe(spark: SparkSession, table: pa.Table) -> DataFrame:
    """A Spark DataFrame of ``table``, with the Spark types of its Arrow types.

    Tables of plain columns (numbers, booleans, strings, bytes) are handed to Spark's JVM as an
    Arrow stream, as they are, one partition per ``spark.sql.execution.arrow.maxRecordsPerBatch``
    rows: what ``createDataFrame(pandas)`` does after converting the pandas frame back to Arrow,
    without the round trip through pandas. Other tables go through pandas with Spark's Arrow
    conversion (about 1.2 s per 100k rows on one core); the explicit schema keeps the types when
    a batch's values alone would not (an int column with nulls is float64 in pandas)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = from_arrow_schema(table.schema)
    if not all(any(plain(t) for plain in _DIRECT_TYPES) for t in table.schema.types):
        return spark.createDataFrame(table.to_pandas(), schema=schema)
    from pyspark.sql import DataFrame
    from pyspark.sql.pandas.serializers import ArrowStreamSerializer

    jvm: Any = spark._jvm
    step = spark._jconf.arrowMaxRecordsPerBatch()
    batches = table.combine_chunks().to_batches(max_chunksize=step if step > 0 else None)
    jiter = spark.sparkContext._serialize_to_jvm(
        batches or [pa.RecordBatch.from_pylist([], schema=table.schema)],
        ArrowStreamSerializer(),
        jvm.PythonSQLUtils.readArrowStreamFromFile,
        jvm.ArrowIteratorServer,
    )
    frame = DataFrame(jvm.PythonSQLUtils.toDataFrame(jiter, schema.json(), spark._jsparkSession), spark)
    frame._schema = schema
    return frame
