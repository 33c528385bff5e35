"""A frozen worker's head write after a lease takeover (#18 hole 2), in-process on both backends.

A worker passes its last lease check, then freezes right before its head PUT (SIGSTOP, a GC
pause, a slow S3 PUT inside botocore's retries). Its lease expires and a second worker takes the
session over, runs the same request and streams its own attempt. Whichever of the two PUTs comes
second, the head and the live stream must show the same single attempt.

Before the fix the zombie resumed before the taker's PUT and won the compare-and-set (both expected
the same head version): the head held the zombie's events, the stream the taker's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from tests.support.crash import TENANT, Backends, request_for
from tests.test_crash_steps import apply, assert_exactly_once
from tether.worker.engine.commit import CommitStep, StepContext, install_probe

JOIN_TIMEOUT_S = 30.0


class Freezer:
    """Freeze ``w1`` right before its head PUT; thaw it when the test says."""

    def __init__(self) -> None:
        self.frozen = threading.Event()
        self.thaw = threading.Event()
        self.taker_at_put = threading.Event()
        self.zombie_done = threading.Event()

    def __call__(self, ctx: StepContext) -> None:
        if ctx.step is not CommitStep.HEAD_PUT or ctx.phase != "before":
            return
        if ctx.worker_id == "w1" and not self.frozen.is_set():
            self.frozen.set()
            assert self.thaw.wait(JOIN_TIMEOUT_S), "the test never thawed the zombie"
        elif ctx.worker_id == "w2" and not self.taker_at_put.is_set():
            self.taker_at_put.set()
            # the zombie resumes now, between the taker's attempt and the taker's PUT
            self.thaw.set()
            assert self.zombie_done.wait(JOIN_TIMEOUT_S), "the zombie never finished"


def run_zombie(backends: Backends, freezer: Freezer, doomed: object) -> threading.Thread:
    errors: list[BaseException] = []

    def zombie() -> None:
        try:
            apply(backends, "w1", doomed)  # type: ignore[arg-type]
        except BaseException as exc:  # its conflict is expected; keep anything else for the test
            errors.append(exc)
        finally:
            freezer.zombie_done.set()

    thread = threading.Thread(target=zombie, name="zombie", daemon=True)
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return thread


@pytest.mark.parametrize("zombie_first", [False, True], ids=["taker-put-last", "zombie-put-first"])
def test_zombie_head_put_after_takeover_keeps_head_and_stream_one_attempt(
    make_backends: Callable[[], Backends], zombie_first: bool
) -> None:
    backends = make_backends()
    session_id = f"s-zombie-{zombie_first}"
    history = [request_for(session_id, text) for text in ("1+1", "2*3")]
    for request in history:
        apply(backends, "warm-up", request)
    doomed = request_for(session_id, "6*7")

    freezer = Freezer()
    uninstall = install_probe(freezer)
    try:
        thread = run_zombie(backends, freezer, doomed)
        assert freezer.frozen.wait(JOIN_TIMEOUT_S), "the zombie never reached its head PUT"
        backends.expire_lease(TENANT, session_id)  # frozen past its TTL: the lease is lost
        if zombie_first:  # it resumes before the taker even loads the head
            freezer.thaw.set()
            thread.join(JOIN_TIMEOUT_S)
        apply(backends, "w2", doomed)  # the broker redelivers the request to another worker
        thread.join(JOIN_TIMEOUT_S)
    finally:
        freezer.thaw.set()
        uninstall()
    assert not thread.is_alive()
    unexpected = [e for e in thread.errors if "conflict" not in type(e).__name__.lower()]  # type: ignore[attr-defined]
    assert not unexpected, unexpected
    after = request_for(session_id, "10-4")
    apply(backends, "w3", after)
    # one applied attempt; the live stream shows exactly the committed events (assert_exactly_once
    # compares every committed event with the stream's)
    assert_exactly_once(backends, session_id, [*history, doomed, after])
