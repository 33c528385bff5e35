"""The run queue on Redis (see :mod:`tether.runs.queue.base` for the seam).

Submission, finishing and idle release are one Lua script each, so each is atomic. Keys are
built by :mod:`tether.keys`.

The scripts touch a session's keys, run keys and namespace-wide keys together, so they need a
non-cluster Redis (see :mod:`tether.keys`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, cast

import redis

from tether.core.events import now_ms
from tether.errors import TetherError
from tether.keys import RedisKeys
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.runs.contract import RunRequest, RunResult
from tether.runs.leases.base import Lease
from tether.runs.queue.base import (
    DONE_MAX_LEN,
    CancelOutcome,
    IdleRelease,
    RunState,
    RunView,
    StopMode,
    SubmitOutcome,
    SubmitState,
)

#: KEYS: req index, run hash, pending, active.
#: ARGV: run_id, request json, ttl_s, now_ms, active member, reject(0/1), tenant, session,
#: request_id, submitted_at_ms, queue (the broker queue serving the run; '' when unknown).
#: Returns {code, run_id}: 1 queued, 0 duplicate, 2 busy,
#: 3 the run id is taken by another request (never re-queued: a finished run stays finished).
SUBMIT_SCRIPT = """
local existing = redis.call('GET', KEYS[1])
if existing then return {0, existing} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {3, ARGV[1]} end
if ARGV[6] == '1' and redis.call('LLEN', KEYS[3]) > 0 then
  return {2, ARGV[1]}
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[3])
redis.call('HSET', KEYS[2], 'status', 'QUEUED', 'request', ARGV[2], 'tenant', ARGV[7],
  'session_id', ARGV[8], 'request_id', ARGV[9], 'submitted_at_ms', ARGV[10])
if ARGV[11] ~= '' then redis.call('HSET', KEYS[2], 'queue', ARGV[11]) end
redis.call('EXPIRE', KEYS[2], ARGV[3])
redis.call('RPUSH', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[4], 'NX', ARGV[4], ARGV[5])
return {1, ARGV[1]}
"""

#: KEYS: run hash, done. ARGV: status, result json, tenant, session, request_id, ttl_s, run_id,
#: done maxlen. Returns 1 recorded, 0 refused: a rejection never rewrites an existing record (a
#: forged message carrying a queued run's id must not fail that run).
RECORD_REJECTED_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'result', ARGV[2], 'tenant', ARGV[3],
  'session_id', ARGV[4], 'request_id', ARGV[5])
redis.call('EXPIRE', KEYS[1], ARGV[6])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[8], '*', 'run_id', ARGV[7], 'status', ARGV[1])
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

#: KEYS: run hash, pending, active, done, attempts.
#: ARGV: run_id, status, result json, ttl_s, now_ms, active member, done maxlen, tenant,
#: session, request_id (a record that expired is re-created whole).
FINISH_SCRIPT = """
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'result', ARGV[3], 'tenant', ARGV[8],
  'session_id', ARGV[9], 'request_id', ARGV[10])
redis.call('EXPIRE', KEYS[1], ARGV[4])
if redis.call('LINDEX', KEYS[2], 0) == ARGV[1] then
  redis.call('LPOP', KEYS[2])
else
  redis.call('LREM', KEYS[2], 1, ARGV[1])
end
redis.call('DEL', KEYS[5])
redis.call('ZADD', KEYS[3], 'XX', ARGV[5], ARGV[6])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[7], '*', 'run_id', ARGV[1], 'status', ARGV[2])
return 1
"""

#: KEYS: lease, pending, active, released fence. ARGV: lease value, active member, fence.
#: Returns 1 released, 0 still work to do (lease kept), -1 lease not ours.
RELEASE_IF_IDLE_SCRIPT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('LLEN', KEYS[2]) > 0 then return 0 end
redis.call('SET', KEYS[4], ARGV[3])
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[3], ARGV[2])
return 1
"""

_SUBMIT_STATES = {
    1: SubmitState.QUEUED,
    0: SubmitState.DUPLICATE,
    2: SubmitState.BUSY,
    3: SubmitState.TAKEN,
}
_IDLE_RELEASE = {1: IdleRelease.RELEASED, 0: IdleRelease.BUSY, -1: IdleRelease.LOST}


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def run_view(run_id: str, raw: dict[bytes, bytes]) -> RunView | None:
    """A run record from its hash (None when it has none); shared with the asyncio producer."""
    if not raw:
        return None
    fields = {_text(k): _text(v) for k, v in raw.items()}
    request = result = None
    if "request" in fields:
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
        queue=fields.get("queue") or None,
    )


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
        self._release_if_idle = client.register_script(RELEASE_IF_IDLE_SCRIPT)
        self._record_rejected = client.register_script(RECORD_REJECTED_SCRIPT)
        self._begin = client.register_script(BEGIN_SCRIPT)
        self._hand_back = client.register_script(HAND_BACK_SCRIPT)
        self._cancel = client.register_script(CANCEL_SCRIPT)

    # --- submission --------------------------------------------------------------------------

    def _submit_args(
        self, request: RunRequest, queue: str | None
    ) -> tuple[list[str], list[Any]]:
        k = self.keys
        t, s = request.tenant, request.session_id
        keys = [
            k.request(t, s, request.request_id),
            k.run(request.run_id),
            k.pending(t, s),
            k.active(),
        ]
        args = [
            request.run_id,
            request.model_dump_json(),
            self.result_ttl_s,
            now_ms(),
            k.active_member(t, s),
            "1" if request.on_busy == "reject" else "0",
            t,
            s,
            request.request_id,
            request.submitted_at_ms,
            queue or "",
        ]
        return keys, args

    def submit_many(
        self, requests: Sequence[RunRequest], *, queue: str | None = None
    ) -> list[SubmitOutcome]:
        """Register and queue requests, idempotently, in one pipelined round trip."""
        with translate_errors(self._where):
            pipe = self.client.pipeline(transaction=False)
            for request in requests:
                keys, args = self._submit_args(request, queue)
                self._submit(keys=keys, args=args, client=pipe)
            replies = pipe.execute()
        return [
            SubmitOutcome(_text(run_id), _SUBMIT_STATES[int(code)])
            for code, run_id in replies
        ]

    # --- records -----------------------------------------------------------------------------

    def get(self, run_id: str) -> RunView | None:
        """The run record, or None when unknown or expired."""
        with translate_errors(self._where):
            raw = cast(dict[bytes, bytes], self.client.hgetall(self.keys.run(run_id)))
        return run_view(run_id, raw)

    def peek_many(self, run_ids: Sequence[str]) -> dict[str, RunResult | None]:
        """For each run id with a record: its result (None while unfinished), in one round trip.

        Run ids without a record (unknown, expired, or lost with a Redis restart) are absent
        from the answer.
        """
        if not run_ids:
            return {}
        with translate_errors(self._where):
            pipe = self.client.pipeline(transaction=False)
            for run_id in run_ids:
                pipe.hmget(self.keys.run(run_id), ["status", "result"])
            replies = cast(list[list[bytes | None]], pipe.execute())
        out: dict[str, RunResult | None] = {}
        for run_id, (status, result) in zip(run_ids, replies, strict=True):
            if status is None and result is None:
                continue
            out[run_id] = RunResult.model_validate_json(result) if result is not None else None
        return out

    def note_failure(self, run_id: str, error: str, *, retry_after_ms: int = 0) -> None:
        """Remember why an attempt of the run failed (and not to retry it for a while)."""
        mapping: dict[Any, Any] = {"last_error": error[:1000]}
        if retry_after_ms > 0:
            mapping["retry_at_ms"] = now_ms() + retry_after_ms
        key = self.keys.run(run_id)
        with translate_errors(self._where):
            if self.client.exists(key):  # never re-create a record that expired or was lost
                self.client.hset(key, mapping=mapping)

    def begin(self, run_id: str, worker: str) -> int | None:
        """Count one more attempt and mark the run running, unless a cancel came first."""
        k = self.keys
        with translate_errors(self._where):
            count = self._begin(
                keys=[k.run(run_id), k.attempts(run_id), k.cancel(run_id)],
                args=[worker, now_ms(), self.result_ttl_s],
            )
        count = int(cast(Any, count))
        return None if count < 0 else count

    def hand_back(self, run_id: str) -> None:
        """Undo :meth:`begin`: one attempt fewer, status QUEUED again."""
        k = self.keys
        with translate_errors(self._where):
            self._hand_back(keys=[k.run(run_id), k.attempts(run_id)])

    def record_rejected(self, result: RunResult) -> bool:
        """Record a run that never entered a session queue (invalid, unknown agent, busy).

        A run id that already has a record, queued or finished, is never rewritten (a forged
        message reusing its id cannot fail or change it): then nothing is recorded and False is
        returned.
        """
        keys = [self.keys.run(result.run_id), self.keys.done()]
        args = [
            result.status.value,
            result.model_dump_json(),
            result.tenant,
            result.session_id,
            result.request_id,
            self.result_ttl_s,
            result.run_id,
            DONE_MAX_LEN,
        ]
        with translate_errors(self._where):
            return bool(self._record_rejected(keys=keys, args=args))

    def finish(self, result: RunResult) -> None:
        """Record the result, pop the run from its session queue and announce completion."""
        k = self.keys
        t, s = result.tenant, result.session_id
        keys = [
            k.run(result.run_id),
            k.pending(t, s),
            k.active(),
            k.done(),
            k.attempts(result.run_id),
        ]
        args = [
            result.run_id,
            result.status.value,
            result.model_dump_json(),
            self.result_ttl_s,
            now_ms(),
            k.active_member(t, s),
            DONE_MAX_LEN,
            t,
            s,
            result.request_id,
        ]
        with translate_errors(self._where):
            self._finish(keys=keys, args=args)

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
                keys=[k.lease(t, s), k.pending(t, s), k.active(), k.released(t, s)],
                args=[f"{lease.owner}|{lease.fence}", k.active_member(t, s), lease.fence],
            )
        return _IDLE_RELEASE[int(cast(Any, code))]

    # --- cancellation --------------------------------------------------------------------------

    def request_cancel(self, run_id: str) -> CancelOutcome:
        """Ask the run to stop (see :class:`~tether.runs.queue.base.CancelOutcome`)."""
        k = self.keys
        with translate_errors(self._where):
            outcome = self._cancel(
                keys=[k.run(run_id), k.cancel(run_id)], args=[self.result_ttl_s]
            )
        return CancelOutcome(_text(outcome))

    def cancel_requested(self, run_id: str) -> bool:
        """True when someone asked the run to stop."""
        return self.stop_mode(run_id) is not None

    def stop_mode(self, run_id: str) -> StopMode | None:
        """How the run was asked to stop, or None."""
        with translate_errors(self._where):
            raw = self.client.get(self.keys.cancel(run_id))
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
            if self.client.hget(k.run(head), "status") != RunState.RUNNING.value.encode():
                return None
            # NX: an interrupt never softens a cancel already asked for
            self.client.set(k.cancel(head), mode.value, nx=True, ex=self.result_ttl_s)
        return head

    # --- crash recovery ----------------------------------------------------------------------

    def stale_sessions(self, idle_ms: int, limit: int = 100) -> list[tuple[str, str]]:
        """Active sessions without progress for ``idle_ms`` (oldest first)."""
        with translate_errors(self._where):
            members = self.client.zrangebyscore(
                self.keys.active(), "-inf", now_ms() - idle_ms, start=0, num=limit
            )
        out = []
        for member in members:
            tenant, _, session_id = _text(member).partition("/")
            out.append((tenant, session_id))
        return out

    def claim_kick(self, tenant: str, session_id: str, ttl_ms: int) -> bool:
        """Claim re-enqueueing the session for ``ttl_ms`` and record progress on it."""
        k = self.keys
        with translate_errors(self._where):
            if not self.client.set(k.kick(tenant, session_id), b"1", nx=True, px=ttl_ms):
                return False
            self.client.zadd(k.active(), {k.active_member(tenant, session_id): now_ms()}, xx=True)
        return True

    def forget_if_idle(self, tenant: str, session_id: str) -> None:
        """Drop a session from the active set when it has no queue and no lease."""
        k = self.keys
        with translate_errors(self._where):
            if not self.client.exists(k.lease(tenant, session_id)) and not self.client.llen(
                k.pending(tenant, session_id)
            ):
                self.client.zrem(k.active(), k.active_member(tenant, session_id))

    # --- completion stream -------------------------------------------------------------------

    def done_last_id(self) -> bytes:
        """The id of the newest completion entry (``0-0`` when none)."""
        with translate_errors(self._where):
            entries = self.client.xrevrange(self.keys.done(), count=1)
        return cast(bytes, entries[0][0]) if entries else b"0-0"

    def read_done(self, after_id: bytes, block_ms: int) -> list[tuple[bytes, str]]:
        """Completion entries after ``after_id`` (blocks up to ``block_ms``)."""
        with translate_errors(self._where):
            reply = cast(
                Any, self.client.xread({self.keys.done(): after_id}, block=block_ms, count=1000)
            )
        out: list[tuple[bytes, str]] = []
        for _key, entries in reply or []:
            for entry_id, fields in entries:
                out.append((entry_id, _text(fields[b"run_id"])))
        return out


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
