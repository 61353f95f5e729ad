"""The reconciliation desk: tally's pages inside the Airflow UI (an Airflow plugin).

`warehouse` reads the user-facing Delta tables with delta-rs (no JVM), `ledger` turns them
into the ledger and date views (pure), `pages` renders them as HTML, `app` is the FastAPI app
Airflow's api-server mounts (every endpoint behind Airflow's own auth), `plugin` registers it
with the navigation entry and the nightly runs' tab. On the top floor beside `dags/`: it may
import `tally` and Airflow, never the layers or the DAGs.
"""
