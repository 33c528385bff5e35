"""The web console in a real browser: headless Chromium (Debian's package) driven by Playwright
against a real ``tether console`` process on the test stack (real workers, private redis-server,
moto S3). Saves a screenshot of the session page; with TETHER_UPDATE_SCREENSHOT=1 it replaces
the README's docs/img/console.png (so a plain test run leaves the work tree clean).

Without /usr/bin/chromium these tests fail (never skip) and say how to install it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import browser, page
from tests.support.console import Console
from tests.support.stack import Stack, unique
from tether.core.results import RunStatus
from tether.producer import Producer

README_SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "img" / "console.png"

__all__ = ["browser", "page"]  # fixtures used by name


@pytest.fixture(scope="module")
def console(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """``tether console --actions`` on the shared stack."""
    with Console(stack.env, tmp_path_factory.mktemp("console"), "--actions") as running:
        yield running


def test_the_console_finds_a_session_a_worker_just_ran(
    live_stack: Stack, console: Console, page: Page
) -> None:
    sid = unique("console")
    result = live_stack.producer.run(sid, "2 + 3", agent="calculator", wait_s=60)
    assert result.status is RunStatus.COMPLETED and result.worker

    page.goto(f"{console.url}/sessions")
    page.fill("#q", sid)
    page.click("form.search button")
    row = page.locator(f'tr[data-session-id="{sid}"]')
    expect(row).to_have_count(1)
    expect(row.locator(".badge")).to_have_text("completed")

    row.locator("a").first.click()
    expect(page.locator("#session-id")).to_have_text(sid)
    run = page.locator(f'article[data-timeline-run="{result.run_id}"]')
    expect(run.locator(".badge").first).to_have_text("completed")
    expect(run.locator("tr.call-model")).to_have_count(2)  # asked for the tool, then answered
    tool = run.locator("tr.call-tool")
    expect(tool).to_have_count(1)
    expect(tool.locator("td").nth(2)).to_have_text("calculate")
    expect(tool.locator("td.detail")).to_have_text("5")
    expect(page.locator("ol.memory")).to_contain_text("2 + 3")

    page.click(f'a[href="/runs/{result.run_id}"]')
    expect(page.locator("dl.meta")).to_contain_text(result.worker)


def _follow_a_new_session(producer: Producer, console: Console, page: Page, prefix: str) -> str:
    """A session a run just created, open in ``page`` with its live feed connected."""
    sid = unique(prefix)
    producer.run(sid, "hello", agent="echo", wait_s=60)  # the session exists
    page.goto(f"{console.url}/sessions/{sid}")
    expect(page.locator("#live-dot")).to_have_class(re.compile(r"\bon\b"))
    return sid


def test_a_live_event_arrives_and_a_queued_run_is_cancelled_from_the_page(
    live_stack: Stack, console: Console, page: Page, tmp_path: Path
) -> None:
    producer = live_stack.producer
    sid = _follow_a_new_session(producer, console, page, "live")

    # long enough for everything up to the cancel click below on a loaded machine (with 3 s,
    # the queued run sometimes started and finished first, and its button went away)
    slow = producer.run_async(sid, "sleep 8", agent="sleepy")
    expect(page.locator('#live-events li[data-type="TOOL_CALL"]')).to_have_count(1)
    assert not slow.done(), "the live event must show while its run is still going"
    expect(page.locator("#live-count")).not_to_have_text("0 new")

    queued = producer.run_async(sid, "after the sleep", agent="echo")  # behind the slow run
    live_row = page.locator(f'#session-runs tr[data-run-id="{queued.run_id}"]')
    expect(live_row.locator(".status .badge")).to_have_text("queued")  # added live, no reload
    expect(page.locator(f'#session-runs tr[data-run-id="{slow.run_id}"] .status')).to_contain_text(
        "running"
    )
    update = os.environ.get("TETHER_UPDATE_SCREENSHOT") == "1"
    screenshot = README_SCREENSHOT if update else tmp_path / "console.png"
    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 10_000

    page.goto(f"{console.url}/runs")
    row = page.locator(f'tr[data-run-id="{queued.run_id}"]')
    expect(row.locator(".status")).to_contain_text("queued")
    row.locator("button[data-cancel]").click()
    expect(page.locator("#flash")).to_contain_text("cancelled: it will never start")
    row = page.locator(f'tr[data-run-id="{queued.run_id}"]')
    # no reload: the page's live feed turns the cell once the worker reaches the run
    expect(row.locator(".status .badge")).to_have_text("cancelled")
    assert queued.run_result(timeout=30).status is RunStatus.CANCELLED
    assert slow.run_result(timeout=30).status is RunStatus.COMPLETED

    page.goto(f"{console.url}/sessions/{sid}")
    tool = page.locator(f'article[data-timeline-run="{slow.run_id}"] tr.call-tool')
    expect(tool.locator("td").nth(3)).to_have_text(re.compile(r"^8\.\d s$"))  # the tool's duration


def test_a_run_row_that_appears_live_gets_its_cancel_button(
    live_stack: Stack, console: Console, page: Page
) -> None:
    """#29 N4: a queued run added to the page by the live feed can be cancelled from its row,
    without a reload (before, only rows the server rendered had the button)."""
    producer = live_stack.producer
    sid = _follow_a_new_session(producer, console, page, "livecancel")

    slow = producer.run_async(sid, "sleep 8", agent="sleepy")
    queued = producer.run_async(sid, "after the sleep", agent="echo")  # behind the slow run
    live_row = page.locator(f'#session-runs tr[data-run-id="{queued.run_id}"]')
    expect(live_row.locator(".status .badge")).to_have_text("queued")  # added live
    live_row.locator("button[data-cancel]").click()
    expect(page.locator("#flash")).to_contain_text("cancelled: it will never start")
    assert queued.run_result(timeout=30).status is RunStatus.CANCELLED
    assert slow.run_result(timeout=60).status is RunStatus.COMPLETED
