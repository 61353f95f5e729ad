"""The desk's pure parts (ledger rows, filters, pages, file checks) and its reads of a warehouse
that does not answer (a real delta-rs client against a closed port and a silent one)."""

from __future__ import annotations

import asyncio
import re
import socket
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tally import ledger as L
from tally import ledger_reads as W
from tally.tables import CATALOG
from tally_desk import pages

D1, D2, D3, D4 = (date(2026, 11, d) for d in (1, 2, 3, 4))


def summary(day: date, **values: int) -> dict:
    base = {c: 0 for c in L.SUMMARY_COLUMNS[1:]}
    base["late_event_rate"] = 0.0
    # as a run from before tolerances and currencies wrote it (its run names the currency)
    base |= {"severity": None, "tolerance_rule": None, "currency": None}
    return {**base, "business_date": day, **values}


def columns(table: str) -> set[str]:
    """The column names of a catalog table's DDL (no Spark needed)."""
    return set(re.findall(r"(?:^|, )([a-z_]+) [A-Z]", CATALOG[table].ddl))


def date_detail(ledger: dict, **parts: Any) -> dict:
    """What the desk's date page renders (`tally_desk.app.read_date`'s shape): the date's
    ledger row, nothing else recorded unless `parts` say so."""
    detail = {
        "business_date": "2026-11-20",
        "ledger": ledger,
        "files": {},
        "airflow_runs": [],
        "signoffs": [],
        "alerts": [],
        "provenance": {},
    }
    return detail | parts


def test_desk_tables_are_in_the_catalog() -> None:
    assert set(W.DESK_TABLES) <= set(CATALOG)
    assert set(L.SIGNOFF_COLUMNS) <= columns("signoffs")
    assert set(L.SUMMARY_COLUMNS) <= columns("reconciliation_summary")
    assert set(L.RUN_COLUMNS) <= columns("reconciliation_runs")


def test_status_sign_off_and_order() -> None:
    at = datetime(2026, 11, 5, tzinfo=UTC)
    rows = L.ledger_rows(
        [
            summary(D1),
            summary(D2, gap_count=3, gap_amount=40),
            summary(D3, gap_count=1, unexplained_windows=1, unexplained_amount=-7),
        ],
        [{"business_date": D1, "run_time": at}],
        [
            {"business_date": D1, "severity": "critical", "success": True},
            {"business_date": D2, "severity": "warning", "success": False},
        ],
        [
            {"business_date": D3, "decision": "rejected", "decided_at": at, "decided_by": "a"},
            {
                "business_date": D3,
                "decision": "accepted",
                "decided_at": at.replace(hour=1),
                "decided_by": "b",
                "reason": "ticket 123",
            },
        ],
        [D1, D4],
    )
    assert [r["business_date"] for r in rows] == [
        "2026-11-04",
        "2026-11-03",
        "2026-11-02",
        "2026-11-01",
    ]
    assert [r["status"] for r in rows] == [
        "not_run",
        "unexplained",
        "explained_by_late",
        "balanced",
    ]
    assert rows[1]["signoff"]["decision"] == "accepted" and rows[1]["signoff"]["reason"]
    assert rows[3]["last_run"] == at.isoformat()
    failing = L.ledger_rows(
        [summary(D1)], [], [{"business_date": D1, "severity": "critical", "success": False}], [], []
    )
    assert failing[0]["status"] == "validation_failed"


@pytest.mark.parametrize(
    ("signed_run", "last_run", "superseded"),
    [
        (1, 1, False),  # the decision is on the date's latest run
        (1, 2, True),  # re-run after it (a restatement): awaiting sign-off again
        (None, 2, False),  # a decision that names no run (older rows): not judged
        (2, 1, False),  # never newer than the latest: a run the history lost is not awaited
    ],
)
def test_a_sign_off_of_an_older_run_is_superseded(signed_run, last_run, superseded) -> None:
    def at(hour: int | None) -> datetime | None:
        return None if hour is None else datetime(2026, 11, 5, hour, tzinfo=UTC)

    signoff = {
        "business_date": D1,
        "decision": "auto",
        "decided_at": at(3),
        "run_time": at(signed_run),
    }
    (row,) = L.ledger_rows(
        [summary(D1)], [{"business_date": D1, "run_time": at(last_run)}], [], [signoff], []
    )
    assert row["signoff"]["superseded"] is superseded
    assert pages.signoff_text(row["signoff"]).startswith("awaiting") is superseded


def test_ledger_grid_aligns_and_escapes() -> None:
    from tally_app.ledger import grid

    rows = L.ledger_rows(
        [summary(D1, batch_count=1234, batch_amount=-50_000), summary(D2, gap_count=3)],
        [],
        [],
        [
            {
                "business_date": D2,
                "decision": "accepted",
                "decided_at": None,
                "decided_by": "a\x1b[2J",
            }
        ],
        [],
    )
    lines = grid(rows)
    assert [len(line) for line in lines[1:]] and lines[0].startswith("date        status")
    assert lines[1].startswith("2026-11-02  explained_by_late")
    assert "accepted by a\\x1b[2J" in lines[1] and "\x1b" not in lines[1]  # no escape sequence
    assert "-50,000" in lines[2] and "1,234" in lines[2]
    # numbers right-aligned: the amount column ends at the same place on both lines
    end = lines[0].index("batch amount") + len("batch amount")
    assert lines[2][:end].endswith("-50,000") and lines[1][:end].endswith("0")


def test_tally_ledger_on_a_warehouse_with_no_tables_is_one_line(tmp_path, tally_cli, capsys):
    # a mistyped --warehouse: nothing to show is said, not printed as an empty ledger
    assert tally_cli(["ledger", "--warehouse", str(tmp_path / "no-such")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        captured.err.strip()
        == f"tally: ledger: no events or reconciliation in {tmp_path / 'no-such'}"
    )


def test_query_parse_and_page() -> None:
    rows = L.ledger_rows([summary(date(2026, 1, d)) for d in range(1, 11)], [], [], [], [])
    page = L.select_page(rows, L.LedgerQuery.parse(None, "2026-01-03", "2026-01-08", 2, 4))
    assert page["total"] == 6
    assert [r["business_date"] for r in page["dates"]] == ["2026-01-04", "2026-01-03"]
    for bad in (
        {"status": "odd"},
        {"date_from": "2026-1-1"},
        {"date_from": "2026-01-02", "date_to": "2026-01-01"},
        {"page": "x"},
        {"page_size": 1000},
    ):
        with pytest.raises(ValueError):
            L.LedgerQuery.parse(**bad)


def test_pages_escape_what_they_show() -> None:
    row = L.ledger_rows([summary(D1)], [], [], [], [])[0]
    row["signoff"] = {"decision": "accepted", "decided_by": "<b>x</b>", "reason": "<script>"}
    html = pages.ledger_page({"dates": [row], "total": 1}, L.LedgerQuery())
    assert "<script>" not in html and "&lt;script&gt;" in html and "&lt;b&gt;x" in html


def test_file_names_are_checked(tmp_path: Path) -> None:
    from fastapi import HTTPException

    from tally_desk.app import DeskConfig, docs_file, report_file

    reports, docs = tmp_path / "reports", tmp_path / "gx" / "uncommitted" / "data_docs"
    (docs / "local_site").mkdir(parents=True)
    reports.mkdir()
    (reports / "report-2026-11-01.html").write_text("r")
    (docs / "local_site" / "index.html").write_text("d")
    (tmp_path / "secret.html").write_text("s")
    (reports / "report-2026-11-02.html").symlink_to(tmp_path / "secret.html")
    config = DeskConfig(W.Location(str(tmp_path / "w")), reports, docs, 1.0, "UTC")
    assert report_file(config, "report-2026-11-01.html").read_text() == "r"
    assert docs_file(config, "local_site/index.html").read_text() == "d"
    for name in ("../secret.html", "report-2026-11-02.html", "report-2026-11-03.html", "x.html"):
        with pytest.raises(HTTPException) as err:
            report_file(config, name)
        assert err.value.status_code == 404
    for relative in ("../../../secret.html", "local_site/../../../../secret.html", "/etc/passwd"):
        with pytest.raises(HTTPException):
            docs_file(config, relative)


def _desk(tmp_path: Path, endpoint: str, timeout_s: float):
    from tally_desk.app import DeskConfig

    location = W.Location("s3a://tally/warehouse", endpoint, "us-east-1", True)
    return DeskConfig(location, tmp_path, tmp_path, timeout_s, "UTC")


def test_an_unreachable_warehouse_is_a_clear_503(tmp_path: Path, monkeypatch) -> None:
    from fastapi import HTTPException

    from tally_desk.app import off_loop, read_ledger

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    config = _desk(tmp_path, f"http://127.0.0.1:{port}", 20.0)
    with pytest.raises(HTTPException) as err:
        asyncio.run(off_loop(config, read_ledger, config, datetime.now(UTC)))
    assert err.value.status_code == 503
    assert str(err.value.detail).startswith("warehouse unreachable: ")

    # A store that accepts the connection and never answers: the deadline answers.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        config = _desk(tmp_path, f"http://127.0.0.1:{silent.getsockname()[1]}", 1.0)
        with pytest.raises(HTTPException) as err:
            asyncio.run(off_loop(config, read_ledger, config, datetime.now(UTC)))
    assert err.value.status_code == 503
    assert "did not answer within 1 s" in str(err.value.detail)


def test_which_dates_need_a_person() -> None:
    from tally_app.signoffs import SignOff, date_status, needs_person

    clean = {"unexplained_windows": 0, "gap_amount": 0, "explained_amount": 0}
    assert date_status(clean, {"success": True}) == "balanced"
    late = {**clean, "gap_amount": 40, "explained_amount": 40}
    assert date_status(late, {"success": True}) == "explained_by_late"
    assert date_status(late, {"success": False}) == "validation_failed"
    assert date_status({**late, "unexplained_windows": 2}, {"success": True}) == "unexplained"
    copies = {**late, "copies_count": 1}  # late events and a copy the stream counted
    assert date_status(copies, {"success": True}) == "explained_by_copies"
    assert date_status({**copies, "unexplained_windows": 1}, {"success": True}) == "unexplained"
    assert [needs_person(s) for s in L.STATUSES[:5]] == [False, False, False, True, True]
    # Graded by the materiality tolerances: ok signs itself off (unless validation failed),
    # warn and fail ask a person; a run from before tolerances (no severity) fails as before.
    residual = {**late, "unexplained_windows": 1, "unexplained_amount": 7}
    graded = {
        severity: date_status({**residual, "severity": severity}, {"success": True})
        for severity in ("ok", "warn", "fail", None)
    }
    assert graded == {
        "ok": "within_tolerance",
        "warn": "unexplained_warn",
        "fail": "unexplained",
        None: "unexplained",
    }
    failed = date_status({**residual, "severity": "ok"}, {"success": False})
    assert failed == "validation_failed"
    assert [needs_person(s) for s in ("within_tolerance", "unexplained_warn")] == [False, True]
    assert set(L.STATUSES) == set(L.STATUS_LABELS)
    at = datetime(2026, 11, 5, tzinfo=UTC)
    with pytest.raises(ValueError, match="needs a reason"):
        SignOff(D1, "accepted", "ana", at, reason="  ")
    with pytest.raises(ValueError, match="decision"):
        SignOff(D1, "maybe", "ana", at)
    with pytest.raises(ValueError, match="time zone"):
        SignOff(D1, "rejected", "ana", datetime(2026, 11, 5))  # noqa: DTZ001


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("2026-11-26T04:49:28.680000+00:00", "2026-11-26 04:49:28 UTC"),  # the API's UTC time
        ("2026-11-26T05:49:28+01:00", "2026-11-26 04:49:28 UTC"),  # another offset: as UTC
        ("2026-11-26T04:49:28", "2026-11-26T04:49:28"),  # no zone: shown as it is, not guessed
        ("soon", "soon"),  # not a time at all
    ],
)
def test_date_page_times_read_as_utc(value: str, shown: str) -> None:
    from tally_desk.pages import _when

    assert _when(value) == shown


@pytest.mark.parametrize(
    ("column", "value", "cell"),
    [
        ("stream_amount", 522928930, '<td class="n">522,928,930</td>'),  # no currency: minor units
        ("late_event_rate", 7.0e-05, '<td class="n">0.0070%</td>'),  # a rate, as the ledger
        ("last_run", "2026-11-26T04:49:28+00:00", "<td>2026-11-26 04:49:28 UTC</td>"),
        ("reason", "<b>x</b>", "<td>&lt;b&gt;x&lt;/b&gt;</td>"),  # text is escaped
        ("reason", None, "<td></td>"),
    ],
)
def test_date_page_cells(column: str, value: object, cell: str) -> None:
    from tally_desk.pages import _cell

    assert _cell(column, value) == cell


def test_the_date_page_lists_the_copies_the_stream_counted() -> None:
    """The evidence of EXPLAINED_BY_COPIES on the date's page: each copy beside its first
    arrival, at most `COPIES_SHOWN` of them, and how many there are."""
    from tally_desk.pages import date_page

    ledger = {c: 0 for c in L.TOTALS} | {
        "status": "explained_by_copies",
        "signoff": None,
        "unexplained_windows": 0,
        "unexplained_amount": 0,
        "late_event_rate": 0.0,
        "last_run": None,
    }
    copy = {c: None for c in L.COPY_COLUMNS} | {
        "event_id": "e<0>",
        "key": "b",
        "amount": 300,
        "first_event_date": "2026-11-19",
        "first_key": "a",
    }
    detail = date_detail(ledger, copies={"rows": L.COPIES_SHOWN + 1, "shown": [copy]})
    html = date_page(detail)
    assert "explained by copies the stream counted" in html
    assert '<table id="copies">' in html and "<td>e&lt;0&gt;</td>" in html
    assert f"1 of {L.COPIES_SHOWN + 1:,} shown" in html
    assert '<p id="copies">None.</p>' in date_page({**detail, "copies": {"rows": 0, "shown": []}})


@pytest.mark.parametrize(
    ("column", "value", "currency", "cell"),
    [
        ("stream_amount", 522928930, "USD", '<td class="n">$5,229,289.30</td>'),
        ("gap_amount", -1234, "JPY", '<td class="n">-¥1,234</td>'),  # yen: no minor unit
        ("amount", 1234, "BHD", '<td class="n">BHD 1.234</td>'),  # a copy's amount, fils
        ("batch_count", 1234, "JPY", '<td class="n">1,234</td>'),  # a count is no amount
    ],
)
def test_date_page_amounts_in_the_dates_currency(
    column: str, value: int, currency: str, cell: str
) -> None:
    from tally_desk.pages import _cell

    assert _cell(column, value, currency) == cell


def test_each_date_carries_its_runs_currency_to_the_pages_and_the_grid() -> None:
    """A date's amounts are in the currency its latest run recorded (`default_currency`); a
    run from before currencies counted in USD; a date never run has none."""
    from tally_app.ledger import grid
    from tally_desk.pages import ledger_page

    at = datetime(2026, 11, 5, tzinfo=UTC)
    runs = [
        {"business_date": D1, "run_time": at, "settings": '{"default_currency": "USD"}'},
        {"business_date": D1, "run_time": at, "settings": '{"default_currency": "JPY"}'},
        {"business_date": D2, "run_time": at, "settings": '{"lateness": 1000}'},
        # a recorded value that is no code: amounts shown as minor units, not a failing page
        {"business_date": D3, "run_time": at, "settings": '{"default_currency": "usd"}'},
    ]
    rows = L.ledger_rows(
        [summary(D1, batch_amount=1234, gap_amount=-5), summary(D2, batch_amount=1234)],
        runs,
        [],
        [],
        [D3],
    )
    assert [(r["business_date"], r["currency"]) for r in rows] == [
        (D3.isoformat(), None),  # run, but with no valid currency recorded
        (D2.isoformat(), "USD"),
        (D1.isoformat(), "JPY"),
    ]
    html = ledger_page({"dates": rows, "total": 3}, L.LedgerQuery())
    assert '<td class="n">¥1,234</td><td class="n">-¥5</td>' in html
    assert '<td class="n">$12.34</td>' in html
    lines = grid(rows)
    assert "¥1,234" in lines[3] and "-¥5" in lines[3] and "$12.34" in lines[2]


# -- a date in several currencies -------------------------------------------------------------


def per_currency(currency: str | None, **values: Any) -> dict:
    """A `reconciliation_summary` row of D1 in one currency (severity ok unless given)."""
    return summary(D1, **{"severity": "ok", "tolerance_rule": "none", **values}) | {
        "currency": currency
    }


ROLLUP_CASES = [
    # (why, the date's summary rows, what the rollup holds)
    (
        "one currency: its figures as they are, amounts included",
        [per_currency("JPY", batch_count=2, batch_amount=1734)],
        {"batch_count": 2, "batch_amount": 1734, "currency": "JPY", "currencies": ["JPY"]},
    ),
    (
        "two currencies: counts add up, amounts never (each stays in by_currency)",
        [
            per_currency("USD", batch_count=2, batch_amount=534, windows=1),
            per_currency("JPY", batch_count=2, batch_amount=1734, windows=1),
        ],
        {
            "batch_count": 4,
            "windows": 2,
            "batch_amount": None,
            "currency": None,
            "currencies": ["JPY", "USD"],  # by code
        },
    ),
    (
        "the worst currency's severity decides, with its rule",
        [
            per_currency("USD", severity="warn", tolerance_rule="usd"),
            per_currency("BHD", severity="fail", tolerance_rule="bhd"),
            per_currency("JPY"),
        ],
        {"severity": "fail", "tolerance_rule": "bhd"},
    ),
    (
        "a row from before tolerances (no severity): none, so any residual fails",
        [per_currency("USD"), per_currency("JPY", severity=None)],
        {"severity": None, "tolerance_rule": None},
    ),
    (
        "the late rate over every currency's events, the largest lateness of any",
        [
            per_currency("USD", batch_count=3, late_events=0, max_lateness_ms=None),
            per_currency("JPY", batch_count=1, late_events=1, max_lateness_ms=5000),
        ],
        {"late_event_rate": 0.25, "max_lateness_ms": 5000},
    ),
    (
        "one currency: its rate as recorded (the desk reads no late_events)",
        [per_currency("USD", batch_count=4, late_event_rate=0.25) | {"late_events": None}],
        {"late_event_rate": 0.25},
    ),
    (
        "several, read without late_events: each rate times its batch events",
        [
            per_currency("USD", batch_count=2, late_event_rate=0.5) | {"late_events": None},
            per_currency("JPY", batch_count=2, late_event_rate=0.0) | {"late_events": None},
        ],
        {"late_event_rate": 0.25},
    ),
    (
        "worst keys of several currencies name their currency",
        [
            per_currency("USD", worst_keys=["m1"]),
            per_currency("JPY", worst_keys=["m1", "m2"]),
        ],
        {"worst_keys": ["m1 (JPY)", "m2 (JPY)", "m1 (USD)"]},
    ),
]


@pytest.mark.parametrize(("why", "rows", "expected"), ROLLUP_CASES)
def test_date_rollup(why: str, rows: list[dict], expected: dict) -> None:
    rollup = L.date_rollup(rows)
    assert rollup is not None
    assert {k: rollup[k] for k in expected} == expected, why
    assert [r["currency"] for r in rollup["by_currency"]] == sorted(r["currency"] for r in rows)


def test_a_date_of_no_summary_rows_has_no_rollup() -> None:
    assert L.date_rollup([]) is None


def test_a_residual_in_any_currency_makes_the_date_unexplained() -> None:
    """Two currencies: the rollup's amounts are None, so the status reads each currency's."""
    rows = [
        per_currency("USD", gap_amount=0),
        per_currency("JPY", unexplained_amount=7, gap_amount=7, severity="fail"),
    ]
    rollup = L.date_rollup(rows)
    assert rollup is not None and rollup["unexplained_amount"] is None
    assert L.status_of(rollup, validation_failed=False) == "unexplained"
    only_gap = L.date_rollup([per_currency("USD"), per_currency("JPY", gap_amount=500)])
    assert L.status_of(only_gap, validation_failed=False) == "explained_by_late"


def test_a_date_in_several_currencies_shows_each_amount_in_its_own() -> None:
    """The ledger's row, the desk's pages and `tally ledger` write a date's amount once per
    currency ("$5.34 and ¥1,734"), never a sum of two currencies."""
    from tally_app.ledger import grid
    from tally_desk.pages import date_page, ledger_page

    at = datetime(2026, 11, 5, tzinfo=UTC)
    runs = [{"business_date": D1, "run_time": at, "settings": '{"default_currency": "USD"}'}]
    rows = L.ledger_rows(
        [
            per_currency("USD", batch_count=2, batch_amount=534),
            per_currency("JPY", batch_count=2, batch_amount=1734),
        ],
        runs,
        [],
        [],
        [],
    )
    (row,) = rows
    assert row["currency"] is None and row["batch_amount"] is None and row["batch_count"] == 4
    zero = {k: 0 for k in L.SUMMARY_COLUMNS if k.endswith("_amount")}
    assert row["by_currency"] == [
        {"currency": "JPY", **zero, "batch_amount": 1734},
        {"currency": "USD", **zero, "batch_amount": 534},
    ]
    html = ledger_page({"dates": rows, "total": 1}, L.LedgerQuery())
    assert '<td class="n">¥1,734 and $5.34</td>' in html
    assert "$22.68" not in html and "¥2,268" not in html  # 534 + 1734 in either currency
    assert "¥1,734 and $5.34" in grid(rows)[1]
    copy = {c: None for c in L.COPY_COLUMNS} | {
        "event_id": "d1",
        "key": "m2",
        "amount": 999,
        "currency": "EUR",  # a copy in another currency than its first arrival's
        "first_amount": 700,
        "first_currency": "USD",
    }
    detail = date_detail(row, business_date=D1.isoformat(), copies={"rows": 1, "shown": [copy]})
    page = date_page(detail)
    assert "¥1,734 and $5.34" in page and "2,268" not in page
    assert '<td class="n">€9.99</td>' in page and '<td class="n">$7.00</td>' in page


def test_the_date_page_names_what_failed_in_words() -> None:
    """What failed (critical first, with what it observed and its Data Docs page), the figures
    labelled in words, the provenance as tables with the raw JSON behind a toggle."""
    from tally_desk.pages import date_page

    ledger = {c: 0 for c in L.TOTALS} | {
        "status": "validation_failed",
        "signoff": None,
        "unexplained_windows": 0,
        "unexplained_amount": 0,
        "late_event_rate": 7.000070000700007e-05,
        "last_run": None,
        "currency": "USD",
        "stream_amount": 1234,
    }
    failed = [
        {
            "suite": "events",
            "check_name": "event_time_not_ahead_of_ingest",
            "severity": "critical",
            "observed_value": "5 of 100499 rows unexpected",
            "description": "No event_time is more than 300000 ms ahead of its ingest_time.",
            "docs_page": "docs/validations/events/x.html",
        },
        {
            "suite": "gap",
            "check_name": "late_rate_warn",
            "severity": "warning",
            "observed_value": "0.007 %",
            "description": "Late-event rate at most 0.1 % (warning).",
            "docs_page": None,
        },
    ]
    provenance = {
        "run_time": "2026-11-21T00:30:00+00:00",
        "events_version": 7,
        "window_ms": 60000,
        "settings": {"window": "60s", "default_currency": "USD"},
    }
    detail = date_detail(ledger, provenance=provenance, failed_checks=failed)
    page = date_page(detail)
    listed = re.findall(r"<li[^>]*><b>([^<]+)</b>", page)
    assert listed == ["events/event_time_not_ahead_of_ingest", "gap/late_rate_warn"]
    assert "Observed: 5 of 100499 rows unexpected" in page
    assert '<a href="../docs/validations/events/x.html">Data Docs</a>' in page
    assert page.count(">Data Docs</a>") == 1  # the warning's page is not served
    # figures in words, amounts as money, the rate as a percentage
    assert "<th>stream events</th>" in page and "<th>stream_count</th>" not in page
    assert '<th>stream amount</th><td class="n">$12.34</td>' in page
    assert '<th>late-event rate</th><td class="n">0.0070%</td>' in page
    # provenance: tables, then the raw JSON behind a toggle
    assert '<th>events version (pinned)</th><td class="n">7</td>' in page
    assert "<th>window</th><td>60,000 ms</td>" in page
    assert '<table id="settings">' in page and "<th>default_currency</th>" in page
    assert (
        "<details><summary>raw JSON</summary>" in page and "&quot;events_version&quot;: 7" in page
    )
    assert '<p id="failed-checks">None failed.</p>' in date_page({**detail, "failed_checks": []})


@pytest.mark.parametrize(
    ("change", "currency", "text"),
    [
        ({"events": 3, "amount": 716}, "USD", "+3 events, +$7.16"),  # in the date's currency
        ({"events": -2, "amount": -5}, "USD", "-2 events, -$0.05"),  # a loss keeps its sign
        ({"events": 3, "amount": 716}, "JPY", "+3 events, +¥716"),
        # several currencies: the stream's count adds them, so no amount is shown
        ({"events": 3, "amount": 716}, None, "+3 events"),
        ({"events": 1, "amount": None}, "USD", "+1 events"),  # nothing counted yet
    ],
)
def test_what_a_reopened_date_gained_reads_in_its_currency(
    change: dict, currency: str | None, text: str
) -> None:
    from tally_app.ledger import grid
    from tally_desk.pages import _reopened_text

    assert L.change_text(change, currency) == text
    assert text in _reopened_text(change, currency)
    row = {
        "business_date": "2026-11-20",
        "status": "reopened",
        "reopened": change,
        "currency": currency,
        "signoff": None,
        "last_run": None,
        **dict.fromkeys(L.SUMMARY_COLUMNS[1:]),
    } | {"currency": currency}
    assert f"{L.change_text(change, currency, ' / ')} (unchecked)" in grid([row])[1]


def test_open_items_age_in_the_ledger_and_filter_it() -> None:
    now = datetime(2026, 11, 20, 12, tzinfo=UTC)
    items = {
        D1: {"status": "open", "kind": "unexplained", "owner": "ana", "opened_at": now},
        D2: {
            "status": "open",
            "kind": "awaiting_approval",
            "owner": "ben",
            "opened_at": now - timedelta(days=9, hours=1),
        },
        D3: {"status": "accepted", "kind": "unexplained", "opened_at": now - timedelta(days=40)},
    }
    rows = L.ledger_rows([summary(D1), summary(D2), summary(D3)], [], [], [], [], None, items, now)
    by_date = {r["business_date"]: r["open_item"] for r in rows}
    assert (by_date[str(D1)]["age_days"], by_date[str(D1)]["bucket"]) == (0, "0-1")
    assert (by_date[str(D2)]["age_days"], by_date[str(D2)]["bucket"]) == (9, "8-30")
    # the filter keeps open items that old; a closed one never matches
    for older_than, dates in ((0, [D2, D1]), (2, [D2]), (10, []), (None, [D3, D2, D1])):
        query = L.LedgerQuery.parse(older_than=older_than)
        assert [r["business_date"] for r in L.matching(rows, query)] == [str(d) for d in dates]
    page = L.select_page(rows, L.LedgerQuery.parse(older_than="2"))
    assert page["aging"] == {"0-1": 1, "2-7": 0, "8-30": 1, ">30": 0}  # every open item
    assert page["total"] == 1
    for bad in ("-1", "week"):
        with pytest.raises(ValueError, match="older_than"):
            L.LedgerQuery.parse(older_than=bad)
    html = pages.ledger_page(page, L.LedgerQuery.parse(older_than="2"))
    assert 'id="aging"' in html and "open 9 day(s) (awaiting_approval; owner: ben)" in html
    assert 'href="ledger?older_than=8"' in html
