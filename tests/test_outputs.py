"""Payload text in outputs people open (tally.outputs): the CSV cell, the one-line alert, the
Slack text and the chart label, one row per case."""

from __future__ import annotations

import csv
import io
from decimal import Decimal
from typing import Any

import pytest

from expectations.report_charts import literal_label
from tally.alert import Alert
from tally.outputs import csv_safe_cell, one_line, slack_text


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        ('=HYPERLINK("http://x")', '\'=HYPERLINK("http://x")'),  # a formula
        ("+1", "'+1"),  # a spreadsheet evaluates a leading +
        ("-2+3", "'-2+3"),  # ... and a leading -
        ("@SUM(A1)", "'@SUM(A1)"),  # Lotus-style @ formulas
        ("\tx", "'\tx"),  # OWASP: tab can start a formula after import
        ("\rx", "'\rx"),  # OWASP: carriage return too
        ("-5", "'-5"),  # a key that looks like a number is still text
        ("k-1", "k-1"),  # a sign inside the text is harmless
        ("k1", "k1"),  # ordinary keys are untouched
        ("", ""),  # empty text is empty
        ("'=1", "'=1"),  # already starting with a quote: nothing to do
        (-5, -5),  # numbers stay numbers, negative ones too
        (0, 0),
        (2**63 - 1, 2**63 - 1),  # big minor-unit amounts stay exact ints
        (Decimal("-1.50"), Decimal("-1.50")),
        (None, None),  # the caller decides how to write a missing value
    ],
)
def test_csv_safe_cell(value: Any, cell: Any) -> None:
    assert csv_safe_cell(value) == cell
    assert type(csv_safe_cell(value)) is type(cell)


def test_csv_cells_round_trip_quoted_text_and_bare_numbers() -> None:
    """With QUOTE_NONNUMERIC (how expectations.report writes): text quoted, numbers bare."""
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_NONNUMERIC).writerow(
        [csv_safe_cell(v) for v in ("=1+2", -5, "k\r\n1")]
    )
    assert out.getvalue() == '"\'=1+2",-5,"k\r\n1"\r\n'
    assert next(csv.reader(io.StringIO(out.getvalue()))) == ["'=1+2", "-5", "k\r\n1"]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("k1", "k1"),  # printable text is untouched
        ("a\nb", "a\\nb"),  # a line break would fake a second alert line
        ("a\r\nb", "a\\r\\nb"),
        ("a\tb", "a\\tb"),  # tabs too
        ("a\x1b[31mb", "a\\x1b[31mb"),  # terminal escape codes in logs
        ("\u2028x", "\\u2028x"),  # the Unicode line separator
        ("é ü 日本", "é ü 日本"),  # non-ASCII printable text stays
    ],
)
def test_one_line(text: str, line: str) -> None:
    assert one_line(text) == line


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("<!channel>", "&lt;!channel&gt;"),  # a channel broadcast
        ("<@U123>", "&lt;@U123&gt;"),  # a user mention
        ("<http://x|click>", "&lt;http://x|click&gt;"),  # a disguised link
        ("a & b", "a &amp; b"),  # & first, so escapes are not double-read
        ("&lt;", "&amp;lt;"),  # a pre-escaped text stays literal
        ("@here now", "@\u2060here now"),  # a bare broadcast word is broken
        ("@Channel", "@\u2060Channel"),  # ... in any case
        ("@everyone", "@\u2060everyone"),
        ("me@herewego.com", "me@herewego.com"),  # not a broadcast word
        ("k@x", "k@x"),  # an @ elsewhere stays
    ],
)
def test_slack_text(text: str, shown: str) -> None:
    assert slack_text(text) == shown


def test_alert_message_is_one_line_with_a_hostile_key() -> None:
    alert = Alert("gap on key <!channel>\n[ERROR] fake", "1", "0")
    assert "\n" not in alert.message() and "\\n[ERROR] fake" in alert.message()


@pytest.mark.parametrize(
    ("key", "label"),
    [
        ("k1", "k1"),  # no dollar: unchanged
        ("$x^$", r"\$x^\$"),  # would be (broken) mathtext
        ("$5", r"\$5"),  # a lone dollar
        (r"\$x$", r"\\$x\$"),  # an escaped dollar stays a backslash and a dollar
        ("a\tb\r", "a\\tb\\r"),  # no glyph for control characters: shown as escapes
    ],
)
def test_literal_label(key: str, label: str) -> None:
    assert literal_label(key) == label
