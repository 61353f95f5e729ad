#!/usr/bin/env bash
# make demo: generate a day of events, stream it, reconcile it, print the summary.
set -euo pipefail
demo=${TALLY_DEMO_DIR:-demo}
day=2026-11-20
rm -rf "$demo"
echo "== 1. generate a day of events ($demo/events)"
tally generate --out "$demo/events" --events "${TALLY_DEMO_EVENTS:-100000}" --partitions 8 \
  --seed 7 --start "${day}T00:00:00Z" --duration 1d --files 48
echo "== 2. speed layer: stream the backlog, drain at end of input"
tally stream --input "$demo/events" --warehouse "$demo/warehouse" --window 60s --lateness 30s \
  --idle-timeout 10m --max-files-per-trigger 8 --available-now --drain --clock arrival
echo "== 3. per-batch progress"
tally show stream_progress --warehouse "$demo/warehouse" --limit 20 2>/dev/null | cut -c1-160 || true
if tally reconcile --help >/dev/null 2>&1; then
  echo "== 4. nightly reconciliation for $day"
  tally reconcile --date "$day" --warehouse "$demo/warehouse" --window 60s
fi
echo
echo "Tables are in $demo/warehouse; look at one with: .venv/bin/tally show late_events --warehouse $demo/warehouse"
