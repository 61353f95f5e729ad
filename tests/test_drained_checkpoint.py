"""A drained checkpoint refuses new input, in one line, writing nothing: the drain is a batch of
its own that Spark's checkpoint does not know, so new input would otherwise come as a batch
with the drain's id and have its appends skipped as a replay's (found in session 25: exit 0,
the new lines in no table)."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime

from stream_helpers import read, read_input

from tally_tools.generate import generate


def test_new_input_after_a_drain_is_refused_and_nothing_is_written(
    tmp_path, tally_cli, spark, capsys
):
    generated, input_dir, wh = tmp_path / "generated", tmp_path / "in", tmp_path / "wh"
    generate(
        out=str(generated),
        events=300,
        partitions=2,
        seed=3,
        start=datetime(2026, 11, 20, tzinfo=UTC),
        duration_ms=3_600_000,
        files=3,
        keys=5,
        progress=False,
    )
    files = sorted(p for p in generated.iterdir() if p.is_file())
    input_dir.mkdir()
    for path in files[:2]:
        shutil.copy2(path, input_dir / path.name)
    argv = ["stream", "--input", str(input_dir), "--warehouse", str(wh), "--available-now"]
    assert tally_cli([*argv, "--drain"]) == 0
    events_before = read(spark, str(wh), "events").count()
    progress_before = read(spark, str(wh), "stream_progress").count()
    assert events_before > 0
    capsys.readouterr()

    shutil.copy2(files[2], input_dir / files[2].name)  # new input after the drain
    assert len([line for line in read_input(input_dir) if line.obj]) > events_before
    code = tally_cli(argv)
    err = capsys.readouterr().err
    assert code != 0
    assert err.count("\n") == 1 and "checkpoint was drained at batch" in err, err
    assert read(spark, str(wh), "events").count() == events_before
    assert read(spark, str(wh), "stream_progress").count() == progress_before
