"""Webhooks on the worker: :func:`notify_finished` stores a run's delivery once its result is
committed and sends a ``tether.webhook`` task naming it, and that task delivers it (see
:mod:`tether.runs.webhooks`), sending itself again with a doubling countdown after a failure,
until ``TETHER_WEBHOOK_MAX_ATTEMPTS``; then the delivery joins the dead letters (``tether
webhooks dead | redeliver``).

The task carries a delivery's id and nothing else: what is sent, where, and signed with whose
secret comes from the stored delivery (:mod:`tether.runs.webhooks.pending`), which a tenant
cannot write. A message for a delivery nobody stored is refused, and so is one that carries
anything more (a whole delivery, as workers before the stored deliveries sent it), with or
without ``TETHER_REGISTERED_RUNS_ONLY``: the broker takes messages from every tenant, so a
carried delivery would let one tenant choose what another tenant's secret signs. The run never
waits for its webhook: delivering is a task of its own, after the run's finish.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from typing import Any

from tether.keys import RedisKeys
from tether.persistence.redis_conn import redis_from_url
from tether.runs.contract import RunRequest, RunResult
from tether.runs.webhooks.dead import WebhookDeadLetters
from tether.runs.webhooks.delivery import (
    NOTIFIED,
    WEBHOOK_TASK,
    Delivery,
    attempt_delivery,
    backoff_s,
    delivery_for,
    webhook_url,
)
from tether.runs.webhooks.pending import PendingDeliveries, pending_ttl_s
from tether.settings import Settings, load_settings
from tether.worker.app import app
from tether.worker.engine.admission import MALFORMED, refuse

log = logging.getLogger(__name__)

_state: dict[str, Any] = {}
_state_lock = threading.Lock()
#: What a delivery id looks like (``wh-<run id>-<status>``): checked before it names a key.
_DELIVERY_ID = re.compile(r"wh-[A-Za-z0-9_\-]{1,200}")
#: The ``reason`` label of ``tether_messages_refused`` for a webhook task naming no stored
#: delivery, or carrying one in its body.
UNSTORED = "unstored_webhook"
#: The ``reason`` label for a webhook task naming an attempt another task has taken.
DUPLICATE = "duplicate_webhook"


def _attempt_s(settings: Settings) -> float:
    """How long one attempt may take (its request's timeout, with room): how long it is held."""
    return 2 * settings.webhook_timeout_s + 30


def _stores(settings: Settings) -> tuple[PendingDeliveries, WebhookDeadLetters]:
    """This process's deliveries on their way and dead letters (one Redis client per process:
    a forked child makes its own)."""
    with _state_lock:
        if _state.get("pid") != os.getpid():
            client = redis_from_url(settings.effective_redis_url)
            keys = RedisKeys(settings.namespace)
            _state.update(
                pid=os.getpid(),
                pending=PendingDeliveries(client, keys, pending_ttl_s(settings)),
                dead=WebhookDeadLetters(client, keys),
            )
        return _state["pending"], _state["dead"]


def send_delivery(delivery_id: str, queue: str, countdown_s: float | None = None) -> None:
    """Queue an attempt at the stored delivery ``delivery_id`` (after ``countdown_s``)."""
    app.send_task(
        WEBHOOK_TASK, kwargs={"delivery_id": delivery_id}, queue=queue, countdown=countdown_s
    )


def notify_finished(settings: Settings, request: RunRequest, result: RunResult) -> None:
    """The engine's ``on_finished``: store the run's delivery, if it has a webhook, and queue
    its first attempt."""
    if result.status not in NOTIFIED:
        return
    url = webhook_url(settings, request.webhook, request.tenant)
    if url is None:
        return
    delivery = delivery_for(result, url)
    pending, _ = _stores(settings)
    pending.put(delivery)
    send_delivery(delivery.id, settings.queue)


@app.task(name=WEBHOOK_TASK, ignore_result=True)
def webhook_task(*args: Any, delivery_id: Any = None, **carried: Any) -> dict[str, Any]:
    """One attempt at a stored delivery; on failure, the next (or the dead letters).

    A message that carries anything but ``delivery_id`` is refused (see the module docstring):
    ``*args`` and ``**carried`` only catch such messages, so that they are counted rather than
    failing in Celery's call."""
    settings = load_settings()
    pending, dead = _stores(settings)
    current = _stored(pending, delivery_id, args, carried)
    if current is None:
        return {"state": "refused"}
    if not pending.claim(current, _attempt_s(settings)):
        refuse(
            DUPLICATE,
            f"refused webhook task for delivery {current.id!r}: its attempt "
            f"{current.attempts + 1} was taken by another task (a duplicate, or one forged from "
            "an id in the broker's queues); nothing was sent",
        )
        return {"state": "refused"}
    outcome = attempt_delivery(current, settings)
    current = current.model_copy(
        update={"attempts": current.attempts + 1, "last_error": outcome.error}
    )
    if outcome.error is None:
        pending.remove(current.id)
        log.info("webhook %s delivered (attempt %d)", current.id, current.attempts)
        return {"id": current.id, "state": "delivered", "attempts": current.attempts}
    if outcome.final or current.attempts >= settings.webhook_max_attempts:
        dead.add(current, outcome.error)
        pending.remove(current.id)
        log.warning(
            "webhook %s dead after %d attempt(s): %s", current.id, current.attempts, outcome.error
        )
        return {"id": current.id, "state": "dead", "attempts": current.attempts}
    delay_s = backoff_s(settings, current.attempts)
    log.info(
        "webhook %s attempt %d failed (%s); next in %.1f s",
        current.id,
        current.attempts,
        outcome.error,
        delay_s,
    )
    pending.put(current)
    send_delivery(current.id, settings.queue, countdown_s=delay_s)
    return {"id": current.id, "state": "retrying", "attempts": current.attempts}


def _stored(
    pending: PendingDeliveries, delivery_id: Any, args: tuple[Any, ...], carried: dict[str, Any]
) -> Delivery | None:
    """The stored delivery a task names; None, logged and counted, for anything else."""
    if args or carried:
        legacy = "delivery" in carried
        what = "a whole delivery" if legacy else "arguments besides delivery_id"
        refuse(
            UNSTORED if legacy else MALFORMED,
            f"refused webhook task: it carries {what}, and a webhook task names a stored "
            "delivery by id and nothing else (the broker takes messages from every tenant: a "
            "carried delivery would have a worker sign a body of the sender's choosing with "
            "another tenant's secret); nothing was sent",
        )
        return None
    if isinstance(delivery_id, str) and _DELIVERY_ID.fullmatch(delivery_id):
        found = pending.get(delivery_id)
        if found is not None:
            return found
        refuse(
            UNSTORED,
            f"refused webhook task for delivery {delivery_id!r}: no such delivery is on its way "
            "(delivered, dead, expired, or never stored by a worker: a forged task); nothing "
            "was sent",
        )
        return None
    refuse(MALFORMED, "refused webhook task: it names no stored delivery; nothing was sent")
    return None
