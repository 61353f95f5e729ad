"""A batch frontier as plain values (no Spark): app_id -> the newest batch_id of that
streaming query a pin read (`tally.pins` holds the rule and its Column twin, `within`)."""

from __future__ import annotations

from collections.abc import Mapping

# app_id -> the newest batch_id of that query in the table at the pinned version. Rows written
# without an app_id (not by a stream) are under the key "".
Frontier = dict[str, int]
NO_APP = ""


def is_within(app_id: str | None, batch_id: int, frontier: Mapping[str, int]) -> bool:
    """A row of (app_id, batch_id) is at or below the frontier: a query it names, no later
    batch (a query it does not name is above it)."""
    bound = frontier.get(app_id or NO_APP)
    return bound is not None and batch_id <= bound


def merged(a: Mapping[str, int], b: Mapping[str, int]) -> Frontier:
    """The frontier covering both: the larger batch per app_id."""
    return {app: max(a.get(app, -1), b.get(app, -1)) for app in sorted({*a, *b})}
