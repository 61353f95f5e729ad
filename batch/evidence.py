"""The records behind an UNEXPLAINED window (`reconciliation_evidence`), pure DataFrame
transforms; the run writes them (`batch.reconcile`).

Per (window, key, currency) the batch calls UNEXPLAINED, three kinds of rows, each capped at
`cap` rows per window (`rank` 1..cap; `kind_rows` says how many there are in all):

* `event`: the window's first arrivals in the pinned log (`batch.diff.day_events`), each
  marked `in_late` (it has a late side-output row in this window) and `counted_by_stream`
  (`counted_by_stream`); an event that is neither is one the stream never counted, the
  records an unexplained gap is made of: ranked first, and counted per window in
  `never_counted_rows`;
* `late`: the window's late side-output rows, marked `first_arrival` (a row that can explain:
  `batch.diff.late_arrivals`);
* `revision`: every `stream_aggregates` row of the window (early, final, retracted), in
  revision order (session windows: every row of the stream's sessions the batch session
  holds, each with its own span).

Fixed and session windows differ only in where an event's window and answer come from
(`with_window_answers`, `with_session_answers`).

docs/semantics.md, "Evidence of an unexplained window", states the rules.
"""

from __future__ import annotations

from datetime import date

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from batch.sessions import with_holding_session
from tally.vocabulary import COUNTED, UNEXPLAINED
from tally.windows import WINDOW_KEY

EVENT, LATE, REVISION = "event", "late", "revision"
EVIDENCE_KINDS = (EVENT, LATE, REVISION)
# What the events of the evidence keep of the log beyond `day_events`' own columns.
EVENT_COLUMNS = ("arrival_status", "partition", "app_id", "batch_id", "source_file", "source_line")
_ANSWER_APP, _ANSWER_BATCH = "_answer_app_id", "_answer_batch_id"


def unexplained_windows(reconciliation: DataFrame) -> DataFrame:
    """The (window, key, currency) of the date's UNEXPLAINED `reconciliation` rows."""
    return reconciliation.where(F.col("status") == UNEXPLAINED).select(*WINDOW_KEY)


def of_windows(rows: DataFrame, windows: DataFrame) -> DataFrame:
    """`rows` of the `windows` (a small set: broadcast)."""
    return rows.join(F.broadcast(windows), list(WINDOW_KEY), "left_semi")


def counted_by_stream(in_late: Column) -> Column:
    """Whether the stream's answer for the window holds an event: it is not late there, its
    arrival status is one the window totals include (`COUNTED`), and the answer (the latest
    final revision) was emitted by the same streaming query (`app_id`) in its micro-batch or
    a later one: window totals only grow, so that revision counted it. False for a window
    without an answer."""
    same_query = F.col(_ANSWER_APP).eqNullSafe(F.col("app_id"))
    return F.coalesce(
        ~in_late
        & F.col("arrival_status").isin(*COUNTED)
        & same_query
        & (F.col(_ANSWER_BATCH) >= F.col("batch_id")),
        F.lit(False),
    )


def _capped(rows: DataFrame, cap: int, *order: Column | str) -> DataFrame:
    """At most `cap` rows per window, in `order` (`rank` from 1), each with how many rows the
    window has (`kind_rows`)."""
    per_window = Window.partitionBy(*WINDOW_KEY)
    return (
        rows.withColumn("rank", F.row_number().over(per_window.orderBy(*order)).cast("long"))
        .withColumn("kind_rows", F.count(F.lit(1)).over(per_window))
        .where(F.col("rank") <= cap)
    )


def with_window_answers(firsts: DataFrame, answers: DataFrame, windows: DataFrame) -> DataFrame:
    """Fixed windows: each first arrival with the micro-batch and query of its window's answer
    (`answers`: `latest_final_rows`; none: null)."""
    answer = of_windows(answers, windows).select(
        *WINDOW_KEY, F.col("app_id").alias(_ANSWER_APP), F.col("batch_id").alias(_ANSWER_BATCH)
    )
    return of_windows(firsts, windows).join(F.broadcast(answer), list(WINDOW_KEY), "left")


def with_session_answers(firsts: DataFrame, current: DataFrame) -> DataFrame:
    """Session windows: each first arrival with the micro-batch and query of the stream's
    current session holding its event time (`current`: `latest_final_rows` of the read; a
    batch session's answer is the sum of those it holds; none: null)."""
    located = with_holding_session(firsts, current, "event_time", ("batch_id", "app_id"))
    held = F.col("_b_end").isNotNull() & (F.col("event_time") < F.col("_b_end"))
    return located.select(
        *firsts.columns,
        F.when(held, F.col("_b_app_id")).alias(_ANSWER_APP),
        F.when(held, F.col("_b_batch_id")).alias(_ANSWER_BATCH),
    )


def event_evidence(firsts: DataFrame, late: DataFrame, windows: DataFrame, cap: int) -> DataFrame:
    """`event` rows: the windows' first arrivals (`firsts`: with `EVENT_COLUMNS`, their
    window and their answer's batch: `with_window_answers`, `with_session_answers`), marked
    against their late rows (`late`: `late_arrivals`); never-counted ones first."""
    late_ids = (
        of_windows(late, windows)
        .where(F.col("event_id").isNotNull())
        .select(*WINDOW_KEY, "event_id")
        .distinct()
        .withColumn("in_late", F.lit(True))
    )
    rows = (
        of_windows(firsts, windows)
        .join(late_ids, [*WINDOW_KEY, "event_id"], "left")
        .withColumn("in_late", F.coalesce(F.col("in_late"), F.lit(False)))
        .withColumn("counted_by_stream", counted_by_stream(F.col("in_late")))
        .drop(_ANSWER_APP, _ANSWER_BATCH)
    )
    never = ~F.col("in_late") & ~F.col("counted_by_stream")
    never_rows = F.sum(F.col("_never").cast("long")).over(Window.partitionBy(*WINDOW_KEY))
    marked = rows.withColumn("_never", never).withColumn("never_counted_rows", never_rows)
    order = (F.col("_never").desc(), F.col("in_late").desc(), "event_time", "event_id", "batch_id")
    return _capped(marked, cap, *order).drop("_never")


def late_evidence(late: DataFrame, windows: DataFrame, cap: int) -> DataFrame:
    """`late` rows: the windows' late side-output rows (`late_arrivals`, with
    `first_arrival`), in event time."""
    return _capped(of_windows(late, windows), cap, "event_time", "event_id", "batch_id")


def revision_evidence(stream_rows: DataFrame, windows: DataFrame, cap: int) -> DataFrame:
    """`revision` rows: every `stream_aggregates` row of the windows, in revision order
    (`final` true in rows from before early firings, `retracted` false before sessions);
    each row's own span in `stream_window_start`/`_end` (sessions: `stream_rows_per_session`
    placed it in the batch session holding it; fixed windows: the window's)."""
    rows = of_windows(stream_rows, windows)
    if "stream_window_start" not in rows.columns:
        rows = rows.withColumn("stream_window_start", F.col("window_start")).withColumn(
            "stream_window_end", F.col("window_end")
        )
    final = F.coalesce(F.col("final"), F.lit(True)) if "final" in rows.columns else F.lit(True)
    retracted = (
        F.coalesce(F.col("retracted"), F.lit(False))
        if "retracted" in rows.columns
        else F.lit(False)
    )
    rows = rows.withColumn("final", final).withColumn("retracted", retracted)
    return _capped(rows, cap, "stream_window_start", "revision", "emit_time", "batch_id")


def evidence_rows(
    business_date: date, events: DataFrame, late: DataFrame, revisions: DataFrame
) -> DataFrame:
    """The three kinds as `reconciliation_evidence` rows (without run_time), the columns
    one kind has null in the others'."""
    kinds = (
        events.withColumn("kind", F.lit(EVENT)),
        late.withColumn("kind", F.lit(LATE)),
        revisions.withColumn("kind", F.lit(REVISION)),
    )
    first, *rest = kinds
    rows = first
    for other in rest:
        rows = rows.unionByName(other, allowMissingColumns=True)
    return rows.withColumn("business_date", F.lit(business_date))
