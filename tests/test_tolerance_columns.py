"""The Column twins of the materiality tolerances (tally/tolerance_columns.py) held to the pure
rules (tally/tolerances.py): key globs as Java regexes against fnmatch, and a row's rule and
severity against `rule_for` + `severity`, each over many generated rows in one Spark job."""

from __future__ import annotations

from fnmatch import fnmatchcase

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from tally.tolerance_columns import (
    date_verdicts,
    glob_regex,
    window_verdict,
    with_window_verdicts,
)
from tally.tolerances import (
    ToleranceError,
    WindowResidual,
    date_severity,
    parse_rules,
    rule_for,
    severity,
)

# Characters that are glob or regex syntax, letters, a newline and one beyond ASCII.
KEY_CHARS = "ab-!]^[\\.*?$é\n"
PROPERTY = settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _is_glob(pattern: str) -> bool:
    try:
        parse_rules([{"key": pattern}])
    except ToleranceError:
        return False
    return True


GLOBS = st.text(alphabet=KEY_CHARS, min_size=1, max_size=6).filter(_is_glob)
KEYS = st.text(alphabet=KEY_CHARS, max_size=6)


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        ("merchant-1*", "merchant-12", True),  # a star: any text
        ("merchant-1*", "xmerchant-12", False),  # anchored at the start (rlike searches)
        ("m?", "m7x", False),  # anchored at the end
        ("a.c", "abc", False),  # a dot is itself, not any character
        ("[!a-c]x", "dx", True),  # a complemented range
        ("[]]", "]", True),  # a `]` first in a set is a member
        ("[[]", "[", True),  # a literal `[`
        ("a*", "a\nb", True),  # a star crosses lines, as fnmatch's
        ("é?", "éé", True),  # code points, not bytes
    ],
)
def test_glob_regex_rows(spark, pattern: str, key: str, matches: bool) -> None:
    assert fnmatchcase(key, pattern) is matches  # the row says what fnmatch says
    (row,) = (
        spark.createDataFrame([(key,)], "key string")
        .select(F.col("key").rlike(glob_regex(pattern)).alias("m"))
        .collect()
    )
    assert row["m"] is matches


@PROPERTY
@given(cases=st.lists(st.tuples(GLOBS, KEYS), min_size=1, max_size=200))
def test_glob_regex_matches_what_fnmatch_matches(spark, cases: list[tuple[str, str]]) -> None:
    rows = [(i, glob_regex(p), k) for i, (p, k) in enumerate(cases)]
    frame = spark.createDataFrame(rows, "i int, regex string, key string")
    got = dict(frame.select("i", F.expr("key rlike regex").alias("m")).collect())
    assert got == {i: fnmatchcase(k, p) for i, (p, k) in enumerate(cases)}


LIMIT = st.one_of(st.none(), st.integers(0, 50))
PCT = st.one_of(st.none(), st.sampled_from([0.0, 0.5, 1.0, 2.5, 10.0, 33.3]))


@st.composite
def rules_st(draw: st.DrawFn) -> list[dict[str, object]]:
    rules = []
    for i in range(draw(st.integers(0, 3))):
        warn = {"abs": draw(LIMIT), "pct": draw(PCT), "count": draw(LIMIT)}
        fail = {k: None if v is None else v * 2 for k, v in warn.items()}  # fail >= warn
        window = {
            f"{lvl}_{k}": v for lvl, d in (("warn", warn), ("fail", fail)) for k, v in d.items()
        }
        day = {  # a date's limits: the window's, wider
            k: v if v is None or k.endswith("_pct") else v * 3 for k, v in window.items()
        }
        rules.append(
            {
                "name": f"r{i}",
                "key": draw(st.sampled_from(["*", "m-*", "m-1?", "[!m]*", "x"])),
                "currency": draw(st.sampled_from(["*", "USD", "JPY"])),
                "window": {k: v for k, v in window.items() if v is not None},
                "date": {k: v for k, v in day.items() if v is not None},
            }
        )
    return rules


ROWS = st.lists(
    st.tuples(
        st.sampled_from(["m-1", "m-12", "m-2", "x", "y"]),
        st.sampled_from(["USD", "JPY", "BHD"]),
        st.integers(-120, 120),  # residual amount
        st.integers(-3, 3),  # residual count
        st.integers(-500, 5000),  # batch amount
    ),
    min_size=1,
    max_size=150,
)


@PROPERTY
@given(raw_rules=rules_st(), rows=ROWS)
def test_window_verdict_is_rule_for_then_severity(spark, raw_rules, rows) -> None:
    rules = parse_rules(raw_rules)
    frame = spark.createDataFrame(
        [(i, *r) for i, r in enumerate(rows)],
        "i int, key string, currency string, amount bigint, n bigint, batch bigint",
    )
    graded, rule = window_verdict(
        rules, F.col("key"), F.col("currency"), (F.col("amount"), F.col("n")), F.col("batch")
    )
    got = {
        r["i"]: (r["s"], r["r"])
        for r in frame.select("i", graded.alias("s"), rule.alias("r")).collect()
    }
    expected = {
        i: tuple(severity(rule_for(rules, key, cur), "window", amount, n, batch))
        for i, (key, cur, amount, n, batch) in enumerate(rows)
    }
    assert got == expected


@PROPERTY
@given(raw_rules=rules_st(), rows=ROWS)
def test_date_verdicts_are_date_severity(spark, raw_rules, rows) -> None:
    """Each group (here the row's currency) graded as `date_severity` grades its windows."""
    rules = parse_rules(raw_rules)
    frame = spark.createDataFrame(
        rows,
        "key string, currency string, residual_amount bigint, residual_count bigint, "
        "batch_amount bigint",
    )
    graded = with_window_verdicts(frame, rules, F.col("currency"))
    got = {
        r["currency"]: (r["severity"], r["tolerance_rule"])
        for r in date_verdicts(graded, rules, ["currency"]).collect()
    }
    expected = {
        currency: tuple(
            date_severity(
                rules,
                currency,
                [WindowResidual(k, a, n, b) for k, c, a, n, b in rows if c == currency],
            )
        )
        for currency in {c for _, c, *_ in rows}
    }
    assert got == expected


def test_a_date_with_no_windows_is_ok_under_no_rule(spark) -> None:
    rules = parse_rules([{"key": "*", "date": {"fail_abs": 0}}])
    empty = spark.createDataFrame(
        [], "key string, residual_amount bigint, residual_count bigint, batch_amount bigint"
    )
    graded = with_window_verdicts(empty, rules, F.lit("USD"))
    assert [tuple(r) for r in date_verdicts(graded, rules).collect()] == [
        tuple(date_severity(rules, "USD", []))
    ]
