"""The ledger's reads of the warehouse: delta-rs (`deltalake`), no Spark, no JVM; for the
desk (tally_desk) and `tally ledger` alike, so both show the same rows.

Blocking calls: the desk runs them off the api-server's event loop (`app.read_off_loop`).
A table the warehouse does not hold yet reads as no rows; a warehouse that cannot be read at
all raises `WarehouseUnavailable` with one line saying where and why.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

# The tables the ledger reads (declared in tally.tables.CATALOG; a test checks the names).
SUMMARY = "reconciliation_summary"
RUNS = "reconciliation_runs"
VALIDATION = "validation_results"
ALERTS = "alerts"
SIGNOFFS = "signoffs"
EVENTS = "events"
RESTATEMENTS = "restatements"
SWEEP = "restatement_sweep"
PROGRESS = "stream_progress"
COPIES = "reconciliation_copies"
OPEN_ITEMS = "open_items"
RECONCILIATION = "reconciliation"
EVIDENCE = "reconciliation_evidence"
DESK_TABLES = (
    SUMMARY,
    COPIES,
    RECONCILIATION,
    EVIDENCE,
    OPEN_ITEMS,
    RUNS,
    VALIDATION,
    ALERTS,
    SIGNOFFS,
    EVENTS,
    RESTATEMENTS,
    SWEEP,
    PROGRESS,
)
SWEEP_COLUMNS = ("business_date", "run_time", "events_frontier")
# What the restatement signal reads of `stream_progress` (`tally.restatements.signal`).
PROGRESS_COLUMNS = (
    "app_id",
    "batch_id",
    "new_events_by_date",
    "new_amount_by_date",
    "report_timezone",
)


class WarehouseUnavailable(RuntimeError):
    """The warehouse could not be read (one-line message)."""


@dataclass(frozen=True)
class Location:
    """Where the tables are and how to reach them: a local directory or s3a:// / s3:// with
    the object store's endpoint (credentials from the environment, as for Spark)."""

    warehouse: str
    s3_endpoint: str = ""
    s3_region: str = ""
    s3_path_style: bool = False

    def uri(self, table: str) -> str:
        base = self.warehouse.rstrip("/")
        if base.startswith("s3a://"):
            base = "s3://" + base.removeprefix("s3a://")
        elif base.startswith("file:"):
            base = base.removeprefix("file://").removeprefix("file:")
        elif "://" not in base:
            base = os.path.abspath(base)
        return f"{base}/{table}"

    def storage_options(self) -> dict[str, str]:
        if not self.uri("x").startswith("s3://"):
            return {}
        options: dict[str, str] = {}
        if self.s3_endpoint:
            options["AWS_ENDPOINT_URL"] = self.s3_endpoint.rstrip("/")
            if self.s3_endpoint.startswith("http://"):
                options["AWS_ALLOW_HTTP"] = "true"
        if self.s3_region:
            options["AWS_REGION"] = self.s3_region
        if self.s3_path_style:
            options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
        return options


def _detail(exc: BaseException) -> str:
    """An error's first line (at most 300 characters), or its type when it says nothing."""
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _table(location: Location, name: str) -> Any:
    """The Delta table, or None when the warehouse does not hold it."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    uri = location.uri(name)
    try:
        return DeltaTable(uri, storage_options=location.storage_options() or None)
    except TableNotFoundError:
        return None
    except Exception as exc:  # network, credentials, a corrupt log: say where, one line
        raise WarehouseUnavailable(
            f"warehouse {location.warehouse}: {name}: {_detail(exc)}"
        ) from exc


def read_rows(
    location: Location,
    name: str,
    columns: Sequence[str] | None = None,
    business_date: date | None = None,
    where: Sequence[tuple[str, str, Any]] = (),
) -> list[dict[str, Any]]:
    """The table's rows as dicts (only `columns`; only the date's rows when given, and those
    matching `where`: (column, op, value) conditions, which also skip files by their
    statistics); of `reconciliation_runs`, each date's latest run only (`latest_runs`)."""
    table = _table(location, name)
    if table is None:
        return []
    present = set(table.schema().to_arrow().names)
    wanted = [c for c in columns if c in present] if columns else None
    if name == RUNS and wanted is not None:  # what picks a date's latest run
        wanted += [c for c in RUN_ORDER if c in present and c not in wanted]
    filters = [c for c in where if c[0] in present] or None
    if business_date is not None and "business_date" in present:
        filters = [("business_date", "=", business_date), *(filters or [])]
    try:
        rows = list(table.to_pyarrow_table(columns=wanted, filters=filters).to_pylist())
    except Exception as exc:
        raise WarehouseUnavailable(
            f"warehouse {location.warehouse}: {name}: {_detail(exc)}"
        ) from exc
    if name != RUNS:
        return rows
    return [{k: v for k, v in r.items() if not columns or k in columns} for r in latest_runs(rows)]


# `reconciliation_runs` keeps every run of a date, numbered in the order recorded (a row from
# before run history has no number: it was the date's only run).
RUN_ORDER = ("run_number", "run_time")


def latest_runs(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The latest run of each date among `reconciliation_runs` rows, in the dates' order."""
    latest: dict[Any, dict[str, Any]] = {}
    for row in rows:
        day = row.get("business_date")
        if day not in latest or _run_order(row) > _run_order(latest[day]):
            latest[day] = row
    return list(latest.values())


def _run_order(row: dict[str, Any]) -> tuple[int, float]:
    run_time = row.get("run_time")
    return (row.get("run_number") or 0, run_time.timestamp() if run_time else float("-inf"))


def event_dates(location: Location) -> list[date]:
    """The dates the event log holds (its `event_date` partitions; the Delta log only)."""
    table = _table(location, EVENTS)
    if table is None:
        return []
    try:
        partitions = table.partitions()
    except Exception as exc:
        raise WarehouseUnavailable(f"warehouse {location.warehouse}: {EVENTS}: {exc}") from exc
    out = set()
    for p in partitions:
        value = p.get("event_date")
        if value:
            out.add(date.fromisoformat(str(value)[:10]))
    return sorted(out)


def holds_ledger(location: Location) -> bool:
    """Whether the warehouse holds any table the ledger reads (a mistyped location holds
    none)."""
    return any(_table(location, name) is not None for name in (SUMMARY, RUNS, EVENTS))


def read_ledger(location: Location, now: datetime) -> list[dict[str, Any]]:
    """Every known business date's ledger row, newest first (`tally.ledger.ledger_rows`), its
    open item aged at `now`."""
    from tally import ledger

    runs = read_rows(location, RUNS, ledger.RUN_COLUMNS)
    return ledger.ledger_rows(
        read_rows(location, SUMMARY, ledger.SUMMARY_COLUMNS),
        runs,
        read_rows(location, VALIDATION, ("business_date", "severity", "success")),
        read_rows(location, SIGNOFFS, ledger.SIGNOFF_COLUMNS),
        event_dates(location),
        read_reopened(location, runs),
        read_items(location),
        now,
    )


def read_items(location: Location, business_date: date | None = None) -> dict[date, dict[str, Any]]:
    """Each date's open item (its newest `open_items` row; only the date's when given)."""
    from tally.open_items import latest_items

    return latest_items(read_rows(location, OPEN_ITEMS, None, business_date))


def read_reopened(
    location: Location, runs: Sequence[dict[str, Any]], business_date: date | None = None
) -> dict[date, dict[str, Any]]:
    """The reopened dates among the latest `runs` (`tally.restatements.reopened`), from the
    `restatements` and `restatement_sweep` rows and the `stream_progress` rows above the
    oldest baseline (after a full check: its frontier, not the oldest run's), the signal of
    every date computed at once over Arrow columns (`signals`)."""
    from tally import ledger, restatements

    rows = read_rows(location, RESTATEMENTS, ledger.RESTATEMENT_COLUMNS, business_date)
    swept = read_rows(location, SWEEP, SWEEP_COLUMNS, business_date)

    def of(day: date, table: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [x for x in table if x["business_date"] == day]

    opened = [
        o
        for o in (
            restatements.open_run(r, of(r["business_date"], rows), of(r["business_date"], swept))
            for r in runs
        )
        if o is not None
    ]
    if not opened:
        return {}
    counted = signals(_progress_above(location, [o.baseline for o in opened]), opened)
    out = {}
    for o in opened:
        change = restatements.reopened_change(o, counted.get(o.business_date, (0, 0)))
        if change is not None:
            out[o.business_date] = change
    return out


def _progress_above(location: Location, frontiers: Sequence[dict[str, int]]) -> Any:
    """`stream_progress` rows above the lowest of `frontiers` (a superset of those above
    each run's: every batch after the smallest batch any of them names, and every batch of
    a query none of them names), only the signal's columns, as an Arrow table (None: no
    such table, or one from before the signal); the Parquet row groups' batch_id statistics
    skip the older ones."""
    import pyarrow.dataset as ds

    table = _table(location, PROGRESS)
    if table is None:
        return None
    present = set(table.schema().to_arrow().names)
    if not set(PROGRESS_COLUMNS) <= present:  # a table from before the signal
        return None
    known = sorted({app for f in frontiers for app in f})
    lowest = min(min(f.values(), default=-1) for f in frontiers)
    wanted = (ds.field("batch_id") > lowest) | ~ds.field("app_id").isin(known)
    if "" in known:  # rows written without an app_id are under "" (tally.frontier.NO_APP)
        wanted = wanted | ds.field("app_id").is_null()
    try:
        return table.to_pyarrow_dataset().to_table(columns=list(PROGRESS_COLUMNS), filter=wanted)
    except Exception as exc:
        raise WarehouseUnavailable(
            f"warehouse {location.warehouse}: {PROGRESS}: {_detail(exc)}"
        ) from exc


def signals(progress: Any, opened: Sequence[Any]) -> dict[date, tuple[int, int]]:
    """`tally.restatements.signal` of every date in `opened` (`OpenRun`s) at once, over the
    Arrow table of `stream_progress` rows `progress` (None: nothing): each map exploded to
    (app, batch, zone, day, events, amount) rows, joined with each date's bound per app
    (its baseline's batch, -1 for a query it does not name) on the day (for a row keyed in
    another zone: the day before, the day and the day after), kept above the bound, summed
    per date. Vectorised: the desk's ledger over a year of micro-batches stays one pass."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if progress is None or progress.num_rows == 0 or not opened:
        return {}
    exploded = _exploded(progress)
    if exploded.num_rows == 0:
        return {}
    apps = [str(a) for a in pc.unique(exploded.column("app")).to_pylist()]
    bounds = pa.table(
        {
            "business_date": [o.business_date for o in opened for _ in apps],
            "run_zone": [o.report_timezone for o in opened for _ in apps],
            "app": [a for _ in opened for a in apps],
            "bound": pa.array([o.baseline.get(a, -1) for o in opened for a in apps], pa.int64()),
        }
    )
    parts = []
    for shift in (-1, 0, 1):  # a row keyed in another zone counts the days around
        day = pc.cast(exploded.column("day"), pa.date32())
        target = pc.add(pc.cast(day, pa.int32()), pa.scalar(shift, pa.int32())).cast(pa.date32())
        shifted = exploded.append_column("business_date", target)
        joined = shifted.join(bounds, ["business_date", "app"], join_type="inner")
        above = pc.greater(joined.column("batch_id"), joined.column("bound"))
        if shift:  # only a row keyed in another zone counts the days around
            above = pc.and_(above, pc.not_equal(joined.column("zone"), joined.column("run_zone")))
        parts.append(joined.filter(pc.fill_null(above, False)))
    matched = pa.concat_tables(parts)
    summed = matched.group_by("business_date").aggregate([("events", "sum"), ("amount", "sum")])
    return {
        r["business_date"]: (int(r["events_sum"] or 0), int(r["amount_sum"] or 0))
        for r in summed.to_pylist()
        if r["events_sum"] or r["amount_sum"]
    }


def _exploded(progress: Any) -> Any:
    """One row per (micro-batch, business date) of the maps: app (null as ""), batch_id,
    zone, day, events, amount."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def entries(column: str, value: str) -> Any:
        maps = progress.column(column).combine_chunks()  # a MapArray: offsets, keys, items
        start, end = maps.offsets[0].as_py(), maps.offsets[-1].as_py()
        # each entry's row: the parent indices of a list with the map's offsets
        lists = pa.ListArray.from_arrays(maps.offsets, pa.nulls(end, pa.null()))
        return pa.table(
            {
                "row": pc.cast(pc.list_parent_indices(lists), pa.int64()),
                "day": maps.keys.slice(start, end - start),
                value: pc.cast(maps.items.slice(start, end - start), pa.int64()),
            }
        )

    counts = entries("new_events_by_date", "events")
    amounts = entries("new_amount_by_date", "amount")
    joined = counts.join(amounts, ["row", "day"], join_type="left outer")
    rows = joined.column("row")
    apps = pc.fill_null(pc.take(progress.column("app_id"), rows), "")
    return pa.table(
        {
            "app": apps,
            "batch_id": pc.take(progress.column("batch_id"), rows),
            "zone": pc.take(progress.column("report_timezone"), rows),
            "day": joined.column("day"),
            "events": joined.column("events"),
            "amount": pc.fill_null(joined.column("amount"), 0),
        }
    )


def read_window(location: Location, ref: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A window's `reconciliation` rows (any currency: a row from before currencies has
    none) and its `reconciliation_evidence` rows (`ref`: a `tally.window_evidence.WindowRef`),
    each read from the date's partition, skipping files by window start and key."""
    where = [("window_start", "=", ref.start), ("key", "=", ref.key)]
    recon = read_rows(location, RECONCILIATION, None, ref.business_date, where)
    evidence = read_rows(
        location, EVIDENCE, None, ref.business_date, [*where, ("currency", "=", ref.currency)]
    )
    return recon, evidence


def read_unexplained(location: Location, business_date: date) -> list[dict[str, Any]]:
    """The date's UNEXPLAINED `reconciliation` rows, largest |residual amount| first (the
    desk's date page and the sign-off request list them so)."""
    from tally import ledger
    from tally.window_evidence import FIGURES, WITH_EVIDENCE

    columns = (*FIGURES, "window_start", "window_end", "key", "currency", "status")
    rows = read_rows(
        location, RECONCILIATION, columns, business_date, [("status", "=", WITH_EVIDENCE)]
    )
    rows.sort(key=lambda r: (-abs(r.get("residual_amount") or 0), ledger.when(r["window_start"])))
    return rows
