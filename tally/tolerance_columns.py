"""The Column twins of `tally.tolerances`: choosing a window's rule and grading its residual in
the JVM, one expression over a frame's columns (no Python per row), as `tally.windows` pairs
its arithmetic. Held to the pure functions by tests/test_tolerance_columns.py.

A key glob becomes a Java regular expression (`glob_regex`) with fnmatch's meaning: `*` any
text, `?` one character, `[...]` a set (`[!...]` its complement, `a-z` ranges, a `]` first in the
set a member; the rules refuse a reversed range), every other character itself; each literal
is written as its code point (`\\x{..}`), so no character of a key is read as regex syntax.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from tally.tables import literal_map
from tally.tolerances import (
    ANY_CURRENCY,
    FAIL,
    NO_RULE,
    OK,
    SEVERITIES,
    WARN,
    Limits,
    ToleranceRule,
    glob_set_end,
    glob_set_members,
)

# Wide enough for |amount| * 100 * the pct's denominator (minor units up to 2^63 and a pct of
# a few decimals), exact where a double would round.
_EXACT = "decimal(38,0)"


def _literal(char: str) -> str:
    return f"\\x{{{ord(char):x}}}"


def _set_regex(body: str) -> str:
    negated = body.startswith("!")
    members = glob_set_members(body[1:] if negated else body)
    ranges = "".join(_literal(a) if a == b else f"{_literal(a)}-{_literal(b)}" for a, b in members)
    return f"[{'^' if negated else ''}{ranges}]"


def glob_regex(pattern: str) -> str:
    """A Java regex (Spark's `rlike`, which searches) matching exactly the texts
    `fnmatch.fnmatchcase(text, pattern)` accepts: anchored at both ends, `.` across lines."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        i += 1
        if c == "*":
            if not out or out[-1] != ".*":
                out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            close = glob_set_end(pattern, i - 1)
            if close < 0:
                out.append(_literal(c))  # no set: a literal `[` (fnmatch's reading)
            else:
                out.append(_set_regex(pattern[i:close]))
                i = close + 1
        else:
            out.append(_literal(c))
    return "(?s)^" + "".join(out) + "\\z"


def rule_matches(rule: ToleranceRule, key: Column, currency: Column) -> Column:
    """Whether the rule governs a row of this key and currency (`ToleranceRule.matches`)."""
    matched = key.rlike(glob_regex(rule.key))
    if rule.currency == ANY_CURRENCY:
        return matched
    return matched & (currency == F.lit(rule.currency))


def _exceeds(
    level: tuple[int | None, float | None, int | None], amount: Column, count: Column, batch: Column
) -> Column:
    """Whether any limit of the level is strictly exceeded (`tolerances._exceeds`): the
    percentage compared exactly, |amount| * 100 * q > p * |batch| for the pct p/q as written."""
    abs_limit, pct_limit, count_limit = level
    terms = []
    if abs_limit is not None:
        terms.append(F.abs(amount) > F.lit(abs_limit))
    if count_limit is not None:
        terms.append(F.abs(count) > F.lit(count_limit))
    if pct_limit is not None:
        pct = Fraction(repr(pct_limit))
        scaled = F.abs(amount).cast(_EXACT) * F.lit(100 * pct.denominator).cast(_EXACT)
        over = scaled > F.abs(batch).cast(_EXACT) * F.lit(pct.numerator).cast(_EXACT)
        terms.append((amount != 0) & ((batch == 0) | over))
    exceeded = F.lit(False)
    for term in terms:
        exceeded = exceeded | term
    return exceeded


def _graded(limits: Limits | None, amount: Column, count: Column, batch: Column) -> Column:
    """One rule's severity of a residual (`tolerances.severity` given the rule)."""
    if limits is None:
        return F.lit(FAIL)  # no rule: any residual fails
    return (
        F.when(_exceeds(limits.at("fail"), amount, count, batch), F.lit(FAIL))
        .when(_exceeds(limits.at("warn"), amount, count, batch), F.lit(WARN))
        .otherwise(F.lit(OK))
    )


def window_verdict(
    rules: Sequence[ToleranceRule],
    key: Column,
    currency: Column,
    residual: tuple[Column, Column],
    batch_amount: Column,
    scope: str = "window",
) -> tuple[Column, Column]:
    """(severity, rule name) of each row's residual (amount, count) under its first matching
    rule (`rule_for`, then `severity`): one CASE over the rules, in their order."""
    amount, count = residual
    zero = (amount == 0) & (count == 0)
    severity = F.when(zero, F.lit(OK))
    rule = None
    for r in rules:
        matched = rule_matches(r, key, currency)
        severity = severity.when(matched, _graded(r.limits(scope), amount, count, batch_amount))
        rule = F.when(matched, F.lit(r.name)) if rule is None else rule.when(matched, F.lit(r.name))
    severity = severity.otherwise(_graded(None, amount, count, batch_amount))
    name = F.lit(NO_RULE) if rule is None else rule.otherwise(F.lit(NO_RULE))
    return severity, name


# The columns of a graded window (`reconciliation`) the date's verdict reads.
RULE_COLUMN = "tolerance_rule"
SEVERITY_COLUMN = "severity"


def with_window_verdicts(
    rows: DataFrame, rules: Sequence[ToleranceRule], currency: Column
) -> DataFrame:
    """`reconciliation` rows with each window's `severity` and `tolerance_rule`
    (`window_verdict` of its residual against its batch amount)."""
    severity, rule = window_verdict(
        rules,
        F.col("key"),
        currency,
        (F.col("residual_amount"), F.col("residual_count")),
        F.col("batch_amount"),
    )
    return rows.withColumns({SEVERITY_COLUMN: severity, RULE_COLUMN: rule})


def date_verdicts(
    windows: DataFrame, rules: Sequence[ToleranceRule], by: Sequence[str] = ()
) -> DataFrame:
    """`tolerances.date_severity` of each group (`by`: none, one row for the whole frame) of
    graded windows (`with_window_verdicts`: their `severity`, `tolerance_rule`, residual and
    batch amounts): the worse of the date-scope verdict (`date_verdict`: a rule's windows
    summed as |amount|, |count| and batch amount, graded with its date limits, the worst
    group deciding) and the worst window's, ties to the date scope, then to the earlier rule
    (no rule last). Columns: `by`, `severity`, `tolerance_rule`; no windows: `ok`, no rule."""
    rule = F.col(RULE_COLUMN)
    sums = windows.groupBy(*by, RULE_COLUMN).agg(
        F.sum(F.abs("residual_amount")).alias("_amount"),
        F.sum(F.abs("residual_count")).alias("_count"),
        F.sum("batch_amount").alias("_batch"),
    )
    amount, count, batch = F.col("_amount"), F.col("_count"), F.col("_batch")
    graded = F.when((amount == 0) & (count == 0), F.lit(OK))
    for r in rules:
        graded = graded.when(rule == F.lit(r.name), _graded(r.date, amount, count, batch))
    graded = graded.otherwise(_graded(None, amount, count, batch))
    positions = {r.name: at for at, r in enumerate(rules)}  # no rule: after them all
    position = F.coalesce(literal_map(positions, "string", "int")[rule], F.lit(len(rules)))
    ranks = literal_map(dict(zip(SEVERITIES, range(3), strict=True)), "string", "int")

    def candidate(severity: Column, is_date: bool) -> Column:
        # a struct's max compares field by field: the worst severity, then the date scope,
        # then the earliest rule
        return F.struct(
            ranks[severity].alias("k"),
            F.lit(is_date).alias("d"),
            (-position).alias("p"),
            severity.alias("s"),
            rule.alias("r"),
        ).alias("_c")

    candidates = sums.select(*by, candidate(graded, True)).unionByName(
        windows.select(*by, candidate(F.col(SEVERITY_COLUMN), False))
    )
    return (
        candidates.groupBy(*by)
        .agg(F.max("_c").alias("_w"))
        .select(
            *by,
            F.coalesce(F.col("_w.s"), F.lit(OK)).alias(SEVERITY_COLUMN),
            F.coalesce(F.col("_w.r"), F.lit(NO_RULE)).alias(RULE_COLUMN),
        )
    )
