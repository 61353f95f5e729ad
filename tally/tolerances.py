"""Materiality tolerances (issue 41): rules that grade an unexplained residual `ok`, `warn` or
`fail` instead of failing every one. Pure: parsing and validating the rules, choosing the rule
of a (key, currency), grading one window or one date, and the rules' canonical JSON (what a run
records, so `--reproduce` grades with the same rules). The reconciliation grades with their
Column twins (`tally.tolerance_columns`). The rules are stated in docs/semantics.md,
"Materiality tolerances".

A rule, in the settings file:

    [[tolerance]]
    name = "small merchants"            # optional: "rule N" (its position, from 1)
    key = "merchant-1*"                 # fnmatch glob on the event key, case-sensitive
    currency = "USD"                    # optional: "*" (any currency)
    window = { warn_abs = 100, fail_abs = 1000, warn_pct = 0.5, fail_pct = 2.0 }
    date = { warn_abs = 500, fail_abs = 5000, warn_count = 1, fail_count = 5 }

`*_abs` are minor units of the row's currency, `*_pct` percent of the batch amount (0.5 is
0.5 %), `*_count` events. Every limit is optional; an absent one is no limit of that kind.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from fnmatch import fnmatchcase
from fractions import Fraction
from typing import Any, NamedTuple

from tally.money import CurrencyError, check_currency

OK, WARN, FAIL = "ok", "warn", "fail"
SEVERITIES = (OK, WARN, FAIL)  # in rising order: the worse one wins
SCOPES = ("window", "date")
ANY_CURRENCY = "*"
# The rule recorded for a residual no rule matched (no rule may take this name).
NO_RULE = "none"
LEVELS = ("warn", "fail")
_RULE_FIELDS = ("name", "key", "currency", *SCOPES)


class ToleranceError(ValueError):
    """A malformed rule: one line naming the rule and the field (tally.settings turns it into a
    SettingsError; this module cannot import settings, which imports it)."""


@dataclass(frozen=True)
class Limits:
    """One scope's limits: `*_abs` minor units, `*_pct` percent of the batch amount, `*_count`
    events; None is no limit of that kind at that level."""

    warn_abs: int | None = None
    fail_abs: int | None = None
    warn_pct: float | None = None
    fail_pct: float | None = None
    warn_count: int | None = None
    fail_count: int | None = None

    def at(self, level: str) -> tuple[int | None, float | None, int | None]:
        """(abs, pct, count) of the level `warn` or `fail`."""
        if level == "warn":
            return self.warn_abs, self.warn_pct, self.warn_count
        return self.fail_abs, self.fail_pct, self.fail_count


_LIMIT_FIELDS = tuple(f.name for f in fields(Limits))


@dataclass(frozen=True)
class ToleranceRule:
    """Which residuals a rule governs (`key` glob, `currency` or `*`) and its limits for the
    residual of one window and of one date."""

    name: str
    key: str
    currency: str = ANY_CURRENCY
    window: Limits = Limits()
    date: Limits = Limits()

    def matches(self, key: str, currency: str) -> bool:
        return fnmatchcase(key, self.key) and self.currency in (ANY_CURRENCY, currency)

    def limits(self, scope: str) -> Limits:
        if scope not in SCOPES:
            raise ValueError(f"scope: expected one of {', '.join(SCOPES)}, got {scope!r}")
        return self.window if scope == "window" else self.date


class Verdict(NamedTuple):
    """A residual's severity and the name of the rule that decided it (NO_RULE: none did)."""

    severity: str
    rule: str


# -- choosing and grading ---------------------------------------------------------------------


def rule_for(rules: Sequence[ToleranceRule], key: str, currency: str) -> ToleranceRule | None:
    """The first rule matching the key and the currency; None when none does."""
    return next((r for r in rules if r.matches(key, currency)), None)


def severity(
    rule: ToleranceRule | None,
    scope: str,
    residual_amount: int,
    residual_count: int,
    batch_amount: int,
) -> Verdict:
    """Grade one window's or one date's unexplained residual (signed minor units and events;
    their absolute values are compared) against the rule's limits for `scope`. A level is
    reached when any of its limits is strictly exceeded; `fail` is checked before `warn`. A
    zero residual is `ok`; with no rule any other residual is `fail` (tally before tolerances)."""
    if scope not in SCOPES:
        raise ValueError(f"scope: expected one of {', '.join(SCOPES)}, got {scope!r}")
    limits = rule.limits(scope) if rule is not None else None
    name = NO_RULE if rule is None else rule.name
    if residual_amount == 0 and residual_count == 0:
        return Verdict(OK, name)
    if limits is None:
        return Verdict(FAIL, name)
    for level, graded in (("fail", FAIL), ("warn", WARN)):
        if _exceeds(limits.at(level), residual_amount, residual_count, batch_amount):
            return Verdict(graded, name)
    return Verdict(OK, name)


def _exceeds(
    level: tuple[int | None, float | None, int | None], amount: int, count: int, batch: int
) -> bool:
    """Whether any limit of the level is strictly exceeded. The percentage is compared exactly
    (the limit as the decimal it is written as): |amount| · 100 / |batch| > pct; a nonzero
    amount against a zero batch amount exceeds every pct limit."""
    abs_limit, pct_limit, count_limit = level
    if abs_limit is not None and abs(amount) > abs_limit:
        return True
    if count_limit is not None and abs(count) > count_limit:
        return True
    if pct_limit is None or amount == 0:
        return False
    return batch == 0 or Fraction(100 * abs(amount), abs(batch)) > Fraction(repr(pct_limit))


class WindowResidual(NamedTuple):
    """One reconciliation row of a date, in one currency, as the date's grading reads it."""

    key: str
    residual_amount: int  # unexplained, signed minor units
    residual_count: int  # unexplained, signed events
    batch_amount: int


def date_verdict(
    rules: Sequence[ToleranceRule], currency: str, windows: Iterable[WindowResidual]
) -> Verdict:
    """Grade a (date, currency): its windows are grouped by their rule (`rule_for`; the windows
    no rule matches form one group graded with no rule); a group's residual is the sum of its
    windows' |amount| and |count| (residuals of opposite sign do not cancel), its batch amount
    the sum of their batch amounts; the date gets the worst group's verdict, ties going to the
    group of the earlier rule (the no-rule group last). A date with no windows is ok."""
    sums: dict[int, list[int]] = {}  # rule position (len(rules): no rule) -> the group's sums
    for w in windows:
        at = next((i for i, r in enumerate(rules) if r.matches(w.key, currency)), len(rules))
        group = sums.setdefault(at, [0, 0, 0])
        group[0] += abs(w.residual_amount)
        group[1] += abs(w.residual_count)
        group[2] += w.batch_amount
    verdicts = [
        severity(rules[at] if at < len(rules) else None, "date", *sums[at]) for at in sorted(sums)
    ]
    # max keeps the first of equals: the earlier rule's group
    return max(verdicts, key=lambda v: SEVERITIES.index(v.severity), default=Verdict(OK, NO_RULE))


def date_severity(
    rules: Sequence[ToleranceRule], currency: str, windows: Iterable[WindowResidual]
) -> Verdict:
    """The severity a (date, currency)'s sign-off follows: the worse of its date-scope verdict
    (`date_verdict`) and its worst window's (`rule_for` + `severity`, scope `window`); a tie
    goes to the date-scope verdict, among windows to the earlier rule (no rule last)."""
    windows = list(windows)
    at = {r.name: i for i, r in enumerate(rules)}

    def rank(verdict: Verdict, is_date: bool) -> tuple[int, bool, int]:
        return SEVERITIES.index(verdict.severity), is_date, -at.get(verdict.rule, len(rules))

    graded = [
        severity(
            rule_for(rules, w.key, currency),
            "window",
            w.residual_amount,
            w.residual_count,
            w.batch_amount,
        )
        for w in windows
    ]
    candidates = [(rank(v, False), v) for v in graded]
    verdict = date_verdict(rules, currency, windows)
    return max([(rank(verdict, True), verdict), *candidates], key=lambda c: c[0])[1]


# -- parsing and the canonical form -----------------------------------------------------------


def parse_rules(raw: object) -> tuple[ToleranceRule, ...]:
    """The rules of the settings' `tolerance` (a list of tables, as TOML's `[[tolerance]]` or
    JSON gives them), validated; ToleranceError, one line naming rule and field, otherwise."""
    if not isinstance(raw, list | tuple):
        raise ToleranceError(
            f"tolerance: expected an array of tables [[tolerance]] (or a JSON array), got {raw!r}"
        )
    rules = tuple(_parse_rule(i, table) for i, table in enumerate(raw, start=1))
    seen: set[str] = set()
    for i, rule in enumerate(rules, start=1):
        if rule.name in seen:
            raise ToleranceError(f"tolerance: {_which(i, rule.name)}: name: given to two rules")
        seen.add(rule.name)
    return rules


def _which(position: int, name: object) -> str:
    default = f"rule {position}"
    return default if name in (None, default) else f"{default} ({name!r})"


def _parse_rule(position: int, table: object) -> ToleranceRule:
    if not isinstance(table, Mapping):
        raise ToleranceError(f"tolerance: rule {position}: expected a table, got {table!r}")
    where = f"tolerance: {_which(position, table.get('name'))}"
    unknown = sorted(str(k) for k in table if k not in _RULE_FIELDS)
    if unknown:
        raise ToleranceError(
            f"{where}: {unknown[0]}: unknown field (known: {', '.join(_RULE_FIELDS)})"
        )
    name = table.get("name", f"rule {position}")
    if not isinstance(name, str) or not name.strip() or not name.isprintable():
        raise ToleranceError(f"{where}: name: expected one line of text, got {name!r}")
    if name == NO_RULE:
        raise ToleranceError(f"{where}: name: {NO_RULE!r} is reserved (it records no rule)")
    if "key" not in table:
        raise ToleranceError(f"{where}: key: missing (a glob such as 'merchant-*', or '*')")
    key = table["key"]
    problem = _glob_problem(key)
    if problem is not None:
        raise ToleranceError(f"{where}: key: {problem}")
    currency = table.get("currency", ANY_CURRENCY)
    if currency != ANY_CURRENCY:
        try:
            currency = check_currency(currency)
        except CurrencyError as exc:
            raise ToleranceError(f"{where}: {exc} (or '*': any)") from None
    window, date = (_parse_limits(f"{where}: {s}", table.get(s, {})) for s in SCOPES)
    return ToleranceRule(name=name, key=key, currency=currency, window=window, date=date)


def glob_set_end(pattern: str, start: int) -> int:
    """Where the set opened by the `[` at `start` closes (fnmatch's reading: a `!` and then a
    `]` first in the set are part of it); -1: it does not close."""
    j = start + 1
    j += pattern.startswith("!", j)
    j += pattern.startswith("]", j)  # a `]` first in a set is a member
    return pattern.find("]", j)


def glob_set_members(body: str) -> list[tuple[str, str]]:
    """A set's members (its text between `[` and `]`, without a leading `!`) as (first, last)
    ranges: `a-z` is a range unless the `-` is first or last. A reversed range (`z-a`) is
    kept as it is written; the rules refuse it (`_glob_problem`)."""
    members: list[tuple[str, str]] = []
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            members.append((body[i], body[i + 2]))
            i += 3
        else:
            members.append((body[i], body[i]))
            i += 1
    return members


def _glob_problem(pattern: object) -> str | None:
    """Why `pattern` is no glob to match keys with (None: it is one). fnmatch reads a `[` with
    no closing `]` as a literal `[`, and drops a reversed range (`z-a`) with quirks of its own;
    here both are mistakes (a literal `[` is written `[[]`)."""
    if not isinstance(pattern, str):
        return f"expected a glob (text), got {pattern!r}"
    if not pattern:
        return "must not be empty ('*' matches every key)"
    i = 0
    while i < len(pattern):
        if pattern[i] == "[":
            close = glob_set_end(pattern, i)
            if close < 0:
                return f"unbalanced '[' at position {i} in {pattern!r} (a literal '[' is '[[]')"
            body = pattern[i + 1 : close]
            for first, last in glob_set_members(body[1:] if body.startswith("!") else body):
                if first > last:
                    return f"reversed range '{first}-{last}' in {pattern!r}"
            i = close
        i += 1
    return None


def _parse_limits(where: str, table: object) -> Limits:
    if not isinstance(table, Mapping):
        raise ToleranceError(f"{where}: expected a table of limits, got {table!r}")
    unknown = sorted(str(k) for k in table if k not in _LIMIT_FIELDS)
    if unknown:
        raise ToleranceError(
            f"{where}.{unknown[0]}: unknown limit (known: {', '.join(_LIMIT_FIELDS)})"
        )
    values: dict[str, Any] = {
        name: _limit(f"{where}.{name}", name, value) for name, value in table.items()
    }
    limits = Limits(**values)
    for kind in ("abs", "pct", "count"):
        warn, fail = getattr(limits, f"warn_{kind}"), getattr(limits, f"fail_{kind}")
        if warn is not None and fail is not None and warn > fail:
            raise ToleranceError(
                f"{where}.warn_{kind}: above fail_{kind} ({warn} > {fail}); warn must not exceed "
                "fail"
            )
    return limits


def _limit(where: str, name: str, value: object) -> int | float:
    """A limit as its kind holds it: integer minor units or events; a finite percentage
    (float; -0.0 read as 0.0 so the canonical text is one). Never negative; a bool is no
    number."""
    if name.endswith("_pct"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ToleranceError(f"{where}: expected a percentage (a number), got {value!r}")
        if not math.isfinite(value):
            raise ToleranceError(f"{where}: expected a finite percentage, got {value!r}")
        number: int | float = float(value) + 0.0
    else:
        if isinstance(value, bool) or not isinstance(value, int):
            unit = "minor units" if name.endswith("_abs") else "events"
            raise ToleranceError(f"{where}: expected an integer ({unit}), got {value!r}")
        number = value
    if number < 0:
        raise ToleranceError(f"{where}: must not be negative, got {value!r}")
    return number


def rules_as_json(rules: Sequence[ToleranceRule]) -> str:
    """The rules' canonical JSON: a list in rule order, each rule with every field (the name
    filled in, `*` for any currency), limits only where given, keys sorted, no blanks. What a
    run records; `rules_from_json` reads it back to the same rules."""
    return json.dumps(
        [
            {
                "name": r.name,
                "key": r.key,
                "currency": r.currency,
                **{s: _limits_as_dict(r.limits(s)) for s in SCOPES},
            }
            for r in rules
        ],
        sort_keys=True,
        separators=(",", ":"),
    )


def _limits_as_dict(limits: Limits) -> dict[str, Any]:
    return {n: getattr(limits, n) for n in _LIMIT_FIELDS if getattr(limits, n) is not None}


def rules_from_json(text: str) -> tuple[ToleranceRule, ...]:
    """Rules from JSON text (the canonical form, or any JSON array of rule objects, as
    TALLY_TOLERANCE may hold); blank text is no rules."""
    if not text.strip():
        return ()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ToleranceError(f"tolerance: not valid JSON: {exc}") from None
    return parse_rules(raw)
