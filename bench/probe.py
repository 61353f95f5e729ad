"""Time tally's micro-batches from the outside: a `BatchProcessor` subclass whose methods
record spans, swapped into `streaming.job` for the duration of a run (the code is not edited).

The phases a micro-batch goes through, in order (`streaming.job.BatchProcessor.process`):
read the batch's files (persist + count) -> processing time -> parse + classify + per-partition
stats -> [late-event log check] -> append events -> quarantine -> late_events -> merge window
state (`aggregates.count()`) -> stream_aggregates -> overwrite window_state -> dedup_state ->
stream_progress. Work done inline between two wrapped calls shows up as
"inline before <next phase>"; `PHASE_NAMES` gives those gaps their meaning.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from bench.common import Tracer

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

STATS = "parse + classify + per-partition stats"
LATE_CHECK = "late events: event-log duplicate check + stats again"

# What the code between two wrapped calls does (see streaming/job.py, process()).
PHASE_NAMES = {
    "inline before processing time": "read + split + parse the lines once (parse_lines, persist)",
    f"inline before {STATS}": "plan parse/classify; pin + persist window/dedup state",
    "inline before mark_logged_duplicates": "collect the dates of late events",
    "inline before write events": "advance the watermark (driver), plan close_windows",
    "inline before write stream_aggregates": "merge batch into window state (aggregates.count)",
    "inline before write stream_progress": "build the progress row",
    "inline at the end": "unpersist, log",
}


def describe_phase(label: str) -> str:
    return PHASE_NAMES.get(label, label)


@contextmanager
def traced_stream(tracer: Tracer) -> Iterator[None]:
    """While active, `streaming.job.run_stream` builds a processor that records into `tracer`."""
    import streaming.job as job

    original = job.BatchProcessor
    original_mark = job.mark_logged_duplicates
    calls: dict[int, int] = {}

    class TimedProcessor(job.BatchProcessor):
        def __init__(self, spark: Any, params: Any, clock: Any = job.wall_clock) -> None:
            with tracer.span("create tables"):
                super().__init__(spark, params, clock=clock)

        def process(self, raw_batch: Any, batch_id: int, drain: bool = False) -> None:
            tracer.batch = batch_id
            with tracer.span("batch"):
                super().process(raw_batch, batch_id, drain=drain)

        def previous_progress(self, before_batch: int | None = None) -> dict[str, Any] | None:
            with tracer.span("read stream_progress"):
                return super().previous_progress(before_batch)

        def _batch_now_ms(self, batch_id: int, newest_input_ms: int | None, prev: Any) -> int:
            with tracer.span("processing time"):
                return super()._batch_now_ms(batch_id, newest_input_ms, prev)

        def _write(
            self,
            df: Any,
            table: Any,
            batch_id: int,
            mode: str = "append",
            versioned: bool = False,
        ) -> tuple[int, int]:
            with tracer.span(f"write {table.name}"):
                return super()._write(df, table, batch_id, mode=mode, versioned=versioned)

        @staticmethod
        def _batch_stats(classified: Any, skew_limit_ms: int) -> list[Any]:
            key = tracer.batch if tracer.batch is not None else -1
            calls[key] = calls.get(key, 0) + 1
            label = STATS if calls[key] == 1 else LATE_CHECK
            with tracer.span(label):
                return original._batch_stats(classified, skew_limit_ms)

    def mark(classified: DataFrame, logged_ids: DataFrame) -> DataFrame:
        with tracer.span("mark_logged_duplicates"):
            return original_mark(classified, logged_ids)

    job.BatchProcessor = TimedProcessor  # type: ignore[misc]
    job.mark_logged_duplicates = mark
    try:
        yield
    finally:
        job.BatchProcessor = original  # type: ignore[misc]
        job.mark_logged_duplicates = original_mark
