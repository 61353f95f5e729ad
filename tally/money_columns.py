"""The Column twin of `tally.money.format_money`: amounts written for a person in the JVM, one
expression over a frame's columns (no Python per row), for the CSV's formatted columns. Held
to the pure function by tests/test_money.py.

The text is the sign, the currency's prefix (`money_prefix`: its symbol, or its code and a
space), the whole units grouped by threes with commas, and the minor unit's digits after a
point (none for a currency without one); the arithmetic is decimal, never a float."""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from tally.money import minor_digits, money_prefix
from tally.tables import literal_map

# Wide enough for the magnitude of any 64-bit amount, the most negative included.
_MAGNITUDE = "decimal(20,0)"


def money_text(amount: Column, currency: Column, currencies: Iterable[str]) -> Column:
    """`format_money(amount, currency)` for each row whose currency is one of `currencies`
    (each checked); null where the amount is null or the currency not among them."""
    codes = sorted(set(currencies))
    digits = {c: minor_digits(c) for c in codes}
    prefix = literal_map({c: money_prefix(c) for c in codes}, "string", "string")[currency]
    places = literal_map(digits, "string", "int")[currency]
    scale = literal_map({c: 10**d for c, d in digits.items()}, "string", _MAGNITUDE)[currency]
    magnitude = F.abs(amount.cast(_MAGNITUDE))
    minor = magnitude % scale
    whole = ((magnitude - minor) / scale).cast(_MAGNITUDE)  # exact: a multiple of the scale
    fraction = F.when(
        places > 0, F.concat(F.lit("."), F.lpad(minor.cast("string"), places, "0"))
    ).otherwise(F.lit(""))
    sign = F.when(amount < 0, F.lit("-")).otherwise(F.lit(""))
    return F.when(prefix.isNotNull(), F.concat(sign, prefix, F.format_number(whole, 0), fraction))


def with_currency(rows: DataFrame, default: str) -> DataFrame:
    """`rows` with a `currency` that is never null: rows written before amounts carried one
    (null there, or no such column at the version read) are in `default`, the reading run's
    `default_currency` (docs/tables.md, "Currencies, and a warehouse from before them")."""
    known = F.coalesce(F.col("currency"), F.lit(default)) if "currency" in rows.columns else None
    return rows.withColumn("currency", F.lit(default) if known is None else known)
