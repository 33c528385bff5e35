"""Submitting runs and reading their records on Redis (the
:class:`~tether.runs.queue.base.Submissions` role)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import redis

from tether.core.events import now_ms
from tether.persistence.active_index import note_tenant
from tether.persistence.redis_conn import translate_errors
from tether.persistence.scripts import queue_script, run_pipeline
from tether.runs.contract import RunRef, RunRequest, RunResult, WireRequest
from tether.runs.queue.base import RunView, SubmitOutcome
from tether.runs.queue.record import RunField
from tether.runs.queue.redis._common import (
    RECORD_REJECTED,
    SUBMIT,
    announce,
    rejected_argv,
    run_view,
    stray_index_keys,
    submit_argv,
    submit_keys,
    submit_outcomes,
    text,
)
from tether.runs.queue.redis._part import RedisQueuePart


class RedisSubmissions(RedisQueuePart):
    """Submit runs idempotently and read their records."""

    def submit_many(
        self, requests: Sequence[RunRequest | WireRequest], *, queue: str | None = None
    ) -> list[SubmitOutcome]:
        """Register and queue requests, idempotently, in one pipelined round trip.

        Beside each session's script go the tenant's run-id index entry (NX: the first session
        to use a run id keeps it) and the session's mark in the tenant's queued index (its own
        keyspace: workers keep the namespace's active index); both after the script, so no
        index names a session before its queue holds the run. A :class:`WireRequest` is
        registered with its own text (a producer serializes once).
        """
        k = self.keys
        stamp = now_ms()
        submit = self._script(SUBMIT)
        wires = [WireRequest.of(r) for r in requests]

        def fill(pipe: Any) -> None:
            for wire in wires:
                request = wire.request
                t, s = request.tenant, request.session_id
                argv = submit_argv(wire, queue, self.result_ttl_s)
                queue_script(pipe, submit, submit_keys(k, request), argv)
                pipe.set(k.run_index(t, request.run_id), s, nx=True, ex=self.result_ttl_s)
                pipe.zadd(k.tenant_queued(t, s), {s: stamp}, nx=True)

        with translate_errors(self._where):
            replies = run_pipeline(self.client, [submit], fill)
            outcomes = submit_outcomes(replies)
            stray = stray_index_keys(k, [w.request for w in wires], outcomes, replies)
            if stray:  # rare (a duplicate or busy submission): one more round trip
                self.client.delete(*stray)
            for tenant in {w.request.tenant for w in wires} - self._noted_tenants:
                # once per tenant and queue: where workers find its queued index (a tenant's
                # own credential may not write it; its first claim notes it then)
                note_tenant(self.client, k, tenant)
                self._noted_tenants.add(tenant)
        return outcomes

    def restricted(self) -> bool:
        """True when this queue's credential may not read the namespace's own keys: a tenant's
        ACL user (docs/trust-model.md), as a producer of a deployment with per-tenant users."""
        try:
            self.client.exists(self.keys.tenants())
        except redis.exceptions.NoPermissionError:
            return True
        return False

    def record_rejected(self, result: RunResult, *, reply_to: str | None = None) -> bool:
        """Record a run that never entered a session queue (invalid, unknown agent, busy).

        A run id that already has a record, queued or finished, is never rewritten (a forged
        message reusing its id cannot fail or change it): then nothing is recorded and False is
        returned.
        """
        k = self.keys
        t, s = result.tenant, result.session_id
        keys = RECORD_REJECTED.keys(run=k.run(t, s, result.run_id))
        argv = rejected_argv(result, self.result_ttl_s)
        with translate_errors(self._where):
            recorded = bool(self._script(RECORD_REJECTED)(keys=keys, args=argv))
            if recorded:
                pipe = self.client.pipeline(transaction=False)
                pipe.set(k.run_index(t, result.run_id), s, nx=True, ex=self.result_ttl_s)
                announce(pipe, k, result, reply_to, self.result_ttl_s, observers=False)
                pipe.execute()
        return recorded

    def locate(self, tenant: str, run_id: str) -> RunRef | None:
        """Where ``tenant``'s run lives, from the tenant's run-id index."""
        with translate_errors(self._where):
            raw = self.client.get(self.keys.run_index(tenant, run_id))
        return RunRef(tenant, text(raw), run_id) if raw is not None else None

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
                pipe.hmget(self.keys.run(*ref), [RunField.STATUS, RunField.RESULT])
            replies = cast(list[list[bytes | None]], pipe.execute())
        out: dict[str, RunResult | None] = {}
        for ref, (status, result) in zip(refs, replies, strict=True):
            if status is None and result is None:
                continue
            out[ref.run_id] = RunResult.model_validate_json(result) if result is not None else None
        return out
