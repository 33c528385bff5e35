"""What a person sees of a streamed answer, on real workers: ``tether tail --tokens`` prints the
step's text as it grows (attached mid-step, from its first word), and the console's live view
(headless Chromium) shows it growing, then committed."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from tests.support.console import CHROMIUM, CHROMIUM_ARGS, CHROMIUM_MISSING, Console
from tests.support.stack import eventually, unique
from tests.support.stream_agents import FINAL_TEXT, HALF, STEP0_TEXT
from tests.support.stream_stack import Streaming

WAIT_MS = 30_000


def test_tail_tokens_prints_the_text_as_it_grows(streaming: Streaming) -> None:
    token, sid = uuid.uuid4().hex[:8], unique("st-cli")
    handle = streaming.producer.run_async(sid, f"gate:{token}", agent="streamer")
    eventually(lambda: streaming.midway(token), timeout_s=30)
    script = Path(sys.executable).parent / "tether"
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "tether.producer.ops.cli"]
    proc = subprocess.Popen(
        [*argv, "tail", sid, "--tokens", "--idle-timeout", "3"],
        env=streaming.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the half-written step 0 is printed once tail has caught up
            lines.append(line)
            if "MODEL_REQUEST" in line:
                streaming.open(token)
        err = proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert handle.result(timeout=30).output == FINAL_TEXT
    text = "".join(lines)
    streamed = [line for line in text.splitlines() if " ... " in line]
    assert len(streamed) == 2, text  # one growing line per step
    assert streamed[0].endswith(STEP0_TEXT + '{"text": "forty two, for the record"}')
    assert streamed[1].endswith(FINAL_TEXT)
    assert text.index(STEP0_TEXT) < text.index("MODEL_RESPONSE")


@pytest.fixture
def page(streaming: Streaming, tmp_path: Path) -> Iterator[tuple[Page, Console]]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(CHROMIUM_MISSING, pytrace=False)
    expect.set_options(timeout=WAIT_MS)
    with Console(streaming.env, tmp_path) as console, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.set_default_timeout(WAIT_MS)
            yield context.new_page(), console
        finally:
            browser.close()


def test_the_console_live_view_shows_the_text_growing(
    streaming: Streaming, page: tuple[Page, Console]
) -> None:
    tab, console = page
    sid = unique("st-page")
    assert streaming.producer.run(sid, "plain", agent="streamer", wait_s=60).output == FINAL_TEXT
    token = uuid.uuid4().hex[:8]
    tab.goto(f"{console.url}/sessions/{sid}")
    expect(tab.locator("#live-dot")).to_have_class("live-dot on")
    handle = streaming.producer.run_async(sid, f"gate:{token}", agent="streamer")
    growing = tab.locator(f'li.live-text[data-run="{handle.run_id}"][data-step="0"] .text')
    first_words = " ".join(STEP0_TEXT.split()[:HALF]) + " "
    expect(growing).to_have_text(first_words)  # the half before the gate, as it came
    assert not handle.done()
    streaming.open(token)
    expect(growing).to_contain_text(STEP0_TEXT)
    final = tab.locator(f'li.live-text[data-run="{handle.run_id}"][data-step="1"]')
    expect(final.locator(".text")).to_have_text(FINAL_TEXT)
    expect(final).to_have_class("live-text committed")
    assert handle.result(timeout=30).output == FINAL_TEXT
