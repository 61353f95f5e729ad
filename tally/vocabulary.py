"""The words both layers and the reports share: arrival statuses, reconciliation statuses,
arrival order, severities. Defined once here; everything else imports them."""

from __future__ import annotations

# -- the event contract's own fields (tally/events.py; its JVM line scanner states them in Java)
KNOWN_FIELDS = ("event_id", "key", "amount", "event_time", "partition", "currency")

# -- how an event arrived (events.arrival_status) ---------------------------------------------
ON_TIME = "on_time"  # its window was open
ALLOWED_LATE = "allowed_late"  # its window had closed, within allowed lateness: a revision
LATE = "late"  # beyond allowed lateness: the late side output
DUPLICATE = "duplicate"  # an event_id already counted
ARRIVAL_STATUSES = (ON_TIME, ALLOWED_LATE, LATE, DUPLICATE)
COUNTED = (ON_TIME, ALLOWED_LATE)  # the statuses the stream's window totals include

# -- what the nightly diff says of a window (reconciliation.status) ----------------------------
MATCH = "MATCH"
EXPLAINED_BY_LATE = "EXPLAINED_BY_LATE"
# the gap is late events and copies of earlier events that the stream counted again (beyond
# its dedup horizon), late events or not
EXPLAINED_BY_COPIES = "EXPLAINED_BY_COPIES"
MISSING_IN_STREAM = "MISSING_IN_STREAM"
UNEXPLAINED = "UNEXPLAINED"
EXPLAINED_STATUSES = (MATCH, EXPLAINED_BY_LATE, EXPLAINED_BY_COPIES, MISSING_IN_STREAM)
STATUSES = (*EXPLAINED_STATUSES, UNEXPLAINED)

# -- arrival order ------------------------------------------------------------------------------
# The order lines arrive in within one input: file modification time, file, line.
LINE_ORDER = ("source_mtime", "source_file", "source_line")
# The order of the whole event log: micro-batch by micro-batch, then line order. `batch_id`
# breaks ties of `ingest_time` (two batches with one processing time run in batch_id order).
ARRIVAL_ORDER = ("ingest_time", "batch_id", *LINE_ORDER)
# late_events has no source_mtime column; within a batch its rows keep file, line order.
LATE_ARRIVAL_ORDER = tuple(c for c in ARRIVAL_ORDER if c != "source_mtime")

# -- alerts and expectations ---------------------------------------------------------------------
SEVERITIES = ("info", "warning", "error", "critical")
CRITICAL = "critical"
WARNING = "warning"

# -- Airflow: the nightly DAG and its sign-off tasks (dags/ and the desk, tally_desk/) -----------
NIGHTLY_DAG = "tally_nightly_reconciliation"
SIGNOFF_TASK = "sign_off"  # one person decides, or (four eyes) prepares
APPROVE_TASK = "approve_sign_off"  # the second person of a material gap's sign-off
