"""A warehouse from before events carried a currency (issue 41): the stream adds `currency` to
`events` and `late_events` in place when it starts (ALTER TABLE ADD COLUMNS), keeps every old
row (its currency null: read as the reading run's `default_currency`), and writes each new
event with its own currency or the default."""

from __future__ import annotations

import dataclasses

import reference_model as M
from pyspark.sql import functions as F
from stream_helpers import T0_MS, InputFile, event_line, run_processor

from tally import tables as T

PARAMS = M.Params(window_ms=60_000, lateness_ms=0)


def _without_currency(table: T.Table) -> T.Table:
    old = table.ddl.replace(", currency STRING", "")
    assert old != table.ddl
    return dataclasses.replace(table, ddl=old)


def test_a_warehouse_from_before_currencies_takes_them_in_place(spark, tmp_path, monkeypatch):
    warehouse = str(tmp_path / "warehouse")
    first = [event_line("a", "k1", 100, T0_MS + 1_000, 0), event_line("b", "k2", 7, T0_MS, 1)]
    with monkeypatch.context() as before:  # the tables as tally wrote them before currencies
        events, late = _without_currency(T.EVENTS), _without_currency(T.LATE_EVENTS)
        old = tuple(
            {"events": events, "late_events": late}.get(t.name, t) for t in T.STREAMING_TABLES
        )
        before.setattr(T, "EVENTS", events)
        before.setattr(T, "LATE_EVENTS", late)
        before.setattr(T, "STREAMING_TABLES", old)
        run_processor(
            spark,
            warehouse,
            tmp_path / "in",
            [[InputFile("b0.jsonl", T0_MS + 2_000, first)]],
            PARAMS,
        )
    for name in ("events", "late_events"):
        assert "currency" not in T.read_table(spark, warehouse, name).columns

    later = [
        event_line("c", "k1", 1234, T0_MS + 3_000, 0, extra={"currency": "JPY"}),
        event_line("d", "k2", 5, T0_MS + 3_000, 1),
    ]
    batch = [[InputFile("b1.jsonl", T0_MS + 4_000, later)]]
    run_processor(spark, warehouse, tmp_path / "in", batch, PARAMS, first_batch=1)
    for name in ("events", "late_events"):
        assert "currency" in T.read_table(spark, warehouse, name).columns
    rows = T.read_table(spark, warehouse, "events").select("event_id", "amount", "currency")
    assert sorted(tuple(r) for r in rows.collect()) == [
        ("a", 100, None),  # kept as written: no currency then
        ("b", 7, None),
        ("c", 1234, "JPY"),
        ("d", 5, "USD"),  # names none: the default
    ]
    assert T.read_table(spark, warehouse, "events").where(F.col("batch_id") == 1).count() == 2
