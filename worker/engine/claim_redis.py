"""Claim-and-begin on Redis: one Lua script, one round trip (see :mod:`tether.worker.engine.claim`).

Every key the script touches is in the session's slot (layout v2: the run's record, attempt
counter and cancel flag carry the session's hash tag), so it runs on one Redis Cluster node. The
head run's keys are only known inside the script; it builds them from the prefixes
:class:`~tether.keys.RedisKeys` gives it (``run_prefix`` and its siblings), so the script
restates no key name.

The session's entry in the active-session index (and, once in a while, its tenant's entry in the
tenants index) lives in another slot: it rides in the claim's round trip, beside the script. The
tenant's run-id index lives in other slots too, so a carried request that the script registers
for the first time (its producer never did: a message sent by hand, or a Redis that lost it)
gets it in one more round trip, through the ordinary submit, which then answers "duplicate" and
writes only that.
"""

from __future__ import annotations

import time
from typing import Any, cast

import redis

from tether.core.events import now_ms
from tether.ids import validate_id
from tether.keys import RedisKeys
from tether.persistence.headcache.base import unpack
from tether.persistence.lua import Key
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.persistence.scripts import queue_script, run_pipeline
from tether.runs.contract import WireRequest
from tether.runs.leases._common import validate_acquire
from tether.runs.leases.base import Lease
from tether.runs.queue.base import SubmitOutcome, SubmitState
from tether.runs.queue.record import record_script
from tether.runs.queue.redis import RedisRunQueue
from tether.runs.queue.redis._common import SUBMIT_STATES, carried_keys, run_view, submit_args
from tether.worker.engine.checkpoints.base import Checkpoint
from tether.worker.engine.claim import Carried, Claim

CLAIM = record_script("claim")
#: How often one worker process notes a tenant it claims for in the tenants index (s).
TENANT_NOTE_S = 600.0


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
        self._noted: dict[str, float] = {}

    def claim(
        self,
        tenant: str,
        session_id: str,
        *,
        owner: str,
        ttl_ms: int,
        carried: Carried | None = None,
        expect: str | None = None,
    ) -> Claim:
        """Register ``carried``, take the lease for ``owner`` and begin the queue's head run;
        with ``expect``, only when the session holds a record of that run."""
        validate_acquire(tenant, session_id, owner, ttl_ms)
        wire: WireRequest | None = None
        queue: str | None = None
        if carried is not None:
            # the text the message carried is registered as it is (no second serialization)
            wire, queue = carried.wire, carried.queue
            if (wire.request.tenant, wire.request.session_id) != (tenant, session_id):
                raise ValueError("a carried request must belong to the claimed session")
        keys, args = self._call(tenant, session_id, owner, ttl_ms, wire, queue, expect)
        k = self._keys
        member = k.active_member(tenant, session_id)
        note_tenant = self._tenant_due(tenant)

        def fill(pipe: Any) -> None:
            queue_script(pipe, self._claim, keys, args)
            # workers keep the active index (no tenant's credential writes it): from the first
            # claim until the session's queue is empty; NX keeps the last progress
            pipe.zadd(k.active(tenant, session_id), {member: now_ms()}, nx=True)
            if note_tenant:  # whose queued index the sweeper reads (docs/trust-model.md)
                pipe.zadd(k.tenants(), {tenant: now_ms()})

        with translate_errors(self._where):
            replies = run_pipeline(self._client, [self._claim], fill)
            reply = CLAIM.reply(cast(list[Any], replies[0]))
        submitted = None if wire is None else self._registered(reply, wire, queue)
        fence = int(reply["fence"])
        if fence < 0:
            return Claim(submitted, None, unregistered=True)
        if not fence:
            return Claim(submitted, None)
        lease = Lease(tenant, session_id, owner, fence, takeover=bool(int(reply["takeover"])))
        if reply["head"] is None:  # the queue is empty
            return Claim(submitted, lease)
        return self._head_claim(submitted, lease, reply, wire)

    def _tenant_due(self, tenant: str) -> bool:
        """Whether this process notes ``tenant`` in the namespace's tenants now (once per
        :data:`TENANT_NOTE_S`: the index is written by claims, not by every run)."""
        now_s = time.monotonic()
        if now_s - self._noted.get(tenant, -TENANT_NOTE_S) < TENANT_NOTE_S:
            return False
        self._noted[tenant] = now_s
        return True

    def _call(
        self,
        tenant: str,
        session_id: str,
        owner: str,
        ttl_ms: int,
        wire: WireRequest | None,
        queue: str | None,
        expect: str | None,
    ) -> tuple[list[Key], list[Any]]:
        """KEYS and ARGV of ``claim.lua``; a carried request adds its optional groups."""
        k = self._keys
        keys: dict[str, Key] = dict(
            pending=k.pending(tenant, session_id),
            lease=k.lease(tenant, session_id),
            fence=k.fence(tenant, session_id),
            released=k.released(tenant, session_id),
            checkpoints=k.checkpoints(tenant, session_id),
            head_cache=k.head_cache(tenant, session_id),
        )
        args: dict[str, Any] = dict(
            owner=owner,
            ttl_ms=ttl_ms,
            now_ms=now_ms(),
            attempts_ttl_s=self._runs.result_ttl_s,
            run_prefix=k.run_prefix(tenant, session_id),
            cancel_prefix=k.cancel_prefix(tenant, session_id),
            attempts_prefix=k.attempts_prefix(tenant, session_id),
            caching=int(self._head_cache),
            expect=validate_id(expect, kind="run id") if expect is not None else "",
        )
        if wire is not None:
            keys |= carried_keys(k, wire.request)
            args |= submit_args(wire, queue, self._runs.result_ttl_s)
        return CLAIM.keys(**keys), CLAIM.argv(**args)

    def _registered(
        self, reply: dict[str, Any], wire: WireRequest, queue: str | None
    ) -> SubmitOutcome:
        """What the script's submit did with the carried request."""
        submitted = SubmitOutcome(_text(reply["run_id"]), SUBMIT_STATES[int(reply["code"])])
        if submitted.state is SubmitState.QUEUED:
            # the script cannot write the index and the active set (other slots); the
            # submit finds the request registered and writes only those
            self._runs.submit_many([wire], queue=queue)
        return submitted

    def _head_claim(
        self,
        submitted: SubmitOutcome | None,
        lease: Lease,
        reply: dict[str, Any],
        wire: WireRequest | None,
    ) -> Claim:
        """The claim of a session whose queue has a head run, from the script's reply."""
        head = _text(reply["head"])
        flat = cast(list[bytes], reply["record"])
        record = dict(zip(flat[::2], flat[1::2], strict=True))
        checkpoint, cached = reply["checkpoint"], reply["cached"]
        return Claim(
            submitted,
            lease,
            head,
            # the carried request is not validated again when the record holds its very text
            run_view(head, record, known=wire),
            int(reply["attempts"]) or None,
            bool(int(reply["cancelled"])),
            Checkpoint.model_validate_json(checkpoint) if checkpoint else None,
            queued=int(reply["queued"]),
            cache_read=self._head_cache,
            cached_head=unpack(cached) if isinstance(cached, bytes) else None,
        )
