"""The budget check of a submission on ``redis.asyncio``: the asyncio twin of
:class:`~tether.runs.usage.redis.RedisTenantAdmission`, the same script with the same KEYS and
ARGV and the same reading of its reply (:func:`~tether.runs.usage.redis.admit_call`,
:func:`~tether.runs.usage.redis.verdict_of`)."""

from __future__ import annotations

from typing import Any, cast

import redis.asyncio

from tether.keys import RedisKeys
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.runs.usage.base import Verdict
from tether.runs.usage.redis import ADMIT, admit_call, verdict_of
from tether.settings.budgets import TenantBudget


class AsyncRedisTenantAdmission:
    """The budget check of a submission, ``tenant_admit.lua`` (asyncio).

    Args:
        client: a bytes asyncio client.
        keys: the key schema (namespace).
    """

    def __init__(self, client: redis.asyncio.Redis, keys: RedisKeys) -> None:
        self._keys = keys
        self._where = describe_client(client)
        self._admit = client.register_script(ADMIT.source)

    async def admit(self, tenant: str, budget: TenantBudget, *, runs: int = 1) -> Verdict:
        """See :meth:`~tether.runs.usage.base.TenantUsage.admit`."""
        keys, argv = admit_call(self._keys, tenant, budget, runs)
        with translate_errors(self._where):
            return verdict_of(cast(list[Any], await self._admit(keys=keys, args=argv)))
