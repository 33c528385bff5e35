"""Headless Chromium (Debian's /usr/bin/chromium, Playwright's driver) for the browser tests
of pages that are not the console's: one browser per module, a fresh tab per test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.support.console import CHROMIUM, CHROMIUM_ARGS, CHROMIUM_MISSING

WAIT_MS = 30_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Chromium; fails (never skips) when /usr/bin/chromium is missing."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(CHROMIUM_MISSING, pytrace=False)
    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh tab (its own cookies)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


__all__ = ["WAIT_MS", "browser", "page"]
