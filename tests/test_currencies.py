"""Several currencies end to end: a hand-computed feed of USD, JPY and BHD events (one late, one
duplicate across currencies) through the real stream (`streaming.job.BatchProcessor`, batch
by batch on the arrival clock, then a drain) and the real nightly (`run_nightly`: reconcile,
validate, report, CSV), read back from every output: the tables, the report (in headless
Chromium), its CSV and the desk's JSON. A window's identity includes its currency, and two
currencies' amounts are never added anywhere.

Times are seconds after 2026-11-20T00:00:00Z (the business date, UTC); windows are tumbling
60 s, lateness 10 s, no allowed lateness, one partition. Amounts are integer minor units: the
same 1234 is $12.34, ¥1,234 (yen have no minor unit) and BHD 1.234 (fils: three decimals).
"""

from __future__ import annotations

import csv
import html
import itertools
import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
from browser import ARTIFACTS, opened_file
from pyspark.sql import SparkSession
from stream_helpers import collect, collect_table, iso_ms

from batch.reconcile import recorded_run
from streaming.job import BatchProcessor
from streaming.params import StreamParams
from tally import tables as T
from tally.events import text_lines, text_reader
from tally.ledger import LedgerQuery, select_page
from tally.ledger_reads import Location, read_ledger
from tally.money import format_money
from tally.settings import Settings, load_settings
from tally.vocabulary import EXPLAINED_BY_LATE, MATCH
from tally_app.nightly import NightlyOutcome, run_nightly

S = 1000  # ms per second
DAY = date(2026, 11, 20)
T0_MS = iso_ms("2026-11-20T00:00:00Z")  # times below are seconds after it
NOW = datetime(2026, 11, 21, 0, 30, tzinfo=UTC)  # the nightly runs after the date closed
CURRENCIES = ["BHD", "JPY", "USD"]  # the date's, in the order every output lists them


def at(seconds: float) -> int:
    return T0_MS + int(seconds * S)


def line(eid: str, key: str, amount: int, seconds: int, currency: str | None) -> str:
    obj: dict[str, Any] = {
        "event_id": eid,
        "key": key,
        "amount": amount,
        "event_time": f"2026-11-20T00:{seconds // 60:02d}:{seconds % 60:02d}Z",
    }
    if currency is not None:
        obj["currency"] = currency
    return json.dumps(obj, separators=(",", ":"))


# (processing time = the file's mtime, lines) per micro-batch; the watermark is the newest
# event time less 10 s, and a window closes when its end is <= the watermark.
BATCHES: list[tuple[int, list[str]]] = [
    # B0 at 30 s (WM 20 - 10 = 10): every [0,60) event on time.
    (
        30,
        [
            line("u1", "m1", 350, 5, "USD"),
            line("u2", "m1", 184, 10, None),  # names no currency: the default, USD
            line("y1", "m1", 1234, 15, "JPY"),  # m1's [0,60) again, a window of its own
            line("b1", "m2", 1234, 20, "BHD"),
        ],
    ),
    # B1 at 90 s: d1 at 75 s moves the watermark to 65: [0,60) closes (emitted here).
    (90, [line("d1", "m2", 700, 75, "USD")]),
    # B2 at 100 s (WM 65): y2 belongs to the closed JPY window: late; d1 again in another
    # currency: a duplicate (the stream remembers the id), first arrival (USD 700) wins.
    (
        100,
        [
            line("y2", "m1", 500, 30, "JPY"),
            line("d1", "m2", 999, 75, "EUR"),
        ],
    ),
    # then a drain (batch 3): closes [60,120).
]

# Every window of the date, by (start s, key, currency), hand-computed from the lines above.
STREAM = {  # the stream's answer: (batch that emitted it, count, amount), revision 1 each
    (0, "m1", "JPY"): (1, 1, 1234),  # y1 (y2 came after the window closed)
    (0, "m1", "USD"): (1, 2, 534),  # u1 350 + u2 184
    (0, "m2", "BHD"): (1, 1, 1234),  # b1
    (60, "m2", "USD"): (3, 1, 700),  # d1's first arrival; closed by the drain
}
BATCH = {  # the nightly's truth, first arrivals: (count, amount)
    (0, "m1", "JPY"): (2, 1734),  # y1 1234 + the late y2 500
    (0, "m1", "USD"): (2, 534),  # u1 + u2
    (0, "m2", "BHD"): (1, 1234),  # b1
    (60, "m2", "USD"): (1, 700),  # d1 as USD; its EUR repeat is no event
}
RECONCILIATION = {  # status, (late count, late amount), (residual count, residual amount)
    (0, "m1", "JPY"): (EXPLAINED_BY_LATE, (1, 500), (0, 0)),  # gap 1 / ¥500 = y2
    (0, "m1", "USD"): (MATCH, (0, 0), (0, 0)),
    (0, "m2", "BHD"): (MATCH, (0, 0), (0, 0)),
    (60, "m2", "USD"): (MATCH, (0, 0), (0, 0)),
}
# Per currency: the sums of its windows above.
SUMMARY = {
    "BHD": dict(
        windows=1,
        stream_count=1,
        stream_amount=1234,  # BHD 1.234
        batch_count=1,
        batch_amount=1234,
        gap_count=0,
        gap_amount=0,
        explained_count=0,
        explained_amount=0,
        unexplained_windows=0,
        unexplained_count=0,
        unexplained_amount=0,
        late_events=0,
        late_amount=0,
        copies_count=0,
        copies_amount=0,
        match_windows=1,
        explained_by_late_windows=0,
    ),
    "JPY": dict(
        windows=1,
        stream_count=1,
        stream_amount=1234,  # ¥1,234
        batch_count=2,
        batch_amount=1734,  # ¥1,734
        gap_count=1,
        gap_amount=500,  # the late y2
        explained_count=1,
        explained_amount=500,
        unexplained_windows=0,
        unexplained_count=0,
        unexplained_amount=0,
        late_events=1,
        late_amount=500,
        copies_count=0,
        copies_amount=0,
        match_windows=0,
        explained_by_late_windows=1,
    ),
    "USD": dict(
        windows=2,
        stream_count=3,
        stream_amount=1234,  # 534 + 700 = $12.34
        batch_count=3,
        batch_amount=1234,
        gap_count=0,
        gap_amount=0,
        explained_count=0,
        explained_amount=0,
        unexplained_windows=0,
        unexplained_count=0,
        unexplained_amount=0,
        late_events=0,
        late_amount=0,
        copies_count=0,
        copies_amount=0,
        match_windows=2,
        explained_by_late_windows=0,
    ),
}
# Each currency's headline as the report writes it, by the cells' ids (suffixed -<CODE>).
HEADLINE = {
    "BHD": {
        "stream": ("1", "BHD 1.234"),
        "batch": ("1", "BHD 1.234"),
        "gap": ("0", "BHD 0.000"),
        "explained": ("0", "BHD 0.000"),
        "unexplained": ("0", "BHD 0.000"),
    },
    "JPY": {
        "stream": ("1", "¥1,234"),
        "batch": ("2", "¥1,734"),
        "gap": ("1", "¥500"),
        "explained": ("1", "¥500"),
        "unexplained": ("0", "¥0"),
    },
    "USD": {
        "stream": ("3", "$12.34"),
        "batch": ("3", "$12.34"),
        "gap": ("0", "$0.00"),
        "explained": ("0", "$0.00"),
        "unexplained": ("0", "$0.00"),
    },
}
AMOUNTS = ("stream_amount", "batch_amount", "gap_amount", "explained_amount", "unexplained_amount")


def cross_currency_sums() -> set[int]:
    """Every amount that adds two currencies: a sum of events of one currency (first arrivals,
    and the EUR repeat) plus such sums of at least one other currency, less the amounts a
    single currency legitimately has (which may appear in its own part)."""
    amounts = {
        "USD": [350, 184, 700],
        "JPY": [1234, 500],
        "BHD": [1234],
        "EUR": [999],
    }
    within = {
        c: {sum(s) for n in range(1, len(a) + 1) for s in itertools.combinations(a, n)}
        for c, a in amounts.items()
    }
    mixed: set[int] = set()
    for n in range(2, len(within) + 1):
        for codes in itertools.combinations(within, n):
            mixed |= {sum(p) for p in itertools.product(*(within[c] for c in codes))}
    single = set().union(*within.values())
    return mixed - single


def forbidden_texts() -> list[str]:
    """A cross-currency sum written in any currency, and the EUR repeat's amount."""
    written = {format_money(n, c) for n in cross_currency_sums() for c in [*CURRENCIES, "EUR"]}
    return sorted(written | {format_money(999, c) for c in [*CURRENCIES, "EUR"]})


@dataclass
class World:
    warehouse: str
    settings: Settings
    outcome: NightlyOutcome
    report: Path


@pytest.fixture(scope="module")
def world(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("currencies")
    settings = load_settings(
        env={
            "TALLY_WAREHOUSE": str(root / "warehouse"),
            "TALLY_REPORT_DIR": str(root / "reports"),
            "TALLY_GX_ROOT": str(root / "gx-root"),
            "TALLY_WINDOW": "60s",
            "TALLY_LATENESS": "10s",
            "TALLY_ALLOWED_LATENESS": "0s",
            "TALLY_DEDUP_HORIZON": "60s",
            "TALLY_IDLE_TIMEOUT": "10m",
            "TALLY_MAX_CLOCK_SKEW": "2h",
            "TALLY_MAINTENANCE": "false",
            # one late event of six, one duplicate of seven: not what this test is about
            "TALLY_LATE_RATE_WARN": "0.5",
            "TALLY_LATE_RATE_FAIL": "0.5",
            "TALLY_DUPLICATE_RATE_MAX": "0.5",
        }
    )
    params = StreamParams.from_settings(settings, arrival_clock=True)
    inputs = root / "in"
    inputs.mkdir()
    with BatchProcessor(spark, params) as proc:
        proc.set_app_id("t")
        for batch_id, (now, lines) in enumerate(BATCHES):
            path = inputs / f"b{batch_id:03d}.jsonl"
            path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
            ns = at(now) * 1_000_000
            os.utime(path, ns=(ns, ns))  # the arrival clock: the batch runs at its file's mtime
            proc.process(text_reader(spark.read).load(str(path)).transform(text_lines), batch_id)
        assert proc.drain()
    reports = Path(settings.report_location)
    outcome = run_nightly(settings, DAY, NOW, spark, reports)
    return World(settings.warehouse, settings, outcome, outcome.report)


def windows_of(rows: list[dict[str, Any]]) -> dict[tuple[int, str, str], dict[str, Any]]:
    """Rows by (window start s, key, currency); a window twice fails."""
    out: dict[tuple[int, str, str], dict[str, Any]] = {}
    for r in rows:
        ident = ((r["window_start"] - T0_MS) // S, r["key"], r["currency"])
        assert ident not in out, f"{ident} twice"
        assert r["window_end"] - r["window_start"] == 60 * S
        out[ident] = r
    return out


def of_day(spark: SparkSession, world: World, name: str) -> list[dict[str, Any]]:
    df = T.read_table(spark, world.warehouse, name).where(f"business_date = DATE'{DAY}'")
    return collect(df)


# -- the tables ---------------------------------------------------------------------------------


def test_the_stream_keeps_a_window_per_currency(spark, world: World) -> None:
    events = collect_table(spark, world.warehouse, "events")
    assert sorted(
        (r["batch_id"], r["event_id"], r["amount"], r["currency"], r["arrival_status"])
        for r in events
    ) == [
        (0, "b1", 1234, "BHD", "on_time"),
        (0, "u1", 350, "USD", "on_time"),
        (0, "u2", 184, "USD", "on_time"),  # the default for a line naming none
        (0, "y1", 1234, "JPY", "on_time"),
        (1, "d1", 700, "USD", "on_time"),
        (2, "d1", 999, "EUR", "duplicate"),  # logged with its own currency, counted nowhere
        (2, "y2", 500, "JPY", "late"),
    ]
    late = collect_table(spark, world.warehouse, "late_events")
    assert [
        (r["event_id"], (r["window_start"] - T0_MS) // S, r["key"], r["currency"], r["amount"])
        for r in late
    ] == [("y2", 0, "m1", "JPY", 500)]
    stream = windows_of(collect_table(spark, world.warehouse, "stream_aggregates"))
    got = {w: (r["batch_id"], r["event_count"], r["amount_sum"]) for w, r in stream.items()}
    assert got == STREAM
    assert {r["revision"] for r in stream.values()} == {1}


def test_the_nightly_reconciles_each_currency_on_its_own(spark, world: World) -> None:
    batch = windows_of(of_day(spark, world, "batch_aggregates"))
    assert {w: (r["event_count"], r["amount_sum"]) for w, r in batch.items()} == BATCH
    recon = windows_of(of_day(spark, world, "reconciliation"))
    assert set(recon) == set(BATCH)
    for w, r in recon.items():
        status, late, residual = RECONCILIATION[w]
        stream = STREAM[w][1:]
        got = {
            "status": r["status"],
            "stream": (r["stream_count"], r["stream_amount"]),
            "batch": (r["batch_count"], r["batch_amount"]),
            "diff": (r["diff_count"], r["diff_amount"]),
            "late": (r["late_count"], r["late_amount"]),
            "residual": (r["residual_count"], r["residual_amount"]),
        }
        assert got == {
            "status": status,
            "stream": stream,
            "batch": BATCH[w],
            "diff": (BATCH[w][0] - stream[0], BATCH[w][1] - stream[1]),
            "late": late,
            "residual": residual,
        }, w
    # the duplicate's currency is in no aggregate: its first arrival was USD
    for name in ("stream_aggregates", "batch_aggregates", "reconciliation", "late_events"):
        currencies = {r["currency"] for r in collect_table(spark, world.warehouse, name)}
        assert "EUR" not in currencies and None not in currencies, name


def test_one_summary_row_per_currency(spark, world: World) -> None:
    rows = of_day(spark, world, "reconciliation_summary")
    assert sorted(r["currency"] for r in rows) == CURRENCIES
    by = {r["currency"]: r for r in rows}
    for currency, expected in SUMMARY.items():
        r = by[currency]
        assert {c: r[c] for c in expected} == expected, currency
        # the identity, in the currency's own minor units
        assert r["batch_amount"] == (
            r["stream_amount"] + r["late_amount"] - r["copies_amount"] + r["unexplained_amount"]
        )
        assert r["gap_amount"] == r["explained_amount"] + r["unexplained_amount"]
    assert by["JPY"]["worst_keys"] == ["m1"] and by["USD"]["worst_keys"] == []
    # what the nightly hands on: the rows by currency, and a rollup adding counts only
    recon = world.outcome.reconciliation
    assert [s["currency"] for s in recon.summaries] == CURRENCIES
    assert [s["batch_amount"] for s in recon.summaries] == [1234, 1734, 1234]
    rollup = recon.summary
    assert rollup["currencies"] == CURRENCIES
    assert [r["currency"] for r in rollup["by_currency"]] == CURRENCIES
    assert rollup["currency"] is None
    assert {c: rollup[c] for c in AMOUNTS} == dict.fromkeys(AMOUNTS)
    assert (rollup["windows"], rollup["stream_count"], rollup["batch_count"]) == (4, 5, 6)
    assert (rollup["gap_count"], rollup["late_events"], rollup["unexplained_windows"]) == (1, 1, 0)
    assert recon.balanced and world.outcome.failure is None  # validation passed too
    text = recon.describe()
    assert "batch 6 events / BHD 1.234 and ¥1,734 and $12.34," in text
    assert "stream 5 events / BHD 1.234 and ¥1,234 and $12.34;" in text
    assert not [t for t in forbidden_texts() if t in text]


def test_the_runs_row_names_the_currencies_and_adds_no_amounts(spark, world: World) -> None:
    run = recorded_run(spark, world.warehouse, DAY)
    assert run is not None
    assert run["currencies"] == CURRENCIES
    amounts = ("stream_amount", "batch_amount", "gap_amount", "unexplained_amount")
    assert {c: run[c] for c in amounts} == dict.fromkeys(amounts)
    counts = ("windows", "stream_count", "batch_count", "gap_count", "late_events")
    assert {c: run[c] for c in counts} == {
        "windows": 4,  # 1 + 1 + 2
        "stream_count": 5,  # 1 + 1 + 3
        "batch_count": 6,  # 1 + 2 + 3
        "gap_count": 1,  # y2
        "late_events": 1,
    }
    assert (run["unexplained_windows"], run["balanced"]) == (0, True)
    assert json.loads(run["settings"])["default_currency"] == "USD"


# -- what people read: the report, its CSV, the desk ---------------------------------------------


def test_the_report_has_a_part_per_currency(world: World) -> None:
    page = world.report.read_text(encoding="utf-8")
    for currency, figures in HEADLINE.items():
        assert f'<h3 id="in-{currency}">' in page
        for name, (count, amount) in figures.items():
            assert f'id="{name}-count-{currency}">{count}<' in page, (currency, name)
            assert f'id="{name}-amount-{currency}">{html.escape(amount)}<' in page
    # no unsuffixed headline: nothing stands for the date's amounts in one currency
    assert not re.search(r'id="(stream|batch|gap|explained|unexplained)-amount"', page)
    assert page.count('id="headline-') == 3
    # the worst keys: JPY's m1 with its ¥500 gap; no key has a gap in the other two
    assert page.count('id="worst-keys-JPY"') == 1 and 'id="worst-keys-USD"' not in page
    # each part's late-event rate is its own currency's: y2 is 1 of JPY's 2 events, none else
    rates = {c: re.search(rf'id="late-rate-{c}">([^<]*)<', page) for c in HEADLINE}
    assert {c: m.group(1) for c, m in rates.items() if m} == {
        "BHD": "0.000 %",
        "JPY": "50.000 %",
        "USD": "0.000 %",
    }
    text = html.unescape(re.sub(r"<[^>]+>", " ", page))
    assert "BHD (3 decimals), JPY (0 decimals), USD (2 decimals)" in text
    assert "EUR" not in text
    assert not [t for t in forbidden_texts() if t in text]


def test_the_csv_writes_each_row_in_its_currency(world: World) -> None:
    path = world.report.parent / f"reconciliation-{DAY.isoformat()}.csv"
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    got = {
        (r["window_start"][11:19], r["key"], r["currency"]): (
            r["status"],
            (r["stream_amount"], r["stream_amount_formatted"]),
            (r["batch_amount"], r["batch_amount_formatted"]),
            tuple(r[f"{c}_amount_formatted"] for c in ("diff", "late", "residual")),
        )
        for r in rows
    }
    assert len(got) == len(rows) == 4
    assert got == {
        ("00:00:00", "m1", "JPY"): (
            EXPLAINED_BY_LATE,
            ("1234", "¥1,234"),
            ("1734", "¥1,734"),
            ("¥500", "¥500", "¥0"),  # the gap is the late y2
        ),
        ("00:00:00", "m1", "USD"): (
            MATCH,
            ("534", "$5.34"),
            ("534", "$5.34"),
            ("$0.00", "$0.00", "$0.00"),
        ),
        ("00:00:00", "m2", "BHD"): (
            MATCH,
            ("1234", "BHD 1.234"),
            ("1234", "BHD 1.234"),
            ("BHD 0.000", "BHD 0.000", "BHD 0.000"),
        ),
        ("00:01:00", "m2", "USD"): (
            MATCH,
            ("700", "$7.00"),
            ("700", "$7.00"),
            ("$0.00", "$0.00", "$0.00"),
        ),
    }
    assert "EUR" not in path.read_text(encoding="utf-8")


def test_the_desk_json_keeps_currencies_apart(world: World) -> None:
    rows = read_ledger(Location(world.warehouse), datetime.now(UTC))
    page = json.loads(
        json.dumps(select_page(rows, LedgerQuery.parse(None, None, None, "1", "50")), default=str)
    )
    (row,) = [r for r in page["dates"] if r["business_date"] == DAY.isoformat()]
    assert row["status"] == "explained_by_late"
    assert row["currency"] is None  # several: none names the date's amounts
    amounts = sorted(k for k in row if k.endswith("_amount"))
    assert amounts == sorted(AMOUNTS)
    assert {k: row[k] for k in amounts} == dict.fromkeys(amounts)  # no sum across currencies
    assert (row["stream_count"], row["batch_count"], row["gap_count"]) == (5, 6, 1)
    assert row["by_currency"] == [
        {
            "currency": c,
            **{k: SUMMARY[c][k] for k in AMOUNTS},
        }
        for c in CURRENCIES
    ]


def test_the_report_in_headless_chromium(world: World) -> None:
    shot = ARTIFACTS / "report-currencies.png"
    with opened_file(world.report) as (page, requests):
        shown = {
            (currency, name): (
                page.inner_text(f"#{name}-count-{currency}"),
                page.inner_text(f"#{name}-amount-{currency}"),
            )
            for currency, figures in HEADLINE.items()
            for name in figures
        }
        assert shown == {
            (currency, name): value
            for currency, figures in HEADLINE.items()
            for name, value in figures.items()
        }
        assert [page.inner_text(f"#in-{c}") for c in CURRENCIES] == [f"In {c}" for c in CURRENCIES]
        assert page.locator("#batch-amount").count() == 0
        assert page.inner_text("#balance") == "BALANCED"
        assert page.inner_text("#verdict") == "Clean: balanced and validated"
        # JPY's worst keys: m1, its gap in yen
        cells = page.eval_on_selector_all(
            "#worst-keys-JPY td", "tds => tds.map(td => td.innerText)"
        )
        assert cells[:4] == ["m1", "¥500", "¥500", "¥0"]
        body = page.inner_text("body")
        assert "EUR" not in body
        assert not [t for t in forbidden_texts() if t in body]
        images = page.eval_on_selector_all(
            "img", "imgs => imgs.map(i => [i.id, i.complete, i.naturalWidth])"
        )
        # a per-window and a worst-keys chart per currency, the three shared ones
        assert sorted(i for i, _, _ in images) == sorted(
            [f"chart-windows-{c}" for c in CURRENCIES]
            + [f"chart-worst-keys-{c}" for c in CURRENCIES]
            + ["chart-lateness", "chart-curve", "chart-partitions"]
        )
        assert all(complete and width > 0 for _, complete, width in images), images
        page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    assert [u for u in requests if not u.startswith(("file://", "data:"))] == []
