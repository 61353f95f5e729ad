"""The stream's state files (streaming/state.py): both parts of a batch in one write, a part
without rows, and the layout of earlier checkpoints (a directory and a marker per part)."""

from __future__ import annotations

from pathlib import Path

import pytest
from frames import assert_frame_equal
from pyspark.sql import DataFrame, SparkSession

from streaming.state import DEDUP_DDL, WINDOWS_DDL, StateStore
from tally.tables import empty_of

# An open window as a stream from before currencies wrote it, and as one writes it now.
WINDOW_BEFORE_CURRENCIES = (
    "SELECT TIMESTAMP '2026-11-20 00:00:00' AS window_start, "
    "TIMESTAMP '2026-11-20 00:01:00' AS window_end, 'k' AS key, 2L AS event_count, "
    "150L AS amount_sum, 1 AS emitted_revision, true AS finalized, false AS pending, "
    "7L AS last_emit_ms"
)
WINDOW = f"{WINDOW_BEFORE_CURRENCIES}, 'JPY' AS currency"
IDS = (
    "SELECT id AS event_id, TIMESTAMP '2026-11-20 00:01:00' AS window_end "
    "FROM VALUES ('a'), ('b') AS t(id)"
)


def _rows(df: DataFrame) -> list[tuple[object, ...]]:
    return sorted(tuple(r) for r in df.collect())


def test_both_parts_in_one_write_and_read_back(spark: SparkSession, tmp_path: Path) -> None:
    store = StateStore(spark, str(tmp_path / "checkpoint"))
    windows, dedup = spark.sql(WINDOW), spark.sql(IDS)
    store.write(3, windows, dedup)
    base = tmp_path / "checkpoint" / "tally" / "state" / "3"
    assert (base / "_SUCCESS").exists()
    assert sorted(p.name for p in base.iterdir() if p.is_dir()) == ["state=dedup", "state=windows"]
    got_windows, got_dedup = store.read(3)
    assert got_windows.columns == [f.split()[0] for f in WINDOWS_DDL.split(", ")]
    assert got_dedup.columns == ["event_id", "window_end"]
    assert_frame_equal(got_windows, windows)
    assert_frame_equal(got_dedup, dedup)
    assert_frame_equal(store.read_dedup(3), dedup)


def test_a_part_without_rows_reads_empty(spark: SparkSession, tmp_path: Path) -> None:
    store = StateStore(spark, str(tmp_path / "checkpoint"))
    store.write(0, empty_of(spark, WINDOWS_DDL), spark.sql(IDS))
    windows, dedup = store.read(0)
    assert windows.count() == 0 and dedup.count() == 2
    store.write(1, spark.sql(WINDOW), empty_of(spark, DEDUP_DDL))
    windows, dedup = store.read(1)
    assert windows.count() == 1 and dedup.count() == 0 and store.read_dedup(1).count() == 0


def test_a_checkpoint_of_the_earlier_layout_is_read(spark: SparkSession, tmp_path: Path) -> None:
    store = StateStore(spark, str(tmp_path / "checkpoint"))
    base = store.state_dir(5)
    spark.sql(WINDOW_BEFORE_CURRENCIES).write.parquet(f"{base}/windows")
    spark.sql(IDS).write.parquet(f"{base}/dedup")
    windows, dedup = store.read(5)
    # its windows read with a null currency (the stream reads it as its default_currency)
    before = [(*r, None) for r in _rows(spark.sql(WINDOW_BEFORE_CURRENCIES))]
    assert _rows(windows) == before
    assert_frame_equal(dedup, spark.sql(IDS))


def test_missing_state_is_an_error(spark: SparkSession, tmp_path: Path) -> None:
    store = StateStore(spark, str(tmp_path / "checkpoint"))
    spark.sql(WINDOW).write.parquet(f"{store.state_dir(2)}/windows")  # dedup never written
    with pytest.raises(FileNotFoundError, match="state of batch 2 missing"):
        store.read(2)
    with pytest.raises(FileNotFoundError, match="state of batch 4 missing"):
        store.read(4)


def test_part_bytes_is_the_size_of_a_parts_files(spark: SparkSession, tmp_path: Path) -> None:
    store = StateStore(spark, str(tmp_path / "checkpoint"))
    store.write(0, empty_of(spark, WINDOWS_DDL), spark.sql(IDS))
    files = (tmp_path / "checkpoint" / "tally" / "state" / "0" / "state=dedup").glob("*.parquet")
    assert store.part_bytes(0, "dedup") == sum(f.stat().st_size for f in files) > 0
    assert store.part_bytes(0, "windows") == 0  # a part without rows has no files
    assert store.part_bytes(7, "dedup") == 0  # no such batch
    base = store.state_dir(5)  # the earlier layout: a directory a part
    spark.sql(IDS).write.parquet(f"{base}/dedup")
    assert store.part_bytes(5, "dedup") > 0
