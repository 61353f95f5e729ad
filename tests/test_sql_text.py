"""Python values as Spark SQL literals (`tally.sql_text`): what the parser gives back."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DateType,
    LongType,
    StringType,
    StructField,
    TimestampType,
)

from tally.sql_text import rows_sql, sql_literal, sql_string


def test_sql_string_gives_back_the_text(spark) -> None:
    """Split offsets name their files in one SQL CASE: a path's quotes, backslashes, escape-like
    text and line breaks must come back from the parser exactly as they were."""
    texts = ["plain", "it's", "a\\b", "\\'", "x\\u0041\\n", "two\nlines\t", "ünï €", "'' \\\\ '"]
    got = spark.range(1).select(
        *[F.expr(sql_string(t)).alias(f"t{i}") for i, t in enumerate(texts)]
    )
    assert list(got.first()) == texts


NAIVE = datetime(2026, 11, 20, tzinfo=UTC).replace(tzinfo=None)
FIELDS = [
    StructField("day", DateType()),
    StructField("name", StringType()),
    StructField("ok", BooleanType()),
    StructField("n", LongType()),
    StructField("at", TimestampType()),
]


def test_rows_sql_gives_back_the_rows_with_their_types(spark) -> None:
    rows = [
        # every type set; a timestamp keeps its milliseconds
        {
            "day": date(2026, 11, 20),
            "name": "it's a\\b\nc €",
            "ok": True,
            "n": -(2**40),
            "at": datetime(2026, 11, 20, 23, 59, 59, 123000, tzinfo=UTC),
        },
        # every value NULL: still typed
        {"day": None, "name": None, "ok": None, "n": None, "at": None},
        # a missing key is NULL; False and 0 are values, not NULL
        {"name": "", "ok": False, "n": 0},
    ]
    frame = spark.sql(rows_sql(rows, FIELDS))
    assert [(f.name, f.dataType) for f in frame.schema.fields] == [
        (f.name, f.dataType) for f in FIELDS
    ]
    got = [r.asDict() for r in frame.collect()]
    # Spark gives a timestamp back naive, in the session's zone (UTC)
    assert got[0] == {**rows[0], "at": rows[0]["at"].replace(tzinfo=None)}
    assert got[1] == rows[1]
    assert got[2] == {"day": None, "name": "", "ok": False, "n": 0, "at": None}


@pytest.mark.parametrize(
    ("value", "data_type"),
    [
        ("1", LongType()),  # text is no integer
        (1, BooleanType()),  # an int is no boolean
        (NAIVE, TimestampType()),  # a naive time is refused (UTC rule)
        (True, LongType()),  # a bool is an int in Python, not a number here
        (datetime(2026, 11, 20, tzinfo=UTC), DateType()),  # a time is no date
        ("2026-11-20", DateType()),  # text is no date
    ],
)
def test_sql_literal_refuses_a_value_of_another_type(value, data_type) -> None:
    with pytest.raises((TypeError, ValueError)):
        sql_literal(value, data_type)


def test_rows_sql_needs_a_row() -> None:
    with pytest.raises(ValueError, match="at least one row"):
        rows_sql([], FIELDS)
