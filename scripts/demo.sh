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
tally show stream_progress --warehouse "$demo/warehouse" --limit 20 | cut -c1-160
echo "== 4. nightly reconciliation for $day: re-aggregate, diff, validate (GX), report"
status=0
tally reconcile --date "$day" --warehouse "$demo/warehouse" \
  --out "$demo/reports" || status=$?
if [ "$status" -eq 1 ]; then
  # The generator plants data-quality faults (clocks 30 min ahead, a heavy lateness tail):
  # the suites are meant to catch them. The report shows each one with its observed value.
  echo "(reconcile exited 1: see the line above and $demo/reports/report-$day.html)"
elif [ "$status" -ne 0 ]; then
  exit "$status"
fi
echo "Report: $demo/reports/report-$day.html"
echo
echo "Tables are in $demo/warehouse; look at one with: .venv/bin/tally show late_events --warehouse $demo/warehouse"
