"""Python values as Spark SQL literals: a small frame of known rows becomes one SQL text (one
Py4J call, one analysis) instead of a `lit` per value (several round trips each)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    IntegralType,
    StringType,
    StructField,
    TimestampType,
)

from tally.dates import epoch_ms


def sql_string(text: str) -> str:
    """`text` as a Spark SQL string literal: every backslash and quote escaped, so the parser
    gives back exactly `text` (any other character stands for itself between the quotes)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_literal(value: Any, data_type: DataType) -> str:
    """`value` as a literal of `data_type` (NULL typed too): strings, booleans, integers,
    dates and timezone-aware timestamps (to the millisecond)."""
    sql_type = data_type.simpleString()
    if value is None:
        return f"CAST(NULL AS {sql_type})"
    if isinstance(data_type, StringType):
        return sql_string(str(value))
    if isinstance(data_type, BooleanType) and isinstance(value, bool):
        return "true" if value else "false"
    if (
        isinstance(data_type, IntegralType)
        and isinstance(value, int)
        and not isinstance(value, bool)
    ):
        return f"CAST({int(value)} AS {sql_type})"
    if isinstance(data_type, TimestampType) and isinstance(value, datetime):
        return f"timestamp_millis({epoch_ms(value)})"
    if isinstance(data_type, DateType) and type(value) is date:
        return f"DATE'{value.isoformat()}'"
    raise TypeError(f"{value!r} has no {sql_type} literal")


def rows_sql(rows: list[dict[str, Any]], fields: list[StructField]) -> str:
    """`SELECT` of `rows` (a row's missing key is NULL) with `fields`' names and types, in
    one partition; `rows` must not be empty."""
    if not rows:
        raise ValueError("rows_sql needs at least one row")
    names = ", ".join(f"`{f.name}`" for f in fields)
    values = ", ".join(
        "(" + ", ".join(sql_literal(row.get(f.name), f.dataType) for f in fields) + ")"
        for row in rows
    )
    return f"SELECT * FROM VALUES {values} AS t({names})"
