"""The fleet's model budget on Redis: one script admits a call, one settles it
(``model_budget.lua`` and ``model_settle.lua`` in :mod:`tether.persistence.lua`). Every key of a
model shares its slot, so a Redis Cluster runs each script on one node."""

from __future__ import annotations

from typing import Any, cast

import redis

from tether.keys import RedisKeys
from tether.persistence.lua import load
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.runs.limits.base import Admission, WaitReason
from tether.settings.limits import ModelLimit

ADMIT = load("model_budget")
SETTLE = load("model_settle")


class RedisModelBudget:
    """:class:`~tether.runs.limits.base.ModelBudget` for the fleet.

    Args:
        client: a bytes Redis client shared by the worker.
        keys: the key schema (namespace).
        slot_ttl_ms: a slot whose call never settled (its worker died) frees after this long.
    """

    def __init__(self, client: redis.Redis, keys: RedisKeys, *, slot_ttl_ms: int = 600_000) -> None:
        self._client = client
        self._keys = keys
        self._slot_ttl_ms = slot_ttl_ms
        self._where = describe_client(client)
        self._admit = client.register_script(ADMIT.source)
        self._settle = client.register_script(SETTLE.source)

    def admit(self, model: str, limit: ModelLimit, token: str, tokens: int) -> Admission:
        budget, inflight, pause = self._keys.model_budget(model)
        argv = ADMIT.argv(
            token=token,
            tokens=max(0, tokens),
            us_per_request=limit.us_per_request,
            us_per_token=f"{limit.us_per_token:.6f}",
            max_concurrent=limit.concurrent_requests,
            slot_ttl_ms=self._slot_ttl_ms,
        )
        with translate_errors(self._where):
            keys = ADMIT.keys(budget=budget, inflight=inflight, pause=pause)
            reply = ADMIT.reply(cast(list[Any], self._admit(keys=keys, args=argv)))
        if int(reply["admitted"]):
            return Admission(True)
        reason = reply["reason"]
        why = reason.decode() if isinstance(reason, bytes) else str(reason)
        return Admission(False, int(reply["wait_us"]) / 1e6, cast(WaitReason, why))

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
