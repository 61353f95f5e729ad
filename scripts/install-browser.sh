#!/usr/bin/env bash
# Install Debian's chromium for the report tests (Playwright drives /usr/bin/chromium through
# executable_path; no browser is ever downloaded by Playwright). Idempotent: does nothing when
# /usr/bin/chromium is already there. Needs root (or sudo) and a reachable Debian mirror.
set -euo pipefail
CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ]; then
  echo "chromium: already installed at $CHROMIUM ($("$CHROMIUM" --version 2>/dev/null || echo 'version unknown'))"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo)
else
  echo "chromium: $CHROMIUM is missing and installing it needs root (no sudo found)" >&2
  exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "chromium: $CHROMIUM is missing and apt-get is not available (Debian/Ubuntu only)" >&2
  exit 1
fi

echo "chromium: $CHROMIUM missing; installing Debian's chromium with apt-get"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update
"${SUDO[@]}" apt-get install -y chromium
if [ ! -x "$CHROMIUM" ]; then
  echo "chromium: apt-get finished but $CHROMIUM is still missing" >&2
  exit 1
fi
echo "chromium: installed $("$CHROMIUM" --version 2>/dev/null || echo "at $CHROMIUM")"
