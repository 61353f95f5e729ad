"""Materiality tolerances (tally/tolerances.py): matching, grading, validation, the canonical
JSON and the `tolerance` setting. Pure Python, no Spark."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tally.settings import Settings, SettingsError, load_settings
from tally.tolerances import (
    FAIL,
    NO_RULE,
    OK,
    SEVERITIES,
    WARN,
    Limits,
    ToleranceError,
    ToleranceRule,
    WindowResidual,
    date_severity,
    date_verdict,
    parse_rules,
    rule_for,
    rules_as_json,
    rules_from_json,
    severity,
)

RULES = parse_rules(
    [
        {"name": "usd merchants", "key": "merchant-1*", "currency": "USD"},
        {"name": "any merchant", "key": "merchant-*"},
        {"name": "exact", "key": "m[0-9]"},
    ]
)


@pytest.mark.parametrize(
    ("key", "currency", "rule"),
    [
        ("merchant-12", "USD", "usd merchants"),  # both match: the first rule wins
        ("merchant-12", "EUR", "any merchant"),  # first rule is USD only; the any-currency one
        ("merchant-2", "USD", "any merchant"),  # glob: merchant-1* does not match merchant-2
        ("Merchant-12", "USD", None),  # case-sensitive: no rule
        ("m7", "JPY", "exact"),  # a character set
        ("m77", "JPY", None),  # a set matches one character, the glob the whole key
        ("other", "USD", None),  # nothing matches: no rule
    ],
)
def test_rule_for_takes_the_first_matching_rule(key: str, currency: str, rule: str | None) -> None:
    found = rule_for(RULES, key, currency)
    assert (found.name if found else None) == rule


LIMITED = ToleranceRule(
    name="limited",
    key="*",
    window=Limits(warn_abs=100, fail_abs=1000, warn_pct=0.5, fail_pct=2.0),
    date=Limits(warn_count=1, fail_count=5),
)
WARN_ONLY = ToleranceRule(name="warn only", key="*", window=Limits(warn_abs=10))


@pytest.mark.parametrize(
    ("rule", "scope", "amount", "count", "batch", "expected"),
    [
        # -- a zero residual
        (LIMITED, "window", 0, 0, 1_000_000, OK),  # nothing unexplained: ok
        (None, "window", 0, 0, 1_000_000, OK),  # also with no rule
        # -- no rule: today's behaviour, any residual fails
        (None, "window", 1, 0, 1_000_000, FAIL),  # a minor unit
        (None, "date", 0, 1, 1_000_000, FAIL),  # an event whose amount is zero
        # -- abs, strictly greater (pct kept out of the way by a large batch amount)
        (LIMITED, "window", 100, 0, 10**9, OK),  # at warn_abs: not exceeded
        (LIMITED, "window", 101, 0, 10**9, WARN),  # above warn_abs
        (LIMITED, "window", 1000, 0, 10**9, WARN),  # at fail_abs: still warn
        (LIMITED, "window", 1001, 0, 10**9, FAIL),  # above fail_abs: fail wins over warn
        (LIMITED, "window", -1001, 0, 10**9, FAIL),  # a negative residual: its absolute value
        # -- pct of the batch amount, exact
        (LIMITED, "window", 50, 0, 10_000, OK),  # 0.5 % exactly: not exceeded
        (LIMITED, "window", 51, 0, 10_000, WARN),  # 0.51 % > 0.5 %
        (LIMITED, "window", 99, 0, 4_950, WARN),  # 2.0 % exactly: fail_pct not exceeded
        (LIMITED, "window", 99, 0, 4_949, FAIL),  # 2.0004 % > fail_pct 2.0
        (LIMITED, "window", 60, 0, -10_000, WARN),  # a negative batch amount: its absolute value
        (LIMITED, "window", 1, 0, 0, FAIL),  # zero batch amount: every pct limit is exceeded
        (LIMITED, "window", 0, 3, 0, OK),  # events but no amount: pct not exceeded (no count limit)
        # -- count, the date scope
        (LIMITED, "date", 10**9, 1, 1, OK),  # the date has count limits only: the amount is free
        (LIMITED, "date", 0, 2, 1, WARN),  # above warn_count
        (LIMITED, "date", 0, -6, 1, FAIL),  # a negative count: its absolute value, above fail
        (LIMITED, "date", 0, 5, 1, WARN),  # at fail_count: warn
        # -- a level with no limits is never reached
        (WARN_ONLY, "window", 10**9, 10**6, 0, WARN),  # no fail limit: at worst warn
        (WARN_ONLY, "date", 10**9, 10**6, 0, OK),  # no date limits at all: ok
    ],
)
def test_severity(
    rule: ToleranceRule | None, scope: str, amount: int, count: int, batch: int, expected: str
) -> None:
    verdict = severity(rule, scope, amount, count, batch)
    assert verdict == (expected, NO_RULE if rule is None else rule.name)


def test_severity_refuses_an_unknown_scope() -> None:
    for rule in (LIMITED, None):
        with pytest.raises(ValueError, match="scope"):
            severity(rule, "week", 1, 1, 1)


def _window(key: str, amount: int, count: int = 0, batch: int = 10**9) -> WindowResidual:
    return WindowResidual(key, amount, count, batch)


DATE_RULES = parse_rules(
    [
        {"name": "a", "key": "a*", "date": {"warn_abs": 10, "fail_abs": 100}},
        {"name": "b", "key": "b*", "date": {"warn_abs": 10, "fail_abs": 100}},
    ]
)


@pytest.mark.parametrize(
    ("windows", "expected"),
    [
        ([], (OK, NO_RULE)),  # no windows: nothing unexplained
        ([_window("a1", 0)], (OK, "a")),  # a governed window with nothing unexplained
        ([_window("a1", 6), _window("a2", 5)], (WARN, "a")),  # summed: 11 > 10
        ([_window("a1", 60), _window("a2", -60)], (FAIL, "a")),  # |+60| + |-60|: no netting
        ([_window("a1", 11), _window("b1", 11)], (WARN, "a")),  # a tie: the earlier rule
        ([_window("a1", 11), _window("b1", 101)], (FAIL, "b")),  # the worst group
        ([_window("a1", 11), _window("c1", 1)], (FAIL, NO_RULE)),  # unruled keys fail as before
        ([_window("c1", 0, 0)], (OK, NO_RULE)),  # unruled but nothing unexplained
    ],
)
def test_date_verdict_grades_each_rules_windows_together(
    windows: list[WindowResidual], expected: tuple[str, str]
) -> None:
    assert date_verdict(DATE_RULES, "USD", windows) == expected


SIGN_OFF_RULES = parse_rules(
    [
        {"name": "a", "key": "a*", "window": {"fail_abs": 10}, "date": {"warn_abs": 15}},
        {"name": "b", "key": "b*", "window": {"warn_abs": 5}},  # no date limits: date ok
        {"name": "c", "key": "c*", "window": {"warn_abs": 5}, "date": {"warn_abs": 5}},
    ]
)


@pytest.mark.parametrize(
    ("windows", "expected"),
    [
        ([], (OK, NO_RULE)),  # nothing to grade
        ([_window("a1", 8), _window("a2", 8)], (WARN, "a")),  # each within, summed beyond
        ([_window("a1", 11)], (FAIL, "a")),  # one window beyond: its fail, the date only ok
        ([_window("b1", 6)], (WARN, "b")),  # b's date scope is ok; its window warns
        ([_window("c1", 6)], (WARN, "c")),  # window and date both warn: the date's verdict
        ([_window("c1", 6), _window("b1", 6)], (WARN, "c")),  # the date's warn beats b's
        ([_window("b1", 6), _window("b2", 6), _window("x", 0)], (WARN, "b")),  # x: no residual
        ([_window("b1", 6), _window("x", 1)], (FAIL, NO_RULE)),  # unruled: fails as before
    ],
)
def test_date_severity_is_the_worse_of_the_date_and_its_windows(
    windows: list[WindowResidual], expected: tuple[str, str]
) -> None:
    assert date_severity(SIGN_OFF_RULES, "USD", windows) == expected


def test_date_verdict_pct_is_of_the_groups_batch_amount() -> None:
    rules = parse_rules([{"key": "*", "date": {"fail_pct": 1}}])
    within = [_window("x", 5, batch=600), _window("y", 5, batch=400)]  # 10 of 1000: 1 %
    beyond = [_window("x", 6, batch=600), _window("y", 5, batch=400)]  # 11 of 1000
    assert date_verdict(rules, "EUR", within) == (OK, "rule 1")
    assert date_verdict(rules, "EUR", beyond) == (FAIL, "rule 1")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"key": "*"}, r"^tolerance: expected an array of tables"),  # one table, not a list
        (["x"], r"^tolerance: rule 1: expected a table"),
        ([{}], r"^tolerance: rule 1: key: missing"),
        ([{"key": "a[b"}], r"^tolerance: rule 1: key: unbalanced '\['"),  # bad glob
        ([{"key": "[!]"}], r"^tolerance: rule 1: key: unbalanced '\['"),  # `]` is the set's
        ([{"key": "m[z-a]"}], r"^tolerance: rule 1: key: reversed range 'z-a'"),  # a mistake
        ([{"key": "[!b-a]"}], r"^tolerance: rule 1: key: reversed range 'b-a'"),  # also negated
        ([{"key": ""}], r"^tolerance: rule 1: key: must not be empty"),
        ([{"key": 5}], r"^tolerance: rule 1: key: expected a glob"),
        ([{"key": "*", "currency": "ABC"}], r"^tolerance: rule 1: currency: 'ABC' is not"),
        ([{"key": "*", "currency": "usd"}], r"^tolerance: rule 1: currency: .*upper-case"),
        ([{"key": "*", "curency": "USD"}], r"^tolerance: rule 1: curency: unknown field"),
        ([{"key": "*", "window": {"warn": 1}}], r"^tolerance: rule 1: window\.warn: unknown"),
        ([{"key": "*", "window": 5}], r"^tolerance: rule 1: window: expected a table"),
        ([{"key": "*", "window": {"fail_abs": -1}}], r"window\.fail_abs: must not be negative"),
        ([{"key": "*", "date": {"warn_pct": -0.5}}], r"date\.warn_pct: must not be negative"),
        ([{"key": "*", "date": {"warn_pct": float("nan")}}], r"date\.warn_pct: expected a fin"),
        ([{"key": "*", "date": {"fail_count": True}}], r"date\.fail_count: expected an integer"),
        ([{"key": "*", "date": {"fail_abs": 1.5}}], r"date\.fail_abs: expected an integer"),
        ([{"key": "*", "date": {"fail_pct": "1"}}], r"date\.fail_pct: expected a percentage"),
        (
            [{"key": "*", "window": {"warn_abs": 11, "fail_abs": 10}}],
            r"^tolerance: rule 1: window\.warn_abs: above fail_abs \(11 > 10\)",
        ),
        (
            [
                {"key": "*"},
                {"name": "small", "key": "*", "date": {"warn_count": 2, "fail_count": 1}},
            ],
            r"^tolerance: rule 2 \('small'\): date\.warn_count: above fail_count",
        ),
        ([{"key": "*", "name": ""}], r"^tolerance: rule 1 \(''\): name: expected one line"),
        ([{"key": "*", "name": "a\nb"}], r"name: expected one line"),  # stays one line
        ([{"key": "*", "name": "none"}], r"name: 'none' is reserved"),  # the no-rule marker
        ([{"key": "a"}, {"key": "b", "name": "rule 1"}], r"^tolerance: rule 2 .*: name: given"),
    ],
)
def test_a_malformed_rule_is_one_line_naming_the_field(raw: object, message: str) -> None:
    with pytest.raises(ToleranceError, match=message) as raised:
        parse_rules(raw)
    assert "\n" not in str(raised.value)


def test_the_canonical_json_names_every_rule_and_round_trips() -> None:
    rules = parse_rules(
        [
            {"key": "merchant-1*", "currency": "USD", "window": {"fail_pct": 2, "warn_abs": 1}},
            {"name": "rest", "key": "*", "date": {"warn_pct": -0.0}},
        ]
    )
    text = rules_as_json(rules)
    assert text == (
        '[{"currency":"USD","date":{},"key":"merchant-1*","name":"rule 1",'
        '"window":{"fail_pct":2.0,"warn_abs":1}},'
        '{"currency":"*","date":{"warn_pct":0.0},"key":"*","name":"rest","window":{}}]'
    )
    assert rules_from_json(text) == rules
    assert rules_as_json(rules_from_json(text)) == text
    assert rules_from_json("") == () and rules_as_json(()) == "[]"


_LIMIT = st.one_of(st.none(), st.integers(0, 10**12))
_PCT = st.one_of(st.none(), st.floats(0, 1e6, allow_nan=False, allow_infinity=False))


@st.composite
def _limits(draw: st.DrawFn) -> Limits:
    """Limits with warn <= fail wherever both are given."""
    values: dict[str, int | float | None] = {}
    for kind, strategy in (("abs", _LIMIT), ("pct", _PCT), ("count", _LIMIT)):
        a, b = draw(strategy), draw(strategy)
        if a is not None and b is not None:
            a, b = min(a, b), max(a, b)
        values[f"warn_{kind}"], values[f"fail_{kind}"] = a, b
    return Limits(**values)


_RULE = st.builds(
    ToleranceRule,
    name=st.text(st.characters(categories=("L", "N", "P"), include_characters=" "), min_size=1),
    key=st.sampled_from(["*", "merchant-*", "m[0-9]?", "[[]x]", "ключ-*"]),
    currency=st.sampled_from(["*", "USD", "JPY", "BHD"]),
    window=_limits(),
    date=_limits(),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_RULE, max_size=4, unique_by=lambda r: r.name))
def test_any_valid_rules_round_trip_through_their_json(rules: list[ToleranceRule]) -> None:
    rules = [r for r in rules if r.name.strip() and r.name != NO_RULE]  # names parse refuses
    text = rules_as_json(rules)
    assert rules_from_json(text) == tuple(rules)
    assert rules_as_json(rules_from_json(text)) == text


@settings(max_examples=200, deadline=None)
@given(
    limits=_limits(),
    scope=st.sampled_from(["window", "date"]),
    smaller=st.integers(-(10**13), 10**13),
    larger=st.integers(-(10**13), 10**13),
    count=st.integers(-100, 100),
    batch=st.integers(-(10**13), 10**13),
)
def test_severity_never_falls_as_the_residual_grows(
    limits: Limits, scope: str, smaller: int, larger: int, count: int, batch: int
) -> None:
    """Monotone in |residual amount|, the count and the batch amount held."""
    if abs(smaller) > abs(larger):
        smaller, larger = larger, smaller
    rule = ToleranceRule(name="r", key="*", window=limits, date=limits)
    low = severity(rule, scope, smaller, count, batch).severity
    high = severity(rule, scope, larger, count, batch).severity
    assert SEVERITIES.index(low) <= SEVERITIES.index(high)


# -- the setting ------------------------------------------------------------------------------

RULE_TOML = """
[[tolerance]]
name = "small merchants"
key = "merchant-1*"
currency = "USD"
window = { warn_abs = 100, fail_abs = 1000, warn_pct = 0.5, fail_pct = 2.0 }
date = { warn_count = 1, fail_count = 5 }
"""


@pytest.mark.parametrize(
    "text",
    [
        RULE_TOML,  # at the top level
        '[tally]\nwindow = "2m"\n' + RULE_TOML,  # beside a [tally] table: still tally's
        '[tally]\nwindow = "2m"\n' + RULE_TOML.replace("[[tolerance]]", "[[tally.tolerance]]"),
    ],
)
def test_the_setting_reads_an_array_of_tables(tmp_path: Path, text: str) -> None:
    config = tmp_path / "tally.toml"
    config.write_text(text)
    loaded = load_settings(str(config), env={})
    (rule,) = loaded.tolerance_rules
    assert (rule.name, rule.key, rule.currency) == ("small merchants", "merchant-1*", "USD")
    assert rule.window.fail_pct == 2.0 and rule.date == Limits(warn_count=1, fail_count=5)
    assert loaded.describe()["tolerance"] == rules_as_json(loaded.tolerance_rules)


def test_the_setting_from_the_environment_is_json_and_beats_the_file(tmp_path: Path) -> None:
    config = tmp_path / "tally.toml"
    config.write_text(RULE_TOML)
    env = {"TALLY_TOLERANCE": '[{"key": "*", "date": {"fail_abs": 7}}]'}
    (rule,) = load_settings(str(config), env=env).tolerance_rules
    assert rule == ToleranceRule(name="rule 1", key="*", date=Limits(fail_abs=7))
    assert Settings().tolerance_rules == () and load_settings(env={}).tolerance == "[]"


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        (  # a negative limit in the file
            RULE_TOML.replace("= 100,", "= -100,"),
            {},
            r"^tolerance: rule 1 \('small merchants'\): window\.warn_abs: must not be negative, "
            r"got -100$",
        ),
        # one table, not an array of tables
        ('[tally.tolerance]\nkey = "*"\n', {}, r"^tolerance: expected an array of tables"),
        (  # both places: which one was meant is not guessed
            RULE_TOML + RULE_TOML.replace("[[tolerance]]", "[[tally.tolerance]]"),
            {},
            r"^tolerance: given as \[\[tolerance\]\] and \[\[tally\.tolerance\]\]$",
        ),
        ("", {"TALLY_TOLERANCE": "[{"}, r"^tolerance: not valid JSON"),
        ("", {"TALLY_TOLERANCE": '[{"key": "x", "currency": "XXX"}]'}, r"^tolerance: rule 1: "),
    ],
)
def test_a_bad_tolerance_stops_loading_with_one_line(
    tmp_path: Path, text: str, env: dict[str, str], message: str
) -> None:
    config = tmp_path / "tally.toml"
    config.write_text(text)
    with pytest.raises(SettingsError, match=message) as raised:
        load_settings(str(config), env=env)
    assert "\n" not in str(raised.value)


def test_the_settings_dataclass_checks_the_rules_it_is_given() -> None:
    with pytest.raises(SettingsError, match=r"^tolerance: rule 1: key: unbalanced"):
        Settings(tolerance='[{"key": "["}]')
