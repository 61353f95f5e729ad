"""Money: which currency codes tally accepts, each currency's minor unit, and how an amount in
minor units is written for a person. One place for these rules (docs/architecture.md); the
data is CLDR's, through Babel, not a table kept by hand.

An amount is always an integer of its currency's minor units (cents, yen, fils). Writing it
never goes through a float: the integer is scaled by a power of ten as a `Decimal`.

Accepted codes are the ISO 4217 alphabetic codes that CLDR lists as in use today in some
territory (legal tender or funds codes such as `CLF`), and the precious metals and other
supranational units CLDR lists there too (`XAU`, `XDR`); not a withdrawn code (`DEM`, `HRK`),
not CLDR's own `CNH` (offshore yuan, not in ISO 4217), and not `XTS` (testing) or `XXX` (no
currency). Minor-unit digits are CLDR's, which follow ISO 4217 except where a currency's minor
unit has fallen out of use (CLDR gives IQD, LBP 0 digits where ISO 4217 keeps 3 and 2).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

# The three upper-case letters of an ISO 4217 alphabetic code.
CODE = re.compile(r"[A-Z]{3}")
# Codes CLDR lists as current that are no currency a ledger can hold.
NOT_MONEY = frozenset({"CNH", "XTS", "XXX"})
# The currency of an amount nothing names one for (the setting `default_currency`'s default):
# the one whose two decimals every amount was written with before tally knew currencies.
DEFAULT_CURRENCY = "USD"
# How amounts are written for a person: the report's and the desk's locale (a comma between
# thousands, a point before the minor unit, the symbol where CLDR has a common one).
LOCALE = "en_US"


class CurrencyError(ValueError):
    """A value that is not a current currency code; its message is one line."""


@functools.cache
def current_currencies() -> frozenset[str]:
    """The currency codes in use today (see the module docstring)."""
    from babel.core import get_global

    territories = get_global("territory_currencies")
    return frozenset(
        code
        for spans in territories.values()
        for code, _start, end, _tender in spans
        if end is None and code not in NOT_MONEY
    )


def check_currency(value: object) -> str:
    """`value` as a currency code, or CurrencyError naming what is wrong with it. Only the
    exact upper-case code is accepted: `usd` is a mistake to report, not to mend."""
    if not isinstance(value, str):
        raise CurrencyError(f"currency: expected a 3-letter ISO 4217 code, got {value!r}")
    if not CODE.fullmatch(value):
        raise CurrencyError(
            f"currency: expected a 3-letter upper-case ISO 4217 code, got {value!r}"
        )
    if value not in current_currencies():
        raise CurrencyError(f"currency: {value!r} is not a current ISO 4217 currency")
    return value


def minor_digits(currency: str) -> int:
    """How many decimal digits the currency's minor unit is: USD 2, JPY 0, BHD 3."""
    from babel.numbers import get_currency_precision

    return int(get_currency_precision(check_currency(currency)))


def major_units(amount_minor: int, currency: str) -> Decimal:
    """An integer amount of minor units as an exact decimal of major units (123456 USD ->
    Decimal('1234.56'), 1234 JPY -> Decimal('1234'))."""
    if not isinstance(amount_minor, int) or isinstance(amount_minor, bool):
        raise TypeError(f"amount: expected integer minor units, got {amount_minor!r}")
    digits = minor_digits(currency)
    return Decimal(amount_minor).scaleb(-digits).quantize(Decimal(1).scaleb(-digits))


def format_money(amount_minor: int, currency: str) -> str:
    """An integer amount of minor units written for a person, exactly, with the currency's
    symbol or code and its own number of decimals: "$1,234.56", "¥1,234", "BHD 1.234",
    "-€0.05"."""
    from babel.numbers import format_currency

    written = format_currency(
        major_units(amount_minor, currency), currency, locale=LOCALE, currency_digits=True
    )
    # CLDR writes a code prefix without a space ("BHD1.234"); people write one.
    code = re.match(r"(-?)([A-Z]{3})(?=\d)", written)
    if code is not None:
        written = f"{code.group(1)}{code.group(2)} {written[code.end() :]}"
    return str(written)


def format_amounts(rows: Iterable[Mapping[str, Any]], column: str, default: str) -> str:
    """One figure of a date's rows, one row per currency, each amount in its own currency
    ("$1.00 and ¥100"; a row naming none: `default`): two currencies are never added."""
    return " and ".join(
        format_money(int(r.get(column) or 0), r.get("currency") or default) for r in rows
    )


def recorded_currency(settings: Mapping[str, Any]) -> str:
    """The currency of a run's amounts: the `default_currency` its recorded settings name; a
    run recorded before tally knew currencies counted in the default's (USD) two decimals."""
    return str(settings.get("default_currency") or DEFAULT_CURRENCY)


def money_prefix(currency: str) -> str:
    """What `format_money` writes before a non-negative amount's digits: "$", "¥", "BHD ".
    The Column twin (`tally.money_columns.money_text`) writes sign, prefix, digits from it."""
    zero = format_money(0, currency)
    return zero[: zero.index("0")]
