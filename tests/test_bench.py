"""The benchmark's own code: the trace parser, the state poller, the flatness check, the big
file's concatenation, carrying earlier results over and the sections' pure helpers (fast, no
Spark); and a smoke test of `tally bench --quick`, in-process on the session's Spark, so the
benchmark cannot rot: the latency, state and nightly sections run for real, every engine
accounts for its input, and the report holds every section's numbers, the others' from a
recorded quick run (tests/data/bench_quick.json, checked like a fresh run)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest

# -- the stream's phase records ------------------------------------------------------------------


def _trace_lines() -> list[str]:
    return [
        json.dumps({"t": 100.0, "level": "DEBUG", "msg": "append events: 0.50 s"}),
        json.dumps({"t": 100.1, "level": "DEBUG", "msg": "append stream_progress: 0.20 s"}),
        json.dumps(
            {
                "t": 101.0,
                "level": "DEBUG",
                "msg": "batch 0 phases: read_parse 0.40 s, write 0.60 s, progress 0.30 s",
            }
        ),
        json.dumps({"t": 101.0, "level": "INFO", "msg": "batch 0: 10 valid, 0 late, 1.30 s"}),
        json.dumps({"t": 102.0, "level": "DEBUG", "msg": "append events: 0.25 s"}),
        json.dumps(
            {
                "t": 103.0,
                "level": "DEBUG",
                "msg": "batch 1 phases: (ignored when the record carries the phases)",
                "phases": {"read_parse": 0.2, "write": 0.3, "progress": 0.1},
            }
        ),
        '{"t": 104.0, "level": "DEBUG", "msg": "batch 2 pha',  # cut short by a kill
    ]


def test_trace_gives_each_batch_its_phases_and_appends(tmp_path: Path) -> None:
    from bench import phases

    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(_trace_lines()) + "\n")
    batches = phases.read_trace(trace)

    assert [b["batch"] for b in batches] == [0, 1]
    assert batches[0]["phases"] == {"read_parse": 0.4, "write": 0.6, "progress": 0.3}
    assert batches[0]["seconds"] == pytest.approx(1.3)
    # appends logged before a batch's phase record belong to that batch
    assert batches[0]["appends"] == {"events": 0.5, "stream_progress": 0.2}
    assert batches[1]["appends"] == {"events": 0.25}
    assert batches[1]["phases"]["read_parse"] == 0.2

    table = {row["phase"]: row for row in phases.phase_table(batches)}
    assert list(table) == ["read_parse", "write", "progress"]  # the stream's order
    assert table["write"]["median_s"] == pytest.approx(0.45)
    assert table["write"]["total_s"] == pytest.approx(0.9)
    assert sum(r["share"] for r in table.values()) == pytest.approx(1.0)
    assert phases.largest_phase(list(table.values()))["phase"] == "write"
    assert phases.append_medians(batches) == {"events": 0.375, "stream_progress": 0.2}

    split = phases.wall_split(batches, started_epoch=90.0, seconds=20.0)
    assert split["startup_s"] == pytest.approx(101.0 - 1.3 - 90.0)
    assert split["in_batches_s"] == pytest.approx(1.9)
    assert split["between_and_end_s"] == pytest.approx(20.0 - 9.7 - 1.9)


def test_trace_handler_writes_the_phase_timer_itself(tmp_path: Path) -> None:
    from bench.tally_cli import TraceHandler

    class Timer:  # what streaming.job logs: an object with `.seconds`
        def __init__(self) -> None:
            self.seconds = {"read_parse": 0.25, "write": 1.5}

        def __str__(self) -> str:
            return "read_parse 0.25 s, write 1.50 s"

    path = tmp_path / "trace.jsonl"
    with path.open("w") as out:
        logger = logging.getLogger("bench-test-trace")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        handler = TraceHandler(out)
        logger.addHandler(handler)
        try:
            logger.debug("batch %d phases: %s", 7, Timer())
            logger.debug("append %s: %.2f s", "events", 0.5)
        finally:
            logger.removeHandler(handler)
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert first["msg"] == "batch 7 phases: read_parse 0.25 s, write 1.50 s"
    assert first["phases"] == {"read_parse": 0.25, "write": 1.5}
    assert second["msg"] == "append events: 0.50 s" and "phases" not in second


# -- state growth ---------------------------------------------------------------------------------


def test_state_poller_measures_the_newest_complete_state(tmp_path: Path) -> None:
    from bench.state import StatePoller

    root = tmp_path / "checkpoint" / "tally" / "state"
    for batch, complete in ((2, True), (3, True), (4, False)):
        for part, size in (("windows", 100), ("dedup", 50)):
            d = root / str(batch) / f"state={part}"
            d.mkdir(parents=True)
            (d / "part-0.parquet").write_bytes(b"x" * size * batch)
        if complete:  # batch 4's state is still being written
            (root / str(batch) / "_SUCCESS").write_bytes(b"")
    poller = StatePoller(tmp_path / "checkpoint")
    poller(0.25, 1_000)
    assert poller.newest_complete() == 3
    assert poller.state_bytes == {3: {"windows": 300, "dedup": 150}}
    assert poller.rss == {4: 1_000}  # charged to the batch in flight

    (root / "4" / "_SUCCESS").write_bytes(b"")
    shutil.rmtree(root / "2")
    poller(0.5, 3_000)
    poller(0.75, 2_000)
    assert poller.state_bytes[4] == {"windows": 400, "dedup": 200}
    assert poller.rss == {4: 1_000, 5: 3_000}


def test_flat_means_last_tenth_within_tolerance_of_first() -> None:
    from bench.state import _tenths

    def batches(values: list[float]) -> list[dict[str, Any]]:
        return [{"open_windows": v} for v in values]

    steady = _tenths(batches([100.0] * 10 + [120.0] * 80 + [110.0] * 10), "open_windows")
    assert steady["flat"] and steady["ratio"] == pytest.approx(1.1)
    growing = _tenths(batches([float(i) for i in range(1, 101)]), "open_windows")
    assert not growing["flat"] and growing["ratio"] > 10
    from_nothing = _tenths(batches([0.0] * 10 + [5.0] * 90), "open_windows")
    assert not from_nothing["flat"]
    unsampled = _tenths([{"open_windows": None}] * 20, "open_windows")
    assert not unsampled["flat"] and unsampled["sampled"] == 0


def _nightly_size(events: int, paired: dict[str, Any] | None) -> dict[str, Any]:
    size = {"events": events, "ratio_parquet": 4.0, "reaggregate_s": 20.0, "diff_s": 10.0}
    size.update({"validate_s": 10.0, "report_s": 5.0})
    return size if paired is None else {**size, "paired": paired}


@pytest.mark.parametrize(
    ("events", "paired", "met"),
    [
        # medians 38 s vs 30 s: 1.27, within 1.3
        (20_000_000, {"tally_s": [40.0, 36.0], "plain_s": [29.0, 31.0], "ratio": 38 / 30}, True),
        # 1.40: missed
        (20_000_000, {"tally_s": [42.0, 42.0], "plain_s": [30.0, 30.0], "ratio": 1.4}, False),
        # the quick size: figures, no verdict
        (20_000, {"tally_s": [4.0, 4.0], "plain_s": [1.0, 1.0], "ratio": 4.0}, None),
        # a run recorded before the pair was measured: nothing to judge
        (20_000_000, None, None),
    ],
)
def test_the_plain_ratio_is_judged_at_20m_events_only(
    events: int, paired: dict[str, Any] | None, met: bool | None
) -> None:
    from bench import nightly_targets as NT

    judged = NT.judge([_nightly_size(events, paired)])["plain_ratio"]
    assert judged["met"] is met and judged["paired"] == paired


def test_peak_rss_is_judged_on_the_second_half() -> None:
    from bench.state import MIDDLE, _tenths

    def rss(values: list[float]) -> list[dict[str, Any]]:
        return [{"peak_rss_mb": v} for v in values]

    # a JVM growing its heap to its working size early, then steady: flat, though the
    # first tenth is far lower (the ratio to it is reported beside)
    warm_up = [900.0 + 100 * i for i in range(10)] + [1_850.0] * 40 + [1_900.0] * 50
    judged = _tenths(rss(warm_up), "peak_rss_mb", peak=True, baseline=MIDDLE)
    assert judged["flat"] and judged["first"] == 1_900.0 and judged["baseline"] == MIDDLE
    assert judged["ratio_to_first"] == pytest.approx(1_900 / 1_800)
    # memory growing with the stream's length: the second half alone grows past the tolerance
    growing = [1_000.0 + 5 * i for i in range(100)]
    assert not _tenths(rss(growing), "peak_rss_mb", peak=True, baseline=MIDDLE)["flat"]
    # the middle tenth of 100 batches is batches 45-54
    step = [1_000.0] * 45 + [2_000.0] * 10 + [1_000.0] * 45
    assert _tenths(rss(step), "peak_rss_mb", peak=True, baseline=MIDDLE)["first"] == 2_000.0


# -- the big file ---------------------------------------------------------------------------------


def test_concatenate_keeps_arrival_order_and_the_newest_mtime(tmp_path: Path) -> None:
    from bench.bigfile import concatenate, events_for_bytes
    from bench.common import arrival_files

    src = tmp_path / "in"
    src.mkdir()
    for i, (text, mtime) in enumerate((("a\nb\n", 3_000), ("c\n", 1_000), ("d\n", 2_000))):
        path = src / f"arrival-{i:06d}.jsonl"
        path.write_text(text)
        os.utime(path, ns=(mtime * 10**6, mtime * 10**6))
    out = tmp_path / "one" / "all.jsonl"
    size = concatenate(arrival_files(src), out)
    assert out.read_text() == "c\nd\na\nb\n"  # modification time order
    assert size == 8 and out.stat().st_mtime_ns == 3_000 * 10**6
    assert 17_000_000 < events_for_bytes(2 * 10**9) < 18_000_000


# -- carrying earlier results over ----------------------------------------------------------------


def _previous(tmp_path: Path, mode: str = "full", fmt: int = 2) -> dict[str, Any]:
    prev = {
        "format": fmt,
        "mode": mode,
        "started": "2026-11-01 03:00",
        "measured": {"curve": "2026-10-30 02:00"} if fmt == 2 else {},
        "speed": {"old": True},
        "nightly": {"sizes": [], "growth": None},
        "curve": {"seconds": 1.0},
    }
    (tmp_path / "benchmarks.json").write_text(json.dumps(prev))
    return prev


def test_partial_run_keeps_other_sections_with_their_dates(tmp_path: Path) -> None:
    from bench.findings import findings
    from bench.report import carry_previous

    _previous(tmp_path)
    r: dict[str, Any] = {"format": 2, "mode": "full", "measured": {"latency": "2026-11-23 01:00"}}
    r["latency"] = {"engines": {}}
    carry_previous(r, tmp_path, ["speed", "nightly", "curve", "bigfile"])
    assert r["carried"] == ["speed", "nightly", "curve"]
    assert r["speed"] == {"old": True}
    assert r["measured"] == {
        "latency": "2026-11-23 01:00",  # measured now, untouched
        "speed": "2026-11-01 03:00",  # the earlier run's start
        "nightly": "2026-11-01 03:00",
        "curve": "2026-10-30 02:00",  # itself carried before: keeps its own date
    }
    assert "bigfile" not in r

    r = {
        "format": 2,
        "mode": "full",
        "nightly": {
            "sizes": [
                {
                    "events": 10,
                    "reaggregate_s": 1.0,
                    "diff_s": 1.0,
                    "validate_s": 3.0,
                    "report_s": 1.0,
                    "ratio_json": 2.0,
                    "ratio_parquet": 4.0,
                    "duckdb_json": {"seconds": 1.0},
                    "duckdb_parquet": {"seconds": 0.5},
                }
            ]
        },
        "carried": ["nightly"],
        "measured": {"nightly": "2026-11-01 03:00"},
    }
    (line,) = findings(r)
    assert line.endswith("(measured 2026-11-01 03:00, carried over)")


def test_carry_only_what_fits(tmp_path: Path) -> None:
    from bench.report import carry_previous

    _previous(tmp_path, mode="quick")
    r: dict[str, Any] = {"format": 2, "mode": "full"}
    carry_previous(r, tmp_path, ["nightly"])
    assert r["carried"] == [] and "nightly" not in r and r["carry_notes"]

    _previous(tmp_path, fmt=1)  # before issue 12: only the unchanged sections carry
    r = {"format": 2, "mode": "full"}
    carry_previous(r, tmp_path, ["speed", "nightly", "curve"])
    assert r["carried"] == ["nightly", "curve"] and "speed" not in r
    assert r["measured"]["curve"] == "2026-11-01 03:00"


def test_report_of_a_partial_run_shows_the_committed_results_as_carried(tmp_path: Path) -> None:
    from bench.findings import findings
    from bench.report import JSON_NAME, carry_previous, render_markdown
    from bench.run import FORMAT, PROJECT_ROOT, SECTIONS

    committed = PROJECT_ROOT / "docs" / JSON_NAME
    if not committed.is_file():
        pytest.skip("no committed benchmark results")
    shutil.copy(committed, tmp_path / JSON_NAME)
    prev = json.loads(committed.read_text())
    r: dict[str, Any] = {
        "format": FORMAT,
        "mode": prev["mode"],
        "machine": prev["machine"],
        "command": "tally bench --only latency",
        "started": "2030-01-01 00:00",
        "total_s": 1.0,
        "preset": {},
        "sections_s": {},
    }
    carry_previous(r, tmp_path, SECTIONS)
    assert "nightly" in r["carried"] and r["nightly"] == prev["nightly"]
    r["findings"] = findings(r)
    md = render_markdown(r, None)
    date = r["measured"]["nightly"]
    assert f"## 6. Nightly job (measured {date}, carried over from an earlier run)" in md
    assert f"| {date} (carried) |" in md
    assert any(f.endswith(f"(measured {date}, carried over)") for f in r["findings"])


def test_each_missed_speed_target_says_what_would_close_it() -> None:
    """One note per missed target (throughput, fixed cost, latency), quoting the measured
    phases; none once the targets are met."""
    from bench.findings import closing_notes

    r: dict[str, Any] = {
        "speed": {
            "met_durable": False,
            "met_agg": True,
            "tally_median_run": {
                "phases": [
                    {"phase": "read_parse", "total_s": 27.15},
                    {"phase": "classify", "total_s": 17.2},
                    {"phase": "write", "total_s": 28.06},
                ]
            },
        },
        "state": {
            "fixed_cost": {"median_batch_ms": 3100, "met": False, "appends_median_s": {"a": 1.1}}
        },
        "latency": {"engines": {"tally": {"met": False}}},
    }
    notes = closing_notes(r)
    assert [n.split(":")[0] for n in notes] == [
        "Throughput",
        "Per-batch fixed cost (3.1 s)",
        "Latency",
    ]
    assert "`read_parse` 27.1 s, `classify` 17.2 s, `write` 28.1 s" in notes[0]
    assert "the slowest median 1.10 s" in notes[1]
    r["speed"]["met_durable"] = True
    r["state"]["fixed_cost"]["met"] = True
    r["latency"]["engines"]["tally"]["met"] = True
    assert closing_notes(r) == []


# -- Flink beside Spark (the Kafka section) -------------------------------------------------------


def test_flink_job_sql_bounds_the_topic_and_writes_intervals_exactly() -> None:
    """The Flink job's SQL (built without pyflink): the source ends at the offsets latest at
    its start, the json format skips a malformed record, intervals keep milliseconds."""
    from bench import flink_job

    assert flink_job.interval(60_000) == "INTERVAL '0 00:01:00.000' DAY TO SECOND(3)"
    assert flink_job.interval(90_061_005) == "INTERVAL '1 01:01:01.005' DAY TO SECOND(3)"
    events = flink_job.events_table_sql("127.0.0.1:1", "t", 30_000)
    assert "'scan.bounded.mode' = 'latest-offset'" in events
    assert "'scan.startup.mode' = 'earliest-offset'" in events
    assert "'json.ignore-parse-errors' = 'true'" in events
    assert "WATERMARK FOR ts AS ts - INTERVAL '0 00:00:30.000' DAY TO SECOND(3)" in events
    _sink, insert = flink_job.totals_sql(Path("/out"), 10_000)
    assert "TUMBLE(TABLE valid_events, DESCRIPTOR(ts), INTERVAL '0 00:00:10.000'" in insert
    source, _sink, _insert = flink_job.bronze_sql("127.0.0.1:1", "t", Path("/out"))
    assert "'format' = 'raw'" in source and "json." not in source


def _kafka_result(flink: dict[str, Any]) -> dict[str, Any]:
    """A Kafka section's result as `kafka_section` returns it (numbers made up)."""
    return {
        "events": 1000,
        "lines": 1010,
        "records": 1010,
        "partitions": 8,
        "records_per_trigger": 505,
        "publish_s": 1.0,
        "window_ms": 60_000,
        "lateness_ms": 30_000,
        "runs": {
            "tally": {"seconds": 40.0, "peak_rss_mb": 900.0, "events_per_s": 25.25},
            "plain": {"seconds": 20.0, "peak_rss_mb": 800.0, "events_per_s": 50.5},
        },
        "tally": {
            "input_lines": 1010,
            "valid_events": 1005,
            "quarantined": 5,
            "late_events": 3,
            "accounted_events": 1000,
        },
        "plain": {"output_rows": 900, "output_events": 950},
        "ratio": 0.5,
        "all_records_accounted": True,
        "malformed_lines": 5,
        "plain_dropped": {"dropped_rows": 60, "dropped_pct": 60 / 10.1, "dropped_by_watermark": 4},
        "flink": flink,
    }


def test_kafka_report_puts_flinks_dropped_rows_beside_tallys_late_output(tmp_path: Path) -> None:
    from bench.findings import findings
    from bench.flink_peer import dropped
    from bench.report.sections import kafka

    # 1,010 records, 1,007 read as valid events by Flink, 998 of them in its windows
    counted = dropped(1010, 998, 1007)
    assert counted == {
        "dropped_rows": 12,
        "dropped_pct": pytest.approx(100 * 12 / 1010),
        "late_rows": 9,
        "late_pct": pytest.approx(100 * 9 / 1007),
        "unread_rows": 3,
    }
    run = {"seconds": 10.0, "events_per_s": 101.0, "peak_rss_mb": 700.0, **counted}
    flink = {
        "valid_rows": 1007,
        "runs": {
            "agg": run,
            "durable": {**run, "seconds": 20.2, "events_per_s": 50.0, "bronze_rows": 1010},
        },
        "version": "2.3.0",
        "parallelism": 2,
        "checkpoint_ms": 5000,
        "ratio_tally_flink": {"agg": 0.25, "durable": 0.505},
        "ratio_flink_plain": {"agg": 2.0, "durable": 0.99},
    }
    md = "\n".join(kafka(_kafka_result(flink), ""))
    assert "### Flink beside Spark" in md
    assert "| 700 MB | 9 (0.89 %) | 12 (1.19 %) | **0.25** | 2.00 |" in md
    assert "| 3 (kept: late side output) | 5 quarantined (kept) |" in md
    assert "| 4 | 60 (5.94 %) |" in md  # plain Spark's own count of rows behind its watermark
    assert "bronze kept 1,010 of 1,010 records (every record: yes)" in md
    lines = findings({"kafka": _kafka_result(flink)})
    assert "agg 101 records/s (tally ÷ Flink 0.25, Flink ÷ plain Spark 2.00; dropped 9 " in lines[1]

    missing = {"runs": {}, "not_measured": "Flink is not installed (`make flink`)"}
    md = "\n".join(kafka(_kafka_result(missing), ""))
    assert "Not measured: Flink is not installed (`make flink`)." in md
    assert findings({"kafka": _kafka_result(missing)})[1].endswith("(`make flink`)).")


# -- the window kinds' read-back ------------------------------------------------------------------


def test_lateness_input_has_its_phases(tmp_path: Path) -> None:
    """The adaptive-lateness section's input: every event once, files in arrival order with
    mtimes at their slice's end, calm delays under a few seconds, the burst partition's
    delays in the burst 20-40 s; the same files again from the same seed."""
    from datetime import datetime

    from bench.lateness import BURST_DELAY_MS, START_MS, LatenessBench, write_input

    b = LatenessBench(rate=40, phase_s=(10, 10, 10), file_s=5, tail_s=10)
    written = write_input(tmp_path / "a", b)
    assert written["events"] == 40 * 40
    files = sorted((tmp_path / "a").iterdir())
    assert len(files) == written["files"]
    delays: dict[str, list[int]] = {"calm": [], "burst": []}
    seen = []
    for f in files:
        end_ms = round(os.path.getmtime(f) * 1000)
        assert (end_ms - START_MS) % (b.file_s * 1000) == 0
        for line in f.read_text().splitlines():
            event = json.loads(line)
            t = round(datetime.fromisoformat(event["event_time"]).timestamp() * 1000)
            # arrived within the file's slice: after its event time, before the slice's end
            assert t <= end_ms
            seen.append(event["event_id"])
            in_burst = b.phase_bounds_ms[1][0] <= t < b.phase_bounds_ms[1][1]
            kind = "burst" if in_burst and event["partition"] == 3 else "calm"
            delays[kind].append(end_ms - t)
    assert len(seen) == len(set(seen)) == written["events"]
    assert max(delays["calm"]) < 5_000 + b.file_s * 1000
    lo, hi = BURST_DELAY_MS
    assert lo <= min(delays["burst"]) and max(delays["burst"]) <= hi + b.file_s * 1000
    write_input(tmp_path / "b", b)
    assert [f.read_bytes() for f in files] == [
        f.read_bytes() for f in sorted((tmp_path / "b").iterdir())
    ]


def _lateness_engine(pcts: list[float], means: list[int], bounds: list[int]) -> dict[str, Any]:
    phases = ["calm", "burst", "calm again"]
    return {
        "completeness": [
            {"phase": ph, "events": 1000, "late": round(10 * (100 - p)), "completeness_pct": p}
            for ph, p in zip(phases, pcts, strict=True)
        ],
        "emit_latency": [
            {"phase": ph, "windows": 4, "windows_missing": 0, "mean_ms": m, "p99_ms": m + 1000}
            for ph, m in zip(phases, means, strict=True)
        ],
        "bounds": [
            {"t_s": 5.0 * i, "bounds_ms": {"0": 1000, "3": b}} for i, b in enumerate(bounds)
        ],
    }


def test_lateness_verdict_and_report(tmp_path: Path) -> None:
    """The acceptance (auto reaches the target in every phase, with a lower mean emit latency
    over all windows than the burst-tuned bound), its targets row, tables and the chart."""
    from bench.lateness import verdict
    from bench.report import lateness as L

    engines = {
        "fixed_calm": _lateness_engine([100.0, 80.0, 99.0], [7_000, 7_000, 7_000], [2_000]),
        "fixed_burst": _lateness_engine([100.0, 100.0, 100.0], [45_000, 45_000, 45_000], [40_000]),
        "auto": _lateness_engine([100.0, 99.5, 100.0], [6_000, 40_000, 50_000], [1_000, 40_960]),
    }
    v = verdict(engines, 99.9)
    assert v == {
        "auto_reaches_target": [True, False, True],
        "auto_mean_latency_below_burst": [True, True, False],
        "auto_overall_mean_ms": 32_000,  # 4 windows a phase: (6 + 40 + 50) / 3 s
        "burst_overall_mean_ms": 45_000,
        "auto_overall_mean_below_burst": True,
        "met": False,  # the burst's 99.5 % misses the target
    }
    reached = {**engines, "auto": _lateness_engine([100.0] * 3, [6_000, 46_000, 50_000], [1])}
    assert verdict(reached, 99.9)["met"] is True  # slower in two phases, faster over all
    slower = {**engines, "auto": _lateness_engine([100.0] * 3, [40_000, 46_000, 50_000], [1])}
    assert verdict(slower, 99.9)["met"] is False
    la = {
        "events": 3000, "rate": 400, "partitions": 4, "phase_s": [15, 15, 20], "tail_s": 60,
        "calm_mean_delay_ms": 250.0, "burst_partitions": [3], "burst_delay_ms": [20_000, 40_000],
        "file_s": 10, "calm_bound_ms": 2_000, "burst_bound_ms": 40_000, "target_pct": 99.9,
        "lateness_min_ms": 1_000, "lateness_max_ms": 60_000, "window_ms": 5_000,
        "engines": engines, **v,
    }  # fmt: skip
    rows: list[list[Any]] = []
    L.target_row(la, lambda *cells: rows.append(list(cells)))
    ((section, _, measured, met),) = rows
    assert section == "lateness" and met is False
    assert measured.startswith("calm: 100.000 %, mean 6.0 s vs 45.0 s; burst: 99.500 %")
    md = "\n".join(L.section(la, ""))
    assert "| auto | burst | 99.500 % | 5 / 1,000 | 40.0 s | 41.0 s | 4 |" in md
    assert "in 2 of 3 phases" in md and L.PNG_NAME in md
    assert "over all measured windows is 32.0 s against the burst-tuned bound's 45.0 s" in md
    L.render_chart(la, tmp_path / L.PNG_NAME)
    assert (tmp_path / L.PNG_NAME).read_bytes().startswith(b"\x89PNG")


def test_current_windows_drop_retracted_sessions_and_find_overlaps(spark, tmp_path: Path) -> None:
    """The windows section's current set: highest revision per window and key minus the
    retracted (docs/semantics.md, "Session windows": the bridged sessions example, D = 10 s),
    a NULL `retracted` (fixed windows) kept, overlapping current windows of a key counted."""
    from datetime import UTC, datetime, timedelta

    from bench.windows import KINDS, cross_check, current_windows
    from tally import tables as T

    t0 = datetime(2026, 11, 21, tzinfo=UTC)

    def row(key: str, start: int, end: int, count: int, revision: int, retracted: object):
        at = t0 + timedelta(seconds=40)
        return (
            t0 + timedelta(seconds=start), t0 + timedelta(seconds=end), key, count, 100 * count,
            revision, at, at, 0, "app", True, retracted, "USD",
        )  # fmt: skip

    rows = [
        # two sessions emitted, then bridged by an event at 12 s: both retracted, one current
        row("a", 0, 14, 2, 1, False),
        row("a", 20, 35, 2, 1, False),
        row("a", 0, 14, 2, 2, True),
        row("a", 20, 35, 2, 2, True),
        row("a", 0, 35, 5, 2, False),
        row("a", 40, 50, 1, 1, False),  # a later session of the same key, touching none
        row("b", 0, 60, 3, 1, None),  # a fixed window, from before `retracted`
        row("b", 0, 60, 4, 2, None),  # its allowed-late revision
        row("c", 0, 20, 1, 1, False),  # two current windows of one key overlapping: a bug
        row("c", 10, 30, 1, 1, False),
    ]
    warehouse = str(tmp_path / "warehouse")
    table = T.STREAM_AGGREGATES
    spark.createDataFrame(rows, table.schema()).write.format("delta").save(
        T.table_path(warehouse, table.name)
    )
    got = current_windows(spark, warehouse, disjoint=True)
    assert got == {
        "windows_emitted": 7,
        "retraction_rows": 2,
        "current_windows": 5,
        "current_events": 5 + 1 + 4 + 2,
        "overlapping_windows": 1,
    }
    assert current_windows(spark, warehouse, disjoint=False)["overlapping_windows"] is None

    # the checks of a drained run with these windows: 12 events counted + 2 late = 15 - 1
    kinds = {k.name: k for k in KINDS}
    run = {
        **got,
        "overlapping_windows": 0,
        "input_lines": 20,
        "drained": True,
        "open_window_events": 0,
        "valid_events": 15,
        "duplicates": 1,
        "late_events": 2,
    }
    assert cross_check(run, kinds["session"], 20)["exact"]
    tumbling = cross_check(run, kinds["tumbling"], 20)  # tumbling never retracts
    assert tumbling["checks"]["retractions"] is False and not tumbling["exact"]
    assert cross_check({**run, "overlapping_windows": 1}, kinds["session"], 20)["checks"] == {
        "input_lines": True,
        "drained": True,
        "pairs": True,
        "retractions": True,
        "disjoint": False,
    }
    assert not cross_check({**run, "late_events": 1}, kinds["session"], 20)["exact"]


# -- the sections whose processes only the recorded quick run measured -------------------------


def test_kafka_micro_batches_hold_the_throughput_runs_lines() -> None:
    """The Kafka runs' records a micro-batch: the file runs' lines a micro-batch, rounded up,
    so both read the same input in the same number of batches."""
    from bench.kafka_source import records_per_trigger

    assert records_per_trigger(20_100, 10, 2) == 4_020  # 5 batches
    assert records_per_trigger(20_101, 10, 2) == 4_021  # never a sixth batch of one record
    assert records_per_trigger(10, 3, 2) == 5  # 2 batches, the last file alone
    assert records_per_trigger(7, 1, 10) == 7  # fewer files than a trigger: one batch


def test_scaleout_books_are_the_reconciliations_numbers_without_table_versions() -> None:
    """What scale-out compares across configurations: `tally reconcile`'s summary without its
    table versions (commits, not numbers) and without the validation lines after it."""
    from bench.scaleout import books

    def stdout(versions: str, batch: int) -> str:
        return (
            f"Reconciliation of 2026-11-21 (UTC, windows: tumbling 1m; {versions}): 96 "
            f"windows;\nbatch {batch:,} events / 5,000,\n  stream 3,990 events / 4,990; "
            "unexplained 0 windows. BALANCED.\nvalidation: 12 expectations, 0 failed\n"
        )

    local = books(stdout("events v3, stream_aggregates v4, late_events v2", 4_000))
    assert local == (
        "96 windows; batch 4,000 events / 5,000, stream 3,990 events / 4,990; "
        "unexplained 0 windows. BALANCED."
    )
    assert books(stdout("events v1, stream_aggregates v9, late_events v1", 4_000)) == local
    assert books(stdout("events v3, stream_aggregates v4, late_events v2", 4_001)) != local


def test_plain_engines_read_every_line(spark, tmp_path: Path) -> None:
    """The throughput section's plain Spark engines (`bench.plain_job`, in this session
    rather than as their own processes): the durable engine keeps every raw line in bronze and
    aggregates every JSON row, the aggregation-only engine the same rows in as many batches as
    tally's, the batch ceiling every valid event; the outputs read back as the section reads
    them."""
    from bench.common import Backlog, StreamShape
    from bench.engines import plain_outputs
    from bench.plain_job import run_mode
    from bench.speed import generate_backlog, input_facts

    data = tmp_path / "input"
    facts = input_facts(generate_backlog(data, Backlog(2_000, 4, seed=7)))
    assert facts["malformed_lines"] > 0 and facts["empty_lines"] > 0  # something to skip
    shape = StreamShape(60_000, 30_000, 2)
    got = {}
    for mode in ("durable", "agg", "batch"):
        out = tmp_path / mode
        queries = run_mode(spark, mode, str(data), out, shape)
        got[mode] = {**plain_outputs(spark, mode, str(out)), "queries": queries}
    assert got["durable"]["bronze_rows"] == facts["lines"]  # malformed lines kept as text
    assert got["durable"]["queries"]["bronze"]["input_rows"] == facts["lines"]
    for mode in ("durable", "agg"):
        agg = got[mode]["queries"]["agg"]
        assert agg["input_rows"] == facts["lines"] - facts["empty_lines"], mode
        assert agg["batches"] == 2, mode  # 4 files, 2 a trigger
        # rows behind the watermark are dropped, windows still open at the end not written
        assert 0 < got[mode]["output_events"] + agg["dropped_by_watermark"] <= agg["input_rows"]
    # the same aggregation query on the same batches, with or without bronze beside it
    for key in ("output_rows", "output_events"):
        assert got["durable"][key] == got["agg"][key], key
    assert got["batch"]["queries"] == {}
    # the batch ceiling drops nothing: every valid event (and malformed lines that still have
    # the four fields plain Spark reads), more than the streaming aggregation wrote
    assert facts["valid_events"] <= got["batch"]["output_events"] <= agg["input_rows"]
    assert got["batch"]["output_events"] > got["agg"]["output_events"]


def test_latency_counts_the_window_ends_inside_the_measured_span() -> None:
    from bench.latency import _expected_ends

    assert _expected_ends(10_001, 40_000, 10_000) == [20_000, 30_000, 40_000]
    assert _expected_ends(10_000, 39_999, 10_000) == [10_000, 20_000, 30_000]
    assert _expected_ends(10_001, 19_999, 10_000) == []


# -- the quick benchmark ------------------------------------------------------------------------
# `tally bench --quick` runs every section: ~13 min on 2 cores, most of it in processes (six
# engines for the throughput, a Kafka broker, a standalone cluster and S3, three window-kind
# and three adaptive-lateness streams, the big file's two) whose components the sections' own
# integration tests start too. test_quick_benchmark runs MEASURED for real, the sections whose
# harness nothing else runs (the in-session latency stream, the nightly stages timed against
# DuckDB and plain Spark SQL, the curve: ~3-4 min), and carries the other sections over from
# RECORDED, one real quick run's benchmarks.json, as `tally bench --only` carries them;
# test_recorded_quick_run checks the recording as a fresh run is checked and renders the report
# from it. The carried sections' runners (bench.speed.speed_section, state.state_section,
# kafka_source, scaleout, windows.windows_section, lateness.lateness_section,
# bigfile.bigfile_section, backlog.backlog_section, longhaul.longhaul_section) run end to end
# only when the recording is made again. What they run is tested on its own: the stream
# process in test_exactly_once, test_catchup, test_housekeeping and test_audit_pins; the state
# section's poller and flatness rule, the trace and the phase tables above. Recording is due
# when a section's results change shape (test_recorded_quick_run fails):
#
#   TALLY_FLINK_HOME=/nonexistent tally bench --quick --out /tmp/q --spark-master 'local[2]' \
#       --shuffle-partitions 2 && cp /tmp/q/benchmarks.json tests/data/bench_quick.json
#
# then `pytest tests/test_bench.py -k recorded` checks the new recording.

RECORDED = Path(__file__).parent / "data" / "bench_quick.json"
MEASURED = ("latency", "nightly", "curve")


def _recorded() -> dict[str, Any]:
    return json.loads(RECORDED.read_text(encoding="utf-8"))


def _check_speed(sp: dict[str, Any]) -> None:
    """1. throughput: every engine ran as a process and read every line."""
    from bench.phases import PHASES
    from bench.run import QUICK

    assert sp["all_lines_accounted"]
    for name in ("tally", "tally_prev"):
        for run in sp["runs"][name]:
            assert run["input_lines"] == sp["lines"]
            assert run["valid_events"] == sp["valid_events"]
            assert run["quarantined"] == sp["malformed_lines"]
            # emitted windows + late side output + still-open windows = distinct valid events
            assert run["accounted_events"] == sp["distinct_events"]
    assert sp["runs"]["tally"][0]["batches"] == QUICK.speed_files // QUICK.files_per_trigger
    for name in ("durable", "agg", "agg_prev"):
        for run in sp["runs"][name]:
            # the JSON reader skips blank lines
            assert run["input_rows"] == sp["lines"] - sp["empty_lines"], name
            assert sp["valid_events"] <= run["output_events"] <= sp["lines"]
    for run in sp["runs"]["durable"]:
        assert run["bronze_rows"] == sp["lines"]  # every raw line kept
    for run in sp["runs"]["batch"]:
        assert sp["valid_events"] <= run["output_events"] <= sp["lines"]
    for name, stats in sp["events_per_s"].items():
        assert stats["median"] > 0, name
        assert sp["peak_rss_mb"][name] > 100, name  # a JVM was measured
    median = sp["events_per_s"]
    assert sp["ratio_tally_durable"] == pytest.approx(
        median["tally"]["median"] / median["durable"]["median"]
    )
    run = sp["tally_median_run"]
    assert {p["phase"] for p in run["phases"]} == set(PHASES)
    split = run["wall_split"]
    assert split["startup_s"] > 0
    assert split["startup_s"] + split["in_batches_s"] <= run["seconds"]


def _check_state(st: dict[str, Any]) -> None:
    """2./4. fixed cost and state from one run of 10x the batches."""
    from bench.phases import PHASES
    from bench.run import QUICK

    assert len(st["batches"]) == QUICK.state_files // QUICK.files_per_trigger
    assert st["all_lines_accounted"]
    fc = st["fixed_cost"]
    assert fc["median_batch_ms"] > 0 and fc["met"] == (fc["median_batch_ms"] <= 1000)
    assert {p["phase"] for p in fc["phases"]} == set(PHASES)
    assert max(b["open_windows"] for b in st["batches"]) > 0
    sampled = [b for b in st["batches"] if b["state_bytes"]]
    assert len(sampled) >= len(st["batches"]) // 2  # the poller saw most batches' state
    assert all(b["windows_bytes"] > 0 and b["dedup_bytes"] > 0 for b in sampled)
    assert st["flat"]["peak_rss_mb"]["sampled"] > 0
    assert set(st["flat"]) == {"open_windows", "state_bytes", "batch_ms", "peak_rss_mb"}


def _check_latency(lat: dict[str, Any]) -> None:
    """3. latency: windows were measured."""
    from bench.run import QUICK

    tally_latency = lat["engines"]["tally"]
    assert tally_latency["windows"] > 0 and tally_latency["p50_ms"] > 0
    assert lat["target_ms"] == QUICK.latency_lateness_ms + 2 * QUICK.latency_trigger_ms


def _check_kafka(ka: dict[str, Any], sp: dict[str, Any]) -> None:
    """8. Kafka: both engines read every published record (the throughput section's input)."""
    assert ka["records"] == ka["lines"] == sp["lines"]
    assert ka["all_records_accounted"] and ka["tally"]["input_lines"] == ka["records"]
    assert ka["tally"]["accounted_events"] == sp["distinct_events"]
    assert sp["valid_events"] <= ka["plain"]["output_events"] <= ka["records"]
    assert ka["ratio"] == pytest.approx(
        ka["runs"]["tally"]["events_per_s"] / ka["runs"]["plain"]["events_per_s"]
    )
    assert ka["flink"]["not_measured"] and ka["flink"]["runs"] == {}


def _check_scaleout(so: dict[str, Any]) -> None:
    """9. scale-out: the day reconciles on the cluster with the warehouse on S3."""
    from bench.run import QUICK

    assert list(so["runs"]) == list(QUICK.scaleout_configurations)
    books = so["runs"]["cluster_s3"]["books"]
    assert f"batch {QUICK.scaleout_events:,} events" in books, books
    assert "unexplained 0 windows" in books and "BALANCED" in books, books
    assert so["runs"]["cluster_s3"]["warehouse"].startswith("s3a://")
    assert so["runs"]["cluster_s3"]["master"].startswith("spark://127.0.0.1:")
    assert all(0 < t < 120 for t in so["startup_s"].values())


def _check_windows(wi: dict[str, Any]) -> None:
    """10. window kinds: tumbling, hopping and sessions on one input, every (event, window)
    pair accounted for exactly after the drain (current windows: retracted sessions dropped)."""
    from bench.run import QUICK

    assert wi["kind_order"] == ["tumbling", "hopping", "session"]
    assert wi["kinds"]["hopping"]["flags"] == ["--window-slide", "12s"]
    assert wi["kinds"]["hopping"]["windows_per_event"] == 5
    assert wi["kinds"]["session"]["flags"] == ["--window-slide", "0ms", "--session-gap", "10s"]
    assert wi["kinds"]["session"]["windows_per_event"] == 1
    assert wi["same_input"] and wi["all_exact"]
    for name, kind in wi["kinds"].items():
        (run,) = wi["runs"][name]  # quick: one repetition
        assert run["input_lines"] == wi["lines"], name
        assert run["batches"] == QUICK.windows_files // QUICK.files_per_trigger + 1  # + drain
        assert run["drained"] and run["open_window_events"] == 0, name
        assert run["valid_events"] == wi["valid_events"], name
        assert run["non_duplicate_events"] == wi["distinct_events"], name
        # current windows' counts + late rows = windows per event x non-duplicate events
        assert run["emitted_events"] + run["late_events"] == (
            kind["windows_per_event"] * wi["distinct_events"]
        ), name
        assert run["exact"], (name, run["checks"])
        # disjoint kinds: no two current windows of a key overlap; hopping's are not counted
        assert run["overlapping_windows"] == (0 if kind["disjoint"] else None), name
        assert kind["retracts"] or run["retraction_rows"] == 0, name
        assert wi["events_per_s"][name]["median"] > 0 and wi["peak_rss_mb"][name] > 100
    hop, tum = wi["runs"]["hopping"][0], wi["runs"]["tumbling"][0]
    ses = wi["runs"]["session"][0]
    assert hop["counted_pairs"] == 5 * tum["counted_pairs"]
    assert hop["windows_emitted"] > tum["windows_emitted"]
    assert ses["counted_pairs"] == tum["counted_pairs"]
    # some events share a session (quick: ~4 events a key a day, so only a few do)
    assert 0 < ses["current_windows"] < ses["current_events"]
    assert wi["current"]["session"]["current_windows"] == ses["current_windows"]
    assert wi["ratio_to_baseline"]["hopping"] == pytest.approx(
        wi["events_per_s"]["hopping"]["median"] / wi["events_per_s"]["tumbling"]["median"]
    )


def _check_lateness(la: dict[str, Any]) -> None:
    """11. adaptive lateness: one input, three engines, every phase measured."""
    assert set(la["engines"]) == {"fixed_calm", "fixed_burst", "auto"}  # the JSON sorts keys
    counts = [c["events"] for c in la["engines"]["auto"]["completeness"]]
    assert all(n > 0 for n in counts)
    for name, run in la["engines"].items():
        assert [c["events"] for c in run["completeness"]] == counts, name  # the same input
        assert all(e["windows"] > 0 for e in run["emit_latency"]), name
        assert [c["phase"] for c in run["completeness"]] == ["calm", "burst", "calm again"]
    # the burst's 20-40 s delays are late under the calm bound
    assert la["engines"]["fixed_calm"]["completeness"][1]["late"] > 0
    auto_bounds = {v for b in la["engines"]["auto"]["bounds"] for v in b["bounds_ms"].values()}
    assert auto_bounds
    assert all(la["lateness_min_ms"] <= v <= la["lateness_max_ms"] for v in auto_bounds)
    assert la["met"] == (all(la["auto_reaches_target"]) and la["auto_overall_mean_below_burst"])


def _check_bigfile(bf: dict[str, Any]) -> None:
    """5. one big file: the same results as the split input."""
    assert bf["single_file_bytes"] == bf["input_bytes"]
    # the event log holds every valid event the progress rows counted
    assert bf["comparison"]["events"]["single"] == bf["runs"]["split"]["valid_events"]
    assert bf["equal"], bf["comparison"]
    assert bf["all_lines_accounted"]
    assert all(run["peak_rss_mb"] > 100 for run in bf["runs"].values())


def _check_backlog(bl: dict[str, Any]) -> None:
    """12. catch-up: several days a batch, every line counted, the driver JVM measured."""
    from bench.run import QUICK

    assert len(bl["batches"]) == QUICK.backlog_days // QUICK.backlog_days_per_batch
    assert sum(b["input_lines"] for b in bl["batches"]) == bl["input_lines"] == bl["lines"]
    assert bl["event_rows"] == bl["valid_lines"] == bl["valid_events"]
    assert bl["all_lines_counted"] and bl["met"]
    assert bl["peak_jvm_rss_mb"] > 100 and bl["peak_tree_rss_mb"] > 100  # JVMs measured
    assert all(b["seconds"] > 0 for b in bl["batches"])
    assert bl["batch_s"]["max"] == max(b["seconds"] for b in bl["batches"])
    # the same files behind a skewed clock: all of it counted, nothing closed, named once
    sk = bl["skewed"]
    assert "failed" not in sk and sk["met"], sk
    assert len(sk["batches"]) == len(bl["batches"])
    assert sk["input_lines"] == bl["lines"] and sk["event_rows"] == bl["valid_lines"]
    assert sk["clock_skewed_events"] == sk["valid_events"] > 0 and sk["windows_emitted"] == 0
    assert [b["open_windows"] for b in sk["batches"]] == sorted(
        b["open_windows"] for b in sk["batches"]
    )
    assert sk["batches"][-1]["open_windows"] > bl["batches"][-1]["open_windows"]
    (warning,) = sk["clock_skew_lines"]
    assert warning.startswith("clock skew: batch 0: ") and "--clock wall" in warning


def _check_history(hi: dict[str, Any]) -> None:
    """14. the nightly with history: a timed whole nightly per warehouse and round; every
    history warehouse built its index over its history and caught up the day in each run."""
    from bench.run import QUICK

    sizes = {s["history_days"]: s for s in hi["sizes"]}
    assert sorted(sizes) == [0, *QUICK.history_days]
    for days, size in sizes.items():
        assert len(size["nightly_s"]) == QUICK.history_rounds and size["median_s"] > 0, days
        if days:
            assert size["build_lines"] == days * QUICK.history_events_per_day
            assert size["index_bytes_per_line"] > 0 and size["build_s"] > 0
            assert len(size["catch_up_s"]) == QUICK.history_rounds  # one catch-up a run
    largest = sizes[max(QUICK.history_days)]["median_s"]
    assert hi["ratio"] == pytest.approx(largest / sizes[0]["median_s"])
    assert hi["met"] == (hi["ratio"] <= hi["target"]) and len(hi["full_s"]) == QUICK.history_rounds
    _check_restatements(hi["restatements"])


def _check_restatements(rs: dict[str, Any]) -> None:
    """14's restatements: the check at 1 and all reconciled dates found nothing; after the
    late file exactly the restated date is reopened (the stream's count: the copy is a
    duplicate) and recorded, with the late events and their amount."""
    from bench.restatements import LATE_AMOUNTS
    from bench.run import QUICK

    assert rs["dates_reconciled"] == QUICK.restate_days - 1
    assert rs["checks_without_signal_found"] == 0
    assert rs["check_one_s"] > 0 and rs["check_all_s"] > 0
    assert rs["ledger_reopened"] == [rs["restated_date"]]
    # the copy is days old, beyond the stream's dedup horizon: new to the stream, counted in
    # its signal; the exact check leaves it out
    assert rs["ledger_count"] == len(LATE_AMOUNTS) + 1
    assert (rs["restated_events"], rs["restated_amount"]) == (len(LATE_AMOUNTS), sum(LATE_AMOUNTS))
    assert rs["false_flags"] == 0


def _check_longhaul(lh: dict[str, Any]) -> None:
    """13. the long haul: every run read every line of its input; in the cost runs the day
    before midnight closed and housekeeping packed it and vacuumed every table; the replay
    compacted its closed dates and left its commits in the log; the nightly, maintenance and
    cleanup ran, the pinned versions are gone, and every date still reproduces."""
    from bench.run import QUICK

    live = lh["live"]
    assert live["files"] == QUICK.longhaul_live_minutes * 60_000 // live["trigger_ms"]
    batches = {"live": live["files"], "replay": QUICK.longhaul_days * QUICK.longhaul_files_per_day}
    lines = {"live": live["lines"], "replay": lh["lines"]}
    assert set(lh["runs"]) == set(QUICK.longhaul_modes) and lh["all_lines_counted"]
    assert live["runs"] == ["off", "thread"] and lh["runs"]["replay"]["input"] == "replay"
    for mode, run in lh["runs"].items():
        shape = run["input"]
        assert run["batches"] == batches[shape] and run["input_lines"] == lines[shape], mode
        assert run["events_per_s"] > 0 and run["batch_ms"]["p99"] >= run["batch_ms"]["p50"] > 0
    thread, off = lh["ratios"]["thread"], lh["runs"]["off"]
    assert thread["throughput"] == pytest.approx(
        lh["runs"]["thread"]["events_per_s"] / off["events_per_s"]
    )
    assert set(lh["ratios"]) == set(lh["cost_met"]) == {"thread"}  # the replay is not a cost run
    # the cost runs: the day before midnight closed inside the run; off kept a small file or
    # more a batch, thread packed it; both appended the same
    day_before = live["start"][:10]
    off_layout, thread_layout = lh["layout"]["off"], lh["layout"]["thread"]
    assert off_layout["events"]["files_by_date"][day_before] > 4
    assert thread_layout["events"]["files_by_date"][day_before] <= 4
    assert "optimize" not in off_layout["events"]["commits_by_kind"]
    assert (
        thread_layout["events"]["commits_by_kind"]["append"]
        == off_layout["events"]["commits_by_kind"]["append"]
    )
    # every table vacuumed once in the cost run (its VACUUM interval is half the run)
    assert "--vacuum-interval" in lh["runs"]["thread"]["flags"]
    assert "--vacuum-interval" not in lh["runs"]["replay"]["flags"]
    assert lh["housekeeping"]["thread"]["actions"].get("vacuum", 0) >= 5
    closed = lh["audit"]["closed_dates"]
    replay_layout = lh["layout"]["replay"]
    assert closed and all(d in replay_layout["events"]["files_by_date"] for d in closed)
    assert lh["max_files_per_closed_date"] <= 4 and lh["closed_files_met"]
    for mode in ("thread", "replay"):  # the closed dates packed on either input
        assert lh["layout"][mode]["events"]["commits_by_kind"]["optimize"] > 0, mode
        assert lh["housekeeping"][mode]["actions"].get("compact_closed", 0) >= 1, mode
        assert lh["housekeeping"][mode]["failed"] == 0
    audit = lh["audit"]
    assert [n["date"] for n in audit["nightly"]] == closed
    assert all(n["code"] in (0, 1) for n in audit["nightly"])  # run recorded either way
    assert audit["maintain"]["code"] == 0
    pins = audit["pinned_versions"]
    assert pins["pinned"] >= len(closed) and pins["unreadable"] == pins["pinned"]
    assert audit["reproduce_available"]
    assert [r["date"] for r in audit["reproduce"]] == closed
    assert all(r["outcome"] == "MATCH" for r in audit["reproduce"]), audit["reproduce"]
    assert lh["reproduce_met"]


def _check_nightly(r: dict[str, Any]) -> None:
    """6./7. nightly per stage, the same totals as DuckDB, balanced; the curve ran."""
    for size in r["nightly"]["sizes"]:
        for stage in ("reaggregate_s", "diff_s", "validate_s", "report_s"):
            assert size[stage] > 0, stage
        assert size["duckdb_json"]["seconds"] > 0 and size["duckdb_parquet"]["seconds"] > 0
        assert size["same_totals_as_duckdb"], size
        assert size["duckdb_parquet"]["events"] == size["tally_events"]
        if "spark_plain" in size:  # recorded runs before 2026-11-27 did not time it
            assert size["spark_plain"]["seconds"] > 0 and size["ratio_spark_plain"] > 0
            assert size["spark_plain"]["events"] == size["tally_events"]
        if "paired" in size:  # recorded runs before 2026-11-29 did not alternate them
            paired = size["paired"]
            assert len(paired["tally_s"]) == len(paired["plain_s"]) == 2
            assert min(paired["tally_s"] + paired["plain_s"]) > 0
            ratio = statistics.median(paired["tally_s"]) / statistics.median(paired["plain_s"])
            assert paired["ratio"] == pytest.approx(ratio)
        assert size["balanced"] and size["report_exists"]
    assert r["curve"]["seconds"] > 0 and r["curve"]["curve_events"] > 0


# every section's heading in benchmarks.md, in SECTIONS' order
HEADINGS = {
    "speed": "## 1. Throughput: whole processes on the same backlog",
    "latency": "## 3. Latency at a steady rate",
    "state": "## 4. State over a 10× longer run",
    "kafka": "## 8. Kafka: a pre-filled topic",
    "scaleout": "## 9. Scale-out: a standalone cluster and S3",
    "windows": "## 10. Window kinds: tumbling, hopping and session windows on the same input",
    "bigfile": "## 5. One big input file",
    "nightly": "## 6. Nightly job",
    "curve": "## 7. Lateness curve",
    "lateness": "## 11. Adaptive lateness: calm, burst, calm",
    "backlog": "## 12. Catch-up after an outage: a backlog several days a micro-batch",
    "longhaul": "## 13. The long haul: many days at small micro-batches, housekeeping off and on",
    "history": "## 14. The nightly with history: the cost of the day, not of the log",
}


def _check_report(r: dict[str, Any], out: Path) -> str:
    """The outputs: every section with numbers, the charts, the raw numbers; the markdown."""
    from bench.report import JSON_NAME, MD_NAME, PNG_NAME
    from bench.report.lateness import PNG_NAME as LATENESS_PNG
    from bench.run import SECTIONS

    md = (out / MD_NAME).read_text()
    for heading in (
        "## Targets",
        "## Findings",
        *HEADINGS.values(),
        "### Where tally's time goes",
        "## 2. Per-batch fixed cost",
        "session (gap 10s)",
    ):
        assert heading in md, heading
    assert f"**{r['speed']['ratio_tally_durable']:.2f}**" in md
    assert f"{r['nightly']['sizes'][-1]['events']:,}" in md
    assert len([f for f in r["findings"] if "MISSED" in f or "met" in f]) >= 4
    png = (out / PNG_NAME).read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert (out / LATENESS_PNG).read_bytes().startswith(b"\x89PNG")
    raw = json.loads((out / JSON_NAME).read_text())
    assert raw["speed"]["lines"] == r["speed"]["lines"] and raw["mode"] == "quick"
    assert set(raw["measured"]) == set(SECTIONS)  # every section measured, dated
    return md


def test_recorded_quick_run(tmp_path: Path) -> None:
    """The recording is one complete, clean quick run of the current format that passes every
    check test_quick_benchmark makes of a fresh run; what the harness derives from a run
    (the window kinds' cross-check, the lateness verdict, the findings) agrees with it when
    computed again; the report renders every section's numbers from it."""
    from bench.findings import findings
    from bench.lateness import verdict
    from bench.report import write_outputs
    from bench.run import FORMAT, QUICK, SECTIONS
    from bench.windows import KINDS, cross_check

    r = _recorded()
    assert (r["format"], r["mode"], r["errors"], r["carried"]) == (FORMAT, "quick", {}, [])
    assert set(r["measured"]) == set(SECTIONS) and not r["carry_notes"]
    assert r["preset"] == json.loads(json.dumps(QUICK.__dict__))  # the quick preset of today
    _check_speed(r["speed"])
    _check_state(r["state"])
    _check_latency(r["latency"])
    _check_kafka(r["kafka"], r["speed"])
    _check_scaleout(r["scaleout"])
    _check_windows(r["windows"])
    _check_lateness(r["lateness"])
    _check_bigfile(r["bigfile"])
    _check_nightly(r)
    _check_backlog(r["backlog"])
    _check_longhaul(r["longhaul"])
    _check_history(r["history"])

    # the harness's derived results, again from the recorded runs
    for kind in KINDS:
        assert r["windows"]["kinds"][kind.name]["flags"] == list(kind.flags(QUICK.shape))
        for run in r["windows"]["runs"][kind.name]:
            again = cross_check(run, kind, r["windows"]["lines"])
            assert {k: run[k] for k in again} == again, kind.name
    la = r["lateness"]
    assert {k: la[k] for k in verdict(la["engines"], la["target_pct"])} == verdict(
        la["engines"], la["target_pct"]
    )
    r["findings"] = findings(r)  # today's sentences from the recorded numbers

    out = tmp_path / "out"
    write_outputs(r, out)
    md = _check_report(r, out)
    # each section's own numbers, as the report and the findings state them
    ka, so, wi, bf = r["kafka"], r["scaleout"], r["windows"], r["bigfile"]
    assert f"tally ÷ plain: **{ka['ratio']:.2f}** (no target)" in md
    assert f"tally read {ka['tally']['input_lines']:,} records" in md
    assert "Not measured: Flink is not installed (`make flink`)." in md
    assert f"are equal in every configuration: {so['runs']['cluster_s3']['books']}" in md
    assert f"Scale-out ({so['events']:,} events;" in "\n".join(r["findings"])
    for name in wi["kind_order"][1:]:
        assert f"{wi['kinds'][name]['label']} ÷ tumbling = {wi['ratio_to_baseline'][name]:.2f}" in (
            "\n".join(r["findings"])
        )
    assert "exact in every run." in "\n".join(r["findings"])
    assert f"Results: **equal**; peak RSS one file ÷ {bf['files']} files = ×" in md
    assert f"| {la['engines']['auto']['completeness'][1]['completeness_pct']:.3f} %" in md
    bl = r["backlog"]
    assert f"{bl['input_lines']:,} of {bl['lines']:,} lines counted" in md
    assert "every line counted" in "\n".join(r["findings"])
    assert f"{bl['skewed']['input_lines']:,} of {bl['lines']:,} lines counted; warned 1x" in md
    assert f"The same files timed {bl['skew_days']} days before" in "\n".join(r["findings"])
    lh = r["longhaul"]
    assert f"at most {lh['max_files_per_closed_date']} over" in md
    hi = r["history"]
    assert f"{hi['ratio']:.2f} ({hi['sizes'][-1]['median_s']:.1f} s vs" in md
    assert "Sizing retention, housekept warehouse" in "\n".join(r["findings"])
    for heading in HEADINGS.values():
        assert "carried over" not in md.split(heading)[1].split("\n")[0], heading


@pytest.mark.slow
def test_quick_benchmark(spark, tmp_path: Path) -> None:
    """`tally bench --quick --only latency,nightly,curve` for real, beside the recorded
    run's other sections (carried over, as a partial run carries the earlier results)."""
    from bench.report import JSON_NAME, MD_NAME
    from bench.run import PROJECT_ROOT, SECTIONS, run_bench

    committed = PROJECT_ROOT / "docs" / MD_NAME
    before = committed.read_bytes() if committed.exists() else None
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(RECORDED, out / JSON_NAME)
    recorded = _recorded()
    r = run_bench(
        spark,
        quick=True,
        out_dir=out,
        work_dir=tmp_path / "work",
        command="pytest tests/test_bench.py",
        only=MEASURED,
    )

    assert r["errors"] == {}
    carried = [s for s in SECTIONS if s not in MEASURED]
    assert r["carried"] == carried
    assert set(r["sections_s"]) == set(MEASURED)
    _check_latency(r["latency"])
    _check_nightly(r)
    # the one-time import is timed apart, and the findings say it is in no stage's time
    assert r["nightly"]["library_import_s"] >= 0
    assert any("libraries of validate and report once" in f for f in r["findings"])
    # plain Spark SQL's query is timed at every size, and the findings give its ratio
    assert all("spark_plain" in size for size in r["nightly"]["sizes"])
    assert any("Plain Spark SQL's own query" in f for f in r["findings"])
    # ...and alternated with a second run of each (issue 40's ratio): no verdict at the
    # quick size, but the figures are there
    assert all("paired" in size for size in r["nightly"]["sizes"])
    assert any("Alternated in the same session" in f for f in r["findings"])
    for name in carried:  # the recorded results, as they were, dated when they were measured
        assert r[name] == recorded[name], name
        assert r["measured"][name] == recorded["measured"][name], name
    kafka_findings = [f for f in r["findings"] if f.startswith("Kafka (")]
    assert kafka_findings and all(
        f.endswith(f"(measured {recorded['measured']['kafka']}, carried over)")
        for f in kafka_findings
    )

    md = _check_report(r, out)
    for name, heading in HEADINGS.items():
        label = f" (measured {r['measured'][name]}, carried over from an earlier run)"
        title = md.split(heading)[1].split("\n")[0]
        assert title.endswith(label) == (name in carried), (name, title)
    # the committed results were not touched, and the work directory is gone
    assert (committed.read_bytes() if committed.exists() else None) == before
    assert not (tmp_path / "work").exists()


def test_nightly_counts_each_stage_call_alone(spark) -> None:
    # The bench's session runs every size: a stage's count must not include the earlier sizes'.
    from bench.nightly import _jobs_of

    jobs: dict[str, int] = {}
    counted = []
    for _ in range(3):
        with _jobs_of(spark, "reconcile", jobs):
            spark.range(10).repartition(2).count()
        counted.append(jobs["reconcile"])
    assert counted[0] >= 1
    assert counted == [counted[0]] * 3
