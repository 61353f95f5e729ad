#!/usr/bin/env bash
# A Spark standalone cluster on this machine: one master and one worker, run from the pyspark
# package of the project's virtualenv (its bin/spark-class; the wheel has no start-*.sh), on
# 127.0.0.1, for tests and for trying tally on a real cluster manager.
#
#   scripts/cluster.sh start    # start the master, then the worker; wait until it registered
#   scripts/cluster.sh stop     # SIGTERM worker and master by recorded pid, SIGKILL after 30 s
#   scripts/cluster.sh status   # "running (...)" / "stopped" (or which half is up); exit 0 / 3
#
# Then: tally stream --spark-master spark://127.0.0.1:7077 ... (see docs/deployment.md).
#
# Pids, logs and the worker's work directory (one folder per application, with each executor's
# stdout/stderr) live in TALLY_CLUSTER_HOME (default .cluster/, git-ignored). Environment
# (defaults): TALLY_CLUSTER_PORT (7077: the master), TALLY_CLUSTER_UI_PORT (18080: the master's
# web UI, JSON at /json/), TALLY_CLUSTER_WORKER_UI_PORT (18081), TALLY_CLUSTER_WORKER_PORT
# (0: any free port), TALLY_CLUSTER_CORES (2: cores the worker offers),
# TALLY_CLUSTER_MEMORY (3g: memory the worker offers to executors), TALLY_CLUSTER_DAEMON_MEMORY
# (512m: heap of the master and worker JVMs themselves), TALLY_CLUSTER_APP_TTL (86400: seconds
# a finished application's directory is kept). The master's REST submission port (6066) stays
# closed. No authentication: everything listens on the loopback interface only.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/pidfile.sh
. "$ROOT/scripts/pidfile.sh"
PYTHON=${TALLY_CLUSTER_PYTHON:-$ROOT/.venv/bin/python}
HOME_DIR=${TALLY_CLUSTER_HOME:-$ROOT/.cluster}
PORT=${TALLY_CLUSTER_PORT:-7077}
UI_PORT=${TALLY_CLUSTER_UI_PORT:-18080}
WORKER_UI_PORT=${TALLY_CLUSTER_WORKER_UI_PORT:-18081}
WORKER_PORT=${TALLY_CLUSTER_WORKER_PORT:-0}
CORES=${TALLY_CLUSTER_CORES:-2}
MEMORY=${TALLY_CLUSTER_MEMORY:-3g}
DAEMON_MEMORY=${TALLY_CLUSTER_DAEMON_MEMORY:-512m}
HOST=127.0.0.1
MASTER_URL="spark://$HOST:$PORT"
UI_URL="http://$HOST:$UI_PORT"

running_pid() { pid_alive "$HOME_DIR/$1.pid"; } # running_pid master|worker

port_open() {
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

alive_workers() { # the master's count of ALIVE workers (0 while it does not answer)
  curl -fsS --max-time 2 "$UI_URL/json/" 2>/dev/null |
    sed -n 's/.*"aliveworkers" *: *\([0-9]*\).*/\1/p' | head -1 | grep . || echo 0
}

spark_home() {
  if [ ! -x "$PYTHON" ]; then
    echo "cluster.sh: $PYTHON not found; run 'make install' first" >&2
    exit 1
  fi
  "$PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'
}

launch() { # launch NAME CLASS ARGS...: spark-class in the background, its pid recorded
  local name=$1
  shift
  # spark-class execs the JVM, so $! is the daemon's own pid.
  nohup "$SPARK_HOME/bin/spark-class" "$@" >>"$HOME_DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$HOME_DIR/$name.pid"
}

wait_for() { # wait_for WHAT SECONDS CONDITION...: poll until CONDITION holds or a daemon died
  local what=$1 seconds=$2 name
  shift 2
  for _ in $(seq 1 $((seconds * 4))); do
    if "$@"; then
      return 0
    fi
    for name in master worker; do
      if [ -f "$HOME_DIR/$name.pid" ] && ! running_pid "$name" >/dev/null; then
        echo "cluster.sh: the $name exited; last lines of $HOME_DIR/$name.log:" >&2
        tail -20 "$HOME_DIR/$name.log" >&2
        stop >/dev/null
        exit 1
      fi
    done
    sleep 0.25
  done
  echo "cluster.sh: $what not within $seconds s; see $HOME_DIR/*.log" >&2
  stop >/dev/null
  exit 1
}

worker_registered() { [ "$(alive_workers)" -ge 1 ]; }

start() {
  if pid=$(running_pid master) && running_pid worker >/dev/null; then
    echo "cluster.sh: already running (master pid $pid, $MASTER_URL)"
    return 0
  fi
  if running_pid master >/dev/null || running_pid worker >/dev/null; then
    echo "cluster.sh: partly running; stopping what is left first"
    stop >/dev/null
  fi
  for p in "$PORT" "$UI_PORT" "$WORKER_UI_PORT"; do
    if port_open "$p"; then
      echo "cluster.sh: $HOST:$p is taken by another process; set TALLY_CLUSTER_*PORT" >&2
      exit 2
    fi
  done
  SPARK_HOME=$(spark_home)
  export SPARK_HOME SPARK_LOCAL_IP=$HOST SPARK_DAEMON_MEMORY=$DAEMON_MEMORY
  unset SPARK_NO_DAEMONIZE
  export SPARK_MASTER_OPTS="${SPARK_MASTER_OPTS:-} -Dspark.master.rest.enabled=false"
  # Each application's directory holds a copy of every shipped jar (~36 MB): keep a day's.
  export SPARK_WORKER_OPTS="${SPARK_WORKER_OPTS:-} -Dspark.worker.cleanup.enabled=true \
-Dspark.worker.cleanup.appDataTtl=${TALLY_CLUSTER_APP_TTL:-86400}"
  mkdir -p "$HOME_DIR/work"
  rm -f "$HOME_DIR/master.pid" "$HOME_DIR/worker.pid"
  launch master org.apache.spark.deploy.master.Master \
    --host "$HOST" --port "$PORT" --webui-port "$UI_PORT"
  wait_for "the master's port $PORT open" 60 port_open "$PORT"
  launch worker org.apache.spark.deploy.worker.Worker \
    --host "$HOST" --port "$WORKER_PORT" --webui-port "$WORKER_UI_PORT" \
    --cores "$CORES" --memory "$MEMORY" --work-dir "$HOME_DIR/work" "$MASTER_URL"
  wait_for "a registered worker" 60 worker_registered
  echo "cluster.sh: running (master pid $(cat "$HOME_DIR/master.pid") $MASTER_URL, UI $UI_URL;" \
    "worker pid $(cat "$HOME_DIR/worker.pid"), $CORES cores, $MEMORY; logs $HOME_DIR)"
}

stop_one() { stop_pid "$HOME_DIR/$1.pid" "cluster.sh: $1"; } # stop_one master|worker

stop() {
  # The worker first: it stops its executors; then the master.
  stop_one worker
  stop_one master
  echo "cluster.sh: stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status)
    master=$(running_pid master || true)
    worker=$(running_pid worker || true)
    if [ -n "$master" ] && [ -n "$worker" ]; then
      echo "running (master pid $master $MASTER_URL, UI $UI_URL; worker pid $worker," \
        "$(alive_workers) alive)"
    elif [ -n "$master$worker" ]; then
      echo "partly running (master pid ${master:-none}, worker pid ${worker:-none})"
      exit 3
    else
      echo "stopped"
      exit 3
    fi
    ;;
  *)
    echo "usage: scripts/cluster.sh start|stop|status" >&2
    exit 2
    ;;
esac
