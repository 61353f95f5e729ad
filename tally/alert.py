"""The alert record: what failed, for which business date, observed value vs threshold.

A plain value with no Airflow in it: the health checks and the tuning produce alerts, the
application layer writes them to the `alerts` table, the DAGs' notifier sends them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from tally.outputs import one_line
from tally.vocabulary import SEVERITIES


@dataclass(frozen=True)
class Alert:
    what: str
    observed: str
    threshold: str
    severity: str = "error"
    business_date: date | None = None
    report_link: str = ""
    dag_id: str = ""
    task_id: str = ""
    run_id: str = ""
    log_link: str = ""
    alert_time: datetime = field(default_factory=lambda: datetime.now(UTC))

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity: expected one of {', '.join(SEVERITIES)}")
        if self.alert_time.tzinfo is None:
            raise ValueError("alert_time: needs a time zone")

    def message(self) -> str:
        """The one line that is logged and sent (payload text in it cannot break the line:
        `tally.outputs.one_line`)."""
        where = ".".join(p for p in (self.dag_id, self.task_id) if p) or "tally"
        day = self.business_date.isoformat() if self.business_date else "-"
        text = (
            f"[{self.severity.upper()}] {where} business_date={day}: {self.what}; "
            f"observed {self.observed or '-'}, threshold {self.threshold or '-'}"
        )
        if self.report_link:
            text += f"; report {self.report_link}"
        if self.log_link:
            text += f"; log {self.log_link}"
        return one_line(text)

    def with_context(self, **values: Any) -> Alert:
        """A copy with the empty fields among `values` filled in."""
        current = asdict(self)
        fills = {k: v for k, v in values.items() if v and not current.get(k)}
        return Alert(**{**current, **fills})
