"""``tether batch report``: two batches run on real workers, written as one self-contained HTML
page, then driven in headless Chromium (Debian's package, as the console's tests): the summary
and the comparison show, search and a filter narrow the case table, and a case opens its
transcript read from the stored session. With TETHER_UPDATE_SCREENSHOT=1 the test replaces the
README's docs/img/batch-report.png (so a plain run leaves the work tree clean)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, Request, expect
from typer.testing import CliRunner

from tests.support.browser import browser, page
from tests.support.finished_batch import EPOCHS, FinishedBatches, finish_batches
from tests.support.stack import Stack
from tether.producer.ops.cli.batch import batch_app

README_SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "img" / "batch-report.png"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "batch_results_v2.jsonl"

__all__ = ["browser", "page"]  # fixtures used by name


@pytest.fixture(scope="module")
def batches(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> FinishedBatches:
    return finish_batches(stack, tmp_path_factory.mktemp("report"))


def report(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], *args: str) -> None:
    for name, value in env.items():
        if name.startswith(("TETHER_", "AWS_")):
            monkeypatch.setenv(name, value)
    result = CliRunner().invoke(batch_app, ["report", *args])
    assert result.exit_code == 0, result.output


def test_the_report_searches_filters_and_opens_a_transcript_in_chromium(
    stack: Stack,
    batches: FinishedBatches,
    page: Page,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    update = os.environ.get("TETHER_UPDATE_SCREENSHOT") == "1"
    monkeypatch.delenv("TETHER_UPDATE_SCREENSHOT", raising=False)  # not a setting of the CLI's
    out = tmp_path / "report.html"
    # this batch (calculator) against the baseline (echo, which gets no sum right)
    report(monkeypatch, stack.env, str(batches.a), "--compare", str(batches.b), "-o", str(out))
    outside: list[str] = []

    def note(request: Request) -> None:
        if not request.url.startswith(("file:", "data:", "about:")):
            outside.append(request.url)

    page.on("request", note)
    page.goto(out.as_uri())
    rows = page.locator("#cases tbody tr")
    expect(rows).to_have_count(4 * EPOCHS)
    expect(page.locator("#pass-rate b")).to_have_text("75.0%")
    expect(page.locator("#comparison")).to_contain_text("improved")
    expect(page.locator("#by-tag svg text", has_text="trick")).to_have_count(1)
    expect(page.locator("#latency svg rect").first).to_be_attached()

    add, wrong = batches.ids[0], batches.ids[3]
    page.fill("#search", add)
    expect(page.locator("#cases tbody tr:visible")).to_have_count(EPOCHS)
    expect(page.locator("#shown")).to_have_text(f"{EPOCHS} of {4 * EPOCHS} shown")
    page.fill("#search", "")
    page.select_option("#outcome", "failed")
    visible = page.locator("#cases tbody tr:visible")
    expect(visible).to_have_count(EPOCHS)
    expect(visible.first).to_have_attribute("data-id", wrong)
    page.select_option("#outcome", "")
    page.select_option("#change", "improved")
    expect(page.locator("#cases tbody tr:visible")).to_have_count(3 * EPOCHS)
    page.select_option("#change", "")
    page.select_option("#tag", "easy")
    expect(page.locator("#cases tbody tr:visible")).to_have_count(2 * EPOCHS)
    page.select_option("#tag", "")

    page.locator(f'#cases tbody tr[data-id="{add}"] button.open').first.click()
    dialog = page.locator("dialog#transcript")
    expect(dialog).to_be_visible()
    expect(page.locator("#t-title")).to_contain_text(add)
    events = page.locator("#t-events li")
    expect(page.locator('#t-events li[data-type="USER_INPUT"]')).to_contain_text("2 + 3")
    expect(page.locator('#t-events li[data-type="TOOL_CALL"]')).to_contain_text("calculate")
    expect(page.locator('#t-events li[data-type="TOOL_RESULT"]')).to_contain_text("5")
    assert events.count() >= 6
    if not update:
        page.screenshot(path=str(tmp_path / "transcript.png"))
    page.click("#t-close")
    expect(dialog).to_be_hidden()
    screenshot = README_SCREENSHOT if update else tmp_path / "batch-report.png"
    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 10_000
    assert outside == [], "the report must not fetch anything"


def test_the_page_stands_alone_and_escapes_recorded_text(tmp_path: Path) -> None:
    lines = [json.loads(x) for x in FIXTURE.read_text().splitlines() if x.strip()]
    lines[0]["output"] = "</script><script>alert(1)</script><img src=x>"
    results = tmp_path / "hostile.results.jsonl"
    results.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "r.html"
    result = CliRunner().invoke(
        batch_app, ["report", str(results), "-o", str(out), "--no-transcripts"]
    )
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert "<script>alert(1)" not in html and "<img src=x>" not in html
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in html  # the table cell, escaped
    assert not re.search(r'(src|href)="(https?:)?//', html), "no outside reference"
    assert html.count("<script") == 2  # the embedded data and the page's own script


def test_a_baseline_of_other_cases_is_refused_naming_both(tmp_path: Path) -> None:
    other = tmp_path / "other.results.jsonl"
    line = json.loads(FIXTURE.read_text().splitlines()[0])
    line["id"] = "not-in-the-fixture"
    other.write_text(json.dumps(line) + "\n")
    result = CliRunner().invoke(
        batch_app,
        [
            "report",
            str(FIXTURE),
            "--compare",
            str(other),
            "-o",
            str(tmp_path / "r.html"),
            "--no-transcripts",
        ],
    )
    assert result.exit_code == 2
    assert "no case id in common" in result.output


def test_score_by_scorer_labels_never_cut_a_number(tmp_path: Path) -> None:
    """The chart cut every label to 18 characters: ``judge:threshold=0.5`` showed as
    ``judge:threshold=0.``, another threshold than the scorer's."""
    from tether.producer.ops.batch.outputs.report_svg import MAX_LABEL_CHARS, chart_label

    rename = {"judge": "judge:threshold=0.5", "contains": "mypkg.scorers:grade_with_rubric_v2"}
    lines = []
    for raw in FIXTURE.read_text().splitlines():
        line = json.loads(raw)
        line["scores"] = {rename[k]: v for k, v in (line.get("scores") or {}).items()}
        line["scorers"] = [rename[k] for k in line.get("scorers") or []]
        lines.append(json.dumps(line) + "\n")
    results = tmp_path / "named.results.jsonl"
    results.write_text("".join(lines))
    out = tmp_path / "r.html"
    done = CliRunner().invoke(
        batch_app, ["report", str(results), "-o", str(out), "--no-transcripts"]
    )
    assert done.exit_code == 0, done.output
    panel = out.read_text().split('id="by-scorer"', 1)[1].split("</svg>", 1)[0]
    labels = re.findall(r'text-anchor="end">([^<]*)</text>', panel)
    assert sorted(labels) == sorted(rename.values())  # whole: they fit
    # past the limit a label loses its middle, never part of a number
    long = "a.very.long.module.path.of.scorers:grade_answers:threshold=0.125,weight=12"
    short = chart_label(long)
    assert len(short) <= MAX_LABEL_CHARS and short.endswith("=0.125,weight=12")
    assert short.startswith("a.very.long.module") and "…" in short
    for number in ("1234567890", "3.14159"):  # at every place in a name, whole or left out
        for at in range(0, 60, 3):
            name = "s" * at + number + "t" * (60 - at)
            digits = re.sub(r"[^0-9.]", "", chart_label(name, 20))
            assert digits in ("", number), (name, chart_label(name, 20))
