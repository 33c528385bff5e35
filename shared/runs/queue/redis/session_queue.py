"""A session's FIFO of runs on Redis, as its lease holder works through it (the
:class:`~tether.runs.queue.base.SessionQueue` role): begin, hand back, fail, finish, release."""

from __future__ import annotations

from typing import Any, cast

from tether.core.events import now_ms
from tether.persistence.lua import LuaScript
from tether.persistence.redis_conn import translate_errors
from tether.persistence.scripts import queue_script, run_pipeline, send_shared
from tether.runs.contract import RunRef, RunResult
from tether.runs.leases.base import Lease
from tether.runs.queue.base import IdleRelease
from tether.runs.queue.record import RunField
from tether.runs.queue.redis._common import (
    BEGIN,
    FINISH,
    FINISH_RELEASE,
    HAND_BACK,
    IDLE_RELEASE,
    RELEASE_IF_IDLE,
    announce,
    text,
)
from tether.runs.queue.redis._part import RedisQueuePart
from tether.runs.usage.base import has_tokens


def _lease_value(lease: Lease) -> str:
    return f"{lease.owner}|{lease.fence}"


class RedisSessionQueue(RedisQueuePart):
    """The lease holder's side of a session's queue."""

    def head(self, tenant: str, session_id: str) -> str | None:
        """The run id at the head of the session's queue."""
        with translate_errors(self._where):
            raw = self.client.lindex(self.keys.pending(tenant, session_id), 0)
        return text(raw) if raw is not None else None

    def begin(self, ref: RunRef, worker: str) -> int | None:
        """Count one more attempt and mark the run running, unless a cancel came first."""
        k = self.keys
        keys = BEGIN.keys(run=k.run(*ref), attempts=k.attempts(*ref), cancel=k.cancel(*ref))
        argv = BEGIN.argv(worker=worker, now_ms=now_ms(), ttl_s=self.result_ttl_s)
        script = self._script(BEGIN)

        def fill(pipe: Any) -> None:
            queue_script(pipe, script, keys, argv)
            self._mark_active(pipe, ref.tenant, ref.session_id)

        with translate_errors(self._where):
            count = int(run_pipeline(self.client, [script], fill)[0])
        return None if count < 0 else count

    def hand_back(self, ref: RunRef) -> None:
        """Undo :meth:`begin`: one attempt fewer, status QUEUED again."""
        k = self.keys
        keys = HAND_BACK.keys(run=k.run(*ref), attempts=k.attempts(*ref))
        with translate_errors(self._where):
            self._script(HAND_BACK)(keys=keys, args=[])

    def note_failure(
        self, ref: RunRef, error: str, *, retry_after_ms: int = 0, before_commit: bool = False
    ) -> None:
        """Remember why an attempt of the run failed (and not to retry it for a while)."""
        mapping: dict[Any, Any] = {RunField.LAST_ERROR: error[:1000]}
        if retry_after_ms > 0:
            mapping[RunField.RETRY_AT_MS] = now_ms() + retry_after_ms
        key = self.keys.run(*ref)
        with translate_errors(self._where):
            if self.client.exists(key):  # never re-create a record that expired or was lost
                self.client.hset(key, mapping=mapping)
                if before_commit:
                    self.client.hincrby(key, RunField.FAILED_BEFORE_COMMIT, 1)

    def finish(self, result: RunResult, *, reply_to: str | None = None) -> str | None:
        """Record the result, pop the run from its session queue and announce completion.

        The session's script and the announcement (another slot) share one round trip; the
        session's active-index entry is refreshed there too (it is progress).
        """
        next_head, _ = self._finish_pipeline(FINISH, result, reply_to, {}, {})
        return text(next_head) if next_head is not None else None

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
        ``_leave_active`` sees it. A wrong guess costs the round trip it would have saved.
        """
        k = self.keys
        t, s = result.tenant, result.session_id
        if (lease.tenant, lease.session_id) != (t, s):
            raise ValueError("the lease must be the finished run's session's")
        leave = expect_idle and not self._cluster
        reply, queued = self._finish_pipeline(
            FINISH_RELEASE,
            result,
            reply_to,
            {"lease": k.lease(t, s), "released": k.released(t, s)},
            {"lease_value": _lease_value(lease), "fence": lease.fence},
            leave_active=leave,
        )
        if leave and queued:
            with translate_errors(self._where):
                send_shared(self.client, "ZADD", k.active(t, s), now_ms(), k.active_member(t, s))
        finished = FINISH_RELEASE.reply(reply)
        if finished["head"] is not None:
            return text(finished["head"]), None
        outcome = IDLE_RELEASE[int(finished["release"])]
        if outcome is IdleRelease.RELEASED and not leave:
            with translate_errors(self._where):
                self._leave_active(t, s)
        return None, outcome

    def _finish_pipeline(
        self,
        lua: LuaScript,
        result: RunResult,
        reply_to: str | None,
        more_keys: dict[str, str],
        more_argv: dict[str, Any],
        *,
        leave_active: bool = False,
    ) -> tuple[Any, int | None]:
        """One round trip: ``lua`` (``finish.lua`` or ``finish_release.lua``, whose KEYS and ARGV
        begin alike; ``more_*`` are the rest), the active-index progress (or, ``leave_active``,
        the session's removal from the index and then the queue's length) and the
        announcements; the script's reply, and the queue's length when ``leave_active``."""
        k = self.keys
        t, s = result.tenant, result.session_id
        raw = result.model_dump_json()  # once: the record and the producer's feed share it
        keys = lua.keys(
            run=k.run(t, s, result.run_id),
            pending=k.pending(t, s),
            attempts=k.attempts(t, s, result.run_id),
            deltas=k.deltas(t, s),
            **more_keys,
        )
        argv = lua.argv(
            run_id=result.run_id,
            status=result.status.value,
            result=raw,
            ttl_s=self.result_ttl_s,
            tenant=t,
            session_id=s,
            request_id=result.request_id,
            **more_argv,
        )
        script = self._script(lua)

        def fill(pipe: Any) -> None:
            queue_script(pipe, script, keys, argv)
            if leave_active:
                pipe.zrem(k.active(t, s), k.active_member(t, s))
                pipe.zrem(k.tenant_queued(t, s), s)
                pipe.llen(k.pending(t, s))
            else:
                pipe.zadd(k.active(t, s), {k.active_member(t, s): now_ms()})
            announce(pipe, k, result, reply_to, self.result_ttl_s, raw=raw)
            if counted:  # last: the replies above keep their places
                usage = self.tenant_usage
                usage.queue_add(pipe, t, result.run_id, result.usage, result.cost_usd, at_ms=now)

        counted = has_tokens(result.usage)
        now = now_ms()
        scripts = [script, self.tenant_usage.add_script] if counted else [script]
        with translate_errors(self._where):
            replies = run_pipeline(self.client, scripts, fill)
        return replies[0], int(replies[3]) if leave_active else None

    def note_waiting(self, ref: RunRef, what: str | None) -> None:
        """Show what the running run waits for in its record and the namespace's index (only
        while it waits: a run that never waits costs nothing here)."""
        k = self.keys
        member = "/".join(ref)
        with translate_errors(self._where):
            pipe = self.client.pipeline(transaction=False)
            if what is None:
                pipe.hdel(k.run(*ref), RunField.WAITING)
                pipe.zrem(k.waiting(), member)
            else:
                pipe.hset(k.run(*ref), RunField.WAITING, what)
                pipe.zadd(k.waiting(), {member: now_ms()}, nx=True)
            pipe.execute()

    def waiting_runs(self) -> list[tuple[RunRef, str]]:
        """The runs that wait now, oldest first (at most 1,000)."""
        with translate_errors(self._where):
            members = [text(m) for m in self.client.zrange(self.keys.waiting(), 0, 999)]
            refs = [RunRef(*m.split("/", 2)) for m in members]
            pipe = self.client.pipeline(transaction=False)
            for ref in refs:
                pipe.hget(self.keys.run(*ref), RunField.WAITING)
            found = pipe.execute()
        return [(ref, text(what)) for ref, what in zip(refs, found, strict=True) if what]

    def drop(self, tenant: str, session_id: str, run_id: str) -> None:
        """Remove a run id from the session queue (an orphan without a record)."""
        with translate_errors(self._where):
            self.client.lrem(self.keys.pending(tenant, session_id), 1, run_id)

    def release_if_idle(self, lease: Lease) -> IdleRelease:
        """Release the lease only when the queue is empty."""
        k = self.keys
        t, s = lease.tenant, lease.session_id
        keys = RELEASE_IF_IDLE.keys(
            lease=k.lease(t, s), pending=k.pending(t, s), released=k.released(t, s)
        )
        argv = RELEASE_IF_IDLE.argv(lease_value=_lease_value(lease), fence=lease.fence)
        with translate_errors(self._where):
            code = self._script(RELEASE_IF_IDLE)(keys=keys, args=argv)
            outcome = IDLE_RELEASE[int(cast(Any, code))]
            if outcome is IdleRelease.RELEASED:
                self._leave_active(t, s)
        return outcome
