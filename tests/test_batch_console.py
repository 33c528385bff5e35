"""The console's Batches page on the test stack: two batches run on real workers leave their
progress records in Redis; a real ``tether console`` process lists them (over HTTP and in
headless Chromium) with state, progress and pass rate, and serves each one's report, made on
demand from its results file with the transcripts from the store."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import browser, page
from tests.support.console import Console
from tests.support.finished_batch import EPOCHS, FinishedBatches, finish_batches
from tests.support.stack import Stack, unique
from tether.keys import RedisKeys
from tether.producer.ops.batch import run_batch
from tether.producer.ops.batch.boards.base import BatchRecord, BatchState
from tether.producer.ops.batch.boards.redis import RedisBatchBoard
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


# --- a record's results_path is its tenant's claim, not a fact (C3) -------------------------------


@pytest.fixture(scope="module")
def bob_console(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """A console of tenant ``bob`` (``TETHER_TENANT=bob``, as bob would start his own)."""
    env = dict(stack.env, TETHER_TENANT="bob")
    with Console(env, tmp_path_factory.mktemp("console-bob")) as running:
        yield running


def _put_bob_record(stack: Stack, batch_id: str, results_path: str) -> None:
    """What bob can do with his own Redis credential: write a record on his own board."""
    board = RedisBatchBoard(stack.producer.redis, RedisKeys(stack.settings.namespace), ttl_s=600)
    now_ms = int(time.time() * 1000)
    board.put(
        BatchRecord(
            batch_id=batch_id,
            tenant="bob",
            results_path=results_path,
            state=BatchState.FINISHED,
            total=1,
            finished=1,
            started_at_ms=now_ms,
        )
    )


def _without_tenant(source: Path, target: Path) -> Path:
    """A copy of a results file as a build before lines carried a tenant wrote it."""
    lines = [json.loads(raw) for raw in source.read_text().splitlines()]
    assert all("tenant" in line for line in lines), "new lines name their tenant"
    target.write_text("".join(json.dumps({**line, "tenant": None}) + "\n" for line in lines))
    return target


def _not_found_page(console: Console, batch_id: str, path: str) -> str:
    """The report answer of a batch without its results file here, its id and path masked."""
    answer = httpx.get(f"{console.url}/batches/{batch_id}/report", timeout=30)
    assert answer.status_code == 404, (path, answer.status_code)
    masked = answer.text.replace(batch_id, "BATCH").replace(path, "PATH")
    return re.sub(r"rendered [^<]*", "rendered", masked)  # the page's clock


def test_a_record_pointing_at_another_tenants_results_or_any_path_serves_nothing(
    stack: Stack,
    batches: FinishedBatches,
    bob_console: Console,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Before: bob's console served the report of any file bob's record named (tenant
    ``default``'s whole results: inputs, outputs, expected answers), and its report link told
    whether any path existed on the console's machine. Now only a file whose lines are that
    batch's of bob's tenant is read; every other path answers as a missing one."""
    folder = tmp_path_factory.mktemp("bob-batch")
    secret = unique("bob-own-text")
    cases = folder / "cases.jsonl"
    cases.write_text(json.dumps({"id": "c1", "input": secret}) + "\n")
    own = run_batch(stack.producer, cases, agent="echo", tenant="bob", out=folder / "b.jsonl")
    assert read_results(Path(own.out))[0].tenant == "bob"
    victim_id = read_results(batches.a)[0].batch_id  # tenant "default"'s batch
    old_own = _without_tenant(Path(own.out), folder / "old-own.jsonl")
    old_victim = _without_tenant(batches.a, folder / "old-victim.jsonl")
    foreign = {
        victim_id: str(batches.a),  # even under the victim's own batch id
        "bob-stolen": str(batches.a),
        "bob-old-victim": str(old_victim),  # a file from before lines named a tenant
        "bob-passwd": "/etc/passwd",
        "bob-environ": "/proc/self/environ",
        "bob-zero": "/dev/zero",
        "bob-missing": str(folder / "no-such.results.jsonl"),
    }
    for batch_id, path in foreign.items():
        _put_bob_record(stack, batch_id, path)
    _put_bob_record(stack, own.batch_id, own.out)

    html = httpx.get(f"{bob_console.url}/batches", timeout=10).text
    for batch_id in foreign:
        assert f'data-batch-id="{batch_id}"' in html
        assert f'href="/batches/{batch_id}/report"' not in html, batch_id
    assert f'href="/batches/{own.batch_id}/report"' in html
    answers = {_not_found_page(bob_console, i, p) for i, p in foreign.items()}
    assert len(answers) == 1, "a missing file and a foreign one must answer alike"
    assert "PATH" in answers.pop()
    report = httpx.get(f"{bob_console.url}/batches/{own.batch_id}/report", timeout=30)
    assert report.status_code == 200 and secret in report.text
    # a file written before lines named a tenant is still served by its batch id
    _put_bob_record(stack, own.batch_id, str(old_own))
    old = httpx.get(f"{bob_console.url}/batches/{own.batch_id}/report", timeout=30)
    assert old.status_code == 200 and secret in old.text
