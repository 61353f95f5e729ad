"""The nightly diff (`batch.reconcile`, Spark) held to the plain-Python reference
(tests/reference_diff.py) on drawn logs: a few event_ids reused on the date and the day before,
with every arrival status (a copy counted on time or allowed late beyond the stream's dedup
horizon, a duplicate, a late copy with or without its late row), late rows that are or are
not first arrivals, and a stream answer that is what the stream counted, or off by a unit,
or missing. Every window's figures and status, and the summary, must be the model's.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest
import reference_diff as R
from batch_fixtures import (
    ensure_inputs,
    event,
    late,
    ms,
    stream_row,
    write_inputs,
)
from hypothesis import HealthCheck, Phase, assume, example, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from batch.reconcile import reconcile
from tally import tables as T

pytestmark = pytest.mark.usefixtures("small_delta_snapshots")

W = 60_000
DAY = date(2026, 11, 20)
NOW = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)
DAY_MS = (ms("2026-11-20T00:00:00Z"), ms("2026-11-21T00:00:00Z"))
BASE = {0: ms("2026-11-20T10:00:00Z"), -1: ms("2026-11-19T10:00:00Z")}
ARRIVED = ms("2026-11-21T01:00:00Z")  # every line arrives after both dates, in drawn order
STATUSES = ("on_time", "allowed_late", "late", "duplicate")

# one drawn line: (id, key, amount, day offset, window, second, status, a late row written,
# currency: None is a row from before currencies, read as the run's USD)
line_st = st.tuples(
    st.integers(0, 4),
    st.sampled_from("ab"),
    st.integers(1, 99),
    st.sampled_from((0, 0, -1)),
    st.integers(0, 2),
    st.integers(0, 59),
    st.sampled_from(STATUSES),
    st.booleans(),
    st.sampled_from((None, None, "USD", "JPY")),
)
# the stream's answer per window of the date: as counted, a unit off, or missing
answer_st = st.sampled_from(("counted", "counted", "counted", "off", "missing"))

Line = tuple[int, str, int, int, int, int, str, bool, str | None]

DESIGNED: list[Line] = [
    (0, "a", 10, -1, 0, 5, "on_time", False, None),  # i0 first seen the day before
    (0, "b", 7, 0, 1, 5, "on_time", False, None),  # ...counted again on the date: a copy
    (1, "a", 3, 0, 0, 1, "on_time", False, "USD"),  # USD named: the same windows as None
    (1, "a", 3, 0, 0, 1, "duplicate", False, None),  # within the horizon: not counted
    (2, "b", 5, -1, 2, 9, "on_time", False, None),
    (2, "b", 6, 0, 2, 9, "allowed_late", False, "JPY"),  # a copy, in yen: its own window
    (3, "a", 8, 0, 1, 30, "late", True, "JPY"),  # a late first arrival, in yen
    (3, "a", 8, 0, 1, 30, "late", True, None),  # its copy, late again: explains nothing
    (4, "b", 2, 0, 0, 40, "late", False, None),  # late without its row (a pin between commits)
    (5, "a", 4, 0, 0, 50, "on_time", False, "JPY"),  # beside i1's dollars, never added to them
]


def logs(lines: list[Line], answers: list[str]) -> tuple[list[Any], list[Any], list[Any]]:
    """The drawn lines as `events` rows (arrival order = drawn order), their late rows, and
    the stream's rows: per window of the date, what it counted (on_time, allowed_late), a unit
    off or missing, as drawn (cycled)."""
    events, late_rows = [], []
    for n, (i, key, amount, offset, window, second, status, late_row, currency) in enumerate(lines):
        at = BASE[offset] + window * W + second * 1000
        row = event(
            f"i{i}",
            key,
            amount,
            at,
            ingest=ARRIVED + n * 1000,
            status=status,
            batch_id=n,
            currency=currency,
        )
        events.append(row)
        if status == "late" and late_row:
            late_rows.append(late(row, W, 5 * W))
    counted: dict[tuple[int, str, str | None], list[int]] = {}
    for row in events:
        start = row["event_time"] - row["event_time"] % W
        if row["arrival_status"] in R.COUNTED and DAY_MS[0] <= start < DAY_MS[1]:
            at = (start, row["key"], row["currency"] or R.DEFAULT_CURRENCY)
            pair = counted.setdefault(at, [0, 0])
            pair[0] += 1
            pair[1] += row["amount"]
    stream = []
    for n, ((start, key, currency), (count, amount)) in enumerate(sorted(counted.items())):
        answer = answers[n % len(answers)]
        if answer != "missing":
            off = amount + (answer == "off")
            stream.append(stream_row(start, W, key, count, off, currency=currency))
    return events, stream, late_rows


def spark_rows(spark: Any, warehouse: str) -> dict[R.WindowKey, R.DiffRow]:
    rows = (
        T.read_table(spark, warehouse, "reconciliation")
        .select("*", F.unix_millis("window_start").alias("_start"))
        .collect()
    )

    def pair(r: Any, name: str) -> R.Pair:
        return (r[f"{name}_count"], r[f"{name}_amount"])

    return {
        (r["_start"], r["key"], r["currency"]): R.DiffRow(
            pair(r, "stream"),
            pair(r, "batch"),
            pair(r, "late"),
            pair(r, "copies"),
            pair(r, "residual"),
            r["status"],
        )
        for r in rows
    }


@settings(
    max_examples=2,  # and the two designed ones: each re-runs the nightly
    deadline=None,
    phases=[Phase.explicit, Phase.generate],  # shrinking re-runs the nightly for minutes
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@example(lines=DESIGNED, answers=["counted"])
@example(lines=DESIGNED, answers=["off", "missing", "counted"])
@given(
    lines=st.lists(line_st, min_size=3, max_size=14),
    answers=st.lists(answer_st, min_size=1, max_size=3),
)
def test_the_nightly_diff_is_the_models(
    spark, tmp_path_factory, lines: list[Line], answers: list[str]
) -> None:
    events, stream, late_rows = logs(lines, answers)
    want = R.diff(events, stream, late_rows, DAY_MS, W)
    assume(want)  # a date with windows (the model is cheap; the nightly is not)
    warehouse = str(tmp_path_factory.mktemp("diff_model") / "warehouse")
    ensure_inputs(spark, warehouse)
    write_inputs(spark, warehouse, W, events, stream, late_rows)
    result = reconcile(spark, warehouse, DAY, W, now=NOW)
    assert R.by_window(spark_rows(spark, warehouse)) == R.by_window(want), (lines, answers)
    # one summary row a currency, none summing two
    expected = R.totals_by_currency(want)
    summaries = {
        r["currency"]: {k: r[k] for k in R.totals(want.values())} for r in result.summaries
    }
    assert summaries == expected
    if len(expected) > 1:  # the date's amounts: only per currency
        assert result.summary["gap_amount"] is None and result.summary["currencies"] == list(
            expected
        )
    assert result.balanced == all(r.status != "UNEXPLAINED" for r in want.values())
