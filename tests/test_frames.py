"""The test-frame kit itself (tests/frames.py): `assert_frame_equal` fails on each kind of
difference, schema first, and `frame` reads its rows the same whichever way a time is given."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest
from frames import assert_frame_equal, frame, frame_rows
from pyspark.sql.types import LongType, StructField, StructType

from tally import tables as T

DDL = "key STRING, n BIGINT, at TIMESTAMP"
A, B = {"key": "a", "n": 1, "at": 1_000}, {"key": "b", "n": 2}

# (why, got (ddl, rows), expected (ddl, rows), ignore_row_order, the failure's words or None)
Built = tuple[str, list[dict[str, Any]]]  # a frame's DDL and rows
CASES: list[tuple[str, Built, Built, bool, str | None]] = [
    ("equal frames are equal", (DDL, [A, B]), (DDL, [A, B]), False, None),
    ("the order is ignored when asked", (DDL, [A, B]), (DDL, [B, A]), True, None),
    ("...and counts when not", (DDL, [A, B]), (DDL, [B, A]), False, "row 0 differs"),
    ("a column's type", ("key STRING, n INT, at TIMESTAMP", [A]), (DDL, [A]), True, "schemas"),
    (
        "the columns' order",
        ("n BIGINT, key STRING, at TIMESTAMP", [A]),
        (DDL, [A]),
        True,
        "schemas",
    ),
    ("a column too many", (DDL + ", x INT", [A]), (DDL, [A]), True, "schemas differ"),
    ("the schema is compared even with no rows", ("key STRING", []), (DDL, []), True, "schemas"),
    ("one value", (DDL, [A, {**B, "n": 3}]), (DDL, [A, B]), True, "rows differ"),
    ("a null is a value", (DDL, [A, {**B, "n": None}]), (DDL, [A, B]), True, "rows differ"),
    ("rows are a multiset: a copy too many", (DDL, [A, B, A]), (DDL, [A, B]), True, "x1"),
    ("an empty frame against rows", (DDL, []), (DDL, [A]), True, "missing"),
    ("in order, a row too few", (DDL, [A]), (DDL, [A, B]), False, "1 rows, expected 2"),
]


@pytest.mark.parametrize(
    ("why", "got", "expected", "ignore_row_order", "failure"), CASES, ids=[c[0] for c in CASES]
)
def test_assert_frame_equal(spark, why, got, expected, ignore_row_order, failure) -> None:
    def compare() -> None:
        assert_frame_equal(
            frame(spark, *got), frame(spark, *expected), ignore_row_order=ignore_row_order
        )

    if failure is None:
        compare()
    else:
        with pytest.raises(AssertionError, match=failure):
            compare()


def test_nullability_alone_differs_only_when_asked(spark) -> None:
    built = frame(spark, "n BIGINT", [{"n": 1}])  # a literal: not nullable
    nullable = StructType([StructField("n", LongType(), True)])
    read_back = spark.createDataFrame([(1,)], nullable)
    assert built.schema != read_back.schema
    assert_frame_equal(built, read_back)
    with pytest.raises(AssertionError, match="schemas differ"):
        assert_frame_equal(built, read_back, ignore_nullable=False)


def test_frame_takes_times_as_epoch_ms_or_aware_datetimes_and_a_table_or_its_ddl(spark) -> None:
    at = datetime(2026, 11, 20, 10, 0, 5, tzinfo=UTC)
    as_ms = frame(spark, T.EVENTS, [{"event_id": "x", "event_time": 1_795_168_805_000}])
    as_datetime = frame(spark, T.EVENTS.ddl, [{"event_id": "x", "event_time": at}])
    assert_frame_equal(as_ms, as_datetime, ignore_nullable=False)
    (row,) = frame_rows(as_ms.selectExpr("unix_millis(event_time)", "event_date"))
    assert row == (1_795_168_805_000, None)
    dated = frame(spark, "d DATE, m MAP<INT, BIGINT>", [{"d": date(2026, 11, 20), "m": {2: 5}}])
    assert frame_rows(dated) == [(date(2026, 11, 20), ((2, 5),))]


def test_frame_refuses_a_column_its_schema_lacks(spark) -> None:
    with pytest.raises(AssertionError, match="unknown columns"):
        frame(spark, DDL, [{"key": "a", "amount": 1}])
    assert frame(spark, T.EVENTS, []).schema == T.EVENTS.schema()
