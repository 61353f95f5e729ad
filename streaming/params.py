"""What a stream runs with: its plain parameters (read from Settings at the entry point), its
clock, and the error that stops it before it writes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from streaming.lateness import MIN_HISTORY_EVENTS
from streaming.logic import WindowParams
from tally.maintenance import retention_properties
from tally.money import DEFAULT_CURRENCY
from tally.settings import Settings, default_checkpoint

Clock = Callable[[], datetime]


class StreamError(RuntimeError):
    """A condition that stops the stream before it writes anything (one-line message)."""


@dataclass(frozen=True)
class StreamParams:
    """Plain values the job runs with (read from Settings at the entry point)."""

    warehouse: str
    window_ms: int
    lateness_ms: int
    allowed_lateness_ms: int
    idle_timeout_ms: int
    max_clock_skew_ms: int
    watermark_policy: str = "partition-min"
    arrival_clock: bool = False  # processing time = newest input file's modification time
    dedup_horizon_ms: int = 0
    checkpoint: str = ""  # "": the warehouse's default checkpoint
    window_slide_ms: int = 0  # hopping windows slide by this (0: tumbling)
    session_gap_ms: int = 0  # session windows with this gap (0: fixed windows)
    early_firing_interval_ms: int = 0  # early (final = false) rows at most this often; 0: off
    # the field that makes a line a control record carrying a source watermark ("": none)
    source_watermark_field: str = ""
    # L_p per source partition where it differs from `lateness_ms`
    lateness_by_partition: Mapping[int, int] = field(default_factory=dict)
    # partitions the watermark waits for until each has reported (docs/semantics.md)
    expected_partitions: frozenset[int] = frozenset()
    # lateness auto (docs/semantics.md): each partition's bound follows its delays toward
    # the target, within [lateness_min_ms, lateness_max_ms]; `lateness_ms` is then unused
    lateness_auto: bool = False
    completeness_target: float = 99.9
    lateness_min_ms: int = 0
    lateness_max_ms: int = 0
    lateness_min_history: int = MIN_HISTORY_EVENTS  # not a setting: tests lower it
    # business dates are calendar dates here (stream_progress.new_events_by_date's keys)
    report_timezone: str = "UTC"
    # settings kept as properties of the stream's tables (retention; tally.maintenance)
    table_properties: Mapping[str, str] = field(default_factory=dict)
    # the currency of an event that names none (the event contract)
    default_currency: str = DEFAULT_CURRENCY

    @property
    def window(self) -> WindowParams:
        return WindowParams(
            self.window_ms,
            self.allowed_lateness_ms,
            self.dedup_horizon_ms,
            self.window_slide_ms,
            self.early_firing_interval_ms,
            self.session_gap_ms,
        )

    @property
    def checkpoint_location(self) -> str:
        return self.checkpoint or default_checkpoint(self.warehouse)

    @classmethod
    def from_settings(
        cls, settings: Settings, arrival_clock: bool = False, topic_partitions: int = 0
    ) -> StreamParams:
        """`topic_partitions`: how many partitions the Kafka topic has (for
        `expected_partitions = all`)."""
        expected = settings.expected_partition_set
        if expected is None:  # `all`: the topic's partitions when the stream starts
            expected = frozenset(range(topic_partitions))
        return cls(
            warehouse=settings.warehouse,
            window_ms=settings.window,
            lateness_ms=settings.fixed_lateness,
            allowed_lateness_ms=settings.allowed_lateness,
            idle_timeout_ms=settings.idle_timeout,
            max_clock_skew_ms=settings.max_clock_skew,
            watermark_policy=settings.watermark_policy,
            arrival_clock=arrival_clock,
            dedup_horizon_ms=settings.dedup_horizon,
            checkpoint=settings.checkpoint_location,
            lateness_by_partition=settings.lateness_by_partition_ms,
            window_slide_ms=settings.window_slide,
            session_gap_ms=settings.session_gap,
            source_watermark_field=settings.source_watermark_field,
            early_firing_interval_ms=settings.early_firing_interval,
            expected_partitions=expected,
            lateness_auto=settings.lateness_auto,
            completeness_target=settings.completeness_target,
            lateness_min_ms=settings.lateness_min,
            lateness_max_ms=settings.lateness_max,
            report_timezone=settings.report_timezone,
            default_currency=settings.default_currency,
            table_properties=(
                retention_properties(settings.deleted_file_retention, settings.log_retention)
                if settings.maintenance
                else {}
            ),
        )


def wall_clock() -> datetime:
    return datetime.now(UTC)
