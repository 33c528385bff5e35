"""The fleet's model budget on Redis: one script admits a call (its tenant's fair share
included), one settles it (``model_budget.lua`` and ``model_settle.lua`` in
:mod:`tether.persistence.lua`). Every key of a model shares its slot, so a Redis Cluster runs
each script on one node."""

from __future__ import annotations

from typing import Any, cast

import redis

from tether.ids import validate_tenant
from tether.keys import RedisKeys
from tether.persistence.lua import load
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.runs.limits.base import Admission, WaitReason
from tether.runs.limits.shares import DEFAULT_TENANT, WAIT_GRACE_S, call_cost_us
from tether.settings.limits import ModelLimit

ADMIT = load("model_budget")
SETTLE = load("model_settle")
TURN = load("model_share_turn")


class RedisModelBudget:
    """:class:`~tether.runs.limits.base.ModelBudget` for the fleet.

    Args:
        client: a bytes Redis client shared by the worker.
        keys: the key schema (namespace).
        slot_ttl_ms: a slot whose call never settled (its worker died) frees after this long.
        wait_grace_ms: a waiting call that has not asked again this long after the poll it was
            told to make stops counting as waiting (:mod:`~tether.runs.limits.shares`).
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        *,
        slot_ttl_ms: int = 600_000,
        wait_grace_ms: int = int(WAIT_GRACE_S * 1000),
    ) -> None:
        self._client = client
        self._keys = keys
        self._slot_ttl_ms = slot_ttl_ms
        self._wait_grace_ms = wait_grace_ms
        self._where = describe_client(client)
        self._admit = client.register_script(ADMIT.source)
        self._settle = client.register_script(SETTLE.source)
        self._turn = client.register_script(TURN.source)

    def admit(
        self,
        model: str,
        limit: ModelLimit,
        token: str,
        tokens: int,
        *,
        tenant: str = DEFAULT_TENANT,
    ) -> Admission:
        budget, inflight, pause = self._keys.model_budget(model)
        shares, waiting = self._keys.model_shares(model)
        argv = ADMIT.argv(
            token=token,
            tokens=max(0, tokens),
            us_per_request=limit.us_per_request,
            us_per_token=f"{limit.us_per_token:.6f}",
            max_concurrent=limit.concurrent_requests,
            slot_ttl_ms=self._slot_ttl_ms,
            tenant=validate_tenant(tenant),
            weight=f"{limit.weight(tenant):.6f}",
            credit_us=int(limit.idle_credit_s * 1_000_000),
            grace_ms=self._wait_grace_ms,
            call_cost_us=f"{call_cost_us(limit, tokens):.3f}",
        )
        with translate_errors(self._where):
            keys = ADMIT.keys(
                budget=budget, inflight=inflight, pause=pause, shares=shares, waiting=waiting
            )
            reply = ADMIT.reply(cast(list[Any], self._admit(keys=keys, args=argv)))
        if int(reply["admitted"]):
            return Admission(True)
        reason = reply["reason"]
        why = reason.decode() if isinstance(reason, bytes) else str(reason)
        return Admission(False, int(reply["wait_us"]) / 1e6, cast(WaitReason, why))

    def leaves_to_others(self, model: str, limit: ModelLimit, tenant: str) -> bool:
        shares, waiting = self._keys.model_shares(model)
        argv = TURN.argv(
            tenant=validate_tenant(tenant),
            credit_us=int(limit.idle_credit_s * 1_000_000),
            recent_ms=self._wait_grace_ms,
        )
        with translate_errors(self._where):
            found = self._turn(keys=TURN.keys(shares=shares, waiting=waiting), args=argv)
        return bool(int(cast(Any, found)))

    def settle(self, model: str, limit: ModelLimit, token: str, token_delta: int) -> None:
        budget, inflight, _ = self._keys.model_budget(model)
        argv = SETTLE.argv(
            token=token, token_delta=token_delta, us_per_token=f"{limit.us_per_token:.6f}"
        )
        with translate_errors(self._where):
            self._settle(keys=SETTLE.keys(budget=budget, inflight=inflight), args=argv)

    def pause(self, model: str, seconds: float) -> None:
        _, _, pause = self._keys.model_budget(model)
        ms = max(1, int(seconds * 1000))
        with translate_errors(self._where):
            # GT-like: a shorter pause never cuts a longer one short
            current = int(cast(Any, self._client.pttl(pause)))
            if current < ms:
                self._client.set(pause, b"1", px=ms)
