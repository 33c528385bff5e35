"""What the recovery sweeper reads and claims on Redis (the
:class:`~tether.runs.queue.base.Recovery` role): the sharded active-session index."""

from __future__ import annotations

from typing import cast

from tether.core.events import now_ms
from tether.persistence.redis_conn import translate_errors
from tether.runs.queue.redis._common import text
from tether.runs.queue.redis._part import RedisQueuePart


class RedisRecovery(RedisQueuePart):
    """Find sessions without progress, and claim the right to wake them."""

    def pending_count(self, tenant: str, session_id: str) -> int:
        """How many runs are queued for the session."""
        with translate_errors(self._where):
            return int(self.client.llen(self.keys.pending(tenant, session_id)))

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
            ((score, text(member)) for reply in replies for member, score in reply),
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
