"""Out-of-band writes never brick a session: the next run repairs the live stream.

A session changed outside a worker (an in-process save into the worker's store, a patched tool
output) has a head ahead of its Redis stream, as does a Redis restored from an older snapshot.
The next distributed run fills the stream's gap from the head and the archive, then goes on; the
stream shows every committed event again, and the session verifies.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import redis

from tests.support.crash import TENANT, Backends, memory_backends, request_for, worker_runtime
from tether import SessionLogReader
from tether.core.results import RunStatus
from tether.runs.queue.base import submit
from tether.runtime.demo_agents import calculator_agent
from tether.worker.engine.cycle import drain


def apply(backends: Backends, text: str, session_id: str) -> RunStatus:
    request = request_for(session_id, text)
    rt = worker_runtime(backends, "w1", archive_batch_events=4)
    submit(rt.runs, request)
    drain(rt, TENANT, session_id)
    view = backends.runs.get(request.ref)
    assert view is not None and view.result is not None
    return view.result.status


def assert_stream_matches_history(backends: Backends, session_id: str) -> None:
    reader = SessionLogReader(backends.store, backends.archive)
    report = reader.verify(session_id, tenant=TENANT)
    assert report.ok, report.problems
    live = {e.seq: e for e in backends.stream.read(TENANT, session_id)}
    history = reader.events(session_id, tenant=TENANT)
    assert sorted(live) == [e.seq for e in history]
    assert all(live[e.seq] == e for e in history)


def test_an_in_process_save_into_the_workers_store_does_not_brick_the_session(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    sid = "s-oob"
    assert apply(backends, "1+1", sid) is RunStatus.COMPLETED
    local = calculator_agent()
    local.store, local.archive = backends.store, backends.archive
    session = local.resume_session(sid, tenant=TENANT)
    session.run("2+2")  # outside any worker: its events never reached the stream
    session.save()
    for text in ("3+3", "4+4"):
        assert apply(backends, text, sid) is RunStatus.COMPLETED
    assert_stream_matches_history(backends, sid)


def test_a_stream_behind_the_head_is_repaired_by_the_next_run(
    make_backends: Callable[[], Backends],
) -> None:
    backends = make_backends()
    sid = "s-behind"
    assert apply(backends, "1+1", sid) is RunStatus.COMPLETED
    saved = _save_stream(backends, sid)
    for text in ("2+2", "3+3"):
        assert apply(backends, text, sid) is RunStatus.COMPLETED
    _restore_stream(backends, sid, saved)  # Redis came back from an older snapshot
    assert apply(backends, "5+5", sid) is RunStatus.COMPLETED
    assert_stream_matches_history(backends, sid)


def _save_stream(backends: Backends, sid: str) -> object:
    if backends.name == "memory":
        return copy.deepcopy(backends.stream._logs[(TENANT, sid)])
    keys = backends.stream._keys
    client = backends.stream._client
    return {k: client.dump(k) for k in (keys.events(TENANT, sid), keys.stream_meta(TENANT, sid))}


def _restore_stream(backends: Backends, sid: str, saved: object) -> None:
    if backends.name == "memory":
        backends.stream._logs[(TENANT, sid)] = saved
        return
    client = backends.stream._client
    for key, blob in saved.items():  # type: ignore[attr-defined]
        client.restore(key, 0, blob, replace=True)


def test_a_redis_flush_between_runs_does_not_brick_the_session(
    redis_client: redis.Redis, make_backends: Callable[[], Backends]
) -> None:
    backends = make_backends()
    sid = "s-flushed"
    for text in ("1+1", "2+2"):
        assert apply(backends, text, sid) is RunStatus.COMPLETED
    if backends.name == "memory":  # a new, empty Redis: every hot structure is gone
        fresh = memory_backends()
        backends.stream, backends.leases, backends.runs = fresh.stream, fresh.leases, fresh.runs
        backends.checkpoints = fresh.checkpoints
    else:
        redis_client.flushall()
    assert apply(backends, "3+3", sid) is RunStatus.COMPLETED
    report = SessionLogReader(backends.store, backends.archive).verify(sid, tenant=TENANT)
    assert report.ok, report.problems
