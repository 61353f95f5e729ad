"""The lateness curve: a pure-Python reference of the replay rule, held against the Spark job."""

from __future__ import annotations

import json
import os
from datetime import date
from typing import Any

import pytest
from batch_fixtures import append, event, ms
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from batch.curve import (
    events_from_jsonl,
    events_from_log,
    lateness_curve,
    lateness_curve_by_partition,
    recommend_by_partition,
)
from tally import tables as T
from tally.completeness import meets_target, recommend
from tally.durations import format_duration, parse_duration_list
from tally.settings import SettingsError
from tally.windows import window_range_ms

pytestmark = pytest.mark.usefixtures("small_delta_snapshots")

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


# -- per partition ------------------------------------------------------------------------------

PartitionStream = list[tuple[int, int, int]]  # (partition, event time ms, amount), arrival order


def partition_frame(spark: SparkSession, stream: PartitionStream) -> DataFrame:
    """Events with a source partition and arrival_seq = position, built in the JVM."""
    if not stream:
        return stream_frame(spark, []).withColumn("partition", F.lit(None).cast("int"))
    rows = [
        F.struct(
            F.timestamp_millis(F.lit(t)).alias("event_time"),
            F.lit(amount).cast("long").alias("amount"),
            F.lit(i + 1).cast("long").alias("arrival_seq"),
            F.lit(partition).cast("int").alias("partition"),
        )
        for i, (partition, t, amount) in enumerate(stream)
    ]
    return spark.range(1).select(F.inline(F.array(*rows)))


def reference_by_partition(
    stream: PartitionStream, window_ms: int, lateness: list[int]
) -> list[dict[str, Any]]:
    """The per-partition rule is the global rule on each partition's own arrivals."""
    out = []
    for partition in sorted({p for p, _, _ in stream}):
        own = [(t, amount) for p, t, amount in stream if p == partition]
        for e in reference_curve(own, window_ms, lateness):
            out.append({"partition": partition, **{k: e[k] for k in DROP_FIELDS[1:]}})
    return out


DROP_FIELDS = ("partition", "lateness_ms", "events", "admitted", "dropped", "dropped_amount")


# W = 10 s. A radar (partition 0, in order) and an HTTP poller (partition 1, up to 25 s out of
# order), interleaved in arrival order:
RADAR_AND_POLLER: PartitionStream = [
    (0, 1_000, 1),  # M_0 = 1 s, end 10 s: slack −9 s
    (1, 40_000, 10),  # M_1 = 40 s, end 50 s: slack −10 s
    (0, 2_000, 2),  # M_0 = 2 s, end 10 s: −8 s
    (1, 15_000, 20),  # M_1 = 40 s, end 20 s: slack 20 s (dropped under L <= 20 s)
    (0, 11_000, 3),  # M_0 = 11 s, end 20 s: −9 s
    (1, 55_000, 30),  # M_1 = 55 s, end 60 s: −5 s
    (0, 12_000, 4),  # M_0 = 12 s, end 20 s: −8 s
    (1, 29_000, 40),  # M_1 = 55 s, end 30 s: slack 25 s (dropped under L <= 25 s)
    (0, 21_000, 5),  # M_0 = 21 s, end 30 s: −9 s
]

# One row per case: stream, W, bounds, target, expected rows
# (partition, L, events, dropped, dropped_amount, meets_target), expected recommendation.
PARTITION_CASES = {
    # The radar never drops (each event is at most 1 s behind its own partition's record);
    # the poller drops its two stragglers (20 + 40) until L passes their 25 s slack: the radar
    # needs 0 and the poller 30 s.
    "fast_radar_slow_poller": (
        RADAR_AND_POLLER,
        10_000,
        [0, 100, 5_000, 30_000],
        100.0,
        [
            (0, 0, 5, 0, 0, True),
            (0, 100, 5, 0, 0, True),
            (0, 5_000, 5, 0, 0, True),
            (0, 30_000, 5, 0, 0, True),
            (1, 0, 4, 2, 60, False),
            (1, 100, 4, 2, 60, False),
            (1, 5_000, 4, 2, 60, False),
            (1, 30_000, 4, 0, 0, True),
        ],
        {0: 0, 1: 30_000},
    ),
    # The boundary: the second event's window ends exactly at M_0 − 0 (end 10 s, M_0 10 s) and
    # is dropped under L = 0; one millisecond of lateness admits it.
    "end_equal_to_watermark_is_dropped": (
        [(0, 10_000, 1), (0, 9_999, 2)],
        10_000,
        [0, 1],
        100.0,
        [(0, 0, 2, 1, 2, False), (0, 1, 2, 0, 0, True)],
        {0: 1},
    ),
    # A partition is judged by its own record only: partition 1's 4 s event (end 10 s) comes
    # after partition 0 reached 30 s, but M_1 is 25 s, so its slack is 15 s, not 20 s: L = 20 s
    # admits it. Its 5 s event arrived before M_1 grew, so it is never dropped.
    "other_partitions_do_not_move_the_watermark": (
        [(1, 5_000, 7), (0, 30_000, 1), (1, 25_000, 8), (1, 4_000, 9)],
        10_000,
        [0, 15_000, 20_000],
        100.0,
        [
            (0, 0, 1, 0, 0, True),
            (0, 15_000, 1, 0, 0, True),
            (0, 20_000, 1, 0, 0, True),
            (1, 0, 3, 1, 9, False),
            (1, 15_000, 3, 1, 9, False),
            (1, 20_000, 3, 0, 0, True),
        ],
        {0: 0, 1: 20_000},
    ),
    # Money is exact integers (10^15 and −5 dropped together: 10^15 − 5); a slack of exactly
    # 40 s is dropped under L = 40 s and admitted under 40.001 s. At a 33.3 % target, 1 of 3
    # admitted (33.33 %) already meets it: the smallest bound is 0.
    "exact_amounts_and_a_partial_target": (
        [(2, 50_000, 10**15), (2, 1_000, 10**15), (2, 2_000, -5)],
        10_000,
        [0, 40_000, 40_001],
        33.3,
        [
            (2, 0, 3, 2, 10**15 - 5, True),
            (2, 40_000, 3, 2, 10**15 - 5, True),
            (2, 40_001, 3, 0, 0, True),
        ],
        {2: 0},
    ),
    # No bound in the list reaches the target on partition 3 (slack 40 s, largest L 5 s):
    # its recommendation is None, partition 4's is still given.
    "a_partition_without_a_recommendation": (
        [(3, 50_000, 1), (3, 1_000, 2), (4, 1_000, 3)],
        10_000,
        [0, 5_000],
        100.0,
        [
            (3, 0, 2, 1, 2, False),
            (3, 5_000, 2, 1, 2, False),
            (4, 0, 1, 0, 0, True),
            (4, 5_000, 1, 0, 0, True),
        ],
        {3: None, 4: 0},
    ),
    # No events: no partitions, nothing to recommend.
    "no_events": ([], 10_000, [0], 99.9, [], {}),
}


@pytest.mark.parametrize("case", PARTITION_CASES.values(), ids=list(PARTITION_CASES))
def test_partition_curve_hand_computed(spark, case):
    stream, window_ms, lateness, target, expected, best = case
    curve = lateness_curve_by_partition(partition_frame(spark, stream), window_ms, lateness, target)
    got = [
        (
            e["partition"],
            e["lateness_ms"],
            e["events"],
            e["dropped"],
            e["dropped_amount"],
            e["meets_target"],
        )
        for e in curve
    ]
    assert got == expected
    for e in curve:
        assert e["admitted"] == e["events"] - e["dropped"]
        assert e["completeness_pct"] == pytest.approx(100 * e["admitted"] / e["events"])
        assert e["lateness"] == format_duration(e["lateness_ms"])
    assert [{k: e[k] for k in DROP_FIELDS} for e in curve] == reference_by_partition(
        stream, window_ms, lateness
    )
    recommended = recommend_by_partition(curve, target)
    assert {p: (e and e["lateness_ms"]) for p, e in recommended.items()} == best


def test_global_and_per_partition_curves_differ(spark):
    """One watermark for both sources: the poller's records (40 s, 55 s) make the radar's
    events 20–35 s late, so even 30 s drops two of them (the radar's 2nd and 4th, amounts
    2 + 4, slack 30 s and 35 s) and no bound in the list reaches 100 %. Per partition, the
    radar needs 0 and the poller 30 s."""
    events = partition_frame(spark, RADAR_AND_POLLER)
    lateness = [0, 5_000, 30_000]
    overall = lateness_curve(events, 10_000, lateness, 100.0)
    assert [(e["lateness_ms"], e["dropped"], e["dropped_amount"]) for e in overall] == [
        (0, 6, 2 + 20 + 3 + 40 + 4 + 5),
        (5_000, 6, 74),
        (30_000, 2, 6),
    ]
    assert recommend(overall, 100.0) is None
    by_partition = lateness_curve_by_partition(events, 10_000, lateness, 100.0)
    best = recommend_by_partition(by_partition, 100.0)
    assert {p: e and e["lateness_ms"] for p, e in best.items()} == {0: 0, 1: 30_000}
    # The same stream as one partition is the global curve.
    single = events.withColumn("partition", F.lit(0))
    as_one = lateness_curve_by_partition(single, 10_000, lateness, 100.0)
    assert [{k: e[k] for k in DROP_FIELDS[1:]} for e in as_one] == [
        {k: e[k] for k in DROP_FIELDS[1:]} for e in overall
    ]


partition_streams = st.lists(
    st.tuples(st.integers(0, 2), st.integers(-40, 120), st.integers(-5, 10**15)),
    min_size=0,
    max_size=40,
)


@settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(stream=partition_streams, window_ms=st.sampled_from([5, 10, 30]))
def test_partition_curve_matches_reference(spark, stream, window_ms):
    lateness = [0, 1, 4, 9, 25, 200]
    got = lateness_curve_by_partition(partition_frame(spark, stream), window_ms, lateness, 99.0)
    assert [{k: e[k] for k in DROP_FIELDS} for e in got] == reference_by_partition(
        stream, window_ms, lateness
    )


def test_recommend_by_partition_without_spark():
    def entry(partition: int, lateness: int, admitted: int, events: int = 4) -> dict[str, Any]:
        return {
            "partition": partition,
            "lateness_ms": lateness,
            "admitted": admitted,
            "events": events,
        }

    curve = [entry(1, 5_000, 4), entry(0, 0, 4), entry(1, 0, 3), entry(2, 0, 0)]
    got = recommend_by_partition(curve, 75.0)
    assert {p: e and e["lateness_ms"] for p, e in got.items()} == {0: 0, 1: 0, 2: None}
    assert list(got) == [0, 1, 2]
    strict = recommend_by_partition(curve, 100.0)
    assert {p: e and e["lateness_ms"] for p, e in strict.items()} == {0: 0, 1: 5_000, 2: None}
    assert recommend_by_partition([], 99.9) == {}


def test_per_partition_curve_from_events_log(spark, warehouse):
    day = ms("2026-11-20T00:00:00Z")
    rows = [
        # b's first copy arrives on partition 1: that is its partition, not the repeat's 0
        event("a", "k", 10, day + 30_000, ingest=day + 40_000, partition=0),
        event("b", "k", 20, day + 12_000, ingest=day + 41_000, partition=1),
        event("b", "k", 20, day + 12_000, ingest=day + 42_000, partition=0, status="duplicate"),
        event("c", "k", 30, day + 1_000, ingest=day + 43_000, partition=0),
    ]
    append(spark, warehouse, T.EVENTS, rows)
    events, _ = events_from_log(spark, warehouse, date(2026, 11, 20), 10_000)
    got = [(r["event_id"], r["partition"]) for r in events.orderBy("arrival_seq").collect()]
    assert got == [("a", 0), ("b", 1), ("c", 0)]
    curve = lateness_curve_by_partition(events, 10_000, [0], 100.0)
    # c (end 10 s) is 20 s behind partition 0's 30 s; b is partition 1's own record
    assert [(e["partition"], e["events"], e["dropped"], e["dropped_amount"]) for e in curve] == [
        (0, 2, 1, 30),
        (1, 1, 0, 0),
    ]


def write_jsonl(path: Any, stream: PartitionStream) -> str:
    path.write_text(
        "".join(
            json.dumps(
                {"event_id": f"e{i}", "key": "k", "amount": a, "event_time": t, "partition": p}
            )
            + "\n"
            for i, (p, t, a) in enumerate(stream)
        )
    )
    return os.fspath(path)


def test_cli_by_partition(spark, tmp_path, capsys, tally_cli):
    path = write_jsonl(tmp_path / "in.jsonl", RADAR_AND_POLLER)
    curve = ["lateness-curve", "--input", path, "--window", "10s", "--lateness", "0s,5s,30s"]
    # Without the flag the report is what it was: no per-partition keys.
    assert tally_cli([*curve, "--json", "--target", "70"]) == 0
    plain_report = json.loads(capsys.readouterr().out)
    assert set(plain_report) == {"source", "window_ms", "target_pct", "curve", "recommended"}

    assert tally_cli([*curve, "--json", "--target", "70", "--by-partition"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["curve"] == plain_report["curve"]
    assert report["recommended"] == {"lateness_ms": 30_000, "lateness": "30s"}  # 7 of 9
    assert report["recommended_by_partition"] == {
        "0": {"lateness_ms": 0, "lateness": "0ms"},
        "1": {"lateness_ms": 30_000, "lateness": "30s"},  # 2 of 4 = 50 % at 0 and 5 s
    }
    assert report["recommended_lateness_by_partition"] == "0=0ms,1=30s"
    assert [
        (e["partition"], e["lateness"], e["dropped"]) for e in report["curve_by_partition"]
    ] == [
        (0, "0ms", 0),
        (0, "5s", 0),
        (0, "30s", 0),
        (1, "0ms", 2),
        (1, "5s", 2),
        (1, "30s", 0),
    ]
    assert set(report["curve_by_partition"][0]) == {
        "partition",
        "lateness_ms",
        "lateness",
        "events",
        "admitted",
        "dropped",
        "dropped_amount",
        "completeness_pct",
        "meets_target",
    }

    assert tally_cli([*curve, "--target", "70"]) == 0
    table = capsys.readouterr().out
    assert tally_cli([*curve, "--target", "70", "--by-partition"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(table)  # the global table first, unchanged
    assert "per partition, smallest lateness reaching 70.0%: 0: 0ms, 1: 30s" in text
    assert text.rstrip().endswith("as a setting: TALLY_LATENESS_BY_PARTITION=0=0ms,1=30s")


def test_cli_by_partition_exit_code(spark, tmp_path, capsys, tally_cli):
    # Partition 1 drops its straggler under L = 0 (1 of 2 admitted), partition 0 is in order:
    # overall 9 of 10 admitted meets 80 %, partition 1's 50 % does not.
    stream = [(1, 50_000, 1), (1, 1_000, 2)] + [(0, 51_000 + i, 1) for i in range(8)]
    path = write_jsonl(tmp_path / "in.jsonl", stream)
    curve = ["lateness-curve", "--input", path, "--window", "10s", "--lateness", "0s"]
    assert tally_cli([*curve, "--target", "80"]) == 0
    capsys.readouterr()
    assert tally_cli([*curve, "--target", "80", "--by-partition"]) == 1
    out = capsys.readouterr().out
    assert "0: 0ms, 1: none in the list" in out
    assert out.rstrip().endswith("as a setting: TALLY_LATENESS_BY_PARTITION=0=0ms")


# The lateness_recommendations columns before per-source lateness: a warehouse an earlier
# tally created has this table.
OLD_RECOMMENDATIONS_DDL = (
    "period_start DATE, period_end DATE, run_time TIMESTAMP, window_ms BIGINT, "
    "events BIGINT, events_version BIGINT, target_pct DOUBLE, configured_lateness_ms BIGINT, "
    "configured_completeness_pct DOUBLE, configured_meets_target BOOLEAN, "
    "recommended_lateness_ms BIGINT, recommended_completeness_pct DOUBLE, curve STRING"
)


def test_tuning_per_partition_on_an_old_table(spark, warehouse):
    from dataclasses import replace
    from datetime import UTC, datetime

    from batch.tuning import TuningParams, tune_lateness

    day = ms("2026-11-20T00:00:00Z")
    rows = [
        event(f"e{i}", "k", a, day + t, ingest=day + 100_000 + i, partition=p)
        for i, (p, t, a) in enumerate(RADAR_AND_POLLER)
    ]
    append(spark, warehouse, T.EVENTS, rows)
    old = replace(T.LATENESS_RECOMMENDATIONS, ddl=OLD_RECOMMENDATIONS_DDL)
    T.ensure_table(spark, warehouse, old)
    earlier = {f.name: F.lit(None) for f in old.schema().fields}
    earlier.update(period_start=F.lit(date(2026, 11, 9)), events=F.lit(5))
    T.write_table(T.literal_row(spark, earlier), warehouse, old)

    params = TuningParams(
        warehouse=warehouse,
        window_ms=10_000,
        configured_lateness_ms=0,
        candidates_ms=[30_000],
        target_pct=100.0,
        configured_by_partition={1: 5_000, 7: 1_000},  # partition 7 has no events
    )
    now = datetime(2026, 11, 23, 3, tzinfo=UTC)
    result = tune_lateness(spark, params, date(2026, 11, 16), date(2026, 11, 22), now=now)
    # Globally 0 and 30 s both drop (3 of 9 admitted at 0, 7 at 30 s): nothing reaches 100 %.
    assert (result["configured_meets_target"], result["recommended_lateness_ms"]) == (False, None)
    assert result["recommended_by_partition"] == {0: 0, 1: 30_000}
    assert result["configured_by_partition"] == {0: 0, 1: 5_000}
    assert result["configured_completeness_by_partition"] == {0: 100.0, 1: 50.0}
    assert result["partitions_missing_target"] == [1]

    table = T.read_table(spark, warehouse, T.LATENESS_RECOMMENDATIONS.name)
    assert table.columns == T.LATENESS_RECOMMENDATIONS.schema().fieldNames()
    before, row = table.orderBy("period_start").collect()
    assert before["events"] == 5 and before["recommended_by_partition"] is None
    assert row["recommended_by_partition"] == {0: 0, 1: 30_000}
    assert row["configured_by_partition"] == {0: 0, 1: 5_000}
    assert row["configured_completeness_by_partition"] == {0: 100.0, 1: 50.0}
    assert row["partitions_missing_target"] == [1]
    partition_curve = json.loads(row["curve_by_partition"])
    # the per-partition curve tries the candidates and every configured bound
    assert sorted({(e["partition"], e["lateness_ms"]) for e in partition_curve}) == [
        (p, lat) for p in (0, 1) for lat in (0, 1_000, 5_000, 30_000)
    ]
    assert [e["lateness_ms"] for e in json.loads(row["curve"])] == [0, 30_000]


def test_tuning_compares_the_curve_with_the_bounds_in_force(spark, warehouse):
    """The weekly tuning records, per partition, the bounds the stream had in force over the
    period's micro-batches (what lateness auto chose), the curve's completeness at the last
    one, and the partitions whose recommended bound is wider than any bound in force."""
    from datetime import UTC, datetime

    from batch.tuning import TuningParams, tune_lateness

    day = ms("2026-11-20T00:00:00Z")
    rows = [
        event(f"e{i}", "k", a, day + t, ingest=day + 100_000 + i, partition=p)
        for i, (p, t, a) in enumerate(RADAR_AND_POLLER)
    ]
    append(spark, warehouse, T.EVENTS, rows)

    def progress(batch: int, after: str, bounds: dict[int, int]) -> dict[str, Any]:
        return {
            "batch_id": batch,
            "app_id": "a",
            "processing_time": day + 1_000 * batch,
            "watermark_before": ms(after) - 60_000,
            "watermark_after": ms(after),
            "partition_lateness_ms": bounds,
        }

    append(
        spark,
        warehouse,
        T.STREAM_PROGRESS,
        [
            progress(0, "2026-11-20T00:01:00Z", {0: 1_000, 1: 5_000}),
            progress(1, "2026-11-20T00:02:00Z", {0: 5_000, 1: 10_000}),
            progress(2, "2026-11-20T00:03:00Z", {0: 1_000, 1: 5_000}),
            progress(3, "2026-11-25T00:00:00Z", {0: 999_000, 1: 999_000}),  # after the period
        ],
    )
    params = TuningParams(
        warehouse=warehouse,
        window_ms=10_000,
        configured_lateness_ms=60_000,  # lateness auto: its lateness_max
        candidates_ms=[30_000],
        target_pct=100.0,
    )
    now = datetime(2026, 11, 23, 3, tzinfo=UTC)
    result = tune_lateness(spark, params, date(2026, 11, 16), date(2026, 11, 22), now=now)
    assert result["in_force_min_by_partition"] == {0: 1_000, 1: 5_000}
    assert result["in_force_max_by_partition"] == {0: 5_000, 1: 10_000}
    assert result["in_force_last_by_partition"] == {0: 1_000, 1: 5_000}
    # partition 1's straggler 25 s behind needs 30 s; auto went to 10 s at most
    assert result["recommended_by_partition"][1] == 30_000
    assert result["recommended_by_partition"][0] <= 5_000
    assert result["in_force_completeness_by_partition"] == {0: 100.0, 1: 50.0}
    assert result["partitions_short_of_curve"] == [1]

    (row,) = T.read_table(spark, warehouse, T.LATENESS_RECOMMENDATIONS.name).collect()
    assert row["in_force_max_by_partition"] == {0: 5_000, 1: 10_000}
    assert row["in_force_completeness_by_partition"] == {0: 100.0, 1: 50.0}
    assert row["partitions_short_of_curve"] == [1]
    # the per-partition curve also tries the last bounds in force
    assert {e["lateness_ms"] for e in json.loads(row["curve_by_partition"])} >= {1_000, 5_000}
