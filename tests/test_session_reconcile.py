"""Session windows in the nightly: the truth sessionized from first arrivals, the stream's
current final sessions, the diff per batch session, widening, refusals and provenance.

Gap D = 6 h, so a handful of events per key spans days (the widening case stays tiny). Every
case is one key of one hand-built warehouse, reconciled once for 2026-11-20 (UTC); times are
hours of the 20th unless a day is named.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import Any

import pytest
from batch_fixtures import event, ms, write_inputs
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from batch.reconcile import ReconcileError, ReconcileResult, reconcile, recorded_run, reproduce
from batch.sessions import (
    late_per_session,
    narrower_than,
    read_range,
    stream_per_session,
    with_holding_session,
)
from tally import tables as T
from tally.dates import business_day_bounds
from tally.vocabulary import EXPLAINED_BY_LATE, MATCH, MISSING_IN_STREAM, UNEXPLAINED

pytestmark = pytest.mark.usefixtures("small_delta_snapshots")

HOUR = 3_600_000
GAP = 6 * HOUR
DAY = date(2026, 11, 20)
NOW = datetime(2026, 11, 25, 3, 0, tzinfo=UTC)
WINDOW = 60_000  # recorded only: sessions have no fixed width


def h(hour: float, day: int = 20) -> int:
    """Epoch ms of `hour` (may be fractional) on November `day`, 2026 (UTC)."""
    return ms(f"2026-11-{day:02d}T00:00:00Z") + int(hour * HOUR)


def session(
    key: str,
    start: int,
    end: int,
    count: int,
    amount: int,
    revision: int = 1,
    *,
    final: bool = True,
    retracted: bool = False,
) -> dict[str, Any]:
    """A `stream_aggregates` row of a session."""
    emit = end + 1000 * revision
    return {
        "window_start": start,
        "window_end": end,
        "key": key,
        "event_count": count,
        "amount_sum": amount,
        "revision": revision,
        "emit_time": emit,
        "watermark_at_emit": emit,
        "batch_id": revision,
        "app_id": "test-app",
        "final": final,
        "retracted": retracted,
    }


def late_row(row: dict[str, Any], lateness_ms: int = 1000) -> dict[str, Any]:
    """The `late_events` row of a late `events` row: its span [t, t + D) is its window."""
    columns = {f.name for f in T.LATE_EVENTS.schema().fields}
    end = row["event_time"] + GAP
    return {
        **{k: v for k, v in row.items() if k in columns},
        "window_start": row["event_time"],
        "window_end": end,
        "watermark_at_arrival": end + lateness_ms,
        "lateness_ms": lateness_ms,
        "arrival_delay_ms": row["ingest_time"] - row["event_time"],
        "reason": "beyond_allowed_lateness",
    }


def late_event(event_id: str, key: str, amount: int, at: int) -> dict[str, Any]:
    """An event that arrived a day after its time, `late`."""
    return event(event_id, key, amount, at, status="late", ingest=at + 24 * HOUR, batch_id=9)


# One row per case: (key, events, stream rows, late events, expected reconciliation rows of
# the key on the 20th: (start, end) -> (status, (batch), (stream), (late)), (count, amount)).
Case = tuple[str, list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], dict[Any, Any]]
_m2 = event("m2", "match", 20, h(10))
_bridge = late_event("b5", "bridged", 10_000, h(9))
_missing = late_event("c1", "missing", 7, h(12))
_before = late_event("p2", "before-midnight", 2, h(1))
_after = late_event("n2", "after-midnight", 2, h(1, day=21))
_tail = [late_event(f"w{i}", "chain", 2**i, h(20) + i * 5 * HOUR) for i in (6, 7)]
CASES: list[Case] = [
    # The stream's session is the batch's; a later duplicate of m2 (another amount) does not
    # count: the first arrival wins, as for windows.
    (
        "match",
        [
            event("m1", "match", 100, h(8)),
            _m2,
            {**_m2, "amount": 999, "arrival_status": "duplicate", "ingest_time": h(11)},
        ],
        [session("match", h(8), h(16), 2, 120)],
        [],
        {(h(8), h(16)): (MATCH, (2, 120), (2, 120), (0, 0))},
    ),
    # b5 (late) would have bridged [2, 10) and [14, 22): the batch has one session, the
    # stream two inside it, and batch - (stream1 + stream2) = b5.
    (
        "bridged",
        [
            event("b1", "bridged", 1, h(2)),
            event("b2", "bridged", 10, h(4)),
            event("b3", "bridged", 100, h(14)),
            event("b4", "bridged", 1000, h(16)),
            _bridge,
        ],
        [session("bridged", h(2), h(10), 2, 11), session("bridged", h(14), h(22), 2, 1100)],
        [_bridge],
        {(h(2), h(22)): (EXPLAINED_BY_LATE, (5, 11_111), (4, 1111), (1, 10_000))},
    ),
    # The session's only event came late: the stream never had it.
    (
        "missing",
        [_missing],
        [],
        [_missing],
        {(h(12), h(18)): (MISSING_IN_STREAM, (1, 7), (0, 0), (1, 7))},
    ),
    # A stream defect: one event too many in the stream's session.
    (
        "defect",
        [event("d1", "defect", 5, h(8)), event("d2", "defect", 6, h(9))],
        [session("defect", h(8), h(15), 3, 20)],
        [],
        {(h(8), h(15)): (UNEXPLAINED, (2, 11), (3, 20), (0, 0))},
    ),
    # r3 extended [8, 16) to [8, 21): the stream retracted [8, 16) (revision 2, retracted);
    # counting it too would add its 2 events again.
    (
        "retracted",
        [
            event("r1", "retracted", 1, h(8)),
            event("r2", "retracted", 2, h(10)),
            event("r3", "retracted", 4, h(15)),
        ],
        [
            session("retracted", h(8), h(16), 2, 3),
            session("retracted", h(8), h(16), 2, 3, 2, retracted=True),
            session("retracted", h(8), h(21), 3, 7, 2),
        ],
        [],
        {(h(8), h(21)): (MATCH, (3, 7), (3, 7), (0, 0))},
    ),
    # The highest revision is early (final = false, speculative): the highest final one is
    # the stream's answer.
    (
        "early",
        [event("e1", "early", 1, h(8)), event("e2", "early", 2, h(9))],
        [
            session("early", h(8), h(15), 2, 3),
            session("early", h(8), h(15), 3, 10, 2, final=False),
        ],
        [],
        {(h(8), h(15)): (MATCH, (2, 3), (2, 3), (0, 0))},
    ),
    # A session starting at 22:00 on the 19th, bridged after midnight by the late p2: it is
    # the 19th's. Its second stream session and p2 start on the 20th but lie inside it, so
    # the 20th has no row for the key (neither counted nor unexplained).
    (
        "before-midnight",
        [
            event("p1", "before-midnight", 1, h(22, day=19)),
            _before,
            event("p3", "before-midnight", 4, h(5)),
        ],
        [
            session("before-midnight", h(22, day=19), h(4), 1, 1),
            session("before-midnight", h(5), h(11), 1, 4),
        ],
        [_before],
        {},
    ),
    # The same on the 20th -> 21st: the session starting at 22:00 is the 20th's, with its
    # events timed on the 21st, the stream session starting on the 21st inside it, and n2.
    (
        "after-midnight",
        [
            event("n1", "after-midnight", 1, h(22)),
            _after,
            event("n3", "after-midnight", 4, h(5, day=21)),
        ],
        [
            session("after-midnight", h(22), h(4, day=21), 1, 1),
            session("after-midnight", h(5, day=21), h(11, day=21), 1, 4),
        ],
        [_after],
        {(h(22), h(11, day=21)): (EXPLAINED_BY_LATE, (3, 7), (2, 5), (1, 2))},
    ),
    # Widening: a chain 5 h apart from 20:00 on the 20th to 07:00 on the 22nd. Its last two
    # events came late, so the stream's session ends at 03:00 on the 22nd: the read starts at
    # 06:00 on the 22nd (the stream's reach), sees the session reach past it (w6 until 08:00),
    # and is widened once more to take w7; without that w7 would be missing from the truth.
    (
        "chain",
        [event(f"w{i}", "chain", 2**i, h(20) + i * 5 * HOUR) for i in range(6)] + _tail,
        [session("chain", h(20), h(3, day=22), 6, 63)],
        _tail,
        {(h(20), h(13, day=22)): (EXPLAINED_BY_LATE, (8, 255), (6, 63), (2, 192))},
    ),
    # A line the stream never counted: u2 arrived in micro-batch 5, after the stream's session
    # holding its time was emitted (batch 1) with u1 only.
    (
        "uncounted",
        [
            event("u1", "uncounted", 7, h(3), batch_id=1),
            event("u2", "uncounted", 30, h(5), batch_id=5),
        ],
        [session("uncounted", h(3), h(9), 1, 7)],
        [],
        {(h(3), h(11)): (UNEXPLAINED, (2, 37), (1, 7), (0, 0))},
    ),
    # A stream session no batch session holds: its own row, batch 0.
    (
        "stream-only",
        [],
        [session("stream-only", h(13), h(19), 1, 50)],
        [],
        {(h(13), h(19)): (UNEXPLAINED, (0, 0), (1, 50), (0, 0))},
    ),
]


def recon_rows(spark: SparkSession, warehouse: str) -> dict[str, dict[Any, Any]]:
    """The 20th's reconciliation rows per key, as the cases state them."""
    got: dict[str, dict[Any, Any]] = {}
    rows = (
        T.read_table(spark, warehouse, T.RECONCILIATION.name)
        .where(F.col("business_date") == F.lit(DAY))
        .select(
            "*", F.unix_millis("window_start").alias("s"), F.unix_millis("window_end").alias("e")
        )
        .collect()
    )
    for r in rows:
        got.setdefault(r["key"], {})[(r["s"], r["e"])] = (
            r["status"],
            (r["batch_count"], r["batch_amount"]),
            (r["stream_count"], r["stream_amount"]),
            (r["late_count"], r["late_amount"]),
        )
    return got


@pytest.fixture(scope="module")
def reconciled(spark, tmp_path_factory) -> dict[str, Any]:
    warehouse = str(tmp_path_factory.mktemp("sessions") / "warehouse")
    events = [e for case in CASES for e in case[1]]
    stream = [s for case in CASES for s in case[2]]
    late = [late_row(e) for case in CASES for e in case[3]]
    write_inputs(spark, warehouse, WINDOW, events, stream, late)
    result = reconcile(
        spark, warehouse, DAY, WINDOW, now=NOW, settings={"session_gap": "6h"}, session_gap_ms=GAP
    )
    return {"warehouse": warehouse, "result": result, "rows": recon_rows(spark, warehouse)}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_case(reconciled: dict[str, Any], case: Case) -> None:
    key, _, _, _, expected = case
    assert reconciled["rows"].get(key, {}) == expected


def test_no_other_rows_and_the_summary(reconciled: dict[str, Any], spark) -> None:
    assert set(reconciled["rows"]) == {c[0] for c in CASES if c[4]}
    s = reconciled["result"].summary
    assert (s["windows"], s["unexplained_windows"]) == (10, 3)
    assert (s["match_windows"], s["explained_by_late_windows"]) == (3, 3)
    assert s["missing_in_stream_windows"] == 1
    # batch_aggregates holds exactly the batch sessions of the date
    batch = T.read_table(spark, reconciled["warehouse"], T.BATCH_AGGREGATES.name).collect()
    assert len(batch) == 9 and {r["business_date"] for r in batch} == {DAY}


def test_the_evidence_of_unexplained_sessions(reconciled: dict[str, Any], spark) -> None:
    """Each UNEXPLAINED batch session's records: its first arrivals, each marked by the
    stream session holding it (`uncounted`: u2 arrived after that session's answer); the
    stream's rows placed in it with their own span; a stream-only session has no event."""
    rows = (
        T.read_table(spark, reconciled["warehouse"], T.RECONCILIATION_EVIDENCE.name)
        .where(F.col("business_date") == F.lit(DAY))
        .select(
            "*",
            F.unix_millis("window_start").alias("s"),
            F.unix_millis("stream_window_end").alias("own_end"),
        )
        .collect()
    )
    by_key: dict[str, list[Any]] = {}
    for r in rows:
        by_key.setdefault(r["key"], []).append(r)
    assert set(by_key) == {"uncounted", "defect", "stream-only"}
    events = sorted(
        (r for r in by_key["uncounted"] if r["kind"] == "event"), key=lambda r: r["rank"]
    )
    assert [(r["event_id"], r["counted_by_stream"], r["s"]) for r in events] == [
        ("u2", False, h(3)),  # never counted: first
        ("u1", True, h(3)),
    ]
    assert events[0]["never_counted_rows"] == 1  # the residual: batch 2 - stream 1
    (revision,) = [r for r in by_key["uncounted"] if r["kind"] == "revision"]
    assert (revision["event_count"], revision["own_end"]) == (1, h(9))  # its own span
    defect = [r for r in by_key["defect"] if r["kind"] == "event"]
    assert {r["event_id"] for r in defect} == {"d1", "d2"} and not defect[0]["never_counted_rows"]
    assert {r["kind"] for r in by_key["stream-only"]} == {"revision"}


def test_provenance_and_reproduce(reconciled: dict[str, Any], spark) -> None:
    warehouse, result = reconciled["warehouse"], reconciled["result"]
    assert result.windowing == "session, gap 6h"
    assert "windows: session, gap 6h;" in result.describe()
    run = recorded_run(spark, warehouse, DAY)
    assert run is not None
    assert json.loads(run["settings"]) == {
        "session_gap": "6h",
        "window_ms": WINDOW,
        "window_slide_ms": None,
        "session_gap_ms": GAP,
        "window_kind": "session",
        "report_timezone": "UTC",
    }
    before = recon_rows(spark, warehouse)
    again = reproduce(spark, warehouse, DAY, now=NOW)
    assert again == result and again.session_gap_ms == GAP
    assert recon_rows(spark, warehouse) == before


def test_a_stream_narrower_than_the_gap_is_refused(reconciled: dict[str, Any], spark) -> None:
    """The wrong gap (or a fixed-window stream): stop with one line before writing."""
    with pytest.raises(
        ReconcileError, match=r"^session_gap: .* narrower than the 25200000 ms"
    ) as e:
        reconcile(spark, reconciled["warehouse"], DAY, WINDOW, now=NOW, session_gap_ms=GAP + HOUR)
    assert "\n" not in str(e.value)


def test_widening_stops_after_its_limit(
    reconciled: dict[str, Any], spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chain needs the read widened by two days; with a limit of one the run stops with
    one line."""
    import batch.sessions

    monkeypatch.setattr(batch.sessions, "MAX_WIDENING_DAYS", 1)
    with pytest.raises(
        ReconcileError,
        match=r"^session_gap: 1 session\(s\) of 2026-11-20 still reach past "
        r"2026-11-22T06:00:00.000Z after widening the read by 1 day\(s\)",
    ):
        reconcile(spark, reconciled["warehouse"], DAY, WINDOW, now=NOW, session_gap_ms=GAP)


def test_sessions_and_a_slide_are_refused() -> None:
    with pytest.raises(ReconcileError, match=r"^session_gap and window_slide: both set"):
        reconcile(None, "nowhere", DAY, 4 * HOUR, now=NOW, window_slide_ms=HOUR, session_gap_ms=GAP)  # type: ignore[arg-type]


# -- batch.sessions on inline frames ----------------------------------------------------------


def intervals(spark: SparkSession, rows: list[tuple[Any, ...]], columns: str) -> DataFrame:
    """Rows of (key, start ms, end ms, ...) as a frame with timestamps (in the JVM), in USD
    unless `columns` name a currency."""
    values = ", ".join("(" + ", ".join(repr(v) for v in row) + ")" for row in rows)
    frame_ = spark.sql(f"SELECT * FROM VALUES {values} AS t({columns})")
    if "currency" not in frame_.columns:
        frame_ = frame_.withColumn("currency", F.lit("USD"))
    return frame_.withColumns(
        {
            "window_start": F.timestamp_millis("s"),
            "window_end": F.timestamp_millis("e"),
        }
    ).drop("s", "e")


def by_bounds(df: DataFrame, *values: str) -> set[tuple[Any, ...]]:
    return {
        (r["key"], r["currency"], r["s"], r["e"], *[r[v] for v in values])
        for r in df.select(
            "*", F.unix_millis("window_start").alias("s"), F.unix_millis("window_end").alias("e")
        ).collect()
    }


DAY_BOUNDS = business_day_bounds(DAY)


def test_read_range_is_one_gap_either_side_widened_by_days() -> None:
    start, end = DAY_BOUNDS
    assert read_range(DAY_BOUNDS, GAP) == (start - GAP, end + GAP)
    assert read_range(DAY_BOUNDS, GAP, 2) == (start - GAP, end + GAP + 2 * 24 * HOUR)


def test_stream_sessions_onto_batch_sessions(spark) -> None:
    # batch sessions: k [19th 22:00, 20th 11:00) (the 19th's) and [20th 14:00, 20th 22:00);
    # j [20th 23:00, 21st 08:00) (the 20th's, crossing midnight)
    sessions = intervals(
        spark,
        [("k", h(22, 19), h(11)), ("k", h(14), h(22)), ("j", h(23), h(8, 21))],
        "key, s, e",
    )
    stream = intervals(
        spark,
        [
            ("k", "USD", h(5), h(11), 1, 4),  # inside the 19th's session: the 19th's
            ("k", "USD", h(14), h(20), 2, 3),  # inside [14, 22): summed there
            ("k", "USD", h(15), h(22), 1, 5),  # (a stream would not overlap; the sum is the rule)
            ("k", "USD", h(20), h(23), 1, 7),  # sticks out of [14, 22): its own row
            ("k", "JPY", h(15), h(21), 1, 6),  # inside the bounds, in yen: no session of k's yen
            ("j", "USD", h(2, 21), h(8, 21), 1, 9),  # starts on the 21st inside j's session
            ("j", "USD", h(10, 21), h(16, 21), 1, 1),  # in no session, starts on the 21st
        ],
        "key, currency, s, e, event_count, amount_sum",
    )
    got = stream_per_session(stream, sessions, DAY_BOUNDS)
    assert by_bounds(got, "event_count", "amount_sum") == {
        ("k", "USD", h(14), h(22), 3, 8),
        ("k", "USD", h(20), h(23), 1, 7),
        ("k", "JPY", h(15), h(21), 1, 6),
        ("j", "USD", h(23), h(8, 21), 1, 9),
    }


def test_late_rows_onto_batch_sessions(spark) -> None:
    sessions = intervals(spark, [("k", h(8), h(16)), ("k", h(20), h(8, 21))], "key, s, e")
    late = intervals(
        spark,
        [
            ("k", "USD", h(8), h(14), "a", h(8)),  # at the session's start: in it
            ("k", "USD", h(15.5), h(21.5), "b", h(15.5)),  # before its end: in it
            ("k", "USD", h(16), h(22), "c", h(16)),  # at its end: in none, its own row
            ("k", "USD", h(1, 21), h(7, 21), "d", h(1, 21)),  # after midnight, the 20th's session
            ("x", "USD", h(9), h(15), "e", h(9)),  # a key without sessions: its own row
            ("k", "BHD", h(9), h(15), "f", h(9)),  # k's session is in dollars: its own row
        ],
        "key, currency, s, e, event_id, t",
    ).withColumn("event_time", F.timestamp_millis("t"))
    got = late_per_session(late, sessions, DAY_BOUNDS)
    assert by_bounds(got, "event_id") == {
        ("k", "USD", h(8), h(16), "a"),
        ("k", "USD", h(8), h(16), "b"),
        ("k", "USD", h(16), h(22), "c"),
        ("k", "USD", h(20), h(8, 21), "d"),
        ("x", "USD", h(9), h(15), "e"),
        ("k", "BHD", h(9), h(15), "f"),
    }


def test_with_holding_session_takes_the_latest_start_at_or_before(spark) -> None:
    sessions = intervals(spark, [("k", 0, 10), ("k", 20, 30)], "key, s, e")
    points = intervals(spark, [("k", 20, 25), ("k", 19, 25), ("k", -5, 0)], "key, s, e")
    got = {
        (r["s"], r["b"])
        for r in with_holding_session(points, sessions, "window_start")
        .select(F.unix_millis("window_start").alias("s"), F.unix_millis("_b_start").alias("b"))
        .collect()
    }
    assert got == {(20, 20), (19, 0), (-5, None)}


def test_narrower_than_finds_rows_below_the_gap(spark) -> None:
    rows = intervals(spark, [("k", 0, 10), ("k", 20, 29)], "key, s, e")
    assert [(r["ms"], r["start"]) for r in narrower_than(rows, 10).collect()] == [(9, 20)]


def test_result_windowing_names_sessions() -> None:
    result = ReconcileResult(DAY, 0, 0, 0, WINDOW, "UTC", session_gap_ms=10_000)
    assert result.windowing == "session, gap 10s"


# -- the nightly ----------------------------------------------------------------------------------


def test_the_nightly_waits_two_gaps_and_the_allowed_lateness_past_midnight() -> None:
    """A session of events on the date ends by midnight + D, and an event still counted can
    touch it until the watermark passes its end + D + G."""
    from tally.settings import load_settings
    from tally_app.nightly import ready_after

    env = {"TALLY_SESSION_GAP": "6h", "TALLY_ALLOWED_LATENESS": "30m"}
    ready = ready_after(load_settings(env=env), DAY)
    assert ready == datetime(2026, 11, 21, 12, 30, tzinfo=UTC)
    fixed = ready_after(load_settings(env={"TALLY_WINDOW": "7m"}), DAY)
    assert fixed == datetime(2026, 11, 21, 0, 7, tzinfo=UTC)


def test_sessions_do_not_take_the_window_from_the_stream() -> None:
    """The stream's rows are as wide as its sessions: no window to read from them (and no
    Spark is asked)."""
    from tally.settings import load_settings
    from tally_app.nightly import with_stream_window

    settings = load_settings(env={"TALLY_SESSION_GAP": "6h", "TALLY_WINDOW": "1m"})
    assert with_stream_window(settings, None, explicit=True, business_date=DAY) is settings


def test_tally_reconcile_with_a_session_gap(reconciled, spark, tmp_path, capsys, tally_cli):
    """`tally reconcile --session-gap 6h`: the nightly passes the gap on (an explicit window
    is not compared with the stream's session widths), validates and reports. On a copy of
    the warehouse: exit 1 (the cases hold three UNEXPLAINED rows)."""
    import shutil

    warehouse = str(tmp_path / "warehouse")
    shutil.copytree(reconciled["warehouse"], warehouse)
    run = ["reconcile", "--date", "2026-11-20", "--warehouse", warehouse]
    env = {"TALLY_GX_ROOT": str(tmp_path), "TALLY_REPORT_DIR": str(tmp_path / "reports")}
    assert tally_cli([*run, "--session-gap", "6h", "--window", "1m"], **env) == 1
    out = capsys.readouterr().out
    assert "windows: session, gap 6h;" in out and "10 windows" in out
    assert recon_rows(spark, warehouse) == reconciled["rows"]
    failed = {
        (r["suite"], r["check_name"])
        for r in T.read_table(spark, warehouse, "validation_results").collect()
        if not r["success"]
    }
    # the three UNEXPLAINED rows (one without a batch side) and the late rate; the stream's
    # sessions [8, 16) and [8, 21) of one key are two identities, each with one latest row
    assert ("stream_aggregates", "latest_revision_unique") not in failed
    assert ("gap", "no_unexplained_windows") in failed
    html = (tmp_path / "reports" / "report-2026-11-20.html").read_text()
    assert "session, gap 6h" in html
