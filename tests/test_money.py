"""Currencies, minor units and the written amount (tally/money.py): pure, one row per case;
and its Column twin (tally/money_columns.py) held to it over drawn amounts in one Spark job."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tally.money import (
    CurrencyError,
    check_currency,
    current_currencies,
    format_money,
    major_units,
    minor_digits,
    money_prefix,
)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("USD", None),
        ("JPY", None),
        ("BHD", None),
        ("CLF", None),  # a funds code in use (Chile's unidad de fomento)
        ("XAU", None),  # gold: an ISO 4217 unit CLDR lists
        ("usd", "upper-case"),  # a mistake to report, not to mend
        ("US", "upper-case"),
        ("USDX", "upper-case"),
        (" USD", "upper-case"),
        ("DEM", "not a current"),  # withdrawn (the euro)
        ("HRK", "not a current"),  # withdrawn in 2023
        ("CNH", "not a current"),  # CLDR's offshore yuan, not ISO 4217
        ("XTS", "not a current"),  # ISO's code for testing
        ("XXX", "not a current"),  # ISO's "no currency"
        ("ABC", "not a current"),
        (None, "expected a 3-letter"),
        (840, "expected a 3-letter"),  # ISO's numeric code is not accepted
    ],
)
def test_check_currency(value: object, error: str | None) -> None:
    if error is None:
        assert check_currency(value) == value
    else:
        with pytest.raises(CurrencyError, match=error) as raised:
            check_currency(value)
        assert "\n" not in str(raised.value)


def test_current_currencies_are_codes_and_include_the_majors() -> None:
    codes = current_currencies()
    assert {"USD", "EUR", "JPY", "GBP", "CHF", "BHD", "KWD", "INR", "CNY"} <= codes
    assert all(len(c) == 3 and c.isupper() for c in codes)
    assert 150 < len(codes) < 250  # ~180 today; a data update moves it a little


@pytest.mark.parametrize(
    ("currency", "digits"),
    [
        ("USD", 2),
        ("EUR", 2),
        ("JPY", 0),  # no minor unit in use
        ("KRW", 0),
        ("BHD", 3),  # fils
        ("KWD", 3),
        ("TND", 3),
        ("CLF", 4),
    ],
)
def test_minor_digits(currency: str, digits: int) -> None:
    assert minor_digits(currency) == digits


@pytest.mark.parametrize(
    ("amount", "currency", "major", "written"),
    [
        (123456, "USD", "1234.56", "$1,234.56"),
        (1234, "JPY", "1234", "¥1,234"),  # not 12.34: yen have no minor unit
        (1234, "BHD", "1.234", "BHD 1.234"),  # not 12.34: three decimals
        (-5, "EUR", "-0.05", "-€0.05"),
        (-1234, "BHD", "-1.234", "-BHD 1.234"),
        (0, "KWD", "0.000", "KWD 0.000"),
        (5, "CHF", "0.05", "CHF 0.05"),
        (1234, "GBP", "12.34", "£12.34"),
        # exact far beyond a float's 15-16 digits
        (10**17 + 1, "USD", "1000000000000000.01", "$1,000,000,000,000,000.01"),
    ],
)
def test_major_units_and_format_money(amount: int, currency: str, major: str, written: str):
    assert major_units(amount, currency) == Decimal(major)
    assert str(major_units(amount, currency)) == major
    assert format_money(amount, currency) == written


@pytest.mark.parametrize("amount", [12.34, Decimal("12.34"), "1234", True])
def test_an_amount_is_integer_minor_units(amount: object) -> None:
    with pytest.raises(TypeError, match="integer minor units"):
        format_money(amount, "USD")  # type: ignore[arg-type]


def test_a_bad_currency_is_not_formatted() -> None:
    with pytest.raises(CurrencyError, match="not a current"):
        format_money(100, "DEM")


# -- the Column twin --------------------------------------------------------------------------

TWIN_CURRENCIES = ("USD", "JPY", "BHD", "CLF", "EUR", "CHF", "INR", "ISK")
LONG = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@pytest.mark.parametrize(
    ("currency", "prefix"),
    [
        ("USD", "$"),
        ("JPY", "¥"),
        ("BHD", "BHD "),  # a code is followed by a space, as people write it
        ("CHF", "CHF "),
        ("CAD", "CA$"),
    ],
)
def test_money_prefix(currency: str, prefix: str) -> None:
    assert money_prefix(currency) == prefix


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(
        st.tuples(
            st.one_of(LONG, st.sampled_from([0, -1, 2**63 - 1, -(2**63), 999, -1000])),
            st.sampled_from(TWIN_CURRENCIES),
        ),
        min_size=1,
        max_size=200,
    )
)
def test_money_text_is_format_money(spark, rows: list[tuple[int, str]]) -> None:
    """One Spark job a drawn table: every row's text equals the pure function's."""
    from pyspark.sql import functions as F

    from tally.money_columns import money_text

    frame = spark.createDataFrame(
        [(i, a, c) for i, (a, c) in enumerate(rows)], "i int, amount bigint, currency string"
    )
    text = money_text(F.col("amount"), F.col("currency"), TWIN_CURRENCIES)
    got = {r["i"]: r["text"] for r in frame.select("i", text.alias("text")).collect()}
    assert got == {i: format_money(a, c) for i, (a, c) in enumerate(rows)}


def test_money_text_at_the_edges(spark) -> None:
    """The most negative amount (its magnitude does not fit 64 bits), the largest, a fraction
    alone, zero: each as the pure function writes it, and null outside the currencies."""
    from pyspark.sql import functions as F

    from tally.money_columns import money_text

    rows = [(-(2**63), "CLF"), (2**63 - 1, "JPY"), (-1, "BHD"), (0, "USD"), (5, "EUR")]
    frame = spark.createDataFrame([*rows, (None, "USD")], "amount bigint, currency string")
    column = money_text(F.col("amount"), F.col("currency"), ["CLF", "JPY", "BHD", "USD"])
    texts = [r[0] for r in frame.select(column).collect()]
    assert texts == [*(format_money(a, c) for a, c in rows[:4]), None, None]
