"""The Spark job (BatchProcessor, real code path) held to the reference model on random streams.

Each example writes its batches as JSONL files with chosen mtimes (arrival clock), runs them
through BatchProcessor.process into a fresh warehouse, reads every table back and compares it
with tests/reference_model.py: aggregates with revisions, late events, quarantine, arrival
statuses, the watermark and counters of every batch. Spark is slow (several Delta commits per
micro-batch), so there are few examples and no shrinking; a failure prints the whole stream.
The examples are the same on every run (tests/conftest.py's hypothesis profile).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
import reference_model as M
import stream_helpers as H
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

SPARK_SETTINGS = settings(
    max_examples=3,  # per policy
    deadline=None,
    phases=[Phase.explicit, Phase.generate],  # shrinking would rerun Spark dozens of times
    suppress_health_check=list(HealthCheck),
)


def multiset_diff(name: str, spark_rows: Sequence[Any], model_rows: Sequence[Any]) -> list[str]:
    got, want = Counter(spark_rows), Counter(model_rows)
    out = [f"{name}: only in Spark: {row}" for row in H.sort_rows((got - want).elements())]
    out += [f"{name}: only in model: {row}" for row in H.sort_rows((want - got).elements())]
    return out


def compare(spark_out: H.Outputs, model_out: H.Outputs) -> list[str]:
    diffs: list[str] = []
    for name in ("aggregates", "late_events", "quarantine", "events"):
        diffs += multiset_diff(name, getattr(spark_out, name), getattr(model_out, name))
    if len(spark_out.progress) != len(model_out.progress):
        diffs.append(
            f"progress: {len(spark_out.progress)} batches in Spark, "
            f"{len(model_out.progress)} in the model"
        )
    for got, want in zip(spark_out.progress, model_out.progress, strict=False):
        for field in H.PROGRESS_FIELDS:
            if field == "idle" and want.drained:
                continue  # the spec says nothing about idleness in the drain batch
            if getattr(got, field) != getattr(want, field):
                diffs.append(
                    f"progress batch {want.batch_id} {field}: Spark {getattr(got, field)!r}, "
                    f"model {getattr(want, field)!r}"
                )
    return diffs


def run_both(spark: Any, root: Any, stream: H.Stream) -> list[str]:
    warehouse = str(root / "warehouse")
    H.run_processor(spark, warehouse, root / "input", stream.batches, stream.params, stream.drain)
    return compare(H.read_outputs(spark, warehouse), H.model_outputs(stream.run_model()))


def draw_forced(data: Any, keep: Any = None, **forced: Any) -> H.Stream:
    """A small stream (2-3 batches of 3-8 lines) with the `forced` strategy arguments, kept
    only when `keep(stream)` (the model is cheap, Spark is not)."""
    strategy = H.streams(min_batches=2, max_batches=3, min_lines=3, max_lines=8, **forced)
    return data.draw(strategy.filter(keep) if keep else strategy, label="stream")


def assert_spark_matches_the_model(spark: Any, root: Any, stream: H.Stream) -> None:
    diffs = run_both(spark, root, stream)
    assert not diffs, "\n".join([stream.describe(), *diffs])


@pytest.mark.parametrize("policy", M.POLICIES)
@SPARK_SETTINGS
@given(data=st.data())
def test_spark_job_matches_the_model(spark, tmp_path_factory, policy: str, data) -> None:
    stream = data.draw(
        H.streams(min_batches=2, max_batches=3, min_lines=2, max_lines=8, policies=[policy]),
        label="stream",
    )
    diffs = run_both(spark, tmp_path_factory.mktemp("stream"), stream)
    assert not diffs, "\n".join([stream.describe(), *diffs])


@settings(SPARK_SETTINGS, max_examples=2)
@given(data=st.data())
def test_hopping_per_source_source_watermarks_and_early_firings_match_the_model(
    spark, tmp_path_factory, data
) -> None:
    # Forced on (the test above draws them too, but its few examples start from the simplest
    # stream): S/H = 2, 6 or 12 windows per event, at least one partition's own bound, and
    # control records carrying source watermarks, early firings every 20 s.
    stream = draw_forced(
        data,
        slides=[5_000],
        min_lateness_overrides=1,
        control_fields=["watermark"],
        early_intervals=[20_000],
    )
    assert stream.params.window_slide_ms == 5_000 and stream.params.lateness_by_partition
    assert stream.params.source_watermark_field == "watermark"
    assert stream.params.early_firing_interval_ms == 20_000
    assert_spark_matches_the_model(spark, tmp_path_factory.mktemp("hopping"), stream)


def waits_and_regresses(stream: H.Stream) -> bool:
    progress = stream.run_model().progress
    return any(row.unheard for row in progress) and any(
        count for row in progress for _, count in row.source_regressions
    )


@settings(SPARK_SETTINGS, max_examples=2)
@given(data=st.data())
def test_expected_partitions_and_source_regressions_match_the_model(
    spark, tmp_path_factory, data
) -> None:
    # Forced on: expected partitions (the stream's own, or one that never reports) and control
    # records; only streams whose model run waits for an unheard partition and records a
    # regressed source watermark are kept.
    stream = draw_forced(
        data,
        waits_and_regresses,
        control_fields=["watermark"],
        expected=[frozenset({0, 1, 2}), frozenset({0, 3})],
    )
    assert stream.params.expected_partitions
    assert_spark_matches_the_model(spark, tmp_path_factory.mktemp("expected"), stream)


def retracts(stream: H.Stream) -> bool:
    return any(a.retracted for a in stream.run_model().aggregates)


@settings(SPARK_SETTINGS, max_examples=2)
@given(data=st.data())
def test_session_windows_match_the_model(spark, tmp_path_factory, data) -> None:
    # Forced on: a 10 s or 30 s session gap (no slide: the window kinds exclude each other),
    # early firings every 20 s in some draws. Only streams whose model run retracts a
    # session are kept (about a third are drawn so; the model is cheap, Spark is not), so
    # every Spark example merges emitted sessions.
    stream = draw_forced(data, retracts, session_gaps=[10_000, 30_000], early_intervals=[0, 20_000])
    assert stream.params.session_gap_ms in (10_000, 30_000)
    assert stream.params.window_slide_ms is None
    assert_spark_matches_the_model(spark, tmp_path_factory.mktemp("sessions"), stream)


def adapts(stream: H.Stream) -> bool:
    """Some partition's bound came from its delays (past the history threshold) and differs
    between two batches."""
    bounds = {b for row in stream.run_model().progress for b in row.lateness}
    return len({ms for _, ms in bounds}) > 1


@settings(SPARK_SETTINGS, max_examples=2)
@given(data=st.data())
def test_lateness_auto_matches_the_model(spark, tmp_path_factory, data) -> None:
    # Forced on: lateness auto with a history threshold the small streams reach; only streams
    # whose model run chose different bounds over the batches are kept.
    autos = [
        M.AutoLateness(target, min_ms=500, max_ms=40_000, min_history=3) for target in (90.0, 99.9)
    ]
    stream = draw_forced(data, adapts, autos=autos)
    assert stream.params.lateness_auto is not None
    assert_spark_matches_the_model(spark, tmp_path_factory.mktemp("auto"), stream)
