"""The webhook dead letters for operators: list them, and redeliver one (queued to the workers
again, with a fresh count of attempts). ``tether webhooks dead | redeliver`` and the console."""

from __future__ import annotations

from tether.errors import UsageError
from tether.keys import RedisKeys
from tether.producer.client import Producer
from tether.runs.webhooks.dead import WebhookDeadLetters
from tether.runs.webhooks.delivery import WEBHOOK_TASK, Delivery
from tether.runs.webhooks.pending import PendingDeliveries, pending_ttl_s


def dead_letters(producer: Producer) -> WebhookDeadLetters:
    """The dead letters of the producer's namespace."""
    return WebhookDeadLetters(producer.redis, RedisKeys(producer.settings.namespace))


def redeliver(producer: Producer, delivery_id: str, *, tenant: str | None = None) -> Delivery:
    """Queue dead letter ``delivery_id`` (of ``tenant``, when given) for delivery again, with a
    fresh count of attempts, and take it off the dead letters.

    Raises:
        UsageError: no such dead letter (of that tenant).
    """
    letters = dead_letters(producer)
    dead = letters.get(delivery_id)
    if dead is None or (tenant is not None and dead.tenant != tenant):
        raise UsageError(f"no dead webhook {delivery_id!r}; 'tether webhooks dead' lists them")
    again = dead.model_copy(update={"attempts": 0, "last_error": None, "died_at_ms": None})
    settings = producer.settings
    # stored where the workers look it up: a task names a delivery, never carries one
    keys = RedisKeys(settings.namespace)
    pending = PendingDeliveries(producer.redis, keys, pending_ttl_s(settings))
    pending.release(again.id, max(dead.attempts, settings.webhook_max_attempts))
    pending.put(again)
    producer.celery.send_task(WEBHOOK_TASK, kwargs={"delivery_id": again.id}, queue=settings.queue)
    letters.remove(delivery_id)
    return again
