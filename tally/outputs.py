"""Payload text in outputs people open: one rule per output kind.

Event keys (and any other payload text) are attacker-controlled. A spreadsheet runs a CSV cell
that starts like a formula; Slack turns `<!channel>`, `<@U123>` and `<http://x|here>` into
mentions and links; a line break in a one-line alert fakes a second alert. So:

* `csv_safe_cell`: a text cell starting with `=`, `+`, `-`, `@`, tab or carriage return gets a
  leading `'` (OWASP's CSV-injection guidance); numbers stay numbers. Write the CSV with
  `csv.QUOTE_NONNUMERIC` so every text cell is also quoted.
* `one_line`: control characters (line breaks, tabs, ...) shown as their escapes.
* `terminal_safe` (a Column, in the JVM): what a terminal grid prints (`tally show`) has each
  control character as its Unicode control picture (ESC as U+241B, a line break as U+240A), so
  a key cannot move the cursor, recolour or retitle the terminal, or fake a row.
* `slack_text`: Slack's three control characters `&`, `<`, `>` escaped, and the bare
  broadcasts `@here`, `@channel`, `@everyone` broken by a word joiner, so a key is shown as text.

The HTML report escapes with `html.escape` (expectations.report_html); GX Data Docs escape
their own values.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the DAG files import this module at parse time: no pyspark there
    from pyspark.sql import Column

CSV_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")

_BROADCAST = re.compile(r"@(?=(?:here|channel|everyone)\b)", re.IGNORECASE)
_WORD_JOINER = "\u2060"


def csv_safe_cell(value: Any) -> Any:
    """The cell to write for `value`: numbers (and None) as they are, text that a spreadsheet
    would read as a formula prefixed with `'`."""
    if isinstance(value, str) and value.startswith(CSV_FORMULA_STARTS):
        return "'" + value
    return value


def one_line(text: str) -> str:
    """`text` with every non-printable character (line breaks, tabs, ...) as its escape."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )


# C0 controls and DEL -> their control pictures; C1 controls (no pictures) -> U+FFFD.
_CONTROLS = "".join(map(chr, [*range(0x20), 0x7F, *range(0x80, 0xA0)]))
_PICTURES = "".join(map(chr, [*range(0x2400, 0x2420), 0x2421])) + "\ufffd" * 0x20


def terminal_safe(text: Column) -> Column:
    """`text` with every control character replaced by a visible one (one per character)."""
    from pyspark.sql import functions as F

    return F.translate(text, _CONTROLS, _PICTURES)


def slack_text(text: str) -> str:
    """`text` as Slack shows it literally: no mention, channel broadcast or link."""
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _BROADCAST.sub("@" + _WORD_JOINER, escaped)
