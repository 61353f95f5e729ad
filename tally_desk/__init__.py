"""The reconciliation desk: tally's pages inside the Airflow UI (an Airflow plugin).

`warehouse` reads the user-facing Delta tables with delta-rs (no JVM), `ledger` turns them
into the ledger and date views (pure), `pages` renders them as HTML, `app` is the FastAPI app
Airflow's api-server mounts (every endpoint behind Airflow's own auth), `plugin` registers it
with the navigation entry and the nightly runs' tab. Beside the layers (`docs/architecture.md`,
the import contract in `pyproject.toml`): it imports `tally` and Airflow, never the layers, the
command line or the DAGs, and nothing of tally imports it.
"""
