"""The checks a setting declares beside its help text (`_setting(..., check=positive)` in
`tally.settings`). A check answers a value with None (fine) or one line naming the setting,
and `describe()` states its rule for docs/configuration.md. Pure stdlib."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tally.durations import SettingsError, format_duration


@dataclass(frozen=True)
class Check:
    """A rule on one value: `ok(value)`, else `NAME: ` + `problem` formatted with `value`
    (and `duration`, the value written as a duration)."""

    ok: Callable[[Any], bool]
    problem: str
    rule: str

    def __call__(self, name: str, value: Any) -> str | None:
        if self.ok(value):
            return None
        duration = format_duration(value) if isinstance(value, int) else value
        return f"{name}: {self.problem.format(value=value, duration=duration)}"

    def describe(self) -> str:
        return self.rule


@dataclass(frozen=True)
class Parses:
    """A value a parser accepts: `parse(value, name)` raises a SettingsError naming the
    setting (the parsers of durations, partitions, rules, zones)."""

    parse: Callable[[Any, str], object]
    rule: str

    def __call__(self, name: str, value: Any) -> str | None:
        try:
            self.parse(value, name)
        except SettingsError as exc:
            return str(exc)
        return None

    def describe(self) -> str:
        return self.rule


SettingCheck = Check | Parses


def one_of(choices: tuple[str, ...]) -> Check:
    listed = ", ".join(choices)
    return Check(
        lambda v: v in choices, f"expected one of {listed}, got {{value!r}}", f"one of {listed}"
    )


def not_negative(problem: str = "must not be negative") -> Check:
    return Check(lambda v: v >= 0, f"{problem}, got {{value}}", "0 or more")


def at_least(minimum: int, *, duration: bool = False) -> Check:
    """`minimum` or more; of a duration (milliseconds), written as one."""
    shown = format_duration(minimum) if duration else str(minimum)
    value = "{duration}" if duration else "{value}"
    return Check(lambda v: v >= minimum, f"must be at least {shown}, got {value}", f">= {shown}")


def between(low: int, high: int) -> Check:
    return Check(
        lambda v: low <= v <= high,
        f"must be between {low} and {high}, got {{value}}",
        f"{low} to {high}",
    )


def matches(pattern: str, problem: str, rule: str, *, flags: int = 0, empty: bool = False) -> Check:
    """Text the whole of which matches `pattern` (`empty`: or no text, the setting off)."""
    compiled = re.compile(pattern, flags)
    return Check(
        lambda v: (empty and not v) or compiled.fullmatch(v) is not None,
        f"{problem}, got {{value!r}}",
        f"empty, or {rule}" if empty else rule,
    )


positive = Check(lambda v: v > 0, "must be positive, got {value}", "> 0")
fraction = Check(lambda v: 0 <= v <= 1, "must be a fraction in [0, 1], got {value}", "0 to 1")
percentage = Check(
    lambda v: 0 < v <= 100, "must be a percentage in (0, 100], got {value}", "> 0 and <= 100"
)
not_empty = Check(bool, "must not be empty", "not empty")
cron = Check(
    lambda v: len(v.split()) == 5,
    "expected a cron expression of 5 fields, got {value!r}",
    "a cron expression of 5 fields",
)
