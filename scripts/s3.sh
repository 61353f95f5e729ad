#!/usr/bin/env bash
# An S3-compatible endpoint (moto's server, from the project's .venv) on 127.0.0.1, for tests
# and trying s3a:// warehouses locally. Buckets and objects live in the server's memory: a
# stop (or a crash) loses them.
#
#   scripts/s3.sh start          # start, wait until the port answers
#   scripts/s3.sh stop           # SIGTERM the recorded pid, SIGKILL if it is still there after 30 s
#   scripts/s3.sh status         # "running (pid P, http://127.0.0.1:PORT)" / "stopped"; exit 0 / 3
#   scripts/s3.sh bucket NAME    # create the bucket NAME (no-op if it exists)
#
# The server comes from `make install` (moto[server]). Its log and pid file live in
# TALLY_S3_HOME (default .s3/, git-ignored). Environment (defaults): TALLY_S3_PORT (19000).
# `bucket` talks to TALLY_S3_ENDPOINT (default this server) in TALLY_S3_REGION (default
# AWS_REGION, else us-east-1) with the credentials of the environment (AWS_ACCESS_KEY_ID and
# AWS_SECRET_ACCESS_KEY; any values for this server), as tally's Spark sessions do.
# No authentication: this server listens on the loopback interface only.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/pidfile.sh
. "$ROOT/scripts/pidfile.sh"
BIN=$ROOT/.venv/bin
HOME_DIR=${TALLY_S3_HOME:-$ROOT/.s3}
PORT=${TALLY_S3_PORT:-19000}
PID_FILE="$HOME_DIR/s3.pid"
LOG="$HOME_DIR/s3.log"

running_pid() { pid_alive "$PID_FILE"; }

port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start() {
  if pid=$(running_pid); then
    echo "s3.sh: already running (pid $pid, http://127.0.0.1:$PORT)"
    return 0
  fi
  if [ ! -x "$BIN/moto_server" ]; then
    echo "s3.sh: no $BIN/moto_server; run 'make install' first" >&2
    exit 1
  fi
  if port_open "$PORT"; then
    echo "s3.sh: 127.0.0.1:$PORT is taken by another process; set TALLY_S3_PORT" >&2
    exit 2
  fi
  mkdir -p "$HOME_DIR"
  nohup "$BIN/moto_server" -H 127.0.0.1 -p "$PORT" >>"$LOG" 2>&1 &
  echo $! >"$PID_FILE"
  for _ in $(seq 1 120); do
    if port_open "$PORT"; then
      echo "s3.sh: running (pid $(cat "$PID_FILE"), http://127.0.0.1:$PORT; logs $LOG)"
      return 0
    fi
    if ! running_pid >/dev/null; then
      echo "s3.sh: the server exited; last lines of $LOG:" >&2
      tail -20 "$LOG" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "s3.sh: port $PORT not open after 12 s; see $LOG" >&2
  exit 1
}

stop() { stop_pid "$PID_FILE" s3.sh; }

bucket() {
  local name=${1:-}
  if [ -z "$name" ]; then
    echo "usage: scripts/s3.sh bucket NAME" >&2
    exit 2
  fi
  if [ -z "${AWS_ACCESS_KEY_ID:-}" ] || [ -z "${AWS_SECRET_ACCESS_KEY:-}" ]; then
    echo "s3.sh: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (any values for this server)" >&2
    exit 2
  fi
  S3_BUCKET=$name \
    S3_ENDPOINT=${TALLY_S3_ENDPOINT:-http://127.0.0.1:$PORT} \
    S3_REGION=${TALLY_S3_REGION:-${AWS_REGION:-us-east-1}} \
    "$BIN/python" - <<'EOF'
import os
import sys

import boto3
from botocore.exceptions import BotoCoreError, ClientError

name, endpoint, region = (os.environ[k] for k in ("S3_BUCKET", "S3_ENDPOINT", "S3_REGION"))
s3 = boto3.client("s3", endpoint_url=endpoint, region_name=region)
# Outside us-east-1 S3 wants the region named again in the request.
where = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
try:
    try:
        s3.head_bucket(Bucket=name)
        print(f"s3.sh: bucket {name} exists at {endpoint}")
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("404", "NoSuchBucket"):
            raise
        s3.create_bucket(Bucket=name, **where)
        print(f"s3.sh: bucket {name} created at {endpoint}")
except ClientError as exc:
    error = exc.response["Error"]
    sys.exit(f"s3.sh: bucket {name}: {error.get('Message') or error.get('Code') or exc}")
except BotoCoreError as exc:
    sys.exit(f"s3.sh: bucket {name}: {exc}")
EOF
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status)
    if pid=$(running_pid); then
      echo "running (pid $pid, http://127.0.0.1:$PORT)"
    else
      echo "stopped"
      exit 3
    fi
    ;;
  bucket) bucket "${2:-}" ;;
  *)
    echo "usage: scripts/s3.sh start|stop|status|bucket NAME" >&2
    exit 2
    ;;
esac
