"""A window's page in the desk (tally.window_evidence): which window a request names, and
what the page shows of its rows. Pure functions, table-tested."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest

from tally.window_evidence import (
    EvidenceQuery,
    WindowRef,
    evidence_csv,
    kind_totals,
    matching_row,
    window_detail,
    window_path,
)

DAY = date(2026, 11, 20)
NOON = datetime(2026, 11, 20, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("start", "key", "currency", "error"),
    [
        ("2026-11-20T12:00:00Z", "k", "USD", None),  # UTC, as the pages link it
        ("2026-11-20T13:00:00+01:00", "k", "USD", None),  # another offset: the same instant
        ("2026-11-20T12:00:00", "k", "USD", "time zone"),  # naive: which noon?
        ("noon", "k", "USD", "ISO time"),  # not a time at all
        ("2026-11-20T12:00:00Z", "", "USD", "key"),  # a key is required
        ("2026-11-20T12:00:00Z", "k", "usd", "currency"),  # codes are upper case
        ("2026-11-20T12:00:00Z", "k", "XXZ", "currency"),  # not an ISO 4217 code
        ("2026-11-20T12:00:00Z", "k", None, "currency"),  # a currency is required
    ],
)
def test_window_ref_parse(start: str, key: str, currency: str | None, error: str | None) -> None:
    if error is None:
        ref = WindowRef.parse("2026-11-20", start, key, currency)
        assert (ref.start, ref.start.tzinfo) == (NOON, UTC)
        return
    with pytest.raises(ValueError, match=error) as raised:
        WindowRef.parse("2026-11-20", start, key, currency)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("start", "key", "path"),
    [
        # the start is UTC with Z, URL-quoted; key and currency in the query
        (NOON, "m-1", "dates/2026-11-20/windows/2026-11-20T12%3A00%3A00Z?key=m-1&currency=USD"),
        # a naive start is local time, as PySpark collects timestamps
        (
            NOON.astimezone().replace(tzinfo=None),
            "m-1",
            "dates/2026-11-20/windows/2026-11-20T12%3A00%3A00Z?key=m-1&currency=USD",
        ),
        # another offset is converted; milliseconds are kept
        (
            datetime(2026, 11, 20, 13, 0, 0, 250_000, tzinfo=timezone(timedelta(hours=1))),
            "m-1",
            "dates/2026-11-20/windows/2026-11-20T12%3A00%3A00.25Z?key=m-1&currency=USD",
        ),
        # a hostile key cannot leave the query string
        (
            NOON,
            "../a b&c=d",
            "dates/2026-11-20/windows/2026-11-20T12%3A00%3A00Z?key=..%2Fa+b%26c%3Dd&currency=USD",
        ),
    ],
)
def test_window_path_round_trips(start: datetime, key: str, path: str) -> None:
    assert window_path(DAY, start, key, "USD") == path
    from urllib.parse import parse_qs, unquote, urlsplit

    parts = urlsplit(path)
    query = parse_qs(parts.query)
    ref = WindowRef.parse(
        "2026-11-20", unquote(parts.path.rsplit("/", 1)[1]), query["key"][0], query["currency"][0]
    )
    assert (ref.key, ref.start) == (key, start.astimezone(UTC))


@pytest.mark.parametrize(
    ("kind", "page", "size", "error"),
    [
        (None, "1", "100", None),  # events by default
        ("revision", "3", "500", None),  # the largest page
        ("nope", "1", "100", "kind"),  # an unknown kind
        ("late", "0", "100", "page"),  # pages count from 1
        ("late", "1", "501", "page_size"),  # bounded
        ("late", "x", "100", "integers"),  # not a number
    ],
)
def test_evidence_query_parse(kind: str | None, page: str, size: str, error: str | None) -> None:
    if error is None:
        query = EvidenceQuery.parse(kind, page, size)
        assert (query.kind, query.page, query.page_size) == (kind or "event", int(page), int(size))
    else:
        with pytest.raises(ValueError, match=error):
            EvidenceQuery.parse(kind, page, size)


def _event(rank: int, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "event",
        "rank": rank,
        "kind_rows": 5,
        "never_counted_rows": 2,
        "event_id": f"e{rank}",
        "amount": 100 * rank,
        "in_late": False,
        "counted_by_stream": False,
        **extra,
    }


def test_matching_row_takes_a_row_from_before_currencies_as_the_runs() -> None:
    rows = [{"currency": "EUR", "n": 1}, {"currency": None, "n": 2}]
    ref = WindowRef(DAY, NOON, "k", "USD")
    assert matching_row(rows, ref, "USD") == {"currency": None, "n": 2}
    assert matching_row(rows, ref, "JPY") is None
    assert matching_row(rows, WindowRef(DAY, NOON, "k", "EUR"), "USD") == rows[0]


@pytest.mark.parametrize(
    ("recon", "evidence", "state"),
    [
        (None, [], "no_such_window"),  # the date has no such window
        ({"status": "MATCH"}, [], "no_evidence_needed"),  # balanced: nothing kept
        ({"status": "UNEXPLAINED"}, [], "not_recorded"),  # a run from before evidence
        ({"status": "UNEXPLAINED"}, [_event(1)], "recorded"),
    ],
)
def test_window_detail_states(recon: Any, evidence: list[dict[str, Any]], state: str) -> None:
    detail = window_detail(WindowRef(DAY, NOON, "k", "USD"), recon, evidence, EvidenceQuery())
    assert detail["evidence"] == state


def test_window_detail_pages_a_kind_in_rank_order_and_says_what_the_stream_did() -> None:
    evidence = [
        _event(3, counted_by_stream=True),
        _event(1),
        {"kind": "revision", "rank": 1, "kind_rows": 1, "revision": 1},
        _event(2, in_late=True),
    ]
    ref = WindowRef(DAY, NOON, "k", "USD")
    recon = {"status": "UNEXPLAINED", "residual_count": 2}
    first = window_detail(ref, recon, evidence, EvidenceQuery("event", 1, 2))
    second = window_detail(ref, recon, evidence, EvidenceQuery("event", 2, 2))
    assert [(r["rank"], r["counted"]) for r in first["rows"]] == [(1, "never counted"), (2, "late")]
    assert [(r["rank"], r["counted"]) for r in second["rows"]] == [(3, "counted")]
    # 5 events in the window, 3 kept, 2 never counted; 1 revision; no late row
    assert first["kinds"] == kind_totals(evidence)
    assert first["kinds"]["event"] == {"total": 5, "stored": 3, "never_counted": 2}
    assert first["kinds"]["revision"] == {"total": 1, "stored": 1}
    assert first["kinds"]["late"] == {"total": 0, "stored": 0}


def test_evidence_csv_quotes_text_and_defuses_formulas() -> None:
    text = evidence_csv([_event(2, event_id="=HYPERLINK(1)"), _event(1)])
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["event_id"] for r in rows] == ["e1", "'=HYPERLINK(1)"]  # rank order, defused
    assert rows[0]["counted"] == "never counted" and rows[0]["amount"] == "100"
    assert text.splitlines()[1].startswith('"event",1,"e1"')  # numbers bare, text quoted
