"""Airflow's plugins folder entry for tally: the reconciliation desk (tally_desk.plugin)."""

from tally_desk.plugin import TallyDeskPlugin

__all__ = ["TallyDeskPlugin"]
