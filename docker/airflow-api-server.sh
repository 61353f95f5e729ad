#!/usr/bin/env bash
# The Airflow api-server of docker/compose.yaml, with authentication on.
#
# SimpleAuthManager reads the users' passwords from a JSON file (and would generate missing ones
# into it). This writes that file at every start from the environment: the user `admin` gets
# AIRFLOW_ADMIN_PASSWORD (set by whoever starts the stack: never in the repository, never in
# the image), so a changed password takes effect on restart. Then the server replaces this
# script (same PID, same signals).
set -euo pipefail
: "${AIRFLOW_ADMIN_PASSWORD:?set AIRFLOW_ADMIN_PASSWORD}"
: "${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:?set AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE}"
umask 077
python -c '
import json, os
with open(os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"], "w") as fh:
    json.dump({"admin": os.environ["AIRFLOW_ADMIN_PASSWORD"]}, fh)
'
exec airflow api-server "$@"
