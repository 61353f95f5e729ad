#!/usr/bin/env bash
# A single-node Kafka broker (KRaft mode: broker and controller in one JVM, no ZooKeeper) on
# 127.0.0.1, for tests, the demo and the benchmark.
#
#   scripts/kafka.sh start     # format the storage once, start, wait until the port answers
#   scripts/kafka.sh stop      # SIGTERM the recorded pid, SIGKILL if it is still there after 30 s
#   scripts/kafka.sh status    # "running (pid P, 127.0.0.1:PORT)" / "stopped"; exit 0 / 3
#
# The jars come from `make jars` (.cache/kafka). Data, logs, the pid file and the generated
# server.properties live in TALLY_KAFKA_HOME (default .kafka/, git-ignored). Environment
# (defaults): TALLY_KAFKA_PORT (19092; the controller listens on PORT + 1),
# TALLY_KAFKA_PARTITIONS (8: partitions of auto-created topics), TALLY_KAFKA_HEAP (512m).
# No authentication: this broker listens on the loopback interface only.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/pidfile.sh
. "$ROOT/scripts/pidfile.sh"
JARS=${TALLY_KAFKA_JARS:-$ROOT/.cache/kafka}
HOME_DIR=${TALLY_KAFKA_HOME:-$ROOT/.kafka}
PORT=${TALLY_KAFKA_PORT:-19092}
CONTROLLER_PORT=$((PORT + 1))
PARTITIONS=${TALLY_KAFKA_PARTITIONS:-8}
HEAP=${TALLY_KAFKA_HEAP:-512m}
PID_FILE="$HOME_DIR/kafka.pid"
PROPS="$HOME_DIR/server.properties"
LOG="$HOME_DIR/kafka.log"

running_pid() { pid_alive "$PID_FILE"; }

port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

write_properties() {
  cat >"$PROPS" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$HOME_DIR/data
num.partitions=$PARTITIONS
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# Keep every record: a record's timestamp is its file's arrival time (tally_tools/produce.py),
# days old in test, demo and benchmark data, and the default 7-day time retention deletes
# such records within 30 s of a start (the data of 2026-11-20 vanished on 2026-11-27).
log.retention.ms=-1
EOF
}

start() {
  if pid=$(running_pid); then
    echo "kafka.sh: already running (pid $pid, 127.0.0.1:$PORT)"
    return 0
  fi
  if ! ls "$JARS"/kafka_2.13-*.jar >/dev/null 2>&1; then
    echo "kafka.sh: no broker jars in $JARS; run 'make jars' first" >&2
    exit 1
  fi
  if port_open "$PORT"; then
    echo "kafka.sh: 127.0.0.1:$PORT is taken by another process; set TALLY_KAFKA_PORT" >&2
    exit 2
  fi
  mkdir -p "$HOME_DIR/data"
  write_properties
  if [ ! -f "$HOME_DIR/data/meta.properties" ]; then
    cluster_id=$(java -cp "$JARS/*" kafka.tools.StorageTool random-uuid)
    java -cp "$JARS/*" kafka.tools.StorageTool format --ignore-formatted -t "$cluster_id" \
      -c "$PROPS" >>"$LOG" 2>&1
  fi
  nohup java "-Xms256m" "-Xmx$HEAP" -cp "$JARS/*" kafka.Kafka "$PROPS" >>"$LOG" 2>&1 &
  echo $! >"$PID_FILE"
  for _ in $(seq 1 120); do
    if port_open "$PORT"; then
      echo "kafka.sh: running (pid $(cat "$PID_FILE"), 127.0.0.1:$PORT; logs $LOG)"
      return 0
    fi
    if ! running_pid >/dev/null; then
      echo "kafka.sh: the broker exited; last lines of $LOG:" >&2
      tail -20 "$LOG" >&2
      exit 1
    fi
    sleep 0.5
  done
  echo "kafka.sh: port $PORT not open after 60 s; see $LOG" >&2
  exit 1
}

stop() { stop_pid "$PID_FILE" kafka.sh; }

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status)
    if pid=$(running_pid); then
      echo "running (pid $pid, 127.0.0.1:$PORT)"
    else
      echo "stopped"
      exit 3
    fi
    ;;
  *)
    echo "usage: scripts/kafka.sh start|stop|status" >&2
    exit 2
    ;;
esac
