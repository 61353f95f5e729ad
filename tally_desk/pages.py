"""The desk's HTML: the ledger and the date page. Server-rendered, no script (the content
security policy allows none); every value escaped. Links are relative to the app's prefix."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any
from urllib.parse import urlencode

from tally.ledger import (
    COPY_COLUMNS,
    STATUS_LABELS,
    STATUSES,
    TOTALS,
    LedgerQuery,
    change_text,
    decision_words,
)
from tally.money import format_amounts, format_money
from tally.open_items import BUCKETS
from tally.window_evidence import KIND_COLUMNS, KINDS

_CSS = """
body{font:14px system-ui,sans-serif;margin:16px;color:#1a1a1a}
table{border-collapse:collapse;margin:8px 0}th,td{border:1px solid #ccc;padding:3px 8px}
th{background:#f2f2f2;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
.s-balanced{color:#196c2e}.s-explained_by_late{color:#7a5b00}.s-explained_by_copies{color:#7a5b00}.s-unexplained{color:#b00020}.s-unexplained_warn{color:#b35900}.s-within_tolerance{color:#7a5b00}.s-reopened{color:#8a2be2}
.s-validation_failed{color:#b00020}.s-not_run{color:#666}.err{color:#b00020}
form{margin:8px 0}nav a{margin-right:12px}pre{background:#f7f7f7;padding:8px;overflow:auto}
iframe{width:100%;height:900px;border:1px solid #ccc}
"""


def _e(value: Any) -> str:
    return escape("" if value is None else str(value))


def _num(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4%}"
    return f"{value:,}" if isinstance(value, int) else _e(value)


def _when(value: Any) -> str:
    """An ISO time from the API as a reader reads it: `2026-11-26 04:49:28 UTC`."""
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    if moment.tzinfo is None:  # the API's times are UTC; a naive one is shown as it is
        return str(value)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# Columns of the date page's tables that hold times (shown by `_when`).
_TIME_COLUMNS = frozenset(
    {
        "last_run",
        "decided_at",
        "alert_time",
        "event_time",
        "ingest_time",
        "emit_time",
        "watermark_at_emit",
        "stream_window_start",
        "stream_window_end",
    }
)


def _is_amount(column: str) -> bool:
    return column == "amount" or column.endswith("_amount")


def _cell(column: str, value: Any, currency: str | None = None) -> str:
    """A table cell: times by `_when`, an amount in `currency` (integer minor units written
    by `tally.money.format_money`; minor units as they are without one), other numbers
    right-aligned by `_num`."""
    if value is None:
        return "<td></td>"
    if column in _TIME_COLUMNS:
        return f"<td>{_e(_when(value))}</td>"
    if currency and _is_amount(column) and isinstance(value, int) and not isinstance(value, bool):
        return f'<td class="n">{_e(format_money(value, currency))}</td>'
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f'<td class="n">{_num(value)}</td>'
    return f"<td>{_e(value)}</td>"


def page(title: str, body: str) -> str:
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>{body}</body></html>"
    )


def signoff_text(signoff: Mapping[str, Any] | None) -> str:
    if not signoff:
        return "pending"
    decision, rest = decision_words(signoff)
    text = f"{decision} {rest} at {_when(signoff.get('decided_at'))}"
    text = f"{text}: {signoff['reason']}" if signoff.get("reason") else text
    if signoff.get("superseded"):  # the date was re-run after it (a restatement)
        return f"awaiting sign-off of the new run (the earlier run: {text})"
    return text


def _filters(query: LedgerQuery) -> str:
    options = "".join(
        f'<option value="{s}"{" selected" if query.status == s else ""}>{STATUS_LABELS[s]}</option>'
        for s in STATUSES
    )
    return (
        '<form method="get" action="ledger">'
        f'<label>status <select name="status"><option value="">any</option>{options}</select>'
        "</label> "
        f'<label>from <input type="date" name="date_from" value="{_e(query.date_from)}"></label> '
        f'<label>to <input type="date" name="date_to" value="{_e(query.date_to)}"></label> '
        '<label>open for at least <input type="number" min="0" name="older_than" '
        f'value="{_e(query.older_than)}" size="4"> days</label> '
        f'<input type="hidden" name="page_size" value="{query.page_size}">'
        '<button type="submit">filter</button></form>'
    )


def _pager(query: LedgerQuery, total: int) -> str:
    pages = max(1, -(-total // query.page_size))
    links = []
    for label, number in (("newer", query.page - 1), ("older", query.page + 1)):
        if 1 <= number <= pages:
            params = {
                "status": query.status or "",
                "date_from": query.date_from.isoformat() if query.date_from else "",
                "date_to": query.date_to.isoformat() if query.date_to else "",
                "older_than": "" if query.older_than is None else query.older_than,
                "page": number,
                "page_size": query.page_size,
            }
            links.append(f'<a href="ledger?{_e(urlencode(params))}">{label}</a>')
    return f"<p>page {query.page} of {pages} ({total} dates) {' '.join(links)}</p>"


def _in_each_currency(row: Mapping[str, Any], column: str) -> str | None:
    """A date's amount in each of its currencies ("$1.00 and ¥100"), when it has several (the
    ledger row's own amount is then None: two currencies are never added)."""
    several = row.get("by_currency") or []
    if row.get(column) is not None or len(several) < 2 or not _is_amount(column):
        return None
    return format_amounts(several, column, str(row.get("currency")))


def _ledger_cell(column: str, row: Mapping[str, Any]) -> str:
    each = _in_each_currency(row, column)
    if each is not None:
        return f'<td class="n">{_e(each)}</td>'
    if row[column] is None:
        return '<td class="n"></td>'
    return _cell(column, row[column], row.get("currency"))


def open_item_text(item: Mapping[str, Any] | None) -> str:
    """A date's open item in words: "open 3 days (awaiting_approval; owner: ben)", or how it
    closed."""
    if not item:
        return ""
    if item["status"] != "open":
        by = f" by {item['resolved_by']}" if item.get("resolved_by") else ""
        return f"{item['status']}{by} after {item['age_days']} day(s)"
    return f"open {item['age_days']} day(s) ({item['kind']}; owner: {item.get('owner')})"


def _aging(counts: Mapping[str, int]) -> str:
    """Open items per aging bucket, each a link to the ledger of those open that long."""
    if not counts:
        return ""
    lows = {label: low for label, low, _ in BUCKETS}
    parts = [
        f'<a class="bucket" href="ledger?older_than={lows[label]}">{_e(label)} days: {n:,}</a>'
        for label, n in counts.items()
    ]
    total = sum(counts.values())
    return f'<p id="aging">Open items: {total:,} ({" · ".join(parts)})</p>'


def ledger_page(result: Mapping[str, Any], query: LedgerQuery) -> str:
    head = (
        "<tr><th>business date</th><th>status</th><th>stream events</th><th>stream amount</th>"
        "<th>batch events</th><th>batch amount</th><th>gap amount</th>"
        "<th>unexplained amount</th><th>late-event rate</th><th>last run</th>"
        "<th>sign-off</th><th>open item</th></tr>"
    )
    rows = []
    for r in result["dates"]:
        day = _e(r["business_date"])
        signoff = signoff_text(r["signoff"]) if r["status"] != "not_run" else ""
        rows.append(
            f'<tr data-date="{day}"><td><a href="dates/{day}">{day}</a></td>'
            f'<td class="s-{_e(r["status"])}">{_e(STATUS_LABELS[r["status"]])}</td>'
            + "".join(
                _ledger_cell(c, r)
                for c in (
                    "stream_count",
                    "stream_amount",
                    "batch_count",
                    "batch_amount",
                    "gap_amount",
                    "unexplained_amount",
                    "late_event_rate",
                )
            )
            + f"<td>{_e(_when(r['last_run'])) if r['last_run'] else ''}</td>"
            f'<td class="signoff">{_e(signoff)}</td>'
            f'<td class="open-item">{_e(open_item_text(r.get("open_item")))}</td></tr>'
        )
    table = f'<table id="ledger">{head}{"".join(rows)}</table>' if rows else "<p>No dates.</p>"
    body = (
        "<h1>Reconciliation</h1>"
        "<p>Business dates, newest first. Amounts in each date's currency.</p>"
        f"{_aging(result.get('aging') or {})}"
        f"{_filters(query)}{table}{_pager(query, result['total'])}"
    )
    return page("tally reconciliation", body)


# What the date page calls the figures it shows (a person reads words, not column names).
FIGURE_LABELS = {
    "currency": "currency",
    "stream_count": "stream events",
    "stream_amount": "stream amount",
    "batch_count": "batch events",
    "batch_amount": "batch amount",
    "gap_count": "gap events",
    "gap_amount": "gap amount",
    "late_count": "late events",
    "late_amount": "late amount",
    "copies_count": "copies the stream counted",
    "copies_amount": "copies' amount",
    "residual_count": "unexplained events",
    "residual_amount": "unexplained amount",
    "unexplained_windows": "unexplained windows",
    "unexplained_amount": "unexplained amount",
    "late_event_rate": "late-event rate",
    "last_run": "last run",
    "run_time": "run time",
    "events_version": "events version (pinned)",
    "stream_aggregates_version": "stream_aggregates version (pinned)",
    "late_events_version": "late_events version (pinned)",
    "window_ms": "window",
    "report_timezone": "report time zone",
}


def _kv_table(values: Mapping[str, Any], ident: str, currency: str | None = None) -> str:
    rows = "".join(
        f"<tr><th>{_e(FIGURE_LABELS.get(k, k))}</th>{_cell(k, v, currency)}</tr>"
        for k, v in values.items()
    )
    return f'<table id="{ident}">{rows}</table>'


def _failed_checks(checks: Sequence[Mapping[str, Any]]) -> str:
    """The date's failed expectations, critical first, each with what it observed and its
    Data Docs page (`docs_page`: a path the desk serves; none when it does not)."""
    if not checks:
        return '<p id="failed-checks">None failed.</p>'
    items = "".join(
        f'<li class="{"s-unexplained" if c["severity"] == "critical" else "s-unexplained_warn"}">'
        f"<b>{_e(c['suite'])}/{_e(c['check_name'])}</b> ({_e(c['severity'])}): "
        f"{_e(c.get('description'))} Observed: {_e(c.get('observed_value'))}"
        + (f' — <a href="../{_e(c["docs_page"])}">Data Docs</a>' if c.get("docs_page") else "")
        + "</li>"
        for c in checks
    )
    return f'<ul id="failed-checks">{items}</ul>'


def _provenance_html(provenance: Mapping[str, Any]) -> str:
    """The run's pins and windowing as a table, its settings as one, the raw JSON behind a
    toggle."""
    if not provenance:
        return '<p id="provenance">No reconciliation run.</p>'
    pins = {k: v for k, v in provenance.items() if k != "settings"}
    if isinstance(pins.get("window_ms"), int):
        pins["window_ms"] = f"{pins['window_ms']:,} ms"
    settings = provenance.get("settings")
    settings_html = (
        _kv_table({k: json.dumps(v) for k, v in sorted(settings.items())}, "settings")
        if isinstance(settings, Mapping)
        else f"<p>{_e(settings)}</p>"
    )
    raw = json.dumps(provenance, indent=2, sort_keys=True)
    return (
        f'<div id="provenance">{_kv_table(pins, "pins")}<h3>Settings in force</h3>'
        f"{settings_html}<details><summary>raw JSON</summary>"
        f'<pre id="provenance-json">{_e(raw)}</pre></details></div>'
    )


def _currency_of(column: str, row: Mapping[str, Any], default: str | None) -> str | None:
    """The currency of a row's amount: the row's own (`first_currency` for a copy's first
    arrival), else `default` (rows from before currencies: the date's)."""
    own = row.get("first_currency") if column.startswith("first_") else row.get("currency")
    return own or default


def _rows_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    ident: str,
    currency: str | None = None,
) -> str:
    if not rows:
        return f'<p id="{ident}">None.</p>'
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join(
        "<tr>"
        + "".join(_cell(c, r.get(c), _currency_of(c, r, currency)) for c in columns)
        + "</tr>"
        for r in rows
    )
    return f'<table id="{ident}"><tr>{head}</tr>{body}</table>'


def date_page(detail: Mapping[str, Any]) -> str:
    day = _e(detail["business_date"])
    row = detail["ledger"]
    files = detail["files"]
    links = ['<a href="../ledger">← ledger</a>']
    if files.get("report"):
        links.append(f'<a id="report-link" href="../{_e(files["report"])}">report</a>')
    if files.get("csv"):
        links.append(f'<a id="csv-link" href="../{_e(files["csv"])}" download>CSV</a>')
    if files.get("data_docs"):
        links.append(f'<a id="data-docs-link" href="../{_e(files["data_docs"])}">Data Docs</a>')
    runs = "".join(
        f'<li><a class="airflow-run" href="{_e(r["url"])}">{_e(r["run_id"])}</a> '
        f"({_e(r['state'])})"
        + (
            f' — <a class="required-action" href="{_e(r["required_action"])}">Required Action</a>'
            if r.get("required_action")
            else ""
        )
        + "</li>"
        for r in detail["airflow_runs"]
    )
    totals = {
        k: _in_each_currency(row, k) or row.get(k)
        for k in (
            "currency",
            *TOTALS,
            "unexplained_windows",
            "unexplained_amount",
            "late_event_rate",
            "last_run",
        )
    }
    signoffs = _rows_table(
        detail["signoffs"],
        ("decided_at", "decision", "decided_by", "reason", "step", "approved_by", "status"),
        "signoffs",
    )
    alerts = _rows_table(
        detail["alerts"], ("alert_time", "severity", "task_id", "what", "observed"), "alerts"
    )
    unexplained = _unexplained_html(detail.get("unexplained_windows"))
    copies = detail.get("copies") or {"rows": 0, "shown": []}
    copies_html = _rows_table(copies["shown"], COPY_COLUMNS, "copies", row.get("currency"))
    if copies["rows"] > len(copies["shown"]):
        copies_html += (
            f'<p id="copies-more">{len(copies["shown"]):,} of {copies["rows"]:,} shown '
            "(all of them: <code>tally show reconciliation_copies</code>).</p>"
        )
    body = (
        f"<nav>{' '.join(links)}</nav><h1>Reconciliation {day}</h1>"
        f'<p>status: <b id="status" class="s-{_e(row["status"])}">'
        f"{_e(STATUS_LABELS[row['status']])}</b> · sign-off: "
        f'<span id="signoff">{_e(signoff_text(row["signoff"]))}</span>'
        + (
            f' · open item: <span id="open-item">{_e(open_item_text(row["open_item"]))}</span>'
            if row.get("open_item")
            else ""
        )
        + "</p>"
        f"{_reopened_text(row.get('reopened'), row.get('currency'))}"
        "<h2>What failed</h2>"
        f"{_failed_checks(detail.get('failed_checks') or [])}"
        "<h2>Figures</h2>"
        f"{_kv_table(totals, 'totals', row.get('currency'))}"
        '<h2>Airflow runs</h2><ul id="airflow-runs">'
        f"{runs or '<li>none found</li>'}</ul>"
        f"<h2>Unexplained windows</h2>{unexplained}"
        f"<h2>Sign-offs</h2>{signoffs}<h2>Alerts</h2>{alerts}"
        "<h2>Copies of earlier events the stream counted</h2>"
        f"{copies_html}"
        f"<h2>Provenance</h2>{_provenance_html(detail['provenance'])}"
    )
    return page(f"tally {detail['business_date']}", body)


_UNEXPLAINED_COLUMNS = ("batch_count", "stream_count", "late_count", "residual_count")


def _unexplained_html(found: Mapping[str, Any] | None) -> str:
    """The date's UNEXPLAINED windows, largest residual first, each linking its records."""
    if not found or not found["shown"]:
        return '<p id="unexplained-windows">None.</p>'
    head = "".join(
        f"<th>{_e(FIGURE_LABELS.get(c, c))}</th>"
        for c in ("window", "key", "currency", *_UNEXPLAINED_COLUMNS, "residual_amount")
    )
    body = "".join(
        f'<tr><td><a class="window-link" href="../{_e(w["page"])}">'
        f"{_e(_when(w['window_start']))}</a></td><td>{_e(w['key'])}</td>"
        f"<td>{_e(w['currency'])}</td>"
        + "".join(_cell(c, w.get(c)) for c in _UNEXPLAINED_COLUMNS)
        + _cell("residual_amount", w.get("residual_amount"), w["currency"] or None)
        + "</tr>"
        for w in found["shown"]
    )
    more = ""
    if found["rows"] > len(found["shown"]):
        more = (
            f'<p id="unexplained-more">{len(found["shown"]):,} of {found["rows"]:,} shown '
            "(largest residual first; all of them in the report and the CSV).</p>"
        )
    return f'<table id="unexplained-windows"><tr>{head}</tr>{body}</table>{more}'


# What the window page says when it has no records to show, by `evidence` state.
_EVIDENCE_STATES = {
    "no_evidence_needed": "This window has no unexplained gap ({status}): the nightly keeps "
    "records only for UNEXPLAINED windows. Its figures are in the report.",
    "not_recorded": "No records were kept for this window (a run from before evidence): "
    "re-run the date to keep them.",
}
# The window page's words for each kind of record.
_KIND_TITLES = {
    "event": "Events (first arrivals in the pinned log)",
    "late": "Late side-output rows",
    "revision": "Stream revisions (stream_aggregates)",
}


def _kind_nav(found: Mapping[str, Any], base: str) -> str:
    parts = []
    for kind in KINDS:
        totals = found["kinds"][kind]
        label = f"{_KIND_TITLES[kind]}: {totals['total']:,}"
        if kind == found["kind"]:
            parts.append(f"<b>{_e(label)}</b>")
        else:
            parts.append(f'<a class="kind-link" href="{_e(base)}&amp;kind={kind}">{_e(label)}</a>')
    return f'<p id="kinds">{" · ".join(parts)}</p>'


def _evidence_pager(found: Mapping[str, Any], base: str) -> str:
    stored = found["kinds"][found["kind"]]["stored"]
    first = (found["page"] - 1) * found["page_size"] + 1
    last = min(stored, first + found["page_size"] - 1)
    links = []
    query = f"&amp;kind={found['kind']}&amp;page_size={found['page_size']}"
    if found["page"] > 1:
        links.append(f'<a id="prev" href="{_e(base)}{query}&amp;page={found["page"] - 1}">prev</a>')
    if last < stored:
        links.append(f'<a id="next" href="{_e(base)}{query}&amp;page={found["page"] + 1}">next</a>')
    shown = f"rows {first:,}–{last:,} of {stored:,} kept" if stored else "none kept"
    total = found["kinds"][found["kind"]]["total"]
    cap = ""
    if total > stored:
        cap = f" (the window has {total:,}; the nightly keeps at most evidence_rows)"
    return f'<p id="pager">{shown}{cap} {" ".join(links)}</p>'


def window_page(found: Mapping[str, Any]) -> str:
    """A window's page: its figures, then its records of one kind, a page at a time."""
    up = "../../../"  # the page is at dates/DAY/windows/START
    links = found["links"]
    nav = [f'<a href="{up}{_e(links["date"])}">← {_e(found["business_date"])}</a>']
    if links.get("report"):
        nav.append(f'<a id="report-link" href="{up}{_e(links["report"])}">report</a>')
    nav.append(f'<a id="evidence-csv" href="{up}{_e(links["csv"])}" download>CSV</a>')
    title = f"{found['window_start']} {found['key']} {found['currency']}"
    figures = _kv_table(found["figures"], "figures", found["currency"])
    head = (
        f"<nav>{' '.join(nav)}</nav><h1>Window {_e(title)}</h1>"
        f'<p>status: <b id="window-status">{_e(found["status"])}</b>'
        f" · severity: {_e(found.get('severity'))} · ends {_e(_when(found['window_end']))}</p>"
        f"{figures}"
    )
    state = found["evidence"]
    if state != "recorded":
        text = _EVIDENCE_STATES[state].format(status=found["status"])
        return page(f"tally {title}", f'{head}<p id="evidence-state">{_e(text)}</p>')
    never = found["kinds"]["event"]["never_counted"]
    base = links["csv"].replace("/evidence.csv", "", 1)
    rows = _rows_table(found["rows"], KIND_COLUMNS[found["kind"]], "evidence", found["currency"])
    body = (
        f'{head}<p id="never-counted" class="s-unexplained">{never:,} first arrival(s) the '
        "stream never counted (neither in its answer nor in the late side output): listed "
        "first among the events.</p>"
        f"{_kind_nav(found, up + base)}<h2>{_e(_KIND_TITLES[found['kind']])}</h2>"
        f"{_evidence_pager(found, up + base)}{rows}"
    )
    return page(f"tally {title}", body)


def _reopened_text(change: dict[str, Any] | None, currency: str | None) -> str:
    """What a reopened date gained after its run (the stream's count until checked)."""
    if not change:
        return ""
    what = change_text(change, currency)
    if change.get("verified"):
        where = f" in {change['windows']:,} windows" if change.get("windows") is not None else ""
        text = f"Changed after its run: {what}{where} (checked; re-run the date to settle it)."
    else:
        text = (
            f"Changed after its run: the stream committed {what} for it since "
            "(not checked yet: tally restatements, or the next check, says exactly)."
        )
    return f'<p id="reopened" class="s-reopened">{_e(text)}</p>'


def message_page(title: str, text: str) -> str:
    return page(title, f'<h1>{_e(title)}</h1><p class="err">{_e(text)}</p>')
