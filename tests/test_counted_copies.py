"""Copies of earlier events that the stream counted (issue 45 A): beyond its dedup horizon the
stream classifies a repeat of a forgotten `event_id` like a new event and, when its window can
still change, counts it; the nightly counts the id once, by its first arrival (here under
the previous date). The diff names that surplus, window by window: `EXPLAINED_BY_COPIES`, the
copies in `copies_count`/`copies_amount`, their lines beside their first arrivals in
`reconciliation_copies`, and the summary's explained = late − copies.

One hand-built day, reconciled once per dedup mode (the index and the whole log must agree).
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest
from batch_fixtures import event, late, ms, stream_row, write_inputs

from batch.reconcile import ReconcileResult, reconcile
from tally import tables as T
from tally.vocabulary import EXPLAINED_BY_COPIES, EXPLAINED_BY_LATE, MATCH, UNEXPLAINED
from tally.windows import window_start_ms

pytestmark = pytest.mark.usefixtures("small_delta_snapshots")

W = 60_000
DAY = date(2026, 11, 20)
NOW = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)
# The first arrivals of the reused ids: on the 19th, an hour apart, a day before the copies.
FIRST_SEEN = ms("2026-11-19T08:00:00Z")


def win(hour: int) -> int:
    return window_start_ms(ms(f"2026-11-20T{hour:02d}:00:00Z"), W)


def first_seen(event_id: str, n: int) -> dict[str, Any]:
    """An id's first arrival on the 19th (its own key and amount there)."""
    return event(event_id, f"{event_id}-19", 1, FIRST_SEEN + n * 3_600_000)


def copy_of(first: dict[str, Any], key: str, amount: int, at: int, status: str) -> dict[str, Any]:
    """A later line of `first`'s id, timed on the 20th with another key and amount."""
    return event(first["event_id"], key, amount, at, status=status, ingest=at + 2000)


def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(events, stream_aggregates, late_events): one window per case."""
    ev: list[dict[str, Any]] = []
    st: list[dict[str, Any]] = []
    lt: list[dict[str, Any]] = []
    firsts = [first_seen(i, n) for n, i in enumerate(("r1", "r2", "r3", "r4", "r5", "r6"))]
    ev += firsts
    r1, r2, r3, r4, r5, r6 = firsts
    # k-copy: a copy the stream counted (on time) beside one event of its own.
    w = win(1)
    ev += [event("a1", "k-copy", 10, w + 1000), copy_of(r1, "k-copy", 7, w + 2000, "on_time")]
    st.append(stream_row(w, W, "k-copy", 2, 17))
    # k-copy-late: a late first arrival and a counted (allowed late) copy in one window.
    w = win(2)
    b = event("b1", "k-copy-late", 30, w + 1000, status="late", ingest=w + 5 * W)
    ev += [event("b0", "k-copy-late", 20, w + 3000), b]
    ev.append(copy_of(r2, "k-copy-late", 5, w + 4000, "allowed_late"))
    st.append(stream_row(w, W, "k-copy-late", 2, 25))
    lt.append(late(b, W, 4 * W))
    # k-copy-only: the stream's only event of the window is a copy; the batch has none.
    w = win(3)
    ev.append(copy_of(r3, "k-copy-only", 9, w + 1000, "on_time"))
    st.append(stream_row(w, W, "k-copy-only", 1, 9))
    # k-copy-dup: a copy within the horizon: the stream knew the id (duplicate), counted none.
    w = win(4)
    ev += [
        event("d1", "k-copy-dup", 4, w + 1000),
        copy_of(r4, "k-copy-dup", 6, w + 2000, "duplicate"),
    ]
    st.append(stream_row(w, W, "k-copy-dup", 1, 4))
    # k-copy-late-repeat: a copy beyond the horizon but late: in late_events, counted nowhere,
    # and no first arrival, so it explains nothing either.
    w = win(5)
    repeat = copy_of(r5, "k-copy-late-repeat", 8, w + 1000, "late")
    ev += [event("e1", "k-copy-late-repeat", 3, w + 2000), repeat]
    st.append(stream_row(w, W, "k-copy-late-repeat", 1, 3))
    lt.append(late(repeat, W, 3 * W))
    # k-copy-partial: a counted copy and one more stream event nobody can explain: the copy
    # explains its part, the rest stays UNEXPLAINED.
    w = win(6)
    ev += [
        event("f1", "k-copy-partial", 2, w + 1000),
        copy_of(r6, "k-copy-partial", 11, w + 2000, "on_time"),
    ]
    st.append(stream_row(w, W, "k-copy-partial", 3, 2 + 11 + 50))
    # k-late: late events alone, as before.
    w = win(7)
    g = event("g1", "k-late", 40, w + 1000, status="late", ingest=w + 3 * W)
    ev += [event("g0", "k-late", 1, w + 2000), g]
    st.append(stream_row(w, W, "k-late", 1, 1))
    lt.append(late(g, W, 2 * W))
    return ev, st, lt


EXPECTED = {  # key: (status, copies (count, amount), residual (count, amount))
    "k-copy": (EXPLAINED_BY_COPIES, (1, 7), (0, 0)),
    "k-copy-late": (EXPLAINED_BY_COPIES, (1, 5), (0, 0)),
    "k-copy-only": (EXPLAINED_BY_COPIES, (1, 9), (0, 0)),
    "k-copy-dup": (MATCH, (0, 0), (0, 0)),
    "k-copy-late-repeat": (MATCH, (0, 0), (0, 0)),
    "k-copy-partial": (UNEXPLAINED, (1, 11), (-1, -50)),
    "k-late": (EXPLAINED_BY_LATE, (0, 0), (0, 0)),
}


@pytest.fixture(scope="module", params=["index", "full"])
def reconciled(
    request, spark, tmp_path_factory
) -> tuple[str, ReconcileResult, dict[str, dict[str, Any]]]:
    warehouse = str(tmp_path_factory.mktemp(f"copies_{request.param}") / "warehouse")
    events, stream, late_rows = scenario()
    write_inputs(spark, warehouse, W, events, stream, late_rows)
    result = reconcile(spark, warehouse, DAY, W, now=NOW, dedup=request.param)
    rows = {
        r["key"]: r.asDict() for r in T.read_table(spark, warehouse, "reconciliation").collect()
    }
    return warehouse, result, rows


def test_each_window_names_its_cause(reconciled) -> None:
    _, _, rows = reconciled
    got = {
        key: (
            r["status"],
            (r["copies_count"], r["copies_amount"]),
            (r["residual_count"], r["residual_amount"]),
        )
        for key, r in rows.items()
    }
    assert got == EXPECTED
    for r in rows.values():  # the rule, on every row
        assert r["residual_count"] == r["diff_count"] - r["late_count"] + r["copies_count"]
        assert r["residual_amount"] == r["diff_amount"] - r["late_amount"] + r["copies_amount"]
    only = rows["k-copy-only"]
    assert (only["batch_count"], only["stream_count"], only["diff_amount"]) == (0, 1, -9)


def test_the_summary_counts_copies_beside_late_events(reconciled) -> None:
    _, result, rows = reconciled
    s = result.summary
    assert (s["copies_count"], s["copies_amount"]) == (4, 7 + 5 + 9 + 11)
    assert (s["late_events"], s["late_amount"]) == (2, 30 + 40)
    assert (s["explained_count"], s["explained_amount"]) == (2 - 4, 70 - 32)
    assert s["explained_by_copies_windows"] == 3 and s["unexplained_windows"] == 1
    assert (
        s["gap_amount"]
        == s["explained_amount"] + s["unexplained_amount"]
        == sum(r["diff_amount"] for r in rows.values())
    )
    assert (s["unexplained_count"], s["unexplained_amount"]) == (-1, -50)
    assert not result.balanced


def test_the_evidence_names_each_copy_and_its_first_arrival(reconciled, spark) -> None:
    warehouse, _, _ = reconciled
    rows = T.read_table(spark, warehouse, "reconciliation_copies").collect()
    got = sorted(
        (
            r["key"],
            r["event_id"],
            r["amount"],
            r["arrival_status"],
            r["first_event_date"],
            r["first_key"],
        )
        for r in rows
    )
    assert got == [
        ("k-copy", "r1", 7, "on_time", date(2026, 11, 19), "r1-19"),
        ("k-copy-late", "r2", 5, "allowed_late", date(2026, 11, 19), "r2-19"),
        ("k-copy-only", "r3", 9, "on_time", date(2026, 11, 19), "r3-19"),
        ("k-copy-partial", "r6", 11, "on_time", date(2026, 11, 19), "r6-19"),
    ]
    assert {r["business_date"] for r in rows} == {DAY}
    assert all(r["first_ingest_time"] < r["ingest_time"] for r in rows)
    assert len({r["run_time"] for r in rows}) == 1


def test_a_day_whose_gap_is_late_events_and_copies_balances(spark, tmp_path) -> None:
    """Without the stream event nothing explains, the same day balances."""
    events, stream, late_rows = scenario()
    stream = [
        r if r["key"] != "k-copy-partial" else {**r, "event_count": 2, "amount_sum": 13}
        for r in stream
    ]
    warehouse = str(tmp_path / "warehouse")
    write_inputs(spark, warehouse, W, events, stream, late_rows)
    result = reconcile(spark, warehouse, DAY, W, now=NOW)
    assert result.balanced and result.summary["explained_by_copies_windows"] == 4


# -- on the real stream ---------------------------------------------------------------------------

MIN = 60_000
D1_T0 = ms("2026-11-19T10:00:00Z")  # the first date's events
D2_T0 = ms("2026-11-20T00:05:00Z")  # the next date: closes the first and forgets its ids


def test_ids_reused_beyond_the_horizon_balance_with_their_evidence(
    spark, tmp_path, tally_cli, capsys
) -> None:
    """Two dates through the stream's own batch processor with a dedup horizon of 0: the
    first date's ids are forgotten once its windows close; two of them come back on the next
    date with new event times, in a window still open, and the stream counts them. `tally
    reconcile` of that date names them (EXPLAINED_BY_COPIES, their first arrivals on the
    19th) and exits 0."""
    import dataclasses

    import reference_model as M
    from stream_helpers import InputFile, event_line, run_processor

    warehouse = str(tmp_path / "warehouse")
    forgetful = M.Params(window_ms=MIN, lateness_ms=5_000, dedup_horizon_ms=0)
    first = [event_line(f"e{i}", "a", 10 + i, D1_T0 + 5_000 * i, 0) for i in range(5)]
    opener = [event_line("n0", "b", 1, D2_T0, 0)]
    # the next date, a minute on: one new event and copies of e0 and e1 (other keys, amounts)
    reused = [
        event_line("n1", "b", 2, D2_T0 + MIN + 1_000, 0),
        event_line("e0", "b", 300, D2_T0 + MIN + 2_000, 0),
        event_line("e1", "c", 400, D2_T0 + MIN + 3_000, 0),
    ]
    batches = [
        [InputFile("d1.jsonl", D1_T0 + 3 * MIN, first)],
        [InputFile("d2a.jsonl", D2_T0 + 10_000, opener)],
        [InputFile("d2b.jsonl", D2_T0 + MIN + 10_000, reused)],
    ]
    run_processor(
        spark, warehouse, tmp_path / "in", batches, dataclasses.replace(forgetful), drain=True
    )
    statuses = {
        r["event_id"]: r["arrival_status"]
        for r in T.read_table(spark, warehouse, "events")
        .where("event_date = '2026-11-20'")
        .collect()
    }
    assert statuses == {"n0": "on_time", "n1": "on_time", "e0": "on_time", "e1": "on_time"}

    env = {
        "TALLY_WAREHOUSE": warehouse,
        "TALLY_WINDOW": "60s",
        "TALLY_GX_ROOT": str(tmp_path / "gx"),
        "TALLY_WATERMARK_LAG_MAX": "2d",
        "TALLY_DUPLICATE_RATE_MAX": "0.9",
    }
    argv = ["reconcile", "--date", "2026-11-20", "--out", str(tmp_path / "reports")]
    capsys.readouterr()
    assert tally_cli(argv, **env) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "BALANCED" in out, out
    assert "The stream counted 2 copies of earlier events / $7.00 again" in out, out
    assert "2 windows EXPLAINED_BY_COPIES" in out
    html = (tmp_path / "reports" / "report-2026-11-20.html").read_text()
    copies = html.split('<table id="copies">')[1].split("</table>")[0]
    assert copies.count("<tr>") == 3 and "<td>e0</td>" in copies and "<td>2026-11-19</td>" in copies
    assert 'id="copies-count">2<' in html and 'id="copies-amount">$7.00<' in html
    rows = T.read_table(spark, warehouse, "reconciliation").collect()
    assert sorted((r["key"], r["status"], r["copies_count"], r["copies_amount"]) for r in rows) == [
        ("b", EXPLAINED_BY_COPIES, 1, 300),  # n1 and the copy of e0: the batch counts n1
        ("b", MATCH, 0, 0),  # n0's window
        ("c", EXPLAINED_BY_COPIES, 1, 400),  # only the copy of e1
    ]
    evidence = T.read_table(spark, warehouse, "reconciliation_copies").collect()
    assert sorted(
        (r["event_id"], r["key"], r["first_event_date"], r["first_key"]) for r in evidence
    ) == [
        ("e0", "b", date(2026, 11, 19), "a"),
        ("e1", "c", date(2026, 11, 19), "a"),
    ]
    validation = {
        r["check_name"]: r["success"]
        for r in T.read_table(spark, warehouse, "validation_results").collect()
        if r["check_name"] in ("no_copies_counted", "explained_gap_is_late_output")
    }
    assert validation == {"no_copies_counted": False, "explained_gap_is_late_output": True}


def test_a_hopping_copy_counts_in_the_windows_it_was_not_late_for(spark, tmp_path) -> None:
    """Hopping windows of 2 minutes every minute: a copy (its id first seen on the 19th) is
    late for its older window (a late row, not a first arrival: it explains nothing) and
    counted in its newer one. Only the newer window holds the copy."""
    size, slide = 2 * W, W
    at = ms("2026-11-20T10:00:30Z")  # in [09:59, 10:01) and [10:00, 10:02)
    first = first_seen("h1", 0)
    copy = copy_of(first, "k-hop", 6, at, "on_time")
    older, newer = window_start_ms(at, slide) - slide, window_start_ms(at, slide)
    late_row = {
        **late(copy, size, 30_000),
        "window_start": older,
        "window_end": older + size,
    }
    events = [first, copy]
    stream = [stream_row(newer, size, "k-hop", 1, 6)]  # the copy, counted
    warehouse = str(tmp_path / "warehouse")
    write_inputs(spark, warehouse, size, events, stream, [late_row])
    reconcile(spark, warehouse, DAY, size, now=NOW, window_slide_ms=slide)
    rows = (
        T.read_table(spark, warehouse, "reconciliation")
        .selectExpr("unix_millis(window_start) AS start", "status", "copies_count")
        .collect()
    )
    got = {r["start"]: (r["status"], r["copies_count"]) for r in rows}
    assert got == {newer: (EXPLAINED_BY_COPIES, 1)}, got
