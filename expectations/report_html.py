"""The report's HTML: one self-contained page (inline CSS, charts as base64 PNGs, no script)
rendered from `ReportData`."""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from expectations.report_charts import (
    chart_curve,
    chart_lateness,
    chart_partitions,
    chart_per_window,
    chart_worst_keys,
)
from expectations.report_data import (
    CurrencyFigures,
    ReportData,
    describe_bound,
    format_count,
    format_rate,
)
from tally.durations import format_duration
from tally.ledger import decision_words
from tally.money import format_money, minor_digits
from tally.tolerances import NO_RULE, OK, WARN
from tally.window_evidence import window_path

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;
max-width:1100px;color:#222;padding:0 1rem}
h1{margin-bottom:.2rem}h2{margin-top:2.2rem;border-bottom:1px solid #ddd;padding-bottom:.3rem}
table{border-collapse:collapse;margin:.6rem 0}td,th{border:1px solid #ddd;padding:.3rem .6rem}
th{background:#f5f5f5;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#2a7d2a;font-weight:600}.bad{color:#b22222;font-weight:600}
.warn{color:#b8860b;font-weight:600}.muted{color:#666}img{max-width:100%;height:auto}
.badge{display:inline-block;padding:.2rem .6rem;border-radius:.3rem;color:#fff}
.badge.ok{background:#2a7d2a}.badge.bad{background:#b22222}.badge.warn{background:#b8860b}
.badge.plain{background:#666}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _img(alt: str, png: str, ident: str) -> str:
    return f'<img id="{ident}" alt="{_e(alt)}" src="data:image/png;base64,{png}">'


def _dur(ms: int | None) -> str:
    return "not known" if ms is None else format_duration(int(ms))


def _table(ident: str, header: Sequence[str], rows: Iterable[str]) -> str:
    """A table of pre-rendered `<tr>` rows under one header row (none if `header` is empty)."""
    head = "<tr>" + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr>" if header else ""
    return f'<table id="{ident}">{head}{"".join(rows)}</table>'


def _key_value_table(ident: str, items: Iterable[tuple[Any, Any]]) -> str:
    return _table(ident, (), (f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in items))


# -- headline ------------------------------------------------------------------------------------


def _headline_row(h: dict[str, int], currency: str, label: str, key: str) -> str:
    """One headline line; `key` names the figures and the cells' ids."""
    return (
        f'<tr><th>{_e(label)}</th><td class="num" id="{key}-count">'
        f"{format_count(h[f'{key}_count'])}</td>"
        f'<td class="num" id="{key}-amount">{format_money(h[f"{key}_amount"], currency)}</td></tr>'
    )


def _balanced(data: ReportData) -> bool:
    headlines = [c.headline for c in data.by_currency] or [data.headline]
    return all(h["unexplained_windows"] == 0 and h["unexplained_amount"] == 0 for h in headlines)


def _failed_critical(data: ReportData) -> list[dict[str, Any]]:
    return [r for r in data.validation if not r["success"] and r["severity"] == "critical"]


def _verdict(data: ReportData) -> str:
    """The date's verdict as `tally reconcile`'s exit code decides it: the books (balanced,
    or an unexplained residual and its grade) and the critical expectations together, so a
    balanced date whose validation failed never reads as a green BALANCED."""
    grade = None if data.severity is None else data.severity[0]
    failed = _failed_critical(data)
    if not _balanced(data) and grade not in (OK, WARN):
        cls, text = "bad", "Not clean: unexplained differences"
    elif failed:
        first = failed[0]
        more = f" and {len(failed) - 1} more" if len(failed) > 1 else ""
        cls, text = (
            "bad",
            f"Not clean: validation failed: {first['suite']}/{first['check_name']} "
            f"(observed {first['observed_value']}){more}",
        )
    elif not _balanced(data):
        cls = "warn" if grade == WARN else "ok"
        text = (
            "Unexplained, above a warn limit: a reviewer signs it off"
            if grade == WARN
            else "Clean: unexplained within the materiality tolerance"
        )
    elif not data.validation:
        cls, text = "warn", "Balanced, not validated"
    else:
        cls, text = "ok", "Clean: balanced and validated"
    return f'<p><span class="badge {cls}" id="verdict">{_e(text)}</span></p>'


def _balance_badge(data: ReportData) -> str:
    if _balanced(data):
        # the books balance; green only when the date is clean (`_verdict`)
        cls = "plain" if _failed_critical(data) else "ok"
        return f'<span class="badge {cls}" id="balance">BALANCED</span>'
    badge = '<span class="badge bad" id="balance">UNEXPLAINED DIFFERENCES</span>'
    if data.severity is None:
        return badge
    severity, rule = data.severity
    by = "no materiality tolerance rule" if rule == NO_RULE else f"rule {rule}"
    return f'{badge} <span id="severity">severity <b>{_e(severity)}</b> ({_e(by)})</span>'


def _signoff_html(data: ReportData) -> str:
    s = data.signoff
    if not s:
        return '<p id="signoff">Sign-off: <b>pending</b>.</p>'
    reason = f": {_e(s['reason'])}" if s.get("reason") else ""
    decision, rest = decision_words(s)
    decided = f"<b>{_e(decision)}</b> {_e(rest)} at {_e(_fmt_when(s['decided_at']))}{reason}"
    if _older_run(s.get("run_time"), data.run_time):  # this run restates the one signed off
        return (
            '<p id="signoff">Sign-off: <b>pending</b> for this run, which restates run '
            f"{_e(_fmt_when(s['run_time']))} (signed off: {decided}).</p>"
        )
    return f'<p id="signoff">Sign-off: {decided}.</p>'


def _older_run(signed: Any, shown: Any) -> bool:
    """Whether the sign-off names a run before the one the report shows (a timestamp read
    back by Spark is naive UTC; one this process holds, aware)."""
    if not isinstance(signed, datetime) or not isinstance(shown, datetime):
        return False
    return _utc(signed) < _utc(shown)


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _fmt_when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if hasattr(value, "strftime") else str(value)


def _headline_html(data: ReportData) -> str:
    """Streaming vs batch totals, the gap split into explained and unexplained, the window
    counts and the late-event rate."""
    h = data.headline
    lines: tuple[tuple[str, str], ...] = (
        ("Streaming total (provisional)", "stream"),
        ("Batch total (audited)", "batch"),
        ("Gap (batch − streaming)", "gap"),
        ("Explained by late events", "explained"),
        ("Unexplained", "unexplained"),
    )
    if h.get("copies_count"):  # copies of earlier events the stream counted: named apart
        lines = (
            *lines[:3],
            ("Explained: late events less the copies below", "explained"),
            ("Copies of earlier events the stream counted", "copies"),
            lines[4],
        )
    return (
        _table(
            "headline",
            ("", "events", f"amount ({data.currency})"),
            (_headline_row(h, data.currency, *line) for line in lines),
        )
        + f'<p>Windows: <span id="windows">{format_count(h["windows"])}</span>; unexplained '
        f'windows: <span id="unexplained-windows">{format_count(h["unexplained_windows"])}'
        f'</span>; late-event rate: <span id="late-rate">{format_rate(data.late_event_rate)}'
        "</span>"
        + (
            f"; max lateness {format_duration(int(data.max_lateness_ms))}"
            if data.max_lateness_ms is not None
            else ""
        )
        + "</p>"
    )


# -- validation ----------------------------------------------------------------------------------


def _validation_row(r: dict[str, Any]) -> str:
    cls = "ok" if r["success"] else ("bad" if r["severity"] == "critical" else "warn")
    word = "pass" if r["success"] else "FAIL"
    page = r.get("data_docs_page")
    docs = f'<a href="{_e(page)}">Data Docs</a>' if page else ""
    return (
        f"<tr><td>{_e(r['suite'])}</td><td>{_e(r['check_name'])}</td>"
        f'<td>{_e(r["severity"])}</td><td class="{cls}">{word}</td>'
        f"<td>{_e(r['observed_value'])}</td><td>{_e(r.get('description'))}</td>"
        f"<td>{docs}</td></tr>"
    )


def _validation_html(data: ReportData) -> str:
    """The verdict (a failed critical expectation fails it), the Data Docs link and one row
    per expectation; a note when the date was not validated."""
    day = data.business_date.isoformat()
    if not data.validation:
        return (
            '<p class="muted" id="validation-verdict">Not validated: no validation_results '
            f"rows for {day} (run tally validate --date {day}).</p>"
        )
    failed = [r for r in data.validation if not r["success"]]
    crit_failed = [r for r in failed if r["severity"] == "critical"]
    warn_failed = [r for r in failed if r["severity"] != "critical"]
    if crit_failed:
        verdict = '<span class="badge bad" id="validation-verdict">FAILED</span>'
    elif warn_failed:
        verdict = '<span class="badge warn" id="validation-verdict">PASSED WITH WARNINGS</span>'
    else:
        verdict = '<span class="badge ok" id="validation-verdict">PASSED</span>'
    index_link = (
        f'<p>GX Data Docs: <a id="data-docs" href="{_e(data.data_docs_index)}">'
        f"{_e(data.data_docs_index)}</a></p>"
        if data.data_docs_index
        else '<p class="muted">GX Data Docs site not built on this machine.</p>'
    )
    return (
        f"<p>{verdict} {len(data.validation)} expectations, {len(crit_failed)} failed, "
        f"{len(warn_failed)} warning(s).</p>"
        + index_link
        + _table(
            "validation",
            ("suite", "check", "severity", "result", "observed", "expectation", ""),
            (_validation_row(r) for r in data.validation),
        )
    )


# -- tables and notes ----------------------------------------------------------------------------


def _money_of(data: ReportData) -> Callable[[Any], str]:
    """An amount of the report's rows (integer minor units) written in the run's currency."""
    return lambda amount: format_money(int(amount), data.currency)


def _worst_keys_html(data: ReportData) -> str:
    if not data.worst_keys:
        return '<p class="muted">No key has a gap.</p>'
    money = _money_of(data)
    return _table(
        "worst-keys",
        ("key", "gap", "explained", "unexplained", "unexplained windows"),
        (
            f'<tr><td>{_e(k["key"])}</td><td class="num">{money(k["gap_amount"])}'
            f'</td><td class="num">{money(k["explained_amount"])}</td>'
            f'<td class="num">{money(k["unexplained_amount"])}</td>'
            f'<td class="num">{format_count(int(k["unexplained_windows"]))}</td></tr>'
            for k in data.worst_keys
        ),
    )


def _unexplained_html(data: ReportData) -> str:
    """The UNEXPLAINED windows, each linking its records in the desk (the report served by
    the desk at files/report-DATE.html: its window page is ../dates/DATE/windows/START)."""
    if not data.unexplained:
        return '<p class="muted" id="unexplained-windows">No UNEXPLAINED window.</p>'
    rows = []
    for w in data.unexplained:
        page = window_path(data.business_date, w["window_start"], w["key"], w["currency"])
        rows.append(
            f'<tr><td><a class="window-link" href="../{_e(page)}">'
            f"{_e(_fmt_when(w['window_start']))}</a></td><td>{_e(w['key'])}</td>"
            f"<td>{_e(w['currency'])}</td>"
            + "".join(
                f'<td class="num">{format_count(int(w[c] or 0))}</td>'
                for c in ("batch_count", "stream_count", "late_count", "residual_count")
            )
            + f'<td class="num">{_e(format_money(int(w["residual_amount"] or 0), w["currency"]))}'
            "</td></tr>"
        )
    table = _table(
        "unexplained-windows",
        (
            "window",
            "key",
            "currency",
            "batch",
            "stream",
            "late",
            "unexplained",
            "unexplained amount",
        ),
        rows,
    )
    more = ""
    if data.unexplained_total > len(data.unexplained):
        more = (
            f'<p class="muted">{len(data.unexplained):,} of {data.unexplained_total:,} shown, '
            "largest first; every window is in the CSV.</p>"
        )
    return (
        '<p class="muted">Each window opens its records (events, late rows, stream revisions) '
        "in the Reconciliation view of Airflow.</p>" + table + more
    )


def _partitions_html(data: ReportData) -> str:
    if not data.partitions:
        return ""
    bounds = {b["partition"]: describe_bound(b) for b in data.bounds}
    bound_head = ("lateness bound in force",) if bounds else ()
    return _table(
        "partitions",
        ("partition", "events", "late", "late rate", *bound_head),
        (
            f'<tr><td>{_e(p["partition"])}</td><td class="num">{format_count(p["events"])}'
            f'</td><td class="num">{format_count(p["late"])}</td>'
            f'<td class="num">{format_rate(p["rate"])}</td>'
            + (f"<td>{_e(bounds.get(p['partition'], '—'))}</td>" if bounds else "")
            + "</tr>"
            for p in data.partitions
        ),
    )


def _copy_money(copy: dict[str, Any], amount: str, currency: str, default: str) -> str:
    """A copy's amount in its own currency (a copy and its first arrival may name different
    ones; rows from before currencies: the run's)."""
    value = copy.get(amount)
    return "" if value is None else format_money(int(value), copy.get(currency) or default)


def _copies_html(data: ReportData) -> str:
    """The evidence of EXPLAINED_BY_COPIES: each copy the stream counted (its window, key,
    event time, arrival) beside its event_id's first arrival, the one the batch counts."""
    count = data.headline.get("copies_count", 0)
    if not count:
        return ""
    shown = len(data.copies)
    more = (
        f" The first {shown:,} of {count:,}; all of them: "
        "<code>tally show reconciliation_copies</code>."
        if shown < count
        else ""
    )
    return (
        "<h2>Copies of earlier events the stream counted</h2>"
        '<p class="muted">Lines whose event_id first arrived earlier (often under another '
        "date), counted again by the stream beyond its dedup horizon; the batch counts each "
        f"id once, by its first arrival (EXPLAINED_BY_COPIES).{more}</p>"
        + _table(
            "copies",
            (
                "window",
                "key",
                "event_id",
                "amount",
                "event time",
                "arrived",
                "first date",
                "first key",
                "first amount",
                "first arrived",
            ),
            (
                f"<tr><td>{_e(_fmt_when(c['window_start']))}</td><td>{_e(c['key'])}</td>"
                f'<td>{_e(c["event_id"])}</td><td class="num">'
                f"{_copy_money(c, 'amount', 'currency', data.currency)}"
                f"</td><td>{_e(_fmt_when(c['event_time']))}</td>"
                f"<td>{_e(_fmt_when(c['ingest_time']))}</td><td>{_e(c['first_event_date'])}</td>"
                f'<td>{_e(c["first_key"])}</td><td class="num">'
                f"{_copy_money(c, 'first_amount', 'first_currency', data.currency)}</td>"
                f"<td>{_e(_fmt_when(c['first_ingest_time']))}</td></tr>"
                for c in data.copies
            ),
        )
    )


def _curve_note(data: ReportData) -> str:
    return (
        f"Curve: {_e(data.curve_source)}. Current bound: "
        f'<span id="current-bound">{_e(_dur(data.current_bound_ms))}</span>; recommended: '
        f'<span id="recommended-bound">{_e(_dur(data.recommended_bound_ms))}</span>'
        + (
            f" (smallest bound reaching {data.completeness_target:g} % completeness)"
            if data.completeness_target is not None
            else ""
        )
        + "."
    )


def _settings_html(data: ReportData) -> str:
    if not data.settings:
        return '<p class="muted">No settings recorded.</p>'
    return _key_value_table("settings", sorted(data.settings.items()))


# -- the page ------------------------------------------------------------------------------------


def _in_currency(data: ReportData, figures: CurrencyFigures) -> ReportData:
    """The report as one currency's part of it shows it."""
    return dataclasses.replace(
        data,
        currency=figures.currency,
        headline=figures.headline,
        per_window=figures.per_window,
        worst_keys=figures.worst_keys,
        late_event_rate=figures.late_event_rate,
        max_lateness_ms=figures.max_lateness_ms,
    )


def _per_currency(data: ReportData, part: Callable[[ReportData], str]) -> str:
    """`part` of the report; for a date in several currencies, one a currency under its code,
    its elements' ids suffixed with it (`headline-JPY`): amounts of two currencies are never
    added, nor drawn on one axis."""
    if len(data.by_currency) <= 1:
        return part(data)
    return "".join(
        f'<h3 id="in-{c.currency}">In {_e(c.currency)}</h3>'
        + re.sub(r'id="([^"]+)"', rf'id="\1-{c.currency}"', part(_in_currency(data, c)))
        for c in data.by_currency
    )


def _currency_note(data: ReportData) -> str:
    """Which currency the amounts are in, and its decimals (each currency's, for several)."""
    codes = [c.currency for c in data.by_currency] or [data.currency]
    if len(codes) == 1:
        return (
            f'amounts in <span id="currency">{_e(codes[0])}</span>, '
            f"{minor_digits(codes[0])} decimals"
        )
    each = ", ".join(f"{_e(c)} ({minor_digits(c)} decimals)" for c in codes)
    return f'amounts in <span id="currency">{each}</span>, each in its own part'


def _windows_chart(data: ReportData) -> str:
    return _img("streaming vs batch per window", chart_per_window(data), "chart-windows")


def _worst_keys_part(data: ReportData) -> str:
    chart = _img("worst keys by gap", chart_worst_keys(data), "chart-worst-keys")
    return chart + _worst_keys_html(data)


def render_html(data: ReportData, csv_name: str) -> str:
    day = data.business_date.isoformat()
    provenance = _key_value_table(
        "provenance", ((k, v) for k, v in data.provenance.items() if v is not None)
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>tally reconciliation report {day}</title>
<style>{_CSS}</style></head>
<body>
<h1>Reconciliation report: <span id="business-date">{day}</span></h1>
<p class="muted">Business date in {_e(data.report_timezone)}; {_currency_note(data)} (the rows
keep integer minor units). Rows: <a href="{_e(csv_name)}">{_e(csv_name)}</a>.</p>
<h2>Headline</h2>
{_verdict(data)}
<p>{_balance_badge(data)}</p>
{_signoff_html(data)}
{_per_currency(data, _headline_html)}
{_copies_html(data)}
<h2>Unexplained windows</h2>
{_unexplained_html(data)}
<h2>Streaming vs batch per window</h2>
{_per_currency(data, _windows_chart)}
<h2>Late events by lateness</h2>
{_img("late events by lateness", chart_lateness(data), "chart-lateness")}
<h2>Latency / completeness</h2>
{_img("latency/completeness curve", chart_curve(data), "chart-curve")}
<p>{_curve_note(data)}</p>
<h2>Worst keys by gap</h2>
{_per_currency(data, _worst_keys_part)}
<h2>Late-event rate per source partition</h2>
{_img("late-event rate per source partition", chart_partitions(data), "chart-partitions")}
{_partitions_html(data)}
<h2>Validation</h2>
{_validation_html(data)}
<h2>Provenance</h2>
{provenance}
<h3>Settings in force</h3>
{_settings_html(data)}
</body></html>
"""
