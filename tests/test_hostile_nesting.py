"""Stored bytes nested deeper than Python's parser recurses (a sealed head, a cached head, an
archive segment, a patch, a queued message): each is refused as corrupt data with
a clear error, never a bare ``RecursionError`` that escapes the worker's handling. A run on such
a head fails at once, as on any unreadable head, instead of being retried forever; and a read
that fails with an error that is not Tether's counts against the run's attempts. On a private
redis-server and S3 over HTTP (moto).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from tests.support.crash import TENANT, Backends, real_backends, request_for, worker_runtime
from tests.support.moto_server import S3TestBucket
from tether.core.results import RunStatus
from tether.errors import SnapshotCorrupt
from tether.keys import RedisKeys
from tether.persistence.codec import loads_event, loads_events, loads_head_memory, loads_snapshot
from tether.persistence.headcache.base import pack
from tether.persistence.journal import decode_patch
from tether.persistence.objects import HEAD_KIND, head_key, seal
from tether.runs.fleet import submitted_at_ms
from tether.runs.queue.base import submit
from tether.worker.engine.cycle import drain
from tether.worker.engine.services import EngineServices

DEEP = b"[" * 5000 + b"]" * 5000
"""Valid JSON that ``json.loads`` cannot parse within the interpreter's recursion limit."""


@pytest.mark.parametrize(
    "read",
    [
        lambda: loads_snapshot(DEEP, where="h"),
        lambda: loads_head_memory(DEEP, where="h"),
        lambda: loads_event(DEEP, where="e"),
        lambda: loads_events(DEEP, where="e"),
        lambda: decode_patch(DEEP, where="p"),
    ],
    ids=["snapshot", "head-memory", "event", "events", "patch"],
)
def test_a_deeply_nested_stored_document_is_corrupt_data(read: Callable[[], Any]) -> None:
    with pytest.raises(SnapshotCorrupt):
        read()


def test_a_deeply_nested_queued_message_is_no_run_message() -> None:
    # tether status reads the oldest message of each queue, which any tenant may publish
    assert submitted_at_ms(DEEP) is None


def _one_run_done(
    client: redis.Redis, bucket: S3TestBucket, session_id: str
) -> tuple[Backends, EngineServices]:
    """Backends on the private Redis and S3, and a worker's runtime that applied one run to
    ``session_id`` (so its head exists, stored and cached)."""
    backends = real_backends(client, bucket.bucket, bucket.endpoint_url)
    rt = worker_runtime(backends, "w")
    submit(rt.runs, request_for(session_id, "1+1"))
    drain(rt, TENANT, session_id)
    return backends, rt


def test_a_run_on_a_deeply_nested_head_fails_at_once_and_touches_nothing(
    redis_client: redis.Redis, s3_bucket: S3TestBucket
) -> None:
    sid = "s-deep"
    backends, rt = _one_run_done(redis_client, s3_bucket, sid)
    blobs = backends.store.blobs
    current = blobs.get(head_key(TENANT, sid))
    hostile = seal(HEAD_KIND, DEEP)
    blobs.put(head_key(TENANT, sid), hostile, expected=current.token)
    backends.head_cache.drop(TENANT, sid)

    request = request_for(sid, "2+2")
    submit(rt.runs, request)
    drain(rt, TENANT, sid)  # before: RecursionError escaped, the run stayed running

    view = rt.runs.get(request.ref)
    assert view is not None and view.result is not None
    assert view.result.status is RunStatus.FAILED
    assert view.result.error_type == "SnapshotCorrupt"
    assert blobs.get(head_key(TENANT, sid)).data == hostile  # touched nothing


def test_a_deeply_nested_cached_head_is_a_miss_and_is_dropped(
    redis_client: redis.Redis, s3_bucket: S3TestBucket
) -> None:
    # a tenant may write anything into its own sessions' head-cache keys (docs/trust-model.md)
    sid = "s-deep-cache"
    backends, _ = _one_run_done(redis_client, s3_bucket, sid)
    stored = backends.store.blobs.get(head_key(TENANT, sid))
    keys: RedisKeys = backends.head_cache._keys
    entry = pack(seal(HEAD_KIND, DEEP), stored.token)
    assert entry is not None
    redis_client.set(keys.head_cache(TENANT, sid), entry)

    loaded = backends.store.load(TENANT, sid)

    assert loaded is not None and loaded.version == stored.token
    assert not redis_client.exists(keys.head_cache(TENANT, sid))


class _Broken:
    """A store whose reads fail with an error that is not Tether's (a bug in a store, or a
    library error it does not translate)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        if name.startswith("load"):
            raise RuntimeError("the store's read broke")
        return getattr(self._store, name)


def test_a_read_that_fails_unexpectedly_counts_against_the_attempts(
    redis_client: redis.Redis, s3_bucket: S3TestBucket
) -> None:
    backends = real_backends(redis_client, s3_bucket.bucket, s3_bucket.endpoint_url)
    backends.store = _Broken(backends.store)
    rt = worker_runtime(backends, "w")  # max_attempts=3
    rt.settings = rt.settings.model_copy(update={"lease_ttl_ms": 1})  # no backoff between them
    sid = "s-broken"
    request = request_for(sid, "1+1")
    submit(rt.runs, request)

    drains = 0
    while drains < 10:
        view = rt.runs.get(request.ref)
        if view is not None and view.result is not None:
            break
        drains += 1
        drain(rt, TENANT, sid)  # before: RuntimeError escaped every drain, uncounted

    assert view is not None and view.result is not None
    assert view.result.status is RunStatus.FAILED
    assert view.result.error_type == "RetriesExhausted"
    assert "RuntimeError" in (view.result.error_message or "")
    assert drains <= 4


def test_deeply_nested_text_in_an_evaluation_is_a_clear_error_or_a_failed_score() -> None:
    from tether.producer.ops.batch.cases import parse_case_line
    from tether.producer.ops.batch.scoring.base import Sample
    from tether.producer.ops.batch.scoring.builtin import json_match
    from tether.producer.ops.batch.scoring.judge import JudgeReplyInvalid, parse_reply

    deep = DEEP.decode()
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_case_line(deep, default_agent="a")  # a cases file's line
    with pytest.raises(JudgeReplyInvalid):
        parse_reply('{"score": ' + deep + "}")  # a judge model's reply
    case = parse_case_line('{"id": "c", "input": "i", "expected": "[]"}', default_agent="a")
    score = json_match()(Sample(case, deep))  # a model's output
    assert score.value == 0 and "nested too deeply" in (score.explanation or "")
