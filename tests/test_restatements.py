"""Dates that change after their run: the scenario of issue 40 part 2, on the real stream.

A day streamed and reconciled, signed off; then a file with 3 late first arrivals for that day
and 1 duplicate. The desk's ledger (delta-rs) shows the date reopened as soon as the stream
committed that batch, before any check; `tally restatements` under policy flag records it
pending with exactly the 3 events and their amount (the duplicate not counted); under policy
rerun within the tolerance it re-runs and signs off automatically (a second run in the run
history, the first still reproducing); beyond the tolerance it re-runs and waits for a
person. A copy of an old event the stream no longer remembers (beyond its dedup horizon)
gives a signal but no change: recorded unchanged, never a restatement.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import reference_model as M
from stream_helpers import InputFile, event_line, run_processor

from batch.reconcile import reconcile, runs_of
from batch.reproduce import verify
from batch.restatements import candidates
from tally import restatements as R
from tally import tables as T
from tally.ledger_reads import Location, read_ledger
from tally.settings import Settings
from tally_app.restatements import settle
from tally_app.signoffs import SignOff, record_signoff

DAY = datetime(2026, 11, 19, tzinfo=UTC).date()
T0 = int(datetime(2026, 11, 19, 10, tzinfo=UTC).timestamp() * 1000)  # the day's events
NEXT = int(datetime(2026, 11, 20, 0, 5, tzinfo=UTC).timestamp() * 1000)  # closes the day
MIN = 60_000
PARAMS = M.Params(window_ms=MIN, lateness_ms=5_000)
FORGETFUL = dataclasses.replace(PARAMS, dedup_horizon_ms=0)  # forgets an id once it may
LATE_AMOUNTS = (700, 11, 5)


def _file(name: str, mtime_ms: int, lines: list[str]) -> InputFile:
    return InputFile(name, mtime_ms, lines)


def _day_batches() -> list[list[InputFile]]:
    """Batch 0: 20 events in the day's 10:00 and 10:01 windows; batch 1: the next day,
    which moves the watermark past the day's windows."""
    day = [event_line(f"e{i}", "ab"[i % 2], 10 * i + 1, T0 + 6_000 * i, 0) for i in range(20)]
    return [
        [_file("b0.jsonl", T0 + 3 * MIN, day)],
        [_file("b1.jsonl", NEXT + MIN, [event_line("n0", "a", 1, NEXT, 0)])],
    ]


def _late_batch(mtime_ms: int) -> list[InputFile]:
    """3 late first arrivals for the day (two windows) and a copy of e0 (a duplicate)."""
    lines = [
        event_line(f"late{i}", "a", amount, T0 + 70_000 * (i % 2) + 1_000, 0)
        for i, amount in enumerate(LATE_AMOUNTS)
    ]
    lines.append(event_line("e0", "a", 1, T0, 0))
    return [_file("late.jsonl", mtime_ms, lines)]


def _settings(warehouse: str, tmp_path: Path, **values: Any) -> Settings:
    return Settings(
        warehouse=warehouse,
        window=MIN,
        spark_master="local[2]",
        shuffle_partitions=2,
        report_dir=str(tmp_path / "reports"),
        gx_root=str(tmp_path / "gx"),
        # three late events and a duplicate among 24 lines, streamed hours after the day on
        # the arrival clock: the scenario, not a validation failure
        late_rate_warn=0.5,
        late_rate_fail=0.9,
        duplicate_rate_max=0.5,
        watermark_lag_max=86_400_000,
        **values,
    )


def _ledger_row(warehouse: str) -> dict[str, Any]:
    rows = read_ledger(Location(warehouse), datetime.now(UTC))
    (row,) = [r for r in rows if r["business_date"] == str(DAY)]
    return row


def _restatements(spark: Any, warehouse: str) -> list[dict[str, Any]]:
    rows = T.read_table(spark, warehouse, T.RESTATEMENTS.name).orderBy("detected_at").collect()
    return [r.asDict() for r in rows]


def reconcile_the_day(spark: Any, warehouse: str, tmp_path: Path) -> datetime:
    """The day streamed, reconciled (balanced) and signed off; returns the run's time."""
    run_processor(spark, warehouse, tmp_path / "in", _day_batches(), PARAMS)
    first_run = datetime(2026, 11, 20, 1, tzinfo=UTC)
    result = reconcile(spark, warehouse, DAY, MIN, now=first_run)
    assert result.balanced and result.summary["batch_count"] == 20
    record_signoff(spark, warehouse, SignOff(DAY, "auto", "tally", first_run, run_time=first_run))
    assert _ledger_row(warehouse)["status"] == "balanced"
    return first_run


@pytest.fixture
def reconciled(spark, warehouse, tmp_path) -> datetime:
    return reconcile_the_day(spark, warehouse, tmp_path)


def test_a_late_first_arrival_reopens_the_date_until_it_is_rerun(
    spark, warehouse, tmp_path, reconciled, tally_cli
) -> None:
    first_run = reconciled
    # the late file: batch 2, after the run
    run_processor(
        spark,
        warehouse,
        tmp_path / "in",
        [_late_batch(NEXT + 2 * 3_600_000)],
        PARAMS,
        first_batch=2,
    )
    # reopened as soon as the stream committed the batch, computed when asked (no check yet):
    # the stream's count knows the copy of e0 is a duplicate
    row = _ledger_row(warehouse)
    assert row["status"] == "reopened"
    assert row["reopened"] == {
        "events": 3,
        "amount": sum(LATE_AMOUNTS),
        "windows": None,
        "verified": False,
    }

    # policy flag: recorded pending, exactly, and `tally restatements` exits 1
    env = {"TALLY_WAREHOUSE": warehouse, "TALLY_WINDOW": "60s", "TALLY_RESTATEMENT_POLICY": "flag"}
    assert tally_cli(["restatements"], **env) == 1
    (pending,) = _restatements(spark, warehouse)
    assert (pending["status"], pending["new_events"], pending["new_amount"]) == (
        R.PENDING,
        3,
        sum(LATE_AMOUNTS),
    )
    assert pending["windows_affected"] == 2 and pending["signal_events"] == 3
    row = _ledger_row(warehouse)
    assert row["status"] == "reopened" and row["reopened"]["verified"] is True
    assert row["reopened"]["windows"] == 2
    # flagged, it waits for someone: an open item
    assert (row["open_item"]["status"], row["open_item"]["kind"]) == ("open", "reopened")
    # checked again with nothing new: the pending row stands, no second row
    assert tally_cli(["restatements"], **env) == 1
    assert len(_restatements(spark, warehouse)) == 1

    # policy rerun within the tolerance: re-run, signed off automatically
    second_run = datetime.now(UTC) + timedelta(hours=1)  # after the command's wall-clock runs
    settings = _settings(
        warehouse,
        tmp_path,
        restatement_policy="rerun",
        restatement_tolerance_events=3,
        restatement_tolerance_amount=sum(LATE_AMOUNTS),
    )
    (settled,) = settle(settings, second_run, spark, tmp_path / "reports")
    assert settled.rerun is not None, settled
    assert settled.status == R.AUTO_ACCEPTED, settled.rerun.validation.describe()
    assert settled.rerun.reconciliation.summary["batch_count"] == 23
    last = _restatements(spark, warehouse)[-1]
    assert last["status"] == R.AUTO_ACCEPTED and last["rerun_time"] is not None
    assert [r["run_number"] for r in runs_of(spark, warehouse, DAY)] == [1, 2]
    row = _ledger_row(warehouse)
    assert row["status"] == "explained_by_late" and row["reopened"] is None
    assert row["signoff"]["decision"] == "auto" and "restatement of run" in row["signoff"]["reason"]
    assert row["open_item"]["status"] == "resolved"  # re-run and signed off by itself
    # the signed-off run stays in the history and still reproduces
    assert verify(spark, warehouse, DAY, first_run, now=second_run, audit_window_ms=10**12).matched

    # one more late first arrival, beyond a tolerance of nothing: re-run, awaits a person
    more = [event_line("late9", "b", 40, T0 + 2_000, 0)]
    run_processor(
        spark,
        warehouse,
        tmp_path / "in",
        [[_file("more.jsonl", NEXT + 4 * 3_600_000, more)]],
        PARAMS,
        first_batch=3,
    )
    strict = dataclasses.replace(settings, restatement_tolerance_events=0)
    (settled,) = settle(strict, second_run + timedelta(hours=1), spark, tmp_path / "reports")
    assert settled.status == R.RERUN
    assert (settled.restatement.change.events, settled.restatement.change.amount) == (1, 40)
    assert len(runs_of(spark, warehouse, DAY)) == 3
    signoff = _ledger_row(warehouse)["signoff"]
    assert signoff["decision"] == "auto" and signoff["superseded"] is True  # the older run's
    item = _ledger_row(warehouse)["open_item"]  # re-run, awaiting a person: open again
    assert (item["status"], item["kind"]) == ("open", "reopened")


def test_a_copy_beyond_the_dedup_horizon_is_no_restatement(
    spark, warehouse, tmp_path, reconciled
) -> None:
    """Batch 2 forgets the day's ids (horizon 0); batch 3's copy of e0 is then new to the
    stream (a signal) but not to the nightly (no change): recorded unchanged, and the date
    is no longer reopened."""
    forget = [[_file("b2.jsonl", NEXT + 2 * MIN, [event_line("n1", "a", 1, NEXT + MIN, 0)])]]
    copy = [[_file("copy.jsonl", NEXT + 3 * MIN, [event_line("e0", "a", 1, T0, 0)])]]
    run_processor(spark, warehouse, tmp_path / "in", forget + copy, FORGETFUL, first_batch=2)
    row = _ledger_row(warehouse)
    assert row["status"] == "reopened" and row["reopened"]["events"] == 1
    settings = _settings(warehouse, tmp_path)
    (settled,) = settle(settings, datetime(2026, 11, 20, 5, tzinfo=UTC), spark, tmp_path)
    assert settled.status == R.UNCHANGED and settled.rerun is None
    (unchanged,) = _restatements(spark, warehouse)
    assert (unchanged["new_events"], unchanged["signal_events"]) == (0, 1)
    assert _ledger_row(warehouse)["status"] == "balanced"
    assert len(runs_of(spark, warehouse, DAY)) == 1


def test_a_full_check_moves_a_quiet_dates_baseline_and_misses_nothing_after(
    spark, warehouse, tmp_path, reconciled
) -> None:
    """Two more batches that do not touch the day: a check of every date finds it quiet and
    records where it read up to (`restatement_sweep`), so the next read of the signal starts
    there (moved again at most every 6 hours); the late file after that still reopens the
    day, exactly."""
    quiet = [
        [
            _file(
                f"q{i}.jsonl",
                NEXT + (2 + i) * MIN,
                [event_line(f"q{i}", "a", 1, NEXT + i * MIN, 0)],
            )
        ]
        for i in range(2)
    ]
    run_processor(spark, warehouse, tmp_path / "in", quiet, PARAMS, first_batch=2)
    (before,) = candidates(spark, warehouse)
    assert set(before.baseline.values()) == {1}  # the run's frontier: batches 0 and 1
    settings = _settings(warehouse, tmp_path, restatement_policy="flag")
    assert settle(settings, datetime(2026, 11, 20, 5, tzinfo=UTC), spark, tmp_path) == []
    (swept,) = T.read_table(spark, warehouse, T.RESTATEMENT_SWEEP.name).collect()
    assert swept["business_date"] == DAY and set(swept["events_frontier"].values()) == {3}
    (after,) = candidates(spark, warehouse)
    assert set(after.baseline.values()) == {3}  # what reads the signal next starts here
    assert _ledger_row(warehouse)["status"] == "balanced"

    # one more quiet batch: a check within 6 hours of the sweep leaves it, one after moves it
    q2 = [[_file("q2.jsonl", NEXT + 4 * MIN, [event_line("q2", "a", 1, NEXT + 2 * MIN, 0)])]]
    run_processor(spark, warehouse, tmp_path / "in", q2, PARAMS, first_batch=4)
    for hour, minute, frontier in ((10, 0, 3), (11, 1, 4)):
        assert (
            settle(settings, datetime(2026, 11, 20, hour, minute, tzinfo=UTC), spark, tmp_path)
            == []
        )
        (swept,) = T.read_table(spark, warehouse, T.RESTATEMENT_SWEEP.name).collect()
        assert set(swept["events_frontier"].values()) == {frontier}, (hour, minute)

    run_processor(
        spark, warehouse, tmp_path / "in", [_late_batch(NEXT + 9 * MIN)], PARAMS, first_batch=5
    )
    row = _ledger_row(warehouse)
    assert row["status"] == "reopened" and row["reopened"]["events"] == 3
    (pending,) = settle(settings, datetime(2026, 11, 20, 12, tzinfo=UTC), spark, tmp_path)
    assert pending.status == R.PENDING
    assert (pending.restatement.change.events, pending.restatement.change.amount) == (
        3,
        sum(LATE_AMOUNTS),
    )


GAINED_COLUMNS = "window_start BIGINT, key STRING, currency STRING, batch_count BIGINT, " + (
    "batch_amount BIGINT"
)


@pytest.mark.parametrize(
    ("recomputed", "recorded", "expected"),
    [
        # (why in the comments) rows: (window start, key, currency, batch count, batch amount)
        (  # one currency: its change
            [(0, "k", "USD", 3, 300)],
            [(0, "k", "USD", 2, 200)],
            (1, 100, 1),
        ),
        (  # two currencies gained: never their sum (1,100), the larger change of one
            [(0, "k", "USD", 3, 300), (0, "k", "JPY", 2, 2000)],
            [(0, "k", "USD", 2, 200), (0, "k", "JPY", 1, 1000)],
            (2, 1000, 2),
        ),
        (  # a loss outweighs a smaller gain elsewhere (signed), a new window counts
            [(0, "k", "USD", 1, 100), (60, "m", "BHD", 1, 5)],
            [(0, "k", "USD", 2, 400)],
            (0, -300, 2),
        ),
        ([(0, "k", "USD", 1, 100)], [(0, "k", "USD", 1, 100)], (0, 0, 0)),  # no change
    ],
)
def test_what_a_date_gained_is_kept_apart_per_currency(
    spark, recomputed: list[tuple], recorded: list[tuple], expected: tuple[int, int, int]
) -> None:
    from batch.restatements import gained

    def rows(values: list[tuple]) -> Any:
        frame = spark.createDataFrame(values, GAINED_COLUMNS)
        return frame.withColumns(
            {
                "window_start": frame["window_start"].cast("timestamp"),
                "window_end": (frame["window_start"] + 60).cast("timestamp"),
            }
        )

    row = gained(rows(recomputed), rows(recorded)).first()
    assert row is not None
    assert (row["events"], row["amount"], row["windows"]) == expected
