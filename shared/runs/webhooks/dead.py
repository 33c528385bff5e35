"""The dead letters: deliveries that ran out of attempts, kept in Redis for an operator
(``tether webhooks dead | redeliver``, the console) until redelivered."""

from __future__ import annotations

import time
from typing import Any

from tether.keys import RedisKeys
from tether.runs.webhooks.delivery import Delivery

#: Dead letters kept at most (the oldest go first).
MAX_DEAD_LETTERS = 10_000


class WebhookDeadLetters:
    """The dead letters of one namespace on a Redis client (``decode_responses`` either way)."""

    def __init__(self, client: Any, keys: RedisKeys) -> None:
        self._client = client
        self._hash, self._order = keys.webhooks_dead()

    def add(self, delivery: Delivery, error: str) -> Delivery:
        """Record ``delivery`` as dead after its last attempt failed with ``error``."""
        now_ms = int(time.time() * 1000)
        dead = delivery.model_copy(update={"last_error": error, "died_at_ms": now_ms})
        pipe = self._client.pipeline(transaction=False)
        pipe.hset(self._hash, dead.id, dead.model_dump_json())
        pipe.zadd(self._order, {dead.id: now_ms})
        pipe.execute()
        self._trim()
        return dead

    def list(self, tenant: str | None = None, limit: int = 100) -> list[Delivery]:
        """The newest dead letters first (of ``tenant`` only, when given)."""
        ids = self._client.zrevrange(self._order, 0, -1)
        found = []
        for text in self._client.hmget(self._hash, ids) if ids else []:
            if text is None:
                continue
            delivery = Delivery.model_validate_json(text)
            if tenant is None or delivery.tenant == tenant:
                found.append(delivery)
            if len(found) >= limit:
                break
        return found

    def get(self, delivery_id: str) -> Delivery | None:
        """One dead letter, or None."""
        text = self._client.hget(self._hash, delivery_id)
        return None if text is None else Delivery.model_validate_json(text)

    def remove(self, delivery_id: str) -> bool:
        """Forget one dead letter; False if there was none."""
        pipe = self._client.pipeline(transaction=False)
        pipe.hdel(self._hash, delivery_id)
        pipe.zrem(self._order, delivery_id)
        removed, _ = pipe.execute()
        return bool(removed)

    def _trim(self) -> None:
        excess = int(self._client.zcard(self._order)) - MAX_DEAD_LETTERS
        if excess > 0:
            oldest = self._client.zrange(self._order, 0, excess - 1)
            pipe = self._client.pipeline(transaction=False)
            pipe.hdel(self._hash, *oldest)
            pipe.zrem(self._order, *oldest)
            pipe.execute()
