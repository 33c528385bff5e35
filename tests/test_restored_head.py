"""#29 item 9: a head restored from a backup without its archive. The archive still holds the
segments of the history the backup lost, so the next commits' segments collide with them. The
run is committed (the head is the commit point) and finished: it is not retried and not logged
as "will retry"; an error names the restored head and the fix; the session's memory is the
restored head's plus the new runs. In-process, on the worker's cycle with memory backends."""

from __future__ import annotations

import logging

import pytest

from tests.support.crash import TENANT, Backends, memory_backends, request_for, worker_runtime
from tether.runs.contract import RunResult
from tether.runs.queue.base import submit
from tether.worker.engine.cycle import drain


def apply(backends: Backends, worker: str, text: str, n: int) -> RunResult:
    request = request_for("s-restored", text).model_copy(
        update={"agent": "notes", "run_id": f"run-{n}", "request_id": f"req-{n}"}
    )
    rt = worker_runtime(backends, worker)
    submit(rt.runs, request)
    drain(rt, TENANT, request.session_id)
    view = backends.runs.get(request.ref)
    assert view is not None and view.result is not None
    return view.result


def test_a_head_restored_without_its_archive_commits_once_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backends = memory_backends()
    apply(backends, "w1", "remember a", 1)
    backup = backends.store.load(TENANT, "s-restored")
    assert backup is not None
    apply(backends, "w1", "remember b", 2)
    apply(backends, "w1", "remember c", 3)
    current = backends.store.load(TENANT, "s-restored")
    assert current is not None and backends.archive is not None
    assert backends.archive.last_seq(TENANT, "s-restored") > backup.snapshot.last_seq
    backends.store.save(backup.snapshot, current.version)  # the operator's restore
    if backends.head_cache is not None:
        backends.head_cache.drop(TENANT, "s-restored")

    with caplog.at_level(logging.INFO):
        after = [apply(backends, "w2", "remember d", 4), apply(backends, "w2", "recall", 5)]
    assert [(r.status, r.attempts) for r in after] == [("COMPLETED", 1), ("COMPLETED", 1)]
    assert after[1].output == "a\nd"  # the restored memory, then the new run
    assert "will retry" not in caplog.text
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and all("restored without its archive" in e for e in errors)
    assert all("not retried" in e for e in errors)
