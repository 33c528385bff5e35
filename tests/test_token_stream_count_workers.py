"""No piece lost, and no wait after the commit, on real workers (the streaming fleet of
tests/support/stream_stack.py): streamed runs (50 in ``make test``, 500 in ``make test-long``),
each read with ``RunHandle.stream()`` right after it is queued, every one giving every piece of
both its steps whenever its reader attached (before its first piece, mid-step, or after the run
ended: the catch-up gives the pieces the session's channel still holds, TTL_S seconds after the
last one), then its RunResult.

Not timing-dependent: a reader's pieces are checked against the step's committed text, whether
it attached early or late, and nothing waits for anything but the run's end."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.stack import unique
from tests.support.stream_agents import FINAL_TEXT, STEP0_TEXT
from tests.support.stream_stack import Streaming
from tether.core.events import AgentEvent, EventType
from tether.core.results import RunStatus
from tether.persistence.deltas import LiveDelta
from tether.producer.handle import RunHandle
from tether.runs.contract import RunResult

READERS = 8
NOTE_ARGUMENTS = '{"text": "forty two, for the record"}'


def _read(handle: RunHandle) -> list[AgentEvent | LiveDelta | RunResult]:
    return list(handle.stream(idle_timeout_s=120))


def _check(handle: RunHandle, items: list[AgentEvent | LiveDelta | RunResult]) -> int:
    """Every piece of the run is there, once, in order; how many entries it came in."""
    assert items and isinstance(items[-1], RunResult), f"run {handle.run_id}: no result"
    result = items[-1]
    assert result.status is RunStatus.COMPLETED and result.output == FINAL_TEXT
    pieces = [i for i in items if isinstance(i, LiveDelta)]
    for step, kind, text in (
        (0, "text", STEP0_TEXT),
        (0, "tool_arguments", NOTE_ARGUMENTS),
        (1, "text", FINAL_TEXT),
    ):
        got = "".join(p.text for p in pieces if p.step == step and p.kind == kind)
        assert got == text, f"run {handle.run_id} step {step} {kind}: {got!r} != {text!r}"
    response = EventType.MODEL_RESPONSE
    responses = [n for n, i in enumerate(items) if isinstance(i, AgentEvent) and i.type is response]
    for step, at in enumerate(responses):  # each step's pieces before its response
        assert all(
            n < at for n, i in enumerate(items) if isinstance(i, LiveDelta) and i.step == step
        )
    return len(pieces)


@pytest.mark.parametrize("runs", [50, pytest.param(500, marks=pytest.mark.slow)])
def test_streamed_runs_give_every_piece_then_their_result(streaming: Streaming, runs: int) -> None:
    handles = [
        streaming.producer.run_async(unique("count"), "plain", agent="streamer")
        for _ in range(runs)
    ]
    with ThreadPoolExecutor(READERS) as pool:
        read = list(pool.map(_read, handles))
    entries = [_check(handle, items) for handle, items in zip(handles, read, strict=True)]
    assert len(entries) == runs and min(entries) > 0
