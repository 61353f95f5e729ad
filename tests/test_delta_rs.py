"""Every user-facing table the stream writes reads outside Spark, with delta-rs (`deltalake`).

A small drained run of the real `BatchProcessor` (arrival clock; W = 60 s, L = 10 s, G = 0,
one partition; times in seconds after T0):

| batch | now | lines                                      | WM after | emitted                 |
|-------|-----|--------------------------------------------|----------|-------------------------|
| 0     | 30  | a: 5, 100 · b: 75, 20 · garbage            | 65       | [0,60): a (WM 65)       |
| 1     | 90  | c: 10, 7 (late: end 60 <= 65) · d: 80, 3   | 70       | –                       |
| 2     | 90  | drain                                      | NULL     | [60,120): b, d (NULL)   |

delta-rs refuses timestamps outside the nanosecond range (a year-9999 sentinel fails with
"Casting from timestamp[ns] to timestamp[us, tz=UTC] would lose data"); the drain stores NULL
with `drained = true` instead, which this test reads back.
"""

from __future__ import annotations

from typing import Any

import pytest
import reference_model as M
import stream_helpers as H

S = 1_000
T0 = H.T0_MS
USER_TABLES = ("events", "stream_aggregates", "late_events", "quarantine", "stream_progress")
EXPECTED_ROWS = {
    "events": 4,
    "stream_aggregates": 2,
    "late_events": 1,
    "quarantine": 1,
    "stream_progress": 3,
}


def t(seconds: int) -> int:
    return T0 + seconds * S


def ev(event_id: str, seconds: int, amount: int) -> str:
    return H.event_line(event_id, "k", amount, t(seconds), 0)


BATCHES = [
    [H.InputFile("d-0.jsonl", t(30), [ev("a", 5, 100), ev("b", 75, 20), "garbage"])],
    [H.InputFile("d-1.jsonl", t(90), [ev("c", 10, 7), ev("d", 80, 3)])],
]
PARAMS = M.Params(window_ms=60 * S, lateness_ms=10 * S, allowed_lateness_ms=0)


@pytest.fixture(scope="module")
def drained(spark, tmp_path_factory) -> dict[str, Any]:
    """Run the stream (drained); per table, its path and the row count Spark sees."""
    from tally import tables as T

    root = tmp_path_factory.mktemp("delta_rs")
    warehouse = str(root / "warehouse")
    H.run_processor(spark, warehouse, root / "input", BATCHES, PARAMS, drain=True)
    return {
        name: (T.table_path(warehouse, name), T.read_table(spark, warehouse, name).count())
        for name in USER_TABLES
    }


def arrow_rows(path: str) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    return DeltaTable(path).to_pyarrow_table().to_pylist()


def ms(value: Any) -> int | None:
    """A timestamp read by pyarrow (aware datetime) as epoch milliseconds."""
    return None if value is None else round(value.timestamp() * 1000)


@pytest.mark.parametrize("name", USER_TABLES)
def test_table_reads_with_delta_rs(drained: dict[str, Any], name: str) -> None:
    path, spark_rows = drained[name]
    rows = arrow_rows(path)
    assert spark_rows == EXPECTED_ROWS[name] > 0
    assert len(rows) == spark_rows


def test_drain_batch_has_no_watermark_and_is_drained(drained: dict[str, Any]) -> None:
    rows = sorted(arrow_rows(drained["stream_progress"][0]), key=lambda r: r["batch_id"])
    assert [r["batch_id"] for r in rows] == [0, 1, 2]
    assert [r["drained"] for r in rows] == [False, False, True]
    assert [ms(r["watermark_after"]) for r in rows] == [t(65), t(70), None]
    assert [ms(r["watermark_before"]) for r in rows] == [None, t(65), t(70)]
    assert rows[2]["watermark_lag_ms"] is None
    assert [r["late_events"] for r in rows] == [0, 1, 0]
    assert [r["quarantined_lines"] for r in rows] == [1, 0, 0]


def test_drained_windows_have_no_watermark_at_emit(drained: dict[str, Any]) -> None:
    rows = arrow_rows(drained["stream_aggregates"][0])
    got = sorted(
        (
            ms(r["window_start"]),
            r["event_count"],
            r["amount_sum"],
            r["batch_id"],
            ms(r["watermark_at_emit"]),
        )
        for r in rows
    )
    assert got == [
        (t(0), 1, 100, 0, t(65)),  # a, closed by the watermark
        (t(60), 2, 23, 2, None),  # b, d: closed by the drain
    ]


def test_late_event_and_quarantined_line(drained: dict[str, Any]) -> None:
    [late] = arrow_rows(drained["late_events"][0])
    assert (late["event_id"], ms(late["watermark_at_arrival"]), late["lateness_ms"]) == (
        "c",
        t(65),
        5_000,
    )
    [bad] = arrow_rows(drained["quarantine"][0])
    assert (bad["raw_line"], bad["reason"]) == ("garbage", "invalid_json")
