"""The lateness curve: a pure-Python reference of the replay rule, held against the Spark job."""

from __future__ import annotations

import json
import os
from datetime import date
from typing import Any

import pytest
from batch_fixtures import append, event, ms, small_delta_snapshots
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from batch.curve import (
    events_from_jsonl,
    events_from_log,
    lateness_curve,
    meets_target,
    recommend,
)
from tally import tables as T
from tally.settings import SettingsError, parse_duration_list
from tally.windows import window_range_ms

pytestmark = pytest.mark.usefixtures(small_delta_snapshots.__name__)

Stream = list[tuple[int, int]]  # (event time ms, amount) in arrival order


def reference_curve(stream: Stream, window_ms: int, lateness: list[int]) -> list[dict[str, Any]]:
    """The rule, one event at a time: watermark = max event time so far (this event
    included) − L; drop iff window end <= watermark; a window (with an admitted event) is
    emitted at the first arrival whose watermark reaches its end, latency = max − end."""
    out = []
    for lat in sorted(set(lateness)):
        high: int | None = None
        dropped = dropped_amount = 0
        open_ends: set[int] = set()
        latencies: list[int] = []
        for t, amount in stream:
            high = t if high is None else max(high, t)
            _, end = window_range_ms(t, window_ms)
            if end <= high - lat:
                dropped += 1
                dropped_amount += amount
            else:
                open_ends.add(end)
            for closed in sorted(e for e in open_ends if e <= high - lat):
                latencies.append(high - closed)
                open_ends.remove(closed)
        total = len(stream)
        out.append(
            {
                "lateness_ms": lat,
                "events": total,
                "admitted": total - dropped,
                "dropped": dropped,
                "dropped_amount": dropped_amount,
                "windows_closed": len(latencies),
                "mean_emit_latency_ms": sum(latencies) / len(latencies) if latencies else None,
                "max_emit_latency_ms": max(latencies) if latencies else None,
            }
        )
    return out


def stream_frame(spark: SparkSession, stream: Stream, base_ms: int = 0) -> DataFrame:
    """Events with arrival_seq = position, built in the JVM."""
    if not stream:
        return spark.range(0).select(
            F.lit(None).cast("timestamp").alias("event_time"),
            F.lit(None).cast("long").alias("amount"),
            F.lit(None).cast("long").alias("arrival_seq"),
        )
    rows = [
        F.struct(
            F.timestamp_millis(F.lit(base_ms + t)).alias("event_time"),
            F.lit(amount).cast("long").alias("amount"),
            F.lit(i + 1).cast("long").alias("arrival_seq"),
        )
        for i, (t, amount) in enumerate(stream)
    ]
    return spark.range(1).select(F.inline(F.array(*rows)))


COMPARED = (
    "lateness_ms",
    "events",
    "admitted",
    "dropped",
    "dropped_amount",
    "windows_closed",
    "mean_emit_latency_ms",
    "max_emit_latency_ms",
)


def comparable(curve: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: e[k] for k in COMPARED} for e in curve]


# Hand-computed: W = 10 s; arrivals (event time s, amount).
HAND: Stream = [
    (1_000, 10),
    (12_000, 20),
    (5_000, 30),
    (25_000, 40),
    (8_000, 50),
    (31_000, 60),
    (19_000, 70),
]
# max so far: 1, 12, 12, 25, 25, 31, 31; window ends: 10, 20, 10, 30, 10, 40, 20
# slack = max − end: −9, −8, 2, −5, 15, −9, 11 (dropped under L iff slack >= L)
HAND_EXPECTED = [
    # L = 0: drops slack 2, 15, 11 (30 + 50 + 70). Ends 10, 20, 30 close at max 12, 25, 31.
    (0, 3, 150, 3, (2_000 + 5_000 + 1_000) / 3, 5_000),
    # L = 5 s: drops slack 15, 11. Thresholds 15, 25 close at 25, 25; 35 and 45 stay open.
    (5_000, 2, 120, 2, (15_000 + 5_000) / 2, 15_000),
    # L = 12 s: drops slack 15. Threshold 22 (end 10) closes at 25; 32, 42, 52 stay open.
    (12_000, 1, 50, 1, 15_000.0, 15_000),
    # L = 20 s: nothing dropped; threshold 30 closes at 31.
    (20_000, 0, 0, 1, 21_000.0, 21_000),
]


@pytest.fixture(scope="module")
def hand_curve(spark) -> list[dict[str, Any]]:
    return lateness_curve(stream_frame(spark, HAND), 10_000, [20_000, 0, 12_000, 5_000, 0], 80.0)


def test_hand_computed_case(hand_curve):
    got = [
        (
            e["lateness_ms"],
            e["dropped"],
            e["dropped_amount"],
            e["windows_closed"],
            e["mean_emit_latency_ms"],
            e["max_emit_latency_ms"],
        )
        for e in hand_curve
    ]
    assert got == HAND_EXPECTED
    assert [e["completeness_pct"] for e in hand_curve] == [
        pytest.approx(100 * 4 / 7),
        pytest.approx(100 * 5 / 7),
        pytest.approx(100 * 6 / 7),
        100.0,
    ]
    assert [e["meets_target"] for e in hand_curve] == [False, False, True, True]
    assert [e["lateness"] for e in hand_curve] == ["0ms", "5s", "12s", "20s"]
    assert comparable(hand_curve) == reference_curve(HAND, 10_000, [0, 5_000, 12_000, 20_000])


def recommended_ms(curve: list[dict[str, Any]], target: float) -> int | None:
    best = recommend(curve, target)
    return None if best is None else int(best["lateness_ms"])


def test_recommend(hand_curve):
    assert recommended_ms(hand_curve, 80.0) == 12_000
    assert recommended_ms(hand_curve, 100) == 20_000
    assert recommended_ms(hand_curve, 50) == 0
    assert recommended_ms(hand_curve[:2], 99.9) is None
    assert recommended_ms(list(reversed(hand_curve)), 71.5) == 12_000


def test_meets_target_is_exact():
    assert meets_target(999, 1000, 99.9)
    assert not meets_target(998, 1000, 99.9)
    assert meets_target(99_999, 100_000, 99.999)
    assert not meets_target(2, 3, 66.67) and meets_target(2, 3, 66.66)
    assert meets_target(0, 0, 100)


streams = st.lists(
    st.tuples(st.integers(-40, 120), st.integers(-5, 10**15)), min_size=0, max_size=40
)


@settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(stream=streams, window_ms=st.sampled_from([5, 10, 30]))
def test_spark_matches_reference(spark, stream, window_ms):
    lateness = [0, 1, 4, 9, 25, 200]
    got = lateness_curve(stream_frame(spark, stream), window_ms, lateness, 99.0)
    assert comparable(got) == reference_curve(stream, window_ms, lateness)


def test_reference_on_many_streams():
    """The reference itself, on many streams (no Spark): completeness never falls with L,
    and latency is at least L."""

    @settings(max_examples=300, deadline=None)
    @given(stream=streams, window_ms=st.sampled_from([5, 10, 30]))
    def check(stream: Stream, window_ms: int) -> None:
        curve = reference_curve(stream, window_ms, [0, 1, 4, 9, 25, 200])
        admitted = [e["admitted"] for e in curve]
        assert admitted == sorted(admitted)
        for e in curve:
            if e["max_emit_latency_ms"] is not None:
                assert e["mean_emit_latency_ms"] >= e["lateness_ms"]

    check()


def test_curve_from_jsonl_in_line_order(spark, tmp_path):
    lines = [
        {"event_id": "a", "key": "k", "amount": 10, "event_time": "2026-11-20T00:00:01Z"},
        {"event_id": "b", "key": "k", "amount": 20, "event_time": "2026-11-20T00:00:12Z"},
        "not json",
        {"event_id": "c", "key": "k", "amount": 30, "event_time": 1795132805000},  # 00:00:05Z
        {"event_id": "b", "key": "k", "amount": 20, "event_time": "2026-11-20T00:00:12Z"},
        {"event_id": "d", "key": "k", "amount": 40, "event_time": "2026-11-20T00:00:25Z"},
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    events = events_from_jsonl(spark, str(path))
    got = [(r["event_id"], r["arrival_seq"]) for r in events.orderBy("arrival_seq").collect()]
    assert got == [("a", 1), ("b", 2), ("c", 3), ("d", 4)]
    base = ms("2026-11-20T00:00:00Z")
    stream = [(1_000, 10), (12_000, 20), (5_000, 30), (25_000, 40)]
    curve = lateness_curve(events, 10_000, [0, 5_000], None)
    shifted = [(base + t, a) for t, a in stream]
    assert comparable(curve) == reference_curve(shifted, 10_000, [0, 5_000])
    assert curve[0]["dropped"] == 1 and curve[0]["meets_target"] is None


def test_curve_from_events_log(spark, warehouse):
    day = ms("2026-11-20T00:00:00Z")
    rows = [
        # ingest order c, a, b: the log's arrival order, whatever the lines say
        event("a", "k", 10, day + 1_000, ingest=day + 20_000, source_line=1),
        event("b", "k", 20, day + 12_000, ingest=day + 30_000, source_line=2),
        event("c", "k", 30, day + 25_000, ingest=day + 10_000, source_line=3),
        event("b", "k", 20, day + 12_000, ingest=day + 40_000, status="duplicate"),
        event("z", "k", 99, day - 5_000, ingest=day + 1_000),  # window on the 19th
    ]
    version = append(spark, warehouse, T.EVENTS, rows)
    events, pinned = events_from_log(spark, warehouse, date(2026, 11, 20), 10_000)
    assert pinned == version
    got = [r["event_id"] for r in events.orderBy("arrival_seq").collect()]
    assert got == ["c", "a", "b"]
    curve = lateness_curve(events, 10_000, [0], 50.0)
    # c (25 s) first: a (end 10 s) and b (end 20 s) are both behind the watermark at L = 0.
    assert (curve[0]["events"], curve[0]["dropped"], curve[0]["dropped_amount"]) == (3, 2, 30)


def test_parse_duration_list():
    assert parse_duration_list("0s, 2s,5s,1m", "lateness") == [0, 2_000, 5_000, 60_000]
    with pytest.raises(SettingsError, match="lateness"):
        parse_duration_list("2s,fast", "lateness")
    with pytest.raises(SettingsError, match="lateness"):
        parse_duration_list(",", "lateness")


def test_cli_json(spark, tmp_path, capsys, tally_cli):
    path = tmp_path / "in.jsonl"
    stream = [(1_000, 10), (12_000, 20), (5_000, 30), (25_000, 40)]
    path.write_text(
        "".join(
            json.dumps({"event_id": f"e{i}", "key": "k", "amount": a, "event_time": t}) + "\n"
            for i, (t, a) in enumerate(stream)
        )
    )
    curve = ["lateness-curve", "--input", os.fspath(path), "--window", "10s"]
    assert tally_cli([*curve, "--lateness", "0s,5s,10s", "--json", "--target", "75"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["source"] == {"kind": "jsonl", "path": str(path)}
    assert (report["window_ms"], report["target_pct"]) == (10_000, 75.0)
    assert report["recommended"] == {"lateness_ms": 0, "lateness": "0ms"}
    assert [e["lateness"] for e in report["curve"]] == ["0ms", "5s", "10s"]
    assert set(report["curve"][0]) == {
        "lateness_ms",
        "lateness",
        "events",
        "admitted",
        "dropped",
        "dropped_amount",
        "completeness_pct",
        "meets_target",
        "windows_closed",
        "mean_emit_latency_ms",
        "max_emit_latency_ms",
    }
    assert report["curve"][0]["completeness_pct"] == 75.0

    assert tally_cli([*curve, "--lateness", "5 parsecs"]) == 2
    assert capsys.readouterr().err.startswith("tally: bad setting: lateness_candidates:")
    # no bound in the list reaches the target: the curve is printed and the exit code is 1
    assert tally_cli([*curve, "--lateness", "0s"], TALLY_COMPLETENESS_TARGET="100") == 1
    assert "no lateness in the list reaches it" in capsys.readouterr().out
