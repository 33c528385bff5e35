"""Claim-and-begin on Redis: one Lua script, one round trip (see :mod:`tether.worker.engine.claim`).

Every key the script touches is in the session's slot (layout v2: the run's record, attempt
counter and cancel flag carry the session's hash tag), so it runs on one Redis Cluster node. The
head run's keys are only known inside the script; it builds them from the session's key prefix,
the same names :class:`~tether.keys.RedisKeys` builds.

The tenant's run-id index and the active-session index live in other slots, so a carried
request that the script registers for the first time (its producer never did: a message sent by
hand, or a Redis that lost it) gets them in one more round trip, through the ordinary submit,
which then answers "duplicate" and writes only those.
"""

from __future__ import annotations

from typing import Any, cast

import redis

from tether.core.events import now_ms
from tether.keys import RedisKeys
from tether.persistence.headcache.base import unpack
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.runs.leases._common import validate_acquire
from tether.runs.leases.base import Lease
from tether.runs.leases.redis import ACQUIRE_FUNCTION
from tether.runs.queue.base import SubmitOutcome, SubmitState
from tether.runs.queue.redis import (
    SUBMIT_FUNCTION,
    SUBMIT_STATES,
    RedisRunQueue,
    run_view,
    submit_call,
)
from tether.worker.engine.checkpoints.base import Checkpoint
from tether.worker.engine.claim import Carried, Claim

#: KEYS: pending, lease, fence counter, released fence, checkpoints, then (only with a carried
#: request) its request-id index entry and run record.
#: ARGV: owner, ttl_ms, now_ms, attempts ttl_s, session key prefix ('<p>:{t/s}:'), head cache
#: on (0/1), carried (0/1), then with a carried request the 9 arguments of the submit script.
#: Returns {submit code, submit run id, fence (0: held), takeover, head, record (flat list),
#: checkpoint, attempts (0: not begun), cancelled, queued runs, cached head entry}.
#: A takeover drops the cached head (its holder may have written the store and died before
#: caching it); any other grant reads it, so the restore needs no round trip of its own.
CLAIM_SCRIPT = SUBMIT_FUNCTION + ACQUIRE_FUNCTION + """
local code, submitted = false, false
if ARGV[7] == '1' then
  local outcome = submit(KEYS[6], KEYS[7], KEYS[1], 7)
  code, submitted = outcome[1], outcome[2]
end
local grant = acquire(KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2])
local fence, takeover = grant[1], grant[2]
if fence == 0 then return {code, submitted, 0, 0} end
local caching = ARGV[6] == '1'
if caching and takeover == 1 then redis.call('DEL', ARGV[5] .. 'head') end
local head = redis.call('LINDEX', KEYS[1], 0)
if not head then return {code, submitted, fence, takeover} end
local cached = false
if caching and takeover ~= 1 then cached = redis.call('GET', ARGV[5] .. 'head') end
local record = redis.call('HGETALL', ARGV[5] .. 'run:' .. head)
local checkpoint = redis.call('HGET', KEYS[5], head)
local has_request, has_result, retry_at = false, false, 0
for i = 1, #record, 2 do
  local field = record[i]
  if field == 'request' then has_request = true
  elseif field == 'result' then has_result = true
  elseif field == 'retry_at_ms' then retry_at = tonumber(record[i + 1]) or 0 end
end
local attempts, cancelled = 0, 0
if has_request and not has_result and retry_at <= tonumber(ARGV[3]) then
  if redis.call('EXISTS', ARGV[5] .. 'cancel:' .. head) == 1 then
    cancelled = 1
  else
    local counter = ARGV[5] .. 'attempts:' .. head
    attempts = redis.call('INCR', counter)
    redis.call('EXPIRE', counter, ARGV[4])
    redis.call('HSET', ARGV[5] .. 'run:' .. head, 'status', 'RUNNING', 'worker', ARGV[1],
      'started_at_ms', ARGV[3])
  end
end
return {code, submitted, fence, takeover, head, record, checkpoint, attempts, cancelled,
  redis.call('LLEN', KEYS[1]), cached}
"""


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class RedisClaimer:
    """:class:`~tether.worker.engine.claim.Claimer` on Redis (one script per claim).

    Args:
        runs: the run queue on the same client and namespace (for the rare second round trip
            of a fresh registration, and its TTL).
    """

    def __init__(
        self, client: redis.Redis, keys: RedisKeys, runs: RedisRunQueue, *, head_cache: bool
    ) -> None:
        self._client = client
        self._keys = keys
        self._runs = runs
        self._head_cache = head_cache
        self._where = describe_client(client)
        self._claim = client.register_script(CLAIM_SCRIPT)

    def claim(
        self,
        tenant: str,
        session_id: str,
        *,
        owner: str,
        ttl_ms: int,
        carried: Carried | None = None,
    ) -> Claim:
        """Register ``carried``, take the lease for ``owner`` and begin the queue's head run."""
        validate_acquire(tenant, session_id, owner, ttl_ms)
        k = self._keys
        at_ms = now_ms()
        keys = [
            k.pending(tenant, session_id),
            k.lease(tenant, session_id),
            k.fence(tenant, session_id),
            k.released(tenant, session_id),
            k.checkpoints(tenant, session_id),
        ]
        prefix = f"{k.prefix}:{k.session_tag(tenant, session_id)}:"
        args: list[Any] = [
            owner, ttl_ms, at_ms, self._runs.result_ttl_s, prefix, int(self._head_cache)
        ]  # fmt: skip
        wire, queue = None, None
        if carried is None:
            args.append("0")
        else:
            # the text the message carried is registered as it is (no second serialization)
            wire, queue = carried.wire, carried.queue
            request = wire.request
            if (request.tenant, request.session_id) != (tenant, session_id):
                raise ValueError("a carried request must belong to the claimed session")
            submit_keys, submit_args = submit_call(k, wire, queue, self._runs.result_ttl_s)
            keys += submit_keys[:2]
            args += ["1", *submit_args]
        with translate_errors(self._where):
            reply = cast(list[Any], self._claim(keys=keys, args=args))
        submitted = None
        if wire is not None:
            code, run_id = int(reply[0]), _text(reply[1])
            submitted = SubmitOutcome(run_id, SUBMIT_STATES[code])
            if submitted.state is SubmitState.QUEUED:
                # the script cannot write the index and the active set (other slots); the
                # submit finds the request registered and writes only those
                self._runs.submit_many([wire], queue=queue)
        fence = int(reply[2])
        if not fence:
            return Claim(submitted, None)
        lease = Lease(tenant, session_id, owner, fence, takeover=bool(int(reply[3])))
        if len(reply) < 5:
            return Claim(submitted, lease)
        head = _text(reply[4])
        flat = cast(list[bytes], reply[5])
        record = dict(zip(flat[::2], flat[1::2], strict=True))
        # the carried request is not validated again when the record holds its very text
        view = run_view(head, record, known=wire)
        checkpoint = Checkpoint.model_validate_json(reply[6]) if reply[6] else None
        attempts = int(reply[7]) or None
        cached = unpack(reply[10]) if len(reply) > 10 and isinstance(reply[10], bytes) else None
        return Claim(
            submitted,
            lease,
            head,
            view,
            attempts,
            bool(int(reply[8])),
            checkpoint,
            queued=int(reply[9]),
            cache_read=self._head_cache,
            cached_head=cached,
        )
