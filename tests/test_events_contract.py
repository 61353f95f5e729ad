"""The event contract (tally/events.py parse_events) against docs/semantics.md, one row a case.

All cases go through Spark together (one module-scoped parse); each case is its own test id,
so a failure names the line. The reference model's validation is checked against the same
table (pure Python), so the model and the job are held to one hand-written expectation.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import pytest
import reference_model as M

NOW_ISO = "2026-11-21T09:42:17.125Z"
NOW_MS = 1_795_254_137_125  # 2026-11-21T09:42:17.125Z


def line(**fields: Any) -> str:
    base: dict[str, Any] = {
        "event_id": "e-1",
        "key": "merchant-42",
        "amount": 12550,
        "event_time": NOW_ISO,
        "partition": 3,
    }
    for name, value in fields.items():
        if value is DROP:
            base.pop(name)
        else:
            base[name] = value
    return json.dumps(base)


DROP = object()


class Bad(NamedTuple):
    why: str
    raw: str
    reason: str


class Good(NamedTuple):
    why: str
    raw: str
    event_id: str
    key: str
    amount: int
    event_time_ms: int
    partition: int
    extra: dict[str, str]
    currency: str = "USD"  # the parser's default_currency when the event names none


QUARANTINED = [
    Bad("empty line", "", "empty_line"),
    Bad("spaces only", "    ", "empty_line"),
    Bad("blank with a tab (still blank)", " \t ", "empty_line"),
    Bad("truncated object", line()[:40], "invalid_json"),
    Bad("array", "[1,2]", "invalid_json"),
    Bad("number", "42", "invalid_json"),
    Bad("JSON null", "null", "invalid_json"),
    Bad("JSON string", '"event"', "invalid_json"),
    Bad("single-quoted pseudo-JSON is not JSON", line().replace('"', "'"), "invalid_json"),
    Bad("trailing text after the object", line() + " trailing", "invalid_json"),
    # Jackson's root parse stops after the first value; the contract is one object a line.
    Bad("a stray closing brace after the object", line() + "}", "invalid_json"),
    Bad("a second object on the line", line() + ' {"x":1}', "invalid_json"),
    Bad("NaN is no JSON number", line().replace("12550", "NaN"), "invalid_json"),
    Bad("a byte-order mark before the object", "\ufeff" + line(), "invalid_json"),
    # Which amount counts? Neither: the line is refused whole, before any field rule.
    Bad("amount named twice", line()[:-1] + ', "amount": 1}', "duplicate_field"),
    Bad("an unknown field named twice", line()[:-1] + ', "x": "a", "x": "b"}', "duplicate_field"),
    Bad("a duplicate beats a missing id", '{"key": "k", "key": "k"}', "duplicate_field"),
    Bad("event_id missing", line(event_id=DROP), "missing_event_id"),
    Bad("event_id blank", line(event_id="   "), "missing_event_id"),
    Bad("event_id a tab (blank is any ASCII whitespace)", line(event_id="\t"), "missing_event_id"),
    Bad("key missing", line(key=DROP), "missing_key"),
    Bad("key empty", line(key=""), "missing_key"),
    Bad("amount missing", line(amount=DROP), "missing_amount"),
    Bad("amount 12.5", line(amount=12.5), "amount_not_integer"),
    Bad("amount 1e3", line().replace("12550", "1e3"), "amount_not_integer"),
    Bad(
        "amount 125.0 (a float, though integral)",
        line().replace("12550", "125.0"),
        "amount_not_integer",
    ),
    Bad('amount "125" (quoted)', line(amount="125"), "amount_not_integer"),
    Bad("amount true", line(amount=True), "amount_not_integer"),
    Bad("amount 2^63 does not fit 64 bits", line(amount=2**63), "amount_not_integer"),
    Bad("event_time missing", line(event_time=DROP), "missing_event_time"),
    Bad("event_time without a zone", line(event_time="2026-11-21T09:42:17.125"), "bad_event_time"),
    Bad("event_time garbage", line(event_time="yesterday"), "bad_event_time"),
    Bad(
        "event_time zone without colon",
        line(event_time="2026-11-21T15:12:17+0530"),
        "bad_event_time",
    ),
    Bad("event_time zone hours only", line(event_time="2026-11-21T15:12:17+05"), "bad_event_time"),
    Bad(
        "event_time out of range fields", line(event_time="2026-13-45T25:61:00Z"), "bad_event_time"
    ),
    Bad("event_time 30 February", line(event_time="2026-02-30T00:00:00Z"), "bad_event_time"),
    Bad("event_time a float", line(event_time=1.5e12), "bad_event_time"),
    Bad("event_time a quoted number", line(event_time="1795254137125"), "bad_event_time"),
    Bad("event_time true", line(event_time=True), "bad_event_time"),
    # Spark's timestamp_millis overflows far before 2^63 ms: the range is checked first.
    Bad("event_time epoch ms near 2^63", line(event_time=2**63 - 1), "bad_event_time"),
    Bad("event_time epoch ms in year 10000", line(event_time=253402300800000), "bad_event_time"),
    Bad("event_time epoch ms before year 1", line(event_time=-62135596800001), "bad_event_time"),
    Bad(
        "event_time ISO that is year 10000 in UTC",
        line(event_time="9999-12-31T23:00:00-05:00"),
        "bad_event_time",
    ),
    Bad('partition "3" (quoted)', line(partition="3"), "partition_not_integer"),
    Bad("partition 1.5", line(partition=1.5), "partition_not_integer"),
    # The first matching reason wins, in the documented order.
    Bad("no id and no key: the id is reported", line(event_id=DROP, key=DROP), "missing_event_id"),
    Bad(
        "no key and a float amount: the key is reported", line(key=DROP, amount=1.5), "missing_key"
    ),
    Bad(
        "float amount and bad time: the amount is reported",
        line(amount=1.5, event_time="nope"),
        "amount_not_integer",
    ),
    Bad(
        "no event_time and bad partition: the time is reported",
        line(event_time=DROP, partition="x"),
        "missing_event_time",
    ),
    Bad(
        "bad time and bad partition: the time is reported",
        line(event_time="nope", partition="x"),
        "bad_event_time",
    ),
    # currency: a current ISO 4217 code (CLDR's list, tally.money), exactly, or nothing
    Bad("currency in lower case", line(currency="usd"), "bad_currency"),
    Bad("a withdrawn currency (Deutsche Mark)", line(currency="DEM"), "bad_currency"),
    Bad("XXX: the code for no currency", line(currency="XXX"), "bad_currency"),
    Bad("an empty currency", line(currency=""), "bad_currency"),
    Bad("the currency's number, not its code", line(currency=978), "bad_currency"),
    Bad("currency as an object", line(currency={"code": "EUR"}), "bad_currency"),
    Bad(
        "bad partition and bad currency: the partition is reported",
        line(partition="x", currency="usd"),
        "partition_not_integer",
    ),
]

VALID = [
    Good("the contract's example", line(), "e-1", "merchant-42", 12550, NOW_MS, 3, {}),
    Good(
        "yen: the amount in yen, no minor unit",
        line(currency="JPY"),
        "e-1",
        "merchant-42",
        12550,
        NOW_MS,
        3,
        {},
        "JPY",
    ),
    Good(
        "Bahraini dinar",
        line(currency="BHD"),
        "e-1",
        "merchant-42",
        12550,
        NOW_MS,
        3,
        {},
        "BHD",
    ),
    Good(
        "currency null: the default",
        line(currency=None),
        "e-1",
        "merchant-42",
        12550,
        NOW_MS,
        3,
        {},
    ),
    Good("epoch milliseconds", line(event_time=NOW_MS), "e-1", "merchant-42", 12550, NOW_MS, 3, {}),
    Good(
        "+05:30 offset is the same instant",
        line(event_time="2026-11-21T15:12:17.125+05:30"),
        "e-1",
        "merchant-42",
        12550,
        NOW_MS,
        3,
        {},
    ),
    Good(
        "-03:00 offset",
        line(event_time="2026-11-21T06:42:17.125-03:00"),
        "e-1",
        "merchant-42",
        12550,
        NOW_MS,
        3,
        {},
    ),
    Good(
        "no fraction of a second",
        line(event_time="2026-11-21T09:42:17Z"),
        "e-1",
        "merchant-42",
        12550,
        NOW_MS - 125,
        3,
        {},
    ),
    Good(
        "ISO-8601 without seconds (hh:mm) and a zone",
        line(event_time="2026-11-21T09:42Z"),
        "e-1",
        "merchant-42",
        12550,
        NOW_MS - 17_125,
        3,
        {},
    ),
    Good("pre-1970 epoch ms", line(event_time=-1), "e-1", "merchant-42", 12550, -1, 3, {}),
    # The contract's range ends are events.
    Good(
        "the last ms of year 9999",
        line(event_time=253402300799999),
        "e-1",
        "merchant-42",
        12550,
        253402300799999,
        3,
        {},
    ),
    Good(
        "the first ms of year 1",
        line(event_time="0001-01-01T00:00:00Z"),
        "e-1",
        "merchant-42",
        12550,
        -62135596800000,
        3,
        {},
    ),
    Good(
        "missing partition means 0",
        line(partition=DROP),
        "e-1",
        "merchant-42",
        12550,
        NOW_MS,
        0,
        {},
    ),
    Good(
        "unknown fields are kept in extra",
        line(region="eu-west", device="pos"),
        "e-1",
        "merchant-42",
        12550,
        NOW_MS,
        3,
        {"region": "eu-west", "device": "pos"},
    ),
    Good(
        "negative amount (a refund)", line(amount=-2500), "e-1", "merchant-42", -2500, NOW_MS, 3, {}
    ),
    Good(
        "largest 64-bit amount",
        line(amount=2**63 - 1),
        "e-1",
        "merchant-42",
        2**63 - 1,
        NOW_MS,
        3,
        {},
    ),
    Good("amount 0", line(amount=0), "e-1", "merchant-42", 0, NOW_MS, 3, {}),
    Good(
        "unknown fields of any type: their compact JSON text, null as null",
        line(n=1.5, flag=True, nested={"a": [1, 2]}, gone=None),
        "e-1",
        "merchant-42",
        12550,
        NOW_MS,
        3,
        {"n": "1.5", "flag": "true", "nested": '{"a":[1,2]}', "gone": None},  # type: ignore[dict-item]
    ),
    Good(
        "whitespace around the object",
        "  " + line() + " \t",
        "e-1",
        "merchant-42",
        12550,
        NOW_MS,
        3,
        {},
    ),
    Good(
        "a numeric event_id is its text",
        line(event_id=17),
        "17",
        "merchant-42",
        12550,
        NOW_MS,
        3,
        {},
    ),
    Good(
        "a space instead of T, partition null means 0",
        line(event_time="2026-11-21 09:42:17.125Z", partition=None),
        "e-1",
        "merchant-42",
        12550,
        NOW_MS,
        0,
        {},
    ),
    Good(
        "fields in another order",
        json.dumps(
            {"partition": 1, "event_time": NOW_ISO, "amount": 5, "key": "k", "event_id": "x"}
        ),
        "x",
        "k",
        5,
        NOW_MS,
        1,
        {},
    ),
]

ALL_LINES = [c.raw for c in QUARANTINED] + [c.raw for c in VALID]


@pytest.fixture(scope="module")
def parsed(spark) -> dict[str, Any]:
    """parse_events over every case at once; rows keyed by source_line (1-based)."""
    from pyspark.sql import functions as F

    from tally.events import parse_events

    raw = spark.createDataFrame(
        [(text, "cases.jsonl", i + 1) for i, text in enumerate(ALL_LINES)],
        "raw_line STRING, source_file STRING, source_line BIGINT",
    )
    out = parse_events(raw)
    valid = out.valid.select(
        "source_line",
        "source_file",
        "event_id",
        "key",
        "amount",
        F.unix_millis("event_time").alias("event_time_ms"),
        "partition",
        "extra",
        "currency",
    ).collect()
    quarantine = out.quarantine.select("source_line", "source_file", "raw_line", "reason")
    return {
        "valid": {r["source_line"]: r for r in valid},
        "quarantine": {r["source_line"]: r for r in quarantine.collect()},
        "columns": (out.valid.columns, out.quarantine.columns),
    }


def _outcome(parsed: dict[str, Any], number: int) -> str:
    if number in parsed["valid"]:
        return "valid"
    if number in parsed["quarantine"]:
        return parsed["quarantine"][number]["reason"]
    return "missing"


@pytest.mark.parametrize(
    "number,case", list(enumerate(QUARANTINED, start=1)), ids=[c.why for c in QUARANTINED]
)
def test_quarantine_reason(parsed: dict[str, Any], number: int, case: Bad) -> None:
    assert _outcome(parsed, number) == case.reason
    row = parsed["quarantine"][number]
    assert (row["raw_line"], row["source_file"]) == (case.raw, "cases.jsonl")


@pytest.mark.parametrize(
    "number,case", list(enumerate(VALID, start=len(QUARANTINED) + 1)), ids=[c.why for c in VALID]
)
def test_valid_event(parsed: dict[str, Any], number: int, case: Good) -> None:
    assert _outcome(parsed, number) == "valid"
    row = parsed["valid"][number]
    assert (row["event_id"], row["key"], row["amount"], row["event_time_ms"], row["partition"]) == (
        case.event_id,
        case.key,
        case.amount,
        case.event_time_ms,
        case.partition,
    )
    assert dict(row["extra"] or {}) == case.extra
    assert row["currency"] == case.currency
    assert row["source_file"] == "cases.jsonl"


def test_every_reason_is_covered() -> None:
    assert {c.reason for c in QUARANTINED} == set(M.REASONS)


def test_valid_plus_quarantine_is_the_input(parsed: dict[str, Any]) -> None:
    valid, quarantine = set(parsed["valid"]), set(parsed["quarantine"])
    assert not valid & quarantine
    assert len(parsed["valid"]) + len(parsed["quarantine"]) == len(ALL_LINES)
    assert valid | quarantine == set(range(1, len(ALL_LINES) + 1))


def test_provenance_columns_are_carried(parsed: dict[str, Any]) -> None:
    valid_columns, quarantine_columns = parsed["columns"]
    assert {"source_file", "source_line"} <= set(valid_columns)
    assert {"raw_line", "reason", "source_file", "source_line"} <= set(quarantine_columns)


ALL_CASES: list[Bad | Good] = [*QUARANTINED, *VALID]


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.why for c in ALL_CASES])
def test_reference_model_agrees_with_the_table(case: Bad | Good) -> None:
    event, reason = M.parse_line(case.raw)
    if isinstance(case, Bad):
        assert (event, reason) == (None, case.reason)
    else:
        assert reason is None and event is not None
        assert (
            event.event_id,
            event.key,
            event.amount,
            event.event_time_ms,
            event.partition,
            dict(event.extra),
            event.currency,
        ) == (
            case.event_id,
            case.key,
            case.amount,
            case.event_time_ms,
            case.partition,
            case.extra,
            case.currency,
        )
