"""Debian's chromium for the browser tests, driven by Playwright (no browser download)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


@contextmanager
def opened_file(path: Path) -> Iterator[tuple[Any, list[str]]]:
    """`path` (an HTML file) loaded in headless chromium with a fresh user-data dir beside it:
    the page, and every URL it requested (a self-contained file requests nothing else)."""
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    ARTIFACTS.mkdir(exist_ok=True)
    requests: list[str] = []
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(path.parent / "chromium-profile"),
            executable_path=executable,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1200, "height": 900},
        )
        try:
            page = context.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.goto(path.as_uri(), wait_until="load")
            yield page, requests
        finally:
            context.close()
