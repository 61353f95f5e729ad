"""Line identity of JSONL input (tally/events.py `text_lines`, `number_lines`): Spark's
line-oriented text source, with the 1-based line number computed from the file splits.

Small `spark.sql.files.maxPartitionBytes` makes tiny files split into several tasks, so the
numbering across splits is exercised on files of a few KB.
"""

from __future__ import annotations

import gzip
import random
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import tally.events
from tally.events import (
    LINE_COLUMNS,
    SPLIT_START,
    LineSplit,
    first_line_numbers,
    number_lines,
    parse_lines,
    read_jsonl_lines,
    text_lines,
    text_reader,
)

SPLIT_BYTES = 1024


@contextmanager
def small_splits(spark: SparkSession, split_bytes: int = SPLIT_BYTES) -> Iterator[None]:
    """Files split every `split_bytes` bytes, small files packed together; restored after.
    The settings apply when a query runs: collect inside the block."""
    settings = {
        "spark.sql.files.maxPartitionBytes": str(split_bytes),
        "spark.sql.files.openCostInBytes": "1",
    }
    saved = {key: spark.conf.get(key) for key in settings}
    try:
        for key, value in settings.items():
            spark.conf.set(key, value)
        yield
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value)


@pytest.fixture(params=["inline", "joined"])
def numbering(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways `number_lines` finds a split's offset: a CASE over the splits' literals (a
    few splits), a broadcast join of a split table (many)."""
    monkeypatch.setattr(
        tally.events, "INLINE_SPLITS_MAX", 10_000 if request.param == "inline" else 0
    )
    return str(request.param)


def joins(df: DataFrame) -> bool:
    return "BroadcastHashJoin" in df._jdf.queryExecution().executedPlan().toString()


def python_lines(path: Path) -> list[str]:
    """The lines of a newline-terminated UTF-8 file as Python reads them."""
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def numbered(df: DataFrame) -> list[tuple[str, int, str]]:
    """(file base name, line number, text), in file and line order."""
    rows = df.select(
        F.regexp_extract("source_file", r"([^/]+)$", 1).alias("name"), "source_line", "raw_line"
    ).collect()
    return sorted((r["name"], r["source_line"], r["raw_line"]) for r in rows)


def varied_lines(count: int, seed: int) -> list[str]:
    """JSON-ish lines of very different lengths (some blank, some multi-byte, a few longer
    than a split), about 100 bytes on average."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        size = 1000 if rng.random() < 0.03 else rng.choice([0, 1, 5, 10, 20, 40, 90])
        filler = "".join(rng.choice("abcxyz0123 é€😀") for _ in range(size))
        out.append("" if size == 0 else f'{{"n":{i},"pad":"{filler}"}}')
    return out


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_lines_are_numbered_across_splits(
    spark: SparkSession, tmp_path: Path, numbering: str
) -> None:
    path = write(tmp_path / "many.jsonl", varied_lines(250, seed=1))
    expected = [("many.jsonl", i + 1, text) for i, text in enumerate(python_lines(path))]
    with small_splits(spark):
        unnumbered = text_reader(spark.read).load(str(path)).transform(text_lines).persist()
        splits = unnumbered.select(SPLIT_START).distinct().count()
        got = numbered(number_lines(unnumbered))
        got_lazily = numbered(read_jsonl_lines(spark, str(path)))
        joined = joins(number_lines(unnumbered))
        unnumbered.unpersist()
    assert splits > 1
    assert joined == (numbering == "joined")
    assert got == expected
    assert got_lazily == expected


def test_number_lines_carries_other_columns(
    spark: SparkSession, tmp_path: Path, numbering: str
) -> None:
    """The stream's order: parse the unnumbered lines, persist, then number them."""
    lines = ['{"event_id":"a","key":"k","amount":1,"event_time":0}', "", "[1]"] * 40
    path = write(tmp_path / "events.jsonl", lines)
    with small_splits(spark, 256):
        text = text_reader(spark.read).load(str(path)).transform(text_lines)
        parsed = parse_lines(text).persist()
        rows = number_lines(parsed).select("source_line", "event_id", "reason").collect()
        parsed.unpersist()
    by_line = {r["source_line"]: (r["event_id"], r["reason"]) for r in rows}
    cycle = [("a", None), (None, "empty_line"), (None, "invalid_json")]
    assert by_line == {n: cycle[(n - 1) % 3] for n in range(1, len(lines) + 1)}
    assert SPLIT_START not in number_lines(parsed).columns


def test_files_read_together_are_numbered_per_file(
    spark: SparkSession, tmp_path: Path, numbering: str
) -> None:
    lines = varied_lines(250, seed=2)
    cuts = [0, 3, 4, 40, 41, 150, 250]  # one file of 1 line, small ones, large ones
    paths = [
        write(tmp_path / f"part-{n}.jsonl", lines[a:b]) for n, (a, b) in enumerate(pairwise(cuts))
    ]
    with small_splits(spark):
        together = numbered(read_jsonl_lines(spark, [str(p) for p in paths]))
        one_by_one = sorted(row for p in paths for row in numbered(read_jsonl_lines(spark, str(p))))
        directory = numbered(read_jsonl_lines(spark, str(tmp_path)))
    assert together == one_by_one == directory
    assert [text for _, _, text in together] == [
        text for p in sorted(paths) for text in python_lines(p)
    ]


class Case(NamedTuple):
    why: str
    content: bytes
    lines: list[str]


LONG = "x" * (3 * SPLIT_BYTES)
CRLF_MANY = [f'{{"n":{i},"pad":"{"y" * (i % 50)}"}}' for i in range(120)]

EDGE_CASES = [
    # Nothing to read: no line at all (not one empty line).
    Case("empty file", b"", []),
    # The last line needs no newline.
    Case("no final newline", b"a\nb", ["a", "b"]),
    # A final newline ends the last line; it does not start an empty one.
    Case("final newline", b"a\nb\n", ["a", "b"]),
    # A blank line is a line (quarantined later as empty_line), numbered like any other.
    Case("blank line in the middle", b"a\n\nb\n", ["a", "", "b"]),
    # Blank lines at the end are lines too; only the final newline makes none.
    Case("blank line at the end", b"a\n\n", ["a", ""]),
    # A file of one newline holds one (empty) line.
    Case("a single newline", b"\n", [""]),
    # Windows line endings: the "\r" before "\n" is not part of the line.
    Case("CRLF", b"a\r\nb\r\n", ["a", "b"]),
    # The same with a blank line, and no final line ending.
    Case("CRLF, blank line", b"a\r\n\r\nb", ["a", "", "b"]),
    # A lone "\r" does not end a line (the text source's default would split there).
    Case("lone CR inside a line", b"a\rb\n", ["a\rb"]),
    # Only one "\r" is dropped before "\n".
    Case("CR CR LF", b"a\r\r\nb\n", ["a\r", "b"]),
    # A "\r" ending the last line is dropped even without a final "\n" (docs/semantics.md).
    Case("CR ending the file", b"a\nb\r", ["a", "b"]),
    # A line spanning several splits is read once.
    Case("line longer than a split", f"short\n{LONG}\nend\n".encode(), ["short", LONG, "end"]),
    # One line over several splits, with no newline at all.
    Case("file is one long line", LONG.encode(), [LONG]),
    # CRLF endings of lines of many lengths, some across split boundaries.
    Case("many CRLF lines", "".join(x + "\r\n" for x in CRLF_MANY).encode(), CRLF_MANY),
    # A split boundary between the "\r" and the "\n" of a line ending.
    Case(
        "CRLF cut by a split boundary",
        b"x" * (SPLIT_BYTES - 1) + b"\r\nnext\r\n",
        ["x" * (SPLIT_BYTES - 1), "next"],
    ),
    # A line starting exactly where a split starts is read once (by the split before).
    Case(
        "line starting at a split boundary",
        b"x" * (SPLIT_BYTES - 1) + b"\nnext\n",
        ["x" * (SPLIT_BYTES - 1), "next"],
    ),
    # An empty line starting exactly at a split boundary.
    Case(
        "empty line at a split boundary",
        b"x" * (SPLIT_BYTES - 1) + b"\n\nlast\n",
        ["x" * (SPLIT_BYTES - 1), "", "last"],
    ),
    # Multi-byte UTF-8 characters straddle split boundaries somewhere in here.
    Case(
        "multi-byte text",
        ("é€😀" * 300 + "\n" + "ü" * 700 + "\n").encode(),
        ["é€😀" * 300, "ü" * 700],
    ),
]


@pytest.fixture(scope="module")
def edge_lines(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every edge case as its own file, read together (small splits): lines by file name."""
    directory = tmp_path_factory.mktemp("edge")
    for number, case in enumerate(EDGE_CASES):
        (directory / f"case-{number:02d}.jsonl").write_bytes(case.content)
    gz = "\n".join(CRLF_MANY[:10]) + "\n"
    (directory / "case-gz.jsonl.gz").write_bytes(gzip.compress(gz.encode()))
    with small_splits(spark):
        df = read_jsonl_lines(spark, str(directory))
        columns = tuple(df.columns)
        rows = numbered(df)
    by_file: dict[str, list[tuple[int, str]]] = {}
    for name, number, text in rows:
        by_file.setdefault(name, []).append((number, text))
    return {"by_file": by_file, "columns": columns}


@pytest.mark.parametrize(
    "number,case", list(enumerate(EDGE_CASES)), ids=[c.why for c in EDGE_CASES]
)
def test_edge_case(edge_lines: dict[str, Any], number: int, case: Case) -> None:
    got = edge_lines["by_file"].get(f"case-{number:02d}.jsonl", [])
    assert got == [(i + 1, text) for i, text in enumerate(case.lines)]


def test_gzip_file_is_read_whole(edge_lines: dict[str, Any]) -> None:
    """Gzip is not splittable: one split, read by one task, numbered from 1."""
    got = edge_lines["by_file"]["case-gz.jsonl.gz"]
    assert got == [(i + 1, text) for i, text in enumerate(CRLF_MANY[:10])]


def test_read_jsonl_lines_columns(edge_lines: dict[str, Any]) -> None:
    assert edge_lines["columns"] == LINE_COLUMNS


def test_streaming_micro_batches_are_numbered(spark: SparkSession, tmp_path: Path) -> None:
    """The file source's frame has no row ids (Spark refuses them on streams): the micro-batch
    numbers its lines, and gets what a batch read gets."""
    source = tmp_path / "in"
    source.mkdir()
    paths = [write(source / f"f{n}.jsonl", varied_lines(60, seed=10 + n)) for n in range(2)]
    stream = text_reader(spark.readStream).load(str(source)).transform(text_lines)
    got: list[tuple[str, int, str]] = []

    def batch(df: DataFrame, _batch_id: int) -> None:
        got.extend(numbered(number_lines(df)))

    with small_splits(spark):
        query = (
            stream.writeStream.foreachBatch(batch)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        expected = numbered(read_jsonl_lines(spark, [str(p) for p in paths]))
    assert sorted(got) == expected
    with pytest.raises(ValueError, match="micro-batch"):
        number_lines(stream)


def test_a_file_listed_twice_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    path = str(write(tmp_path / "once.jsonl", ["a"]))
    with pytest.raises(ValueError, match="more than once"):
        read_jsonl_lines(spark, [path, path])


class FirstLines(NamedTuple):
    why: str
    splits: list[tuple[str, int, int]]  # (file, split offset, lines)
    expected: dict[tuple[str, int], int]  # (file, split offset) -> its first line number


FIRST_LINES = [
    FirstLines("no splits (an empty batch)", [], {}),
    FirstLines("one split starts at line 1", [("a", 0, 5)], {("a", 0): 1}),
    FirstLines(
        "later splits follow the lines of the earlier ones",
        [("a", 0, 5), ("a", 100, 3), ("a", 200, 1)],
        {("a", 0): 1, ("a", 100): 6, ("a", 200): 9},
    ),
    FirstLines(
        "order is by offset, not by the order the splits arrive in",
        [("a", 200, 1), ("a", 0, 5), ("a", 100, 3)],
        {("a", 0): 1, ("a", 100): 6, ("a", 200): 9},
    ),
    FirstLines(
        "each file counts its own lines",
        [("a", 0, 5), ("b", 0, 2), ("b", 64, 4), ("a", 100, 3)],
        {("a", 0): 1, ("a", 100): 6, ("b", 0): 1, ("b", 64): 3},
    ),
    FirstLines(
        "a split holding no line start (one long line crosses it) numbers nothing after it",
        [("a", 0, 1), ("a", 100, 0), ("a", 200, 2)],
        {("a", 0): 1, ("a", 100): 2, ("a", 200): 2},
    ),
]


@pytest.mark.parametrize("case", FIRST_LINES, ids=lambda c: c.why)
def test_first_line_numbers(case: FirstLines) -> None:
    splits = [LineSplit(f, start, 0, lines, None) for f, start, lines in case.splits]
    assert first_line_numbers(splits) == case.expected


def test_no_split_numbers_no_line(spark: SparkSession, tmp_path: Path, numbering: str) -> None:
    # An empty micro-batch (and the drain) has no split at all: nothing to number, no error.
    (tmp_path / "in").mkdir()
    empty = text_reader(spark.read).schema("value STRING").load(str(tmp_path / "in"))
    lines = number_lines(empty.transform(text_lines), splits=[])
    assert lines.columns == list(LINE_COLUMNS) and lines.count() == 0
