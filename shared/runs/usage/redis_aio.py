"""The budget check of a submission on ``redis.asyncio``: the asyncio twin of
:class:`~tether.runs.usage.redis.RedisTenantAdmission`, the same reads in one pipelined round
trip and the same decision (:func:`~tether.runs.usage.redis.queue_admit_reads`,
:func:`~tether.runs.usage.redis.admit_verdict`)."""

from __future__ import annotations

import redis.asyncio

from tether.keys import RedisKeys
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.runs.usage.base import Verdict
from tether.runs.usage.redis import admit_verdict, queue_admit_reads
from tether.settings.budgets import TenantBudget


class AsyncRedisTenantAdmission:
    """The budget check of a submission (asyncio).

    Args:
        client: a bytes asyncio client.
        keys: the key schema (namespace).
    """

    def __init__(self, client: redis.asyncio.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._where = describe_client(client)

    async def admit(self, tenant: str, budget: TenantBudget, *, runs: int = 1) -> Verdict:
        """See :meth:`~tether.runs.usage.base.TenantUsage.admit`."""
        with translate_errors(self._where):
            pipe = self._client.pipeline(transaction=False)
            queue_admit_reads(pipe, self._keys, tenant)
            replies = await pipe.execute()
        return admit_verdict(replies, budget, runs)
