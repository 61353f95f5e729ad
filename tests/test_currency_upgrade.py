"""A warehouse from before events carried a currency (issue 41): the stream adds `currency` to
`events`, `late_events` and `stream_aggregates` in place when it starts (ALTER TABLE ADD
COLUMNS), keeps every old row (its currency null: read as the reading run's
`default_currency`), writes each new event with its own currency or the default, and continues
the windows its state files from before held open in the default currency."""

from __future__ import annotations

import dataclasses

import reference_model as M
from pyspark.sql import functions as F
from stream_helpers import T0_MS, InputFile, event_line, run_processor

from tally import tables as T
from tally.settings import default_checkpoint

PARAMS = M.Params(window_ms=60_000, lateness_ms=0)


def _without_currency(table: T.Table) -> T.Table:
    old = table.ddl.replace(", currency STRING", "")
    assert old != table.ddl
    return dataclasses.replace(table, ddl=old)


def _state_from_before_currencies(spark, checkpoint: str, batch_id: int) -> None:
    """Rewrite the window state files of `batch_id` as a stream from before currencies wrote
    them: the same rows without the `currency` column."""
    from streaming.state import WINDOWS, StateStore

    store = StateStore(spark, checkpoint)
    windows, dedup = (df.localCheckpoint() for df in store.read(batch_id))
    assert windows.count() == 2  # k1's and k2's windows, still open
    store.write(batch_id, windows.drop("currency"), dedup)
    written = spark.read.parquet(store.part_dir(batch_id, WINDOWS)).columns
    assert "currency" not in written


def test_a_warehouse_from_before_currencies_takes_them_in_place(spark, tmp_path, monkeypatch):
    warehouse = str(tmp_path / "warehouse")
    first = [event_line("a", "k1", 100, T0_MS + 1_000, 0), event_line("b", "k2", 7, T0_MS, 1)]
    with monkeypatch.context() as before:  # the tables as tally wrote them before currencies
        events, late = _without_currency(T.EVENTS), _without_currency(T.LATE_EVENTS)
        aggregates = _without_currency(T.STREAM_AGGREGATES)
        earlier = {"events": events, "late_events": late, "stream_aggregates": aggregates}
        old = tuple(earlier.get(t.name, t) for t in T.STREAMING_TABLES)
        before.setattr(T, "EVENTS", events)
        before.setattr(T, "LATE_EVENTS", late)
        before.setattr(T, "STREAM_AGGREGATES", aggregates)
        before.setattr(T, "STREAMING_TABLES", old)
        run_processor(
            spark,
            warehouse,
            tmp_path / "in",
            [[InputFile("b0.jsonl", T0_MS + 2_000, first)]],
            PARAMS,
        )
    for name in ("events", "late_events", "stream_aggregates"):
        assert "currency" not in T.read_table(spark, warehouse, name).columns
    _state_from_before_currencies(spark, default_checkpoint(warehouse), 0)

    later = [
        event_line("c", "k1", 1234, T0_MS + 3_000, 0, extra={"currency": "JPY"}),
        event_line("d", "k2", 5, T0_MS + 3_000, 1),
    ]
    batch = [[InputFile("b1.jsonl", T0_MS + 4_000, later)]]
    run_processor(spark, warehouse, tmp_path / "in", batch, PARAMS, first_batch=1, drain=True)
    for name in ("events", "late_events", "stream_aggregates"):
        assert "currency" in T.read_table(spark, warehouse, name).columns
    # The window [0, 60 s) of k2 was open across the upgrade (its state files from before,
    # currency null): it continues in the default currency, one window with b and d, not two;
    # k1's yen event c is a window of its own beside a's dollars.
    windows = T.read_table(spark, warehouse, "stream_aggregates").select(
        "key", "currency", "event_count", "amount_sum"
    )
    assert sorted(tuple(r) for r in windows.collect()) == [
        ("k1", "JPY", 1, 1234),
        ("k1", "USD", 1, 100),
        ("k2", "USD", 2, 12),  # b 7 + d 5
    ]
    rows = T.read_table(spark, warehouse, "events").select("event_id", "amount", "currency")
    assert sorted(tuple(r) for r in rows.collect()) == [
        ("a", 100, None),  # kept as written: no currency then
        ("b", 7, None),
        ("c", 1234, "JPY"),
        ("d", 5, "USD"),  # names none: the default
    ]
    assert T.read_table(spark, warehouse, "events").where(F.col("batch_id") == 1).count() == 2
