"""Debian's chromium for the browser tests, driven by Playwright (no browser download)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "artifacts"  # screenshots kept by the tests


def chromium_path() -> str:
    """The chromium executable; installs it (scripts/install-browser.sh) or fails the test."""
    if not os.access(CHROMIUM, os.X_OK):
        subprocess.run(["bash", str(REPO / "scripts" / "install-browser.sh")], check=False)
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing and scripts/install-browser.sh could not install it")
    return CHROMIUM
