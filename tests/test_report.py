"""The finance/audit report: exact money formatting, and a report rendered from hand-built
tables, opened in headless Chromium (Debian's /usr/bin/chromium driven by Playwright; no
browser download): headline figures, every chart a real loaded image, a screenshot saved to
artifacts/report.png.
"""

from __future__ import annotations

import csv
import html
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from browser import ARTIFACTS, opened_file
from test_expectations import DAY, NOW, WINDOW_MS, event, recon, write_tables

from expectations.report import build_report
from expectations.report_data import ReportData, bounds_in_force, describe_bounds
from expectations.report_html import render_html
from expectations.report_read import (
    ReportError,
    ReportOptions,
    recorded_bound,
    recorded_duration,
    recorded_settings,
    report_currency,
)
from expectations.validate import write_results
from tally import tables as T


@pytest.mark.parametrize(
    ("recorded", "error"),
    [
        ("{not json", "not JSON"),  # a corrupt record is not "allowed lateness 0"
        ("[1, 2]", "expected a JSON object, got list"),  # JSON, but not settings
        ('{"allowed_lateness": "soon"}', "allowed_lateness"),  # names the unreadable field
        ('{"lateness": "-5s"}', "lateness"),
    ],
)
def test_unreadable_recorded_settings_are_a_report_error(recorded: str, error: str) -> None:
    with pytest.raises(ReportError, match=error):
        settings = recorded_settings({"settings": recorded})
        for name in ("lateness", "allowed_lateness"):
            recorded_duration(settings, name)


@pytest.mark.parametrize(
    ("recorded", "name", "ms"),
    [
        (None, "lateness", None),  # no settings recorded: nothing to read
        ('{"window": "1m"}', "allowed_lateness", None),  # not recorded: the caller's default
        ('{"allowed_lateness": "2s"}', "allowed_lateness", 2_000),  # a duration text
        ('{"lateness": 30000}', "lateness", 30_000),  # milliseconds
    ],
)
def test_recorded_durations(recorded: str | None, name: str, ms: int | None) -> None:
    assert recorded_duration(recorded_settings({"settings": recorded}), name) == ms


@pytest.mark.parametrize(
    ("recorded", "ms"),
    [
        ('{"lateness": "30s"}', 30_000),  # a fixed bound is the bound
        ('{"lateness": "auto", "lateness_max": "2m"}', 120_000),  # auto: the widest it may pick
        ('{"lateness": "AUTO", "lateness_max": 60000}', 60_000),  # as the settings read it
        ('{"window": "1m"}', None),  # not recorded: the caller's fallback
    ],
)
def test_the_recorded_bound_under_auto_is_its_maximum(recorded: str, ms: int | None) -> None:
    assert recorded_bound(recorded_settings({"settings": recorded})) == ms


def test_an_unreadable_bound_under_auto_is_a_report_error() -> None:
    with pytest.raises(ReportError, match="lateness_max"):
        recorded_bound(recorded_settings({"settings": '{"lateness": "auto", "lateness_max": "x"}'}))


@pytest.mark.parametrize(
    ("run", "text"),
    [
        (None, None),
        ({"partition_lateness_min_ms": None}, None),  # a run from before the bounds
        (
            {
                "partition_lateness_min_ms": {0: 30_000, 1: 30_000, 2: 30_000, 4: 30_000},
                "partition_lateness_max_ms": {0: 30_000, 1: 30_000, 2: 30_000, 4: 30_000},
                "partition_lateness_last_ms": {0: 30_000, 1: 30_000, 2: 30_000, 4: 30_000},
            },
            "partitions 0-2: 30s; partition 4: 30s",
        ),
        (
            {
                "partition_lateness_min_ms": {0: 1_000, 1: 100},
                "partition_lateness_max_ms": {0: 60_000, 1: 100},
                "partition_lateness_last_ms": {0: 1_500, 1: 100},
            },
            "partition 0: 1s–1m, last 1500ms; partition 1: 100ms",
        ),
    ],
)
def test_bounds_in_force_in_one_line(run: dict[str, Any] | None, text: str | None) -> None:
    assert describe_bounds(bounds_in_force(run)) == text


def _empty_report(**values: Any) -> ReportData:
    return ReportData(
        business_date=DAY,
        now=NOW,
        report_timezone="UTC",
        headline={
            k: 0
            for k in (
                "stream_count",
                "stream_amount",
                "batch_count",
                "batch_amount",
                "gap_count",
                "gap_amount",
                "explained_count",
                "explained_amount",
                "unexplained_count",
                "unexplained_amount",
                "unexplained_windows",
                "windows",
            )
        },
        late_event_rate=None,
        max_lateness_ms=None,
        per_window=[],
        lateness_hist=[],
        curve=None,
        curve_source="not computed",
        current_bound_ms=None,
        recommended_bound_ms=None,
        completeness_target=None,
        worst_keys=[],
        partitions=[],
        validation=[],
        data_docs_index=None,
        **values,
    )


@pytest.mark.parametrize(
    ("currency", "batch", "gap", "note"),
    [
        # each amount in its currency's own minor unit (tally.money, CLDR's digits)
        ("USD", "$12.34", "-$0.05", ", 2 decimals"),
        ("JPY", "¥1,234", "-¥5", ", 0 decimals"),  # yen have no minor unit
        ("BHD", "BHD 1.234", "-BHD 0.005", ", 3 decimals"),  # fils: three decimals
    ],
)
def test_the_report_writes_amounts_in_the_runs_currency(
    currency: str, batch: str, gap: str, note: str
) -> None:
    amounts = {"stream_amount": 1239, "batch_amount": 1234, "gap_amount": -5}
    data = _empty_report(currency=currency)
    data.headline.update(amounts)
    data.worst_keys.append(
        {
            "key": "k",
            "gap_amount": -5,
            "explained_amount": 0,
            "unexplained_amount": -5,
            "unexplained_windows": 1,
        }
    )
    page = render_html(data, "rows.csv")
    assert f'id="batch-amount">{batch}<' in page and f'id="gap-amount">{gap}<' in page
    assert f'<td class="num">{gap}</td><td class="num">' in page  # the worst keys' table
    assert f'<span id="currency">{currency}</span>' in page and note in page
    assert page.count('src="data:image/png;base64,') == 5


def test_curve_is_not_computed_without_data() -> None:
    page = render_html(_empty_report(), "rows.csv")
    assert "Curve: not computed" in page
    assert page.count('src="data:image/png;base64,') == 5
    assert "Not validated" in page


RUN_1, RUN_2 = datetime(2026, 11, 20, 1, tzinfo=UTC), datetime(2026, 11, 21, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("signed_run", "shown_run", "text"),
    [
        (RUN_1, RUN_1, "Sign-off: <b>accepted</b> by ann"),  # the run shown was signed off
        # a re-run after the sign-off (a restatement): this run awaits its own
        (RUN_1, RUN_2, "Sign-off: <b>pending</b> for this run, which restates run 2026-11-20"),
        # Spark reads timestamps back naive (UTC): the same run either way
        (RUN_1.replace(tzinfo=None), RUN_1, "Sign-off: <b>accepted</b> by ann"),
        (None, RUN_2, "Sign-off: <b>accepted</b> by ann"),  # a decision naming no run
    ],
)
def test_the_sign_off_shown_is_the_runs(signed_run, shown_run, text: str) -> None:
    signoff = {"decision": "accepted", "decided_by": "ann", "decided_at": RUN_1, "reason": "ok"}
    data = _empty_report(signoff={**signoff, "run_time": signed_run}, run_time=shown_run)
    assert text in render_html(data, "rows.csv")


# -- a rendered report ---------------------------------------------------------------------------

HEADLINE = {
    # stream / batch / gap = batch - stream / explained = late / unexplained = residual
    "stream": ("10", "$1,236,067.90"),  # a run recording no currency: USD's
    "batch": ("13", "$1,236,201.35"),
    "gap": ("3", "$133.45"),
    "explained": ("2", "$133.44"),
    "unexplained": ("1", "$0.01"),
}


def _late(row: dict[str, Any], lateness_ms: int) -> dict[str, Any]:
    """The late_events row of an events row (status late) that arrived `lateness_ms` late."""
    epoch_ms = (row["event_time"] - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    start = row["event_time"] - timedelta(milliseconds=epoch_ms % WINDOW_MS)
    end = start + timedelta(milliseconds=WINDOW_MS)
    dropped = ("arrival_status", "event_date", "clock_skewed", "source_mtime")
    return {
        **{k: v for k, v in row.items() if k not in dropped},
        "window_start": start,
        "window_end": end,
        "watermark_at_arrival": end + timedelta(milliseconds=lateness_ms),
        "lateness_ms": lateness_ms,
        "arrival_delay_ms": 60_000,
        "reason": "window_closed",
    }


# Lateness auto's bounds over the date's micro-batches: partition 1 widened in a burst.
BOUNDS_IN_FORCE = {
    "partition_lateness_min_ms": {0: 1_000, 1: 1_000, 2: 1_000},
    "partition_lateness_max_ms": {0: 1_000, 1: 17_222, 2: 1_000},
    "partition_lateness_last_ms": {0: 1_000, 1: 2_000, 2: 1_000},
}


def report_tables() -> dict[str, list[dict[str, Any]]]:
    late_a = event("e-20", "k2", 12_345, "06:30:10", status="late", partition=1)
    late_b = event("e-21", "k1", 999, "12:00:30", status="late", partition=1)
    return {
        "reconciliation": [
            recon("00:10", "k1", stream=(3, 100_001), batch=(3, 100_001)),
            recon("06:30", "k2", stream=(2, 50_000), batch=(3, 62_345), late=(1, 12_345)),
            recon("12:00", "k1", batch=(1, 999), late=(1, 999), in_stream=False),
            recon("18:45", "k3", stream=(5, 123_456_789), batch=(6, 123_456_790)),
        ],
        "reconciliation_summary": [
            {
                "business_date": DAY,
                "windows": 4,
                "stream_count": 10,
                "stream_amount": 123_606_790,
                "batch_count": 13,
                "batch_amount": 123_620_135,
                "gap_count": 3,
                "gap_amount": 13_345,
                "explained_count": 2,
                "explained_amount": 13_344,
                "unexplained_windows": 1,
                "unexplained_count": 1,
                "unexplained_amount": 1,
                "late_events": 2,
                "late_amount": 13_344,
                "late_event_rate": 2 / 13,
                "max_lateness_ms": 45_000,
                "worst_keys": ["k3", "k2", "k1"],
            }
        ],
        "reconciliation_runs": [
            {
                "business_date": DAY,
                "run_time": NOW - timedelta(minutes=30),
                "events_version": 0,
                "stream_aggregates_version": 0,
                "late_events_version": 0,
                "window_ms": WINDOW_MS,
                "report_timezone": "UTC",
                "stream_progress_version": 7,
                **BOUNDS_IN_FORCE,
                "settings": json.dumps(
                    {
                        "lateness": "30s",
                        "allowed_lateness": "0s",
                        "window": "1m",
                        "completeness_target": 99.9,
                        "late_rate_warn": 0.001,
                        "late_rate_fail": 0.01,
                    }
                ),
            }
        ],
        "events": [
            event("e-1", "k1", 100_001, "00:10:05"),
            event("e-2", "k2", 50_000, "06:30:01"),
            event("e-3", "k3", 123_456_789, "18:45:30", partition=1),
            event("e-4", "k3", 1, "18:45:40", partition=2),
            late_a,
            late_b,
        ],
        "late_events": [_late(late_a, 4_000), _late(late_b, 45_000)],
    }


def partition_figures() -> list[dict[str, Any]]:
    """The `reconciliation_partitions` rows the run of `report_tables` wrote (the report's
    only source of the log's figures): per source partition, the date's events and late
    events (`events`), and the late rows (`late_events`) by lateness."""
    run_time = NOW - timedelta(minutes=30)  # the run's
    counts = {0: (2, 0, []), 1: (3, 2, [(4_000, 1), (45_000, 1)]), 2: (1, 0, [])}
    return [
        {
            "business_date": DAY,
            "run_time": run_time,
            "partition": p,
            "events": n,
            "late_events": late,
            "lateness": [{"lateness_ms": ms, "late_rows": k} for ms, k in lateness],
        }
        for p, (n, late, lateness) in counts.items()
    ]


def write_partition_figures(spark, warehouse: str, rows: list[dict[str, Any]]) -> None:
    table = T.RECONCILIATION_PARTITIONS
    T.write_table(spark.createDataFrame(rows, table.schema()), warehouse, table)


def validation_rows(docs_page: str) -> list[dict[str, Any]]:
    base = {
        "business_date": DAY,
        "suite": "gap",
        "column_name": None,
        "kwargs": "{}",
        "unexpected_count": None,
        "element_count": None,
        "exception": None,
        "source_table": "reconciliation",
        "source_version": 0,
        "data_docs_page": docs_page,
        "run_time": NOW,
    }
    return [
        {
            **base,
            "check_name": "no_unexplained_windows",
            "expectation": "expect_column_sum_to_be_between",
            "success": False,
            "severity": "critical",
            "observed_value": "1",
            "description": "At most 0 window(s) with status UNEXPLAINED.",
        },
        {
            **base,
            "check_name": "late_rate_warn",
            "expectation": "expect_column_max_to_be_between",
            "success": False,
            "severity": "warning",
            "observed_value": "0.15384615384615385",
            "description": "Late-event rate at most 0.001 (warning).",
        },
        {
            **base,
            "check_name": "known_status",
            "expectation": "expect_column_values_to_be_in_set",
            "success": True,
            "severity": "critical",
            "observed_value": "0 of 4 rows unexpected",
            "description": "Every status is one the batch layer defines.",
        },
    ]


@pytest.fixture(scope="module")
def report(spark, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("report")
    warehouse = str(root / "warehouse")
    write_tables(spark, warehouse, report_tables())
    write_partition_figures(spark, warehouse, partition_figures())
    # A stand-in Data Docs site (the GX runs are covered by test_expectations.py).
    gx_root = root / "gx_root"
    site = gx_root / "gx" / "uncommitted" / "data_docs" / "local_site"
    (site / "validations").mkdir(parents=True)
    (site / "index.html").write_text("<html><body>Data Docs</body></html>")
    page = site / "validations" / "gap.html"
    page.write_text("<html><body>gap suite</body></html>")
    write_results(spark, warehouse, DAY, ["gap"], validation_rows(page.as_uri()))
    path = build_report(
        spark, warehouse, DAY, root / "out", NOW, ReportOptions(gx_root=str(gx_root))
    )
    return path, gx_root


def test_report_files_and_csv(report) -> None:
    path, _ = report
    assert path.name == "report-2026-11-20.html"
    with (path.parent / "reconciliation-2026-11-20.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["window_start"], r["key"], r["status"]) for r in rows] == [
        ("2026-11-20T00:10:00.000Z", "k1", "MATCH"),
        ("2026-11-20T06:30:00.000Z", "k2", "EXPLAINED_BY_LATE"),
        ("2026-11-20T12:00:00.000Z", "k1", "MISSING_IN_STREAM"),
        ("2026-11-20T18:45:00.000Z", "k3", "UNEXPLAINED"),
    ]
    assert sum(int(r["batch_amount"]) for r in rows) == 123_620_135  # integer minor units
    page = path.read_text()
    assert (
        "<th>lateness bounds in force</th><td>partition 0: 1s; partition 1: 1s–17222ms, "
        "last 2s; partition 2: 1s</td>" in page
    )
    assert "<th>stream_progress version (pinned)</th><td>7</td>" in page
    assert "<td>1s–17222ms, last 2s</td></tr>" in page  # the partitions table's column
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert page.count('src="data:image/png;base64,') == 5  # self-contained


def test_report_in_headless_chromium(report) -> None:
    path, gx_root = report
    with opened_file(path) as (page, requests):
        text = {
            ident: page.inner_text(f"#{ident}")
            for name in HEADLINE
            for ident in (f"{name}-count", f"{name}-amount")
        }
        assert text == {
            f"{name}-{kind}": value
            for name, (count, amount) in HEADLINE.items()
            for kind, value in (("count", count), ("amount", amount))
        }
        assert page.inner_text("#balance") == "UNEXPLAINED DIFFERENCES"
        assert page.inner_text("#verdict") == "Not clean: unexplained differences"
        assert page.inner_text("#late-rate") == "15.385 %"
        assert page.inner_text("#validation-verdict") == "FAILED"
        assert page.inner_text("#current-bound") == "30s"
        # the estimated curve: 2 of 13 events late, by 4 s and 45 s; target 99.9 %
        # (30 s + 60 s: the smallest estimated bound admitting both late events)
        assert page.inner_text("#recommended-bound") == "90s"
        images = page.eval_on_selector_all(
            "img", "imgs => imgs.map(i => [i.id, i.complete, i.naturalWidth])"
        )
        assert len(images) == 5
        assert all(complete and width > 0 for _, complete, width in images), images
        links = page.eval_on_selector_all("#validation a", "as => as.map(a => a.href)")
        assert links and all(link.startswith("file://") for link in links)
        assert (
            page.get_attribute("#data-docs", "href")
            == (gx_root / "gx/uncommitted/data_docs/local_site/index.html").resolve().as_uri()
        )
        page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
    assert (ARTIFACTS / "report.png").stat().st_size > 10_000
    # Nothing but the file itself and its embedded images was requested.
    assert [u for u in requests if not u.startswith(("file://", "data:"))] == []


# -- command line ------------------------------------------------------------------------------


def test_report_command_errors_are_one_line(spark, tmp_path, capsys, tally_cli) -> None:
    assert tally_cli(["report", "--date", "20-11-2026"]) == 2
    assert capsys.readouterr().err == (
        "tally: bad setting: date: expected YYYY-MM-DD, got '20-11-2026'\n"
    )
    warehouse = str(tmp_path / "empty")
    code = tally_cli(["report", "--date", "2026-11-20", "--warehouse", warehouse])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("tally: report: reconciliation: no Delta table at ")
    with pytest.raises(ReportError, match="now: needs a time zone"):
        build_report(spark, warehouse, DAY, tmp_path, datetime(2026, 1, 1))  # noqa: DTZ001


def test_report_command_writes_where_the_nightly_does(report, tmp_path, tally_cli) -> None:
    # Without --out, `tally report` writes into report_dir, as `tally reconcile` does, not
    # into the working directory.
    path, gx_root = report
    warehouse = str(path.parent.parent / "warehouse")
    report_dir = tmp_path / "reports_here"
    argv = ["report", "--date", "2026-11-20", "--warehouse", warehouse]
    assert tally_cli(argv, TALLY_REPORT_DIR=str(report_dir), TALLY_GX_ROOT=str(gx_root)) == 0
    assert sorted(p.name for p in report_dir.iterdir()) == [
        "reconciliation-2026-11-20.csv",
        "report-2026-11-20.html",
    ]


def test_csv_blocks_keep_the_window_key_order(spark, tmp_path) -> None:
    """`write_csv` joins the lines of blocks of window starts in the JVM: the file is the rows
    in (window_start, key) order, line for line what formatting each row in that order gives,
    across blocks (windows from 23:40 back to 00:00, keys out of order)."""
    from frames import frame
    from pyspark.sql import functions as F

    from expectations.report import (
        RECONCILIATION_COLUMNS,
        _csv_cell,
        with_formatted_amounts,
        write_csv,
    )
    from tally import tables as T

    starts = ["23:40", "00:00", "10:09", "10:10", "10:05", "00:01", "12:00"]
    rows = [recon(s, key, batch=(i, 100 * i)) for i, s in enumerate(starts) for key in ("b", "a")]
    path = tmp_path / "rows.csv"
    assert write_csv(frame(spark, T.RECONCILIATION, rows), path, "USD") == len(rows)
    df = with_formatted_amounts(frame(spark, T.RECONCILIATION, rows), "USD")
    types = {f.name: f.dataType for f in df.schema.fields}
    cells = [_csv_cell(c, types[c]) for c in RECONCILIATION_COLUMNS]
    expected = [
        r[0] for r in df.orderBy("window_start", "key").select(F.concat_ws(",", *cells)).collect()
    ]
    header = ",".join(f'"{c}"' for c in RECONCILIATION_COLUMNS)
    assert path.read_bytes() == "".join(f"{x}\r\n" for x in [header, *expected]).encode()
    read = list(csv.DictReader(path.open(newline="")))
    assert [(r["window_start"][11:16], r["key"]) for r in read][:4] == [
        ("00:00", "a"),
        ("00:00", "b"),
        ("00:01", "a"),
        ("00:01", "b"),
    ]


@pytest.mark.parametrize(
    ("currency", "written"),
    [
        ("USD", ["$12.34", "-$0.05", "$0.00"]),
        ("JPY", ["¥1,234", "-¥5", "¥0"]),  # not 12.34: yen have no minor unit
        ("BHD", ["BHD 1.234", "-BHD 0.005", "BHD 0.000"]),
    ],
)
def test_the_csv_keeps_minor_units_and_writes_them_in_the_currency(
    spark, tmp_path, currency: str, written: list[str]
) -> None:
    """Each amount stays its integer of minor units, the currency is a column, and each amount
    is written beside it for a person; a negative one is not quoted against formulas (tally
    wrote it from an integer, and a spreadsheet reads it as the number it is)."""
    from frames import frame

    from expectations.report import write_csv
    from tally import tables as T

    rows = [
        recon("00:00", "a", stream=(1, 0), batch=(1, 1234)),
        recon("00:01", "a", stream=(1, 5), batch=(0, 0)),
        recon("00:02", "a", stream=(1, 7), batch=(1, 7)),
    ]
    path = tmp_path / "rows.csv"
    assert write_csv(frame(spark, T.RECONCILIATION, rows), path, currency) == 3
    read = list(csv.DictReader(path.open(newline="")))
    assert [r["currency"] for r in read] == [currency] * 3
    assert [r["diff_amount"] for r in read] == ["1234", "-5", "0"]
    assert [r["diff_amount_formatted"] for r in read] == written
    assert [r["batch_amount_formatted"] for r in read][1] == written[2]


def test_the_headline_names_the_copies_the_stream_counted() -> None:
    """With copies, the explained line is late events less the copies, and the copies get a
    line of their own; without, the headline is as it was."""
    from types import SimpleNamespace

    from expectations.report_html import _headline_html

    figures = {"stream": (12, 1200), "batch": (11, 1000), "gap": (-1, -200)}
    h: dict[str, int] = {
        f"{k}_{m}": v[i] for k, v in figures.items() for i, m in enumerate(("count", "amount"))
    }
    h |= {"explained_count": 1 - 2, "explained_amount": 300 - 500, "copies_count": 2}
    h |= {"copies_amount": 500, "unexplained_count": 0, "unexplained_amount": 0}
    h |= {"windows": 4, "unexplained_windows": 0}
    data = SimpleNamespace(
        headline=h, late_event_rate=0.1, max_lateness_ms=None, currency="USD", by_currency=()
    )
    html = _headline_html(data)  # type: ignore[arg-type]
    assert 'id="copies-count">2<' in html and 'id="copies-amount">$5.00<' in html
    assert "late events less the copies" in html and 'id="explained-amount">-$2.00<' in html
    plain = _headline_html(SimpleNamespace(**{**vars(data), "headline": {**h, "copies_count": 0}}))  # type: ignore[arg-type]
    assert "copies-count" not in plain and "Explained by late events" in plain


@pytest.mark.parametrize(
    ("unexplained", "severity", "text"),
    [
        (0, None, "BALANCED"),  # nothing unexplained: no grade shown
        (1, None, "UNEXPLAINED DIFFERENCES"),  # a run from before tolerances: no grade
        (1, ("warn", "small <shops>"), "severity <b>warn</b> (rule small &lt;shops&gt;)"),
        (1, ("fail", "none"), "severity <b>fail</b> (no materiality tolerance rule)"),
    ],
)
def test_the_badge_names_the_dates_severity(
    unexplained: int, severity: tuple[str, str] | None, text: str
) -> None:
    from types import SimpleNamespace

    from expectations.report_html import _balance_badge

    headline = {"unexplained_windows": unexplained, "unexplained_amount": 7 * unexplained}
    data = SimpleNamespace(headline=headline, severity=severity, by_currency=(), validation=[])
    badge = _balance_badge(data)  # type: ignore[arg-type]
    assert text in badge
    assert ('id="severity"' in badge) == (unexplained > 0 and severity is not None)


def _check(success: bool, severity: str = "critical", name: str = "amount_within_bounds") -> dict:
    return {
        "suite": "events",
        "check_name": name,
        "success": success,
        "severity": severity,
        "observed_value": "0 of 9 rows unexpected" if success else "2 of 9 rows unexpected",
    }


VERDICT_CASES = [
    # (why, unexplained windows, severity, validation rows, verdict class, verdict text)
    (
        "balanced and every check passed",
        0,
        None,
        [_check(True)],
        "ok",
        "Clean: balanced and validated",
    ),
    (
        "balanced, but a critical check failed: not a green BALANCED (the demo's date)",
        0,
        None,
        [_check(False), _check(False, name="duplicate_rate")],
        "bad",
        "Not clean: validation failed: events/amount_within_bounds (observed 2 of 9 rows "
        "unexpected) and 1 more",
    ),
    (
        "a failed warning does not fail the date",
        0,
        None,
        [_check(False, "warning")],
        "ok",
        "Clean: balanced and validated",
    ),
    ("never validated", 0, None, [], "warn", "Balanced, not validated"),
    (
        "a residual of a run from before tolerances",
        1,
        None,
        [_check(True)],
        "bad",
        "Not clean: unexplained differences",
    ),
    (
        "a residual graded fail",
        1,
        ("fail", "r"),
        [_check(True)],
        "bad",
        "Not clean: unexplained differences",
    ),
    (
        "graded warn: exit 0, but a person signs it off",
        1,
        ("warn", "r"),
        [_check(True)],
        "warn",
        "Unexplained, above a warn limit: a reviewer signs it off",
    ),
    (
        "graded ok: clean",
        1,
        ("ok", "r"),
        [_check(True)],
        "ok",
        "Clean: unexplained within the materiality tolerance",
    ),
    (
        "graded ok, but a critical check failed",
        1,
        ("ok", "r"),
        [_check(False)],
        "bad",
        "Not clean: validation failed: events/amount_within_bounds (observed 2 of 9 rows "
        "unexpected)",
    ),
]


@pytest.mark.parametrize(
    ("why", "unexplained", "severity", "validation", "cls", "text"), VERDICT_CASES
)
def test_the_headline_states_the_verdict_the_exit_code_decides(
    why: str,
    unexplained: int,
    severity: tuple[str, str] | None,
    validation: list[dict],
    cls: str,
    text: str,
) -> None:
    from types import SimpleNamespace

    from expectations.report_html import _balance_badge, _verdict

    headline = {"unexplained_windows": unexplained, "unexplained_amount": 7 * unexplained}
    data = SimpleNamespace(
        headline=headline, severity=severity, by_currency=(), validation=validation
    )
    verdict = _verdict(data)  # type: ignore[arg-type]
    assert f'<span class="badge {cls}" id="verdict">{html.escape(text)}</span>' in verdict, why
    green = '<span class="badge ok" id="balance">' in _balance_badge(data)  # type: ignore[arg-type]
    assert green == (unexplained == 0 and cls != "bad"), why


@pytest.mark.parametrize(
    ("run", "currency"),
    [
        (None, "USD"),  # no run row: the default
        ({"settings": '{"lateness": 1000}'}, "USD"),  # a run from before currencies
        ({"settings": '{"default_currency": "JPY"}'}, "JPY"),
        ({"settings": '{"default_currency": "usd"}'}, None),  # no code: one line, not a crash
    ],
)
def test_the_reports_currency_is_the_runs(run: dict[str, Any] | None, currency: str | None):
    if currency is None:
        with pytest.raises(ReportError, match="default_currency that is no ISO 4217 code"):
            report_currency(run, DAY)
    else:
        assert report_currency(run, DAY) == currency
