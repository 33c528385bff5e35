"""The run queue on Redis (see :mod:`tether.runs.queue.base` for the seam).

Submission, finishing and idle release are one Lua script each, so each is atomic. Keys are
built by :mod:`tether.keys`.

Every script touches the keys of one session only (a run's keys live in its session's slot), so
each runs on one Redis Cluster node. The namespace-wide structures (the sharded active-session
index, the completion stream, the tenant's run-id index) are written by plain commands pipelined
beside the script, never inside it.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Sequence
from typing import Any, cast

import redis
from redis.cluster import RedisCluster

from tether.core.events import now_ms
from tether.errors import TetherError
from tether.keys import RedisKeys
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.persistence.scripts import queue_script, run_pipeline
from tether.runs.contract import RunRef, RunRequest, RunResult, WireRequest
from tether.runs.leases.base import Lease
from tether.runs.queue.base import (
    DONE_MAX_LEN,
    FEED_RESULT_MAX_BYTES,
    CancelOutcome,
    Completion,
    IdleRelease,
    RunState,
    RunView,
    StopMode,
    SubmitOutcome,
    SubmitState,
)

#: ``submit(req index, run hash, pending, a)`` with the arguments at ARGV[a+1] .. ARGV[a+9]:
#: run_id, request json, ttl_s, reject(0/1), tenant, session, request_id, submitted_at_ms,
#: queue (the broker queue serving the run; '' when unknown). Returns {code, run_id}: 1 queued,
#: 0 duplicate, 2 busy, 3 the run id is taken by another request (never re-queued: a finished
#: run stays finished). Shared with the claim script (:mod:`tether.worker.engine.claim_redis`).
SUBMIT_FUNCTION = """
local function submit(req, run, pending, a)
  local existing = redis.call('GET', req)
  if existing then return {0, existing} end
  if redis.call('EXISTS', run) == 1 then return {3, ARGV[a + 1]} end
  if ARGV[a + 4] == '1' and redis.call('LLEN', pending) > 0 then
    return {2, ARGV[a + 1]}
  end
  redis.call('SET', req, ARGV[a + 1], 'EX', ARGV[a + 3])
  redis.call('HSET', run, 'status', 'QUEUED', 'request', ARGV[a + 2], 'tenant', ARGV[a + 5],
    'session_id', ARGV[a + 6], 'request_id', ARGV[a + 7], 'submitted_at_ms', ARGV[a + 8])
  if ARGV[a + 9] ~= '' then redis.call('HSET', run, 'queue', ARGV[a + 9]) end
  redis.call('EXPIRE', run, ARGV[a + 3])
  redis.call('RPUSH', pending, ARGV[a + 1])
  return {1, ARGV[a + 1]}
end
"""

#: KEYS: req index, run hash, pending. ARGV: as SUBMIT_FUNCTION's (from ARGV[1]).
SUBMIT_SCRIPT = SUBMIT_FUNCTION + """
return submit(KEYS[1], KEYS[2], KEYS[3], 0)
"""

#: KEYS: run hash. ARGV: status, result json, tenant, session, request_id, ttl_s.
#: Returns 1 recorded, 0 refused: a rejection never rewrites an existing record (a forged
#: message carrying a queued run's id must not fail that run).
RECORD_REJECTED_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'result', ARGV[2], 'tenant', ARGV[3],
  'session_id', ARGV[4], 'request_id', ARGV[5])
redis.call('EXPIRE', KEYS[1], ARGV[6])
return 1
"""

#: KEYS: run hash, attempts, cancel. ARGV: worker, now_ms, ttl_s.
#: Returns the attempt count, or -1 when a cancel was requested (nothing changes).
BEGIN_SCRIPT = """
if redis.call('EXISTS', KEYS[3]) == 1 then return -1 end
local n = redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[3])
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'status', 'RUNNING', 'worker', ARGV[1], 'started_at_ms', ARGV[2])
end
return n
"""

#: KEYS: run hash, attempts. Undoes BEGIN_SCRIPT for an attempt handed back unfinished.
HAND_BACK_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'result') == 1 then
  return 0
end
if tonumber(redis.call('GET', KEYS[2]) or '0') > 0 then redis.call('DECR', KEYS[2]) end
redis.call('HSET', KEYS[1], 'status', 'QUEUED')
return 1
"""

#: KEYS: run hash, cancel. ARGV: ttl_s. Returns a CancelOutcome value.
CANCEL_SCRIPT = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return 'unknown' end
if redis.call('HEXISTS', KEYS[1], 'result') == 1 then return 'finished' end
redis.call('SET', KEYS[2], 'cancel', 'EX', ARGV[1])
if status == 'QUEUED' then return 'cancelled' end
return 'requested'
"""

#: The finish of a run: record the result, pop the run (KEYS: run hash, pending, attempts;
#: ARGV: run_id, status, result json, ttl_s, tenant, session, request_id: a record that expired
#: is re-created whole).
_FINISH_BODY = """
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'result', ARGV[3], 'tenant', ARGV[5],
  'session_id', ARGV[6], 'request_id', ARGV[7])
redis.call('EXPIRE', KEYS[1], ARGV[4])
if redis.call('LINDEX', KEYS[2], 0) == ARGV[1] then
  redis.call('LPOP', KEYS[2])
else
  redis.call('LREM', KEYS[2], 1, ARGV[1])
end
redis.call('DEL', KEYS[3])
"""

#: KEYS and ARGV: as _FINISH_BODY. Returns the run id now at the head of the queue (nil: empty).
FINISH_SCRIPT = _FINISH_BODY + """
return redis.call('LINDEX', KEYS[2], 0)
"""

#: _FINISH_BODY, then, when the queue is left empty, RELEASE_IF_IDLE_SCRIPT's release.
#: KEYS: as _FINISH_BODY, then lease, released fence. ARGV: as _FINISH_BODY, then lease value,
#: fence. Returns {next head or false, 1 released | -1 lease not ours | 0 runs queued}.
FINISH_RELEASE_SCRIPT = _FINISH_BODY + """
local head = redis.call('LINDEX', KEYS[2], 0)
if head then return {head, 0} end
if redis.call('GET', KEYS[4]) ~= ARGV[8] then return {false, -1} end
redis.call('SET', KEYS[5], ARGV[9])
redis.call('DEL', KEYS[4])
return {false, 1}
"""

#: KEYS: lease, pending, released fence. ARGV: lease value, fence.
#: Returns 1 released, 0 still work to do (lease kept), -1 lease not ours.
RELEASE_IF_IDLE_SCRIPT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('LLEN', KEYS[2]) > 0 then return 0 end
redis.call('SET', KEYS[3], ARGV[2])
redis.call('DEL', KEYS[1])
return 1
"""

SUBMIT_STATES = {
    1: SubmitState.QUEUED,
    0: SubmitState.DUPLICATE,
    2: SubmitState.BUSY,
    3: SubmitState.TAKEN,
}
_IDLE_RELEASE = {1: IdleRelease.RELEASED, 0: IdleRelease.BUSY, -1: IdleRelease.LOST}


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def run_view(
    run_id: str, raw: dict[bytes, bytes], known: WireRequest | None = None
) -> RunView | None:
    """A run record from its hash (None when it has none); shared with the asyncio producer.

    ``known``: a request validated already (the one a worker's message carried). When the
    record's request is its very text, it is that request and is not validated again;
    otherwise the record's own request is validated: the registered copy is the one that runs.
    """
    if not raw:
        return None
    fields = {_text(k): _text(v) for k, v in raw.items()}
    request = result = None
    if known is not None and fields.get("request") == known.text:
        request = known.request
    elif "request" in fields:
        try:
            request = RunRequest.model_validate_json(fields["request"])
        except ValueError:
            request = None
    if "result" in fields:
        result = RunResult.model_validate_json(fields["result"])
    return RunView(
        run_id=run_id,
        status=fields.get("status", "UNKNOWN"),
        tenant=fields.get("tenant", ""),
        session_id=fields.get("session_id", ""),
        request_id=fields.get("request_id", ""),
        request=request,
        result=result,
        submitted_at_ms=int(fields.get("submitted_at_ms", 0)),
        started_at_ms=int(fields.get("started_at_ms", 0)),
        last_error=fields.get("last_error"),
        retry_at_ms=int(fields.get("retry_at_ms", 0)),
        failed_before_commit=int(fields.get("failed_before_commit", 0)),
        queue=fields.get("queue") or None,
    )


def submit_call(
    k: RedisKeys, wire: WireRequest, queue: str | None, ttl_s: int
) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of :data:`SUBMIT_SCRIPT` for a request and its JSON (the record stores the
    text as it is); shared with the asyncio producer and the worker's claim."""
    request = wire.request
    t, s = request.tenant, request.session_id
    keys = [k.request(t, s, request.request_id), k.run(t, s, request.run_id), k.pending(t, s)]
    args = [
        request.run_id,
        wire.text,
        ttl_s,
        "1" if request.on_busy == "reject" else "0",
        t,
        s,
        request.request_id,
        request.submitted_at_ms,
        queue or "",
    ]
    return keys, args


def rejected_args(result: RunResult, ttl_s: int) -> list[Any]:
    """ARGV of :data:`RECORD_REJECTED_SCRIPT` (KEYS: the run's record)."""
    return [
        result.status.value,
        result.model_dump_json(),
        result.tenant,
        result.session_id,
        result.request_id,
        ttl_s,
    ]


def done_fields(result: RunResult) -> dict[Any, Any]:
    """The completion-stream entry announcing ``result``."""
    return {
        "run_id": result.run_id,
        "status": result.status.value,
        "tenant": result.tenant,
        "session_id": result.session_id,
    }


def carried_result(fields: dict[bytes, bytes]) -> RunResult | None:
    """The result a feed entry carries (None: read the record)."""
    raw = fields.get(b"result")
    if raw is None:
        return None
    try:
        return RunResult.model_validate_json(raw)
    except ValueError:  # a newer writer's format: the record answers instead
        return None


#: One announcement in this many also trims the feeds of entries older than the result TTL.
FEED_TRIM_EVERY = 16


def announce(
    pipe: Any,
    k: RedisKeys,
    result: RunResult,
    reply_to: str | None,
    ttl_s: int,
    *,
    raw: str | None = None,
) -> None:
    """Queue on ``pipe`` the announcements of ``result``: the namespace feed, and the producer's
    own feed (which expires when its producer is gone: nobody reads it then).

    Feeds keep at most :data:`DONE_MAX_LEN` entries, and none much older than the run records
    they point to (``ttl_s``): an entry whose record expired announces nothing a reader can
    use. The age trim rides on one announcement in :data:`FEED_TRIM_EVERY` (chosen by run id;
    entry ids are milliseconds, so ``XTRIM MINID`` cuts by age), so memory follows the
    completion rate over the TTL, not the total number of runs, at a sixteenth of a command
    per run.
    """
    fields = done_fields(result)
    entries = [(k.done(), fields)]
    if reply_to is not None:
        # the producer's feed carries a small result, so its listener reads no record
        raw = raw if raw is not None else result.model_dump_json()
        mine = {**fields, "result": raw} if len(raw) <= FEED_RESULT_MAX_BYTES else fields
        entries.append((k.producer_done(k.feed(result.tenant, reply_to)), mine))
    trim = zlib.crc32(result.run_id.encode()) % FEED_TRIM_EVERY == 0  # run ids are random
    for feed, entry in entries:
        pipe.xadd(feed, entry, maxlen=DONE_MAX_LEN, approximate=True)
        if trim:
            pipe.xtrim(feed, minid=f"{now_ms() - ttl_s * 1000}-0", approximate=True)
    if reply_to is not None:
        pipe.expire(entries[-1][0], ttl_s)


def submit_outcomes(replies: Sequence[Any]) -> list[SubmitOutcome]:
    """The outcomes of a submit pipeline (script, index SET, active ZADD per request)."""
    return [
        SubmitOutcome(_text(run_id), SUBMIT_STATES[int(code)]) for code, run_id in replies[::3]
    ]


def stray_index_keys(
    k: RedisKeys,
    requests: Sequence[RunRequest],
    outcomes: Sequence[SubmitOutcome],
    replies: Sequence[Any],
) -> list[str]:
    """Run-index entries the submit pipeline set (NX) for runs it did not create: a busy
    rejection, or a duplicate request answered with its first run. The index must not name a
    session for a run id that has no record there."""
    stray = []
    for request, outcome, index_set in zip(requests, outcomes, replies[1::3], strict=True):
        busy = outcome.state is SubmitState.BUSY
        other = outcome.state is SubmitState.DUPLICATE and outcome.run_id != request.run_id
        if index_set and (busy or other):
            stray.append(k.run_index(request.tenant, request.run_id))
    return stray


def done_entry(entry_id: bytes, fields: dict[bytes, bytes]) -> tuple[bytes, RunRef]:
    """One completion-stream entry as ``(position, run)``; shared with the asyncio producer."""
    ref = RunRef(
        _text(fields.get(b"tenant", b"")),
        _text(fields.get(b"session_id", b"")),
        _text(fields[b"run_id"]),
    )
    return entry_id, ref


class RedisRunQueue:
    """:class:`~tether.runs.queue.base.RunQueue` on Redis.

    Args:
        client: a bytes Redis client (:func:`tether.persistence.redis_conn.redis_from_url`).
        keys: the key schema (namespace).
        result_ttl_s: how long run records and request-id indexes live.
    """

    def __init__(self, client: redis.Redis, keys: RedisKeys, *, result_ttl_s: int) -> None:
        self.client = client
        self.keys = keys
        self.result_ttl_s = result_ttl_s
        self._where = describe_client(client)
        self._submit = client.register_script(SUBMIT_SCRIPT)
        self._finish = client.register_script(FINISH_SCRIPT)
        self._finish_release = client.register_script(FINISH_RELEASE_SCRIPT)
        self._release_if_idle = client.register_script(RELEASE_IF_IDLE_SCRIPT)
        self._record_rejected = client.register_script(RECORD_REJECTED_SCRIPT)
        self._begin = client.register_script(BEGIN_SCRIPT)
        self._hand_back = client.register_script(HAND_BACK_SCRIPT)
        self._cancel = client.register_script(CANCEL_SCRIPT)

    # --- submission --------------------------------------------------------------------------

    def submit_many(
        self, requests: Sequence[RunRequest | WireRequest], *, queue: str | None = None
    ) -> list[SubmitOutcome]:
        """Register and queue requests, idempotently, in one pipelined round trip.

        Beside each session's script go the tenant's run-id index entry (NX: the first session
        to use a run id keeps it) and the session's place in the active index; both after the
        script, so the index never names a session before its queue holds the run. A
        :class:`WireRequest` is registered with its own text (a producer serializes once).
        """
        k = self.keys
        stamp = now_ms()
        wires = [WireRequest.of(r) for r in requests]

        def fill(pipe: Any) -> None:
            for wire in wires:
                request = wire.request
                t, s = request.tenant, request.session_id
                keys, args = submit_call(k, wire, queue, self.result_ttl_s)
                queue_script(pipe, self._submit, keys, args)
                pipe.set(k.run_index(t, request.run_id), s, nx=True, ex=self.result_ttl_s)
                pipe.zadd(k.active(t, s), {k.active_member(t, s): stamp}, nx=True)

        with translate_errors(self._where):
            replies = run_pipeline(self.client, [self._submit], fill)
            outcomes = submit_outcomes(replies)
            stray = stray_index_keys(k, [w.request for w in wires], outcomes, replies)
            if stray:  # rare (a duplicate or busy submission): one more round trip
                self.client.delete(*stray)
        return outcomes

    # --- records -----------------------------------------------------------------------------

    def locate(self, tenant: str, run_id: str) -> RunRef | None:
        """Where ``tenant``'s run lives, from the tenant's run-id index."""
        with translate_errors(self._where):
            raw = self.client.get(self.keys.run_index(tenant, run_id))
        return RunRef(tenant, _text(raw), run_id) if raw is not None else None

    def get(self, ref: RunRef) -> RunView | None:
        """The run record, or None when unknown or expired."""
        with translate_errors(self._where):
            raw = cast(dict[bytes, bytes], self.client.hgetall(self.keys.run(*ref)))
        return run_view(ref.run_id, raw)

    def peek_many(self, refs: Sequence[RunRef]) -> dict[str, RunResult | None]:
        """For each run with a record: its result (None while unfinished), in one round trip.

        Runs without a record (unknown, expired, or lost with a Redis restart) are absent from
        the answer.
        """
        if not refs:
            return {}
        with translate_errors(self._where):
            pipe = self.client.pipeline(transaction=False)
            for ref in refs:
                pipe.hmget(self.keys.run(*ref), ["status", "result"])
            replies = cast(list[list[bytes | None]], pipe.execute())
        out: dict[str, RunResult | None] = {}
        for ref, (status, result) in zip(refs, replies, strict=True):
            if status is None and result is None:
                continue
            out[ref.run_id] = RunResult.model_validate_json(result) if result is not None else None
        return out

    def note_failure(
        self, ref: RunRef, error: str, *, retry_after_ms: int = 0, before_commit: bool = False
    ) -> None:
        """Remember why an attempt of the run failed (and not to retry it for a while)."""
        mapping: dict[Any, Any] = {"last_error": error[:1000]}
        if retry_after_ms > 0:
            mapping["retry_at_ms"] = now_ms() + retry_after_ms
        key = self.keys.run(*ref)
        with translate_errors(self._where):
            if self.client.exists(key):  # never re-create a record that expired or was lost
                self.client.hset(key, mapping=mapping)
                if before_commit:
                    self.client.hincrby(key, "failed_before_commit", 1)

    def begin(self, ref: RunRef, worker: str) -> int | None:
        """Count one more attempt and mark the run running, unless a cancel came first."""
        k = self.keys
        with translate_errors(self._where):
            count = self._begin(
                keys=[k.run(*ref), k.attempts(*ref), k.cancel(*ref)],
                args=[worker, now_ms(), self.result_ttl_s],
            )
        count = int(cast(Any, count))
        return None if count < 0 else count

    def hand_back(self, ref: RunRef) -> None:
        """Undo :meth:`begin`: one attempt fewer, status QUEUED again."""
        k = self.keys
        with translate_errors(self._where):
            self._hand_back(keys=[k.run(*ref), k.attempts(*ref)])

    def record_rejected(self, result: RunResult, *, reply_to: str | None = None) -> bool:
        """Record a run that never entered a session queue (invalid, unknown agent, busy).

        A run id that already has a record, queued or finished, is never rewritten (a forged
        message reusing its id cannot fail or change it): then nothing is recorded and False is
        returned.
        """
        k = self.keys
        t, s = result.tenant, result.session_id
        args = rejected_args(result, self.result_ttl_s)
        with translate_errors(self._where):
            recorded = bool(self._record_rejected(keys=[k.run(t, s, result.run_id)], args=args))
            if recorded:
                pipe = self.client.pipeline(transaction=False)
                pipe.set(k.run_index(t, result.run_id), s, nx=True, ex=self.result_ttl_s)
                announce(pipe, k, result, reply_to, self.result_ttl_s)
                pipe.execute()
        return recorded

    def finish(self, result: RunResult, *, reply_to: str | None = None) -> str | None:
        """Record the result, pop the run from its session queue and announce completion.

        The session's script and the announcement (another slot) share one round trip; the
        session's active-index entry is refreshed there too (it is progress).
        """
        next_head, _ = self._finish_pipeline(self._finish, result, reply_to, [], [])
        return _text(next_head) if next_head is not None else None

    def finish_and_release(
        self,
        result: RunResult,
        lease: Lease,
        *,
        reply_to: str | None = None,
        expect_idle: bool = False,
    ) -> tuple[str | None, IdleRelease | None]:
        """:meth:`finish` and, when the queue is left empty, the lease's release, in one script
        and one round trip, then the active-index exit as :meth:`release_if_idle` does it.

        With ``expect_idle`` on one Redis, the exit rides in the same round trip: the pipeline
        removes the session from the index after the script and then reads the queue's length,
        so a run submitted meanwhile is seen (and the session put back) exactly as
        :meth:`_leave_active` sees it. A wrong guess costs the round trip it would have saved.
        """
        k = self.keys
        t, s = result.tenant, result.session_id
        if (lease.tenant, lease.session_id) != (t, s):
            raise ValueError("the lease must be the finished run's session's")
        leave = expect_idle and not isinstance(cast(Any, self.client), RedisCluster)
        (head, code), queued = self._finish_pipeline(
            self._finish_release,
            result,
            reply_to,
            [k.lease(t, s), k.released(t, s)],
            [f"{lease.owner}|{lease.fence}", lease.fence],
            leave_active=leave,
        )
        if leave and queued:
            with translate_errors(self._where):
                self.client.zadd(k.active(t, s), {k.active_member(t, s): now_ms()})
        if head is not None:
            return _text(head), None
        outcome = _IDLE_RELEASE[int(code)]
        if outcome is IdleRelease.RELEASED and not leave:
            with translate_errors(self._where):
                self._leave_active(t, s)
        return None, outcome

    def _finish_pipeline(
        self,
        script: Any,
        result: RunResult,
        reply_to: str | None,
        more_keys: list[str],
        more_args: list[Any],
        *,
        leave_active: bool = False,
    ) -> tuple[Any, int | None]:
        """One round trip: ``script`` (the finish, KEYS and ARGV as ``_FINISH_BODY`` then
        ``more_keys`` / ``more_args``), the active-index progress (or, ``leave_active``, the
        session's removal from the index and then the queue's length) and the announcements;
        the script's reply, and the queue's length when ``leave_active``."""
        k = self.keys
        t, s = result.tenant, result.session_id
        raw = result.model_dump_json()  # once: the record and the producer's feed share it
        keys = [k.run(t, s, result.run_id), k.pending(t, s), k.attempts(t, s, result.run_id)]
        args = [
            result.run_id, result.status.value, raw, self.result_ttl_s, t, s, result.request_id
        ]

        def fill(pipe: Any) -> None:
            queue_script(pipe, script, [*keys, *more_keys], [*args, *more_args])
            if leave_active:
                pipe.zrem(k.active(t, s), k.active_member(t, s))
                pipe.llen(k.pending(t, s))
            else:
                pipe.zadd(k.active(t, s), {k.active_member(t, s): now_ms()})
            announce(pipe, k, result, reply_to, self.result_ttl_s, raw=raw)

        with translate_errors(self._where):
            replies = run_pipeline(self.client, [script], fill)
        return replies[0], int(replies[2]) if leave_active else None

    # --- the session queue -------------------------------------------------------------------

    def head(self, tenant: str, session_id: str) -> str | None:
        """The run id at the head of the session's queue."""
        with translate_errors(self._where):
            raw = self.client.lindex(self.keys.pending(tenant, session_id), 0)
        return _text(raw) if raw is not None else None

    def pending_count(self, tenant: str, session_id: str) -> int:
        """How many runs are queued for the session."""
        with translate_errors(self._where):
            return int(self.client.llen(self.keys.pending(tenant, session_id)))

    def drop(self, tenant: str, session_id: str, run_id: str) -> None:
        """Remove a run id from the session queue (an orphan without a record)."""
        with translate_errors(self._where):
            self.client.lrem(self.keys.pending(tenant, session_id), 1, run_id)

    def release_if_idle(self, lease: Lease) -> IdleRelease:
        """Release the lease only when the queue is empty."""
        k = self.keys
        t, s = lease.tenant, lease.session_id
        with translate_errors(self._where):
            code = self._release_if_idle(
                keys=[k.lease(t, s), k.pending(t, s), k.released(t, s)],
                args=[f"{lease.owner}|{lease.fence}", lease.fence],
            )
            outcome = _IDLE_RELEASE[int(cast(Any, code))]
            if outcome is IdleRelease.RELEASED:
                self._leave_active(t, s)
        return outcome

    def _leave_active(self, tenant: str, session_id: str) -> None:
        """Drop an idle session from the active index, safely against a concurrent submit.

        The index lives in another slot than the queue, so no script can test and remove at
        once. A submitter pushes to the queue *then* adds the session; removing *then* looking
        at the queue means one of us sees the other: if a run arrived, the session goes back.
        """
        k = self.keys
        member = k.active_member(tenant, session_id)
        if isinstance(cast(Any, self.client), RedisCluster):  # two nodes: two trips keep order
            self.client.zrem(k.active(tenant, session_id), member)
            queued = int(self.client.llen(k.pending(tenant, session_id)))
        else:  # one server runs a pipeline in order
            pipe = self.client.pipeline(transaction=False)
            pipe.zrem(k.active(tenant, session_id), member)
            pipe.llen(k.pending(tenant, session_id))
            queued = int(pipe.execute()[1])
        if queued > 0:
            self.client.zadd(k.active(tenant, session_id), {member: now_ms()}, nx=True)

    # --- cancellation --------------------------------------------------------------------------

    def request_cancel(self, ref: RunRef) -> CancelOutcome:
        """Ask the run to stop (see :class:`~tether.runs.queue.base.CancelOutcome`)."""
        k = self.keys
        with translate_errors(self._where):
            outcome = self._cancel(keys=[k.run(*ref), k.cancel(*ref)], args=[self.result_ttl_s])
        return CancelOutcome(_text(outcome))

    def cancel_requested(self, ref: RunRef) -> bool:
        """True when someone asked the run to stop."""
        return self.stop_mode(ref) is not None

    def stop_mode(self, ref: RunRef) -> StopMode | None:
        """How the run was asked to stop, or None."""
        with translate_errors(self._where):
            raw = self.client.get(self.keys.cancel(*ref))
        if raw is None:
            return None
        # 0.1 wrote '1' for a cancel
        return StopMode.INTERRUPT if raw == b"interrupt" else StopMode.CANCEL

    def preempt(self, tenant: str, session_id: str, run_id: str, mode: StopMode) -> str | None:
        """Ask the session's running run (not ``run_id``) to stop in ``mode``."""
        k = self.keys
        with translate_errors(self._where):
            raw = self.client.lindex(k.pending(tenant, session_id), 0)
            head = _text(raw) if raw is not None else None
            if head is None or head == run_id:
                return None
            running = RunState.RUNNING.value.encode()
            if self.client.hget(k.run(tenant, session_id, head), "status") != running:
                return None
            # NX: an interrupt never softens a cancel already asked for
            self.client.set(
                k.cancel(tenant, session_id, head), mode.value, nx=True, ex=self.result_ttl_s
            )
        return head

    # --- crash recovery ----------------------------------------------------------------------

    def stale_sessions(self, idle_ms: int, limit: int = 100) -> list[tuple[str, str]]:
        """Active sessions without progress for ``idle_ms`` (oldest first), over every shard of
        the index in one pipelined round trip."""
        cutoff = now_ms() - idle_ms
        with translate_errors(self._where):
            pipe = self.client.pipeline(transaction=False)
            for shard in self.keys.active_shards():
                pipe.zrangebyscore(shard, "-inf", cutoff, start=0, num=limit, withscores=True)
            replies = cast(list[list[tuple[bytes, float]]], pipe.execute())
        found = sorted(
            ((score, _text(member)) for reply in replies for member, score in reply),
        )[:limit]
        out = []
        for _, member in found:
            tenant, _, session_id = member.partition("/")
            out.append((tenant, session_id))
        return out

    def claim_kick(self, tenant: str, session_id: str, ttl_ms: int) -> bool:
        """Claim re-enqueueing the session for ``ttl_ms`` and record progress on it."""
        k = self.keys
        with translate_errors(self._where):
            if not self.client.set(k.kick(tenant, session_id), b"1", nx=True, px=ttl_ms):
                return False
            self.client.zadd(
                k.active(tenant, session_id),
                {k.active_member(tenant, session_id): now_ms()},
                xx=True,
            )
        return True

    def forget_if_idle(self, tenant: str, session_id: str) -> None:
        """Drop a session from the active set when it has no queue and no lease."""
        k = self.keys
        with translate_errors(self._where):
            if not self.client.exists(k.lease(tenant, session_id)) and not self.client.llen(
                k.pending(tenant, session_id)
            ):
                self._leave_active(tenant, session_id)

    # --- completion stream -------------------------------------------------------------------

    def done_last_id(self, feed: str | None = None) -> bytes:
        """The id of the newest completion entry of ``feed`` (``0-0`` when none)."""
        with translate_errors(self._where):
            entries = self.client.xrevrange(self.keys.feed_stream(feed), count=1)
        return cast(bytes, entries[0][0]) if entries else b"0-0"

    def read_done(
        self, after_id: bytes, block_ms: int, feed: str | None = None
    ) -> list[tuple[bytes, RunRef]]:
        """Completion entries of ``feed`` after ``after_id`` (blocks up to ``block_ms``)."""
        return [(c.position, c.ref) for c in self.read_completions(after_id, block_ms, feed)]

    def read_completions(
        self, after_id: bytes, block_ms: int, feed: str | None = None
    ) -> list[Completion]:
        """:meth:`read_done`, with the result each entry carries (a producer's feed's small
        results)."""
        with translate_errors(self._where):
            streams: dict[Any, Any] = {self.keys.feed_stream(feed): after_id}
            reply = cast(Any, self.client.xread(streams, block=block_ms, count=1000))
        out = []
        for _key, entries in reply or []:
            for entry_id, fields in entries:
                position, ref = done_entry(entry_id, fields)
                out.append(Completion(position, ref, carried_result(fields)))
        return out

    def close_feed(self, feed: str) -> None:
        """Drop a producer's feed (the producer is closing)."""
        with translate_errors(self._where):
            self.client.delete(self.keys.producer_done(feed))


class RedisArchiveHint:
    """:class:`~tether.persistence.saving.ArchiveHint` on Redis: one small key per session.

    Losing it (a Redis flush) only costs one identical segment rewrite on the next commit.
    """

    def __init__(self, client: redis.Redis, keys: RedisKeys, *, ttl_s: int = 7 * 24 * 3600) -> None:
        self._client = client
        self._keys = keys
        self._ttl_s = ttl_s
        self._where = describe_client(client)

    def archived_through(self, tenant: str, session_id: str) -> int:
        """The highest sequence number known archived (0 when unknown or unreachable)."""
        try:
            with translate_errors(self._where):
                raw = self._client.get(self._keys.archived(tenant, session_id))
        except TetherError:
            return 0
        return int(cast(bytes, raw)) if raw else 0

    def record(self, tenant: str, session_id: str, seq: int) -> None:
        """Remember that events up to ``seq`` are archived (best effort)."""
        with contextlib.suppress(TetherError), translate_errors(self._where):
            self._client.set(self._keys.archived(tenant, session_id), seq, ex=self._ttl_s)
