"""Deliveries on their way: kept in Redis under the namespace, where tenants cannot write, and
named by id in the ``tether.webhook`` task.

A task message travels through the broker, which every tenant's producer may write to, so a
delivery carried in a message's body is only a claim: tenant bob could publish one naming
tenant acme, with bob's text and bob's URL, and have the worker sign it with acme's secret. So
the worker that commits a run stores the run's delivery here (``<p>:{~webhooks}:d:<id>``; the
per-tenant ACL users of docs/trust-model.md do not reach ``{~webhooks}``) and the task carries
only its id: a task for a delivery nobody stored is refused, and nothing is sent or written.
Each attempt's count is kept here too, so no message can reset or forge it.
"""

from __future__ import annotations

from typing import Any

from tether.keys import RedisKeys
from tether.runs.webhooks.delivery import MAX_BACKOFF_S, Delivery
from tether.settings import Settings

#: Kept after the last write at least this long beyond the retries' worst case (s).
PENDING_SLACK_S = 86_400


def pending_ttl_s(settings: Settings) -> int:
    """How long a stored delivery outlives its last attempt: every retry at the longest backoff
    and timeout, plus a day for queues that lag."""
    worst_s = settings.webhook_max_attempts * (MAX_BACKOFF_S + settings.webhook_timeout_s)
    return int(worst_s) + PENDING_SLACK_S


class PendingDeliveries:
    """The deliveries on their way of one namespace, on a Redis client."""

    def __init__(self, client: Any, keys: RedisKeys, ttl_s: int) -> None:
        self._client = client
        self._keys = keys
        self._ttl_s = ttl_s

    def put(self, delivery: Delivery) -> None:
        """Store ``delivery`` (its attempts so far), replacing one of the same id."""
        self._client.set(
            self._keys.webhook_pending(delivery.id), delivery.model_dump_json(), ex=self._ttl_s
        )

    def get(self, delivery_id: str) -> Delivery | None:
        """The stored delivery ``delivery_id``, or None (never stored, delivered, dead, expired)."""
        text = self._client.get(self._keys.webhook_pending(delivery_id))
        return None if text is None else Delivery.model_validate_json(text)

    def claim(self, delivery: Delivery, ttl_s: float) -> bool:
        """Take ``delivery``'s next attempt (its stored attempt count) for this task: True once
        per attempt, False for every other task naming it meanwhile (a duplicate, or a task
        another tenant forged from an id read in the broker's queues), so no task makes more
        attempts than ``TETHER_WEBHOOK_MAX_ATTEMPTS``. The claim expires after ``ttl_s`` (one
        attempt's time): a task redelivered after its worker died mid-attempt goes on."""
        return bool(
            self._client.set(
                self._claim_key(delivery.id, delivery.attempts),
                b"1",
                nx=True,
                ex=max(1, int(ttl_s)),
            )
        )

    def release(self, delivery_id: str, attempts: int) -> None:
        """Drop the claims of ``delivery_id``'s first ``attempts`` attempts: it is delivered
        again from its first (``tether webhooks redeliver``), maybe within a claim's time."""
        keys = [self._claim_key(delivery_id, n) for n in range(attempts + 1)]
        self._client.delete(*keys)

    def _claim_key(self, delivery_id: str, attempt: int) -> str:
        return f"{self._keys.webhook_pending(delivery_id)}:a{attempt}"

    def remove(self, delivery_id: str) -> None:
        """Forget ``delivery_id`` (delivered, or moved to the dead letters)."""
        self._client.delete(self._keys.webhook_pending(delivery_id))
