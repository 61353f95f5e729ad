"""Smoke test of `tally bench --quick`, in-process on the session's Spark, so the benchmark
code cannot rot: every section runs, every engine accounts for its input, and the outputs
hold numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.slow
def test_quick_benchmark(spark, tmp_path: Path) -> None:
    from bench.report import JSON_NAME, MD_NAME, PNG_NAME
    from bench.run import PROJECT_ROOT, run_bench

    committed = PROJECT_ROOT / "docs" / MD_NAME
    before = committed.read_bytes() if committed.exists() else None
    out = tmp_path / "out"
    r = run_bench(
        spark,
        quick=True,
        out_dir=out,
        work_dir=tmp_path / "work",
        command="pytest tests/test_bench.py",
    )

    assert r["errors"] == {}

    # 1. every engine read every line; tally accounts for every distinct valid event
    sp = r["speed"]
    for run in sp["runs"]["tally"]:
        assert run["input_lines"] == sp["lines"]
        assert run["valid_events"] == sp["valid_events"]
        assert run["quarantined"] == sp["malformed_lines"]
        # emitted windows + late side output + still-open windows = distinct valid events
        assert run["accounted_events"] == sp["distinct_events"]
    for run in sp["runs"]["plain"]:
        assert run["input_rows"] == sp["lines"] - sp["empty_lines"]  # the JSON reader skips blanks
    for run in sp["runs"]["batch"]:
        # the plain parse is laxer than tally's contract, never stricter
        assert sp["valid_events"] <= run["output_events"] <= sp["lines"]
    for engine in ("tally", "plain", "batch"):
        assert sp["events_per_s"][engine]["median"] > 0
    assert sp["ratio_tally_plain"] > 0
    assert sp["parse"]["tally_valid_s"] > 0 and sp["parse"]["plain_s"] > 0

    # 2. latency: windows were measured
    tally_latency = r["latency"]["engines"]["tally"]
    assert tally_latency["windows"] > 0 and tally_latency["p50_ms"] > 0

    # 3. state sampled per micro-batch
    st = r["state"]
    assert len(st["batches"]) >= 4
    assert max(b["open_windows"] for b in st["batches"]) > 0
    assert all(b["batch_s"] and b["batch_s"] > 0 for b in st["batches"])

    # 4./5. nightly per stage, the same totals as DuckDB, balanced; the curve ran
    for size in r["nightly"]["sizes"]:
        for stage in ("reaggregate_s", "diff_s", "validate_s", "report_s"):
            assert size[stage] > 0, stage
        assert size["duckdb_json"]["seconds"] > 0 and size["duckdb_parquet"]["seconds"] > 0
        assert size["same_totals_as_duckdb"], size
        assert size["duckdb_parquet"]["events"] == size["tally_events"]
        assert size["balanced"] and size["report_exists"]
    assert r["curve"]["seconds"] > 0 and r["curve"]["curve_events"] > 0

    # the outputs: every section with numbers, the chart, the raw numbers
    md = (out / MD_NAME).read_text()
    for heading in (
        "## Targets",
        "## 1. Speed layer",
        "### Where tally's time goes",
        "## 2. Latency",
        "## 3. State",
        "## 4. Nightly job",
        "## 5. Lateness curve",
    ):
        assert heading in md, heading
    assert f"**{sp['ratio_tally_plain']:.2f}**" in md
    assert f"{r['nightly']['sizes'][-1]['events']:,}" in md
    png = (out / PNG_NAME).read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    raw = json.loads((out / JSON_NAME).read_text())
    assert raw["speed"]["lines"] == sp["lines"] and raw["mode"] == "quick"
    # the committed results were not touched, and the work directory is gone
    assert (committed.read_bytes() if committed.exists() else None) == before
    assert not (tmp_path / "work").exists()
