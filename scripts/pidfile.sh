# A process recorded in a pid file, for the scripts that start servers (kafka.sh, s3.sh,
# cluster.sh source this): is it running, and stop it by its pid.

pid_alive() { # pid_alive PID_FILE: print the recorded pid when that process runs
  [ -f "$1" ] || return 1
  local pid
  pid=$(cat "$1")
  kill -0 "$pid" 2>/dev/null && echo "$pid"
}

stop_pid() { # stop_pid PID_FILE LABEL: SIGTERM, SIGKILL after 30 s; the pid file goes either way
  local file=$1 label=$2 pid
  if ! pid=$(pid_alive "$file"); then
    rm -f "$file"
    echo "$label: stopped"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 60); do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$file"
      echo "$label: stopped (pid $pid)"
      return 0
    fi
    sleep 0.5
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$file"
  echo "$label: killed (pid $pid did not stop within 30 s)"
}
