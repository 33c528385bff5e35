"""Claim-and-begin on Redis: one Lua script, one round trip (see :mod:`tether.worker.engine.claim`).

Every key the script touches is in the session's slot (layout v2: the run's record, attempt
counter and cancel flag carry the session's hash tag), so it runs on one Redis Cluster node. The
head run's keys are only known inside the script; it builds them from the prefixes
:class:`~tether.keys.RedisKeys` gives it (``run_prefix`` and its siblings), so the script
restates no key name.

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
from tether.persistence.lua import load
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.runs.contract import WireRequest
from tether.runs.leases._common import validate_acquire
from tether.runs.leases.base import Lease
from tether.runs.queue.base import SubmitOutcome, SubmitState
from tether.runs.queue.redis import RedisRunQueue
from tether.runs.queue.redis._common import SUBMIT_STATES, run_view, submit_argv, submit_keys
from tether.worker.engine.checkpoints.base import Checkpoint
from tether.worker.engine.claim import Carried, Claim

CLAIM = load("claim")


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
        self._claim = client.register_script(CLAIM.source)

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
        keys = CLAIM.keys(
            pending=k.pending(tenant, session_id),
            lease=k.lease(tenant, session_id),
            fence=k.fence(tenant, session_id),
            released=k.released(tenant, session_id),
            checkpoints=k.checkpoints(tenant, session_id),
            head_cache=k.head_cache(tenant, session_id),
        )
        named = {
            "owner": owner,
            "ttl_ms": ttl_ms,
            "now_ms": at_ms,
            "attempts_ttl_s": self._runs.result_ttl_s,
            "run_prefix": k.run_prefix(tenant, session_id),
            "cancel_prefix": k.cancel_prefix(tenant, session_id),
            "attempts_prefix": k.attempts_prefix(tenant, session_id),
            "caching": int(self._head_cache),
        }
        wire: WireRequest | None = None
        queue: str | None = None
        if carried is None:
            args = CLAIM.argv(carried="0", **named)
        else:
            # the text the message carried is registered as it is (no second serialization)
            wire, queue = carried.wire, carried.queue
            request = wire.request
            if (request.tenant, request.session_id) != (tenant, session_id):
                raise ValueError("a carried request must belong to the claimed session")
            keys += submit_keys(k, request)[:2]  # its request-id index entry and run record
            submitted_argv = submit_argv(wire, queue, self._runs.result_ttl_s)
            args = CLAIM.argv(submitted_argv, carried="1", **named)
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
