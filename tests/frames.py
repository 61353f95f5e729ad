"""The test-frame kit: small DataFrames from dicts, and frame equality schema first (as chispa
does).

`frame(spark, table_or_ddl, rows)` builds its rows in the JVM (`inline` of literal structs): no
Python workers, so a write costs well under a second. Times are given as UTC epoch
milliseconds or as timezone-aware datetimes; dates as `date`; maps as dicts.

`assert_frame_equal(got, expected)` compares the column names and types first, then the rows
(as a multiset unless the order is asked for), and says what differs.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DateType,
    MapType,
    StructField,
    StructType,
    TimestampType,
)

from tally import tables as T

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _literal(value: Any, data_type: DataType) -> Column:
    if value is None:
        return F.lit(None).cast(data_type)
    if isinstance(data_type, TimestampType):
        if isinstance(value, datetime):
            assert value.tzinfo is not None, f"a naive time: {value}"
            value = (value - _EPOCH) // timedelta(milliseconds=1)
        return F.timestamp_millis(F.lit(int(value)))
    if isinstance(data_type, DateType):
        return F.lit(value.isoformat()).cast("date")
    if isinstance(value, dict):  # a MAP column: {key: value}
        return F.create_map(*[F.lit(x) for kv in sorted(value.items()) for x in kv]).cast(data_type)
    return F.lit(value).cast(data_type)


def frame(
    spark: SparkSession, table_or_ddl: T.Table | str, rows: list[dict[str, Any]]
) -> DataFrame:
    """Rows (dicts; missing columns are null) as a DataFrame of the table's or DDL's schema."""
    ddl = table_or_ddl.ddl if isinstance(table_or_ddl, T.Table) else table_or_ddl
    fields = T.schema_of(ddl).fields
    unknown = {k for row in rows for k in row} - {f.name for f in fields}
    assert not unknown, f"{getattr(table_or_ddl, 'name', ddl)}: unknown columns {sorted(unknown)}"
    if not rows:
        return T.empty_of(spark, ddl)
    structs = [
        F.struct(*[_literal(row.get(f.name), f.dataType).alias(f.name) for f in fields])
        for row in rows
    ]
    return spark.range(1).select(F.inline(F.array(*structs)))


# -- comparing frames ---------------------------------------------------------------------------


def frame_rows(df: DataFrame) -> list[tuple[Any, ...]]:
    """A (small) frame's rows, sorted, as hashable tuples (arrays become tuples, maps tuples of
    their sorted items)."""
    return sorted(_rows_in_order(df), key=repr)


def _rows_in_order(df: DataFrame) -> list[tuple[Any, ...]]:
    return [tuple(_hashable(v) for v in r) for r in df.collect()]


def _hashable(value: Any) -> Any:
    if isinstance(value, list | tuple):  # a tuple: a struct's Row
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def _nullable(data_type: DataType) -> DataType:
    """The type with every level nullable: frames built from literals and tables read back
    differ in nullability only, which says nothing about their values."""
    if isinstance(data_type, StructType):
        return StructType(
            [StructField(f.name, _nullable(f.dataType), True) for f in data_type.fields]
        )
    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(_nullable(data_type.keyType), _nullable(data_type.valueType), True)
    return data_type


def _columns(df: DataFrame, ignore_nullable: bool) -> list[str]:
    if ignore_nullable:
        return [f"{f.name} {_nullable(f.dataType).simpleString()}" for f in df.schema.fields]
    return [f"{f.name} {f.dataType!r} nullable={f.nullable}" for f in df.schema.fields]


def assert_frame_equal(
    got: DataFrame,
    expected: DataFrame,
    ignore_row_order: bool = True,
    ignore_nullable: bool = True,
) -> None:
    """The same columns (names, types, in order), then the same rows: as a multiset when
    `ignore_row_order`, else in the same order. Collects both frames: small data only."""
    got_columns = _columns(got, ignore_nullable)
    expected_columns = _columns(expected, ignore_nullable)
    if got_columns != expected_columns:
        raise AssertionError(_schema_diff(got_columns, expected_columns))
    got_rows, expected_rows = _rows_in_order(got), _rows_in_order(expected)
    if ignore_row_order:
        missing = Counter(expected_rows) - Counter(got_rows)
        unexpected = Counter(got_rows) - Counter(expected_rows)
        if missing or unexpected:
            raise AssertionError(
                f"rows differ ({len(got_rows)} got, {len(expected_rows)} expected):\n"
                + _counted("missing", missing)
                + _counted("unexpected", unexpected)
            )
        return
    for number, (g, e) in enumerate(zip(got_rows, expected_rows, strict=False)):
        if g != e:
            raise AssertionError(f"row {number} differs:\n  got      {g}\n  expected {e}")
    if len(got_rows) != len(expected_rows):
        raise AssertionError(f"{len(got_rows)} rows, expected {len(expected_rows)}")


def _schema_diff(got: list[str], expected: list[str]) -> str:
    width = max(len(got), len(expected))
    padded = zip(
        got + ["-"] * (width - len(got)), expected + ["-"] * (width - len(expected)), strict=True
    )
    lines = [f"{'  ' if g == e else '! '}{g:<40} | {e}" for g, e in padded]
    return "schemas differ (got | expected):\n" + "\n".join(lines)


def _counted(what: str, rows: Counter[tuple[Any, ...]]) -> str:
    return "".join(f"  {what:<10} x{n} {row}\n" for row, n in sorted(rows.items(), key=repr))
