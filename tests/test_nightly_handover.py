"""`tally reconcile` in one process hands what the reconciliation read and wrote to validation
and the report (`ReconcileFrames`, `validate_date`'s `sources`, `ReportInputs`) instead of
reading the tables back; the Airflow DAG runs each stage in a process of its own, which reads
them. Both ways must give the same rows, results and report figures: checked on the
reconciliation scenario (every status, late events, a day-late event, a straddling window).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from batch_fixtures import write_inputs
from test_reconcile import DAY, EXPECTED_STATUS, NOW, W, scenario

from batch.reconcile import reconcile, recorded_run
from expectations.report_data import collect_report_data
from expectations.report_read import ReportError, ReportInputs, ReportOptions
from expectations.suites import Thresholds
from expectations.validate import as_read, read_results, validate_date
from tally import tables as T
from tally.arrivals import LINE_IDENTITY
from tally.dates import business_day_bounds
from tally.vocabulary import ARRIVAL_ORDER


def _of_day(spark: Any, warehouse: str, name: str) -> list[dict[str, Any]]:
    rows = T.read_table(spark, warehouse, name).where(f"business_date = DATE'{DAY}'").collect()
    return [r.asDict() for r in rows]


def _by_key(rows: list[Any]) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {(r["window_start"], r["key"]): r.asDict() for r in rows}


def _repeats(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two late repeats of the match window's `m2` beyond the stream's dedup horizon, in
    `events` only: one on its partition 0, one alone on partition 3 (a partition holding
    nothing but a repeat is left out of the report's rates)."""
    (m2,) = [e for e in events if e["event_id"] == "m2" and e["arrival_status"] != "duplicate"]
    later = m2["ingest_time"] + 10 * 86_400_000
    return [
        {**m2, "arrival_status": "late", "ingest_time": later, "batch_id": 90 + p, "partition": p}
        for p in (0, 3)
    ]


def _partition_rates(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The report's rates per partition, in Python: the day's events (by event time) less
    duplicates, less late rows that are not the first arrival of their event_id."""
    lo, hi = business_day_bounds(DAY, "UTC")

    def line(e: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(e[c] for c in LINE_IDENTITY)

    first: dict[str, tuple[Any, ...]] = {}
    for e in sorted(events, key=lambda e: tuple(e[c] for c in ARRIVAL_ORDER)):
        first.setdefault(e["event_id"], line(e))
    counts: dict[int, list[int]] = {}
    for e in events:
        if not lo <= e["event_time"] < hi or e["arrival_status"] == "duplicate":
            continue
        late = e["arrival_status"] == "late"
        if late and first[e["event_id"]] != line(e):  # a repeat: not counted
            continue
        n = counts.setdefault(e["partition"], [0, 0])
        n[0] += 1
        n[1] += late
    return [
        {"partition": p, "events": n, "late": late, "rate": late / n}
        for p, (n, late) in sorted(counts.items())
        if n
    ]


def test_handed_over_frames_are_what_the_tables_hold(spark, warehouse, tmp_path) -> None:
    events, stream, late_rows = scenario()
    events += _repeats(events)
    write_inputs(spark, warehouse, W, events, stream, late_rows)
    result = reconcile(
        spark, warehouse, DAY, W, now=NOW, settings={"window": "7m"}, keep_frames=True
    )
    frames = result.frames
    assert frames is not None
    try:
        # the run and summary rows, and the date's reconciliation rows, as written
        assert frames.run == recorded_run(spark, warehouse, DAY)
        (summary,) = _of_day(spark, warehouse, T.RECONCILIATION_SUMMARY.name)
        assert result.summaries == (summary,)  # one currency: one row, the date's figures
        assert {k: result.summary[k] for k in summary} == summary
        table = T.read_table(spark, warehouse, T.RECONCILIATION.name)
        assert frames.reconciliation.columns == table.columns
        assert frames.reconciliation.is_cached
        held = _by_key(frames.reconciliation.collect())
        assert {r["key"] for r in held.values()} == set(EXPECTED_STATUS)
        assert held == _by_key(table.collect())

        # validation: the same rows from the handed-over frames as from the tables
        version = T.latest_version(spark, warehouse, T.RECONCILIATION.name)
        sources = {
            T.RECONCILIATION.name: (frames.reconciliation, version),
            T.EVENTS.name: (frames.events, result.events_version),
            T.STREAM_AGGREGATES.name: (frames.stream_aggregates, result.stream_aggregates_version),
        }
        gx_root = tmp_path / "gx"
        thresholds = Thresholds.defaults()
        read = validate_date(spark, warehouse, DAY, thresholds, now=NOW, gx_root=gx_root)
        given = validate_date(
            spark, warehouse, DAY, thresholds, now=NOW, gx_root=gx_root, sources=sources
        )
        assert given.results_rows == read.results_rows
        assert not given.success and given.failures == read.failures  # UNEXPLAINED windows
        stored = read_results(spark, warehouse, DAY)
        assert len(stored) == len(given.results_rows) > 10
        assert as_read(given.results_rows) == stored

        # the report's figures: the same from the inputs as from the tables
        options = ReportOptions(current_bound_ms=30_000, gx_root=str(gx_root))
        inputs = ReportInputs(
            reconciliation=frames.reconciliation,
            reconciliation_version=version,
            run=frames.run,
            summaries=result.summaries,
            validation=stored,
        )
        from_tables, rows = collect_report_data(spark, warehouse, DAY, NOW, options)
        rows.unpersist()
        from_inputs, rows = collect_report_data(spark, warehouse, DAY, NOW, options, inputs)
        assert rows is frames.reconciliation and rows.is_cached  # still the caller's
        assert from_inputs == from_tables
        assert from_inputs.headline["explained_count"] > 0 and from_inputs.lateness_hist
        assert from_inputs.partitions == _partition_rates(events)
        assert [p["partition"] for p in from_inputs.partitions] == [0]  # 3: a repeat only
        assert from_inputs.validation == stored
    finally:
        frames.release()
    assert not frames.reconciliation.is_cached


def _log_figures(report: Any) -> tuple[Any, ...]:
    """What the report shows of the event log (and draws from it)."""
    return (
        report.partitions,
        report.lateness_hist,
        report.curve,
        report.curve_source,
        report.recommended_bound_ms,
    )


def test_the_report_takes_the_reconciliations_figures_of_the_log(
    spark, warehouse, capsys, tally_cli
) -> None:
    """The reconciliation writes what the report shows of the event log
    (`reconciliation_partitions`: events and late events per partition, the explaining late
    rows by lateness), and the report takes them: its only source. A run that recorded none
    (a warehouse of an earlier version: no table; figures of another run) is refused in one
    line naming the command that records them, and that command gives the same figures."""
    import shutil

    events, stream, late_rows = scenario()
    events += _repeats(events)
    write_inputs(spark, warehouse, W, events, stream, late_rows)
    options = ReportOptions(current_bound_ms=30_000)
    reconcile(spark, warehouse, DAY, W, now=NOW, settings={"window": "7m"})
    figures = _of_day(spark, warehouse, T.RECONCILIATION_PARTITIONS.name)
    run = recorded_run(spark, warehouse, DAY)
    assert run is not None and {f["run_time"] for f in figures} == {run["run_time"]}

    from_figures, rows = collect_report_data(spark, warehouse, DAY, NOW, options)
    rows.unpersist()
    assert from_figures.partitions == _partition_rates(events)
    assert sum(n for _, n in from_figures.lateness_hist) == from_figures.headline["explained_count"]
    assert from_figures.curve is not None

    # a re-run replaces the date's figures; figures of another run are not taken
    reconcile(spark, warehouse, DAY, W, now=NOW + timedelta(hours=1), settings={"window": "7m"})
    again = _of_day(spark, warehouse, T.RECONCILIATION_PARTITIONS.name)
    assert len(again) == len(figures) and {f["run_time"] for f in again} != {run["run_time"]}
    T.write_table(
        T.read_table(spark, warehouse, T.RECONCILIATION_PARTITIONS.name)
        .selectExpr("*", "run_time - INTERVAL 1 SECOND AS _t")
        .drop("run_time")
        .withColumnRenamed("_t", "run_time"),
        warehouse,
        T.RECONCILIATION_PARTITIONS,
        replace_where=f"business_date = DATE'{DAY}'",
    )
    command = f"`tally reconcile --date {DAY} --reproduce --write`"
    with pytest.raises(ReportError, match="recorded no figures of the event log") as stale:
        collect_report_data(spark, warehouse, DAY, NOW, options)
    assert command in str(stale.value) and "\n" not in str(stale.value)

    # a warehouse reconciled before the table existed: the same one line, from `tally report`
    shutil.rmtree(T.table_path(warehouse, T.RECONCILIATION_PARTITIONS.name))
    assert tally_cli(["report", "--date", str(DAY), "--warehouse", warehouse]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tally: report: ") and err.count("\n") == 1 and command in err

    # the command it names records the figures (the run reproduced at its pins): the same
    argv = command.strip("`").split()[1:]
    assert tally_cli([*argv, "--warehouse", warehouse]) == 0  # MATCH, then written
    reproduced, rows = collect_report_data(spark, warehouse, DAY, NOW, options)
    rows.unpersist()
    assert reproduced.run_time != from_figures.run_time  # the new run's figures
    assert _log_figures(reproduced) == _log_figures(from_figures)
