"""Headless Chromium (Debian package `chromium`, installed by .ci/run) driven by Playwright, for the browser tests:
skip where either is missing, and one page that records the console's errors."""
import os
import shutil
from contextlib import contextmanager
from typing import Any, Iterator

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def need_browser() -> None:
    """Skips the calling test or fixture where Chromium or Playwright is missing."""
    if not os.path.exists(CHROMIUM):
        pytest.skip("no chromium here (apt-get install -y chromium; .ci/run installs it)")
    pytest.importorskip("playwright.sync_api")


@contextmanager
def browser_page() -> Iterator[Any]:
    """A 1280x900 page in headless Chromium; `page.errors` collects the console's error messages."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.errors = errors
        yield page
        browser.close()
