"""The console's Batches page on the test stack: two batches run on real workers leave their
progress records in Redis; a real ``tether console`` process lists them (over HTTP and in
headless Chromium) with state, progress and pass rate, and serves each one's report, made on
demand from its results file with the transcripts from the store."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import browser, page
from tests.support.console import Console
from tests.support.finished_batch import EPOCHS, FinishedBatches, finish_batches
from tests.support.stack import Stack
from tether.producer.ops.batch.results import read_results

__all__ = ["browser", "page"]  # fixtures used by name


@pytest.fixture(scope="module")
def batches(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> FinishedBatches:
    return finish_batches(stack, tmp_path_factory.mktemp("console-batches"))


@pytest.fixture(scope="module")
def console(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    with Console(stack.env, tmp_path_factory.mktemp("console")) as running:
        yield running


def test_the_batches_page_lists_finished_batches_and_serves_their_reports(
    batches: FinishedBatches, console: Console
) -> None:
    a_id = read_results(batches.a)[0].batch_id
    b_id = read_results(batches.b)[0].batch_id
    page = httpx.get(f"{console.url}/batches", timeout=10)
    assert page.status_code == 200
    html = page.text
    for batch_id in (a_id, b_id):
        assert f'data-batch-id="{batch_id}" data-state="finished"' in html
        assert f'href="/batches/{batch_id}/report"' in html
    assert f"{4 * EPOCHS} / {4 * EPOCHS}" in html
    assert "75.0%" in html  # A: 6 of 8 graded lines passed
    report = httpx.get(f"{console.url}/batches/{a_id}/report", timeout=30)
    assert report.status_code == 200 and report.headers["content-type"].startswith("text/html")
    assert 'id="report-data"' in report.text and '"type":"TOOL_CALL"' in report.text
    missing = httpx.get(f"{console.url}/batches/batch-nope/report", timeout=10)
    assert missing.status_code == 404 and "batch-nope" in missing.text


def test_a_batch_opens_its_report_from_the_page_in_chromium(
    batches: FinishedBatches, console: Console, page: Page
) -> None:
    a_id = read_results(batches.a)[0].batch_id
    page.goto(f"{console.url}/batches")
    row = page.locator(f'#batches tr[data-batch-id="{a_id}"]')
    expect(row.locator(".state .badge")).to_have_text("finished")
    expect(row.locator(".pass-rate")).to_contain_text("75.0%")
    row.locator("a.report").click()
    expect(page.locator("#cases tbody tr")).to_have_count(4 * EPOCHS)
    page.locator("#cases tbody tr button.open").first.click()
    expect(page.locator('#t-events li[data-type="TOOL_RESULT"]')).to_have_count(1)
