"""The Airflow plugin: the desk's app in the api-server, its navigation entry and its tab on
the nightly DAG's runs. Loaded from the repository's `plugins/` folder
(`AIRFLOW__CORE__PLUGINS_FOLDER`, set by scripts/airflow.sh and the compose stack)."""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/tally"


def _apps() -> list[dict[str, Any]]:
    from tally_desk.app import create_app

    return [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "tally reconciliation desk"}]


class TallyDeskPlugin(AirflowPlugin):
    name = "tally_desk"
    fastapi_apps = _apps()
    external_views = [  # noqa: RUF012 (AirflowPlugin declares it a plain list)
        {
            "name": "Reconciliation",
            "href": f"{URL_PREFIX}/ledger",
            "destination": "nav",
            "url_route": "reconciliation",
            "nav_top_level": True,
        },
        {
            "name": "Reconciliation",
            "href": f"{URL_PREFIX}/runs/{{DAG_ID}}/{{RUN_ID}}",
            "destination": "dag_run",
            "url_route": "reconciliation-run",
        },
    ]
