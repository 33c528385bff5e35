"""Webhooks on the worker: :func:`notify_finished` sends a ``tether.webhook`` task once a run's
result is committed, and that task delivers it (see :mod:`tether.runs.webhooks`), sending itself
again with a doubling countdown after a failure, until ``TETHER_WEBHOOK_MAX_ATTEMPTS``; then the
delivery joins the dead letters (``tether webhooks dead | redeliver``).

The run never waits for its webhook: delivering is a task of its own, after the run's finish.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import pydantic

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
from tether.settings import Settings, load_settings
from tether.worker.app import app

log = logging.getLogger(__name__)

_state: dict[str, Any] = {}
_state_lock = threading.Lock()


def _dead_letters(settings: Settings) -> WebhookDeadLetters:
    """This process's dead letters (one Redis client per process: a forked child makes its own)."""
    with _state_lock:
        if _state.get("pid") != os.getpid():
            client = redis_from_url(settings.effective_redis_url)
            _state.update(
                pid=os.getpid(), dead=WebhookDeadLetters(client, RedisKeys(settings.namespace))
            )
        dead: WebhookDeadLetters = _state["dead"]
        return dead


def send_delivery(delivery: Delivery, queue: str, countdown_s: float | None = None) -> None:
    """Queue an attempt at ``delivery`` (after ``countdown_s``)."""
    app.send_task(
        WEBHOOK_TASK,
        kwargs={"delivery": delivery.model_dump_json()},
        queue=queue,
        countdown=countdown_s,
        kwargsrepr=f"{{'delivery': <{delivery.id} attempt {delivery.attempts + 1}>}}",
    )


def notify_finished(settings: Settings, request: RunRequest, result: RunResult) -> None:
    """The engine's ``on_finished``: queue the run's webhook, if it has one."""
    if result.status not in NOTIFIED:
        return
    url = webhook_url(settings, request.webhook, request.tenant)
    if url is not None:
        send_delivery(delivery_for(result, url), settings.queue)


@app.task(name=WEBHOOK_TASK, ignore_result=True)
def webhook_task(delivery: Any = None) -> dict[str, Any]:
    """One attempt at a delivery; on failure, the next (or the dead letters)."""
    settings = load_settings()
    try:
        current = Delivery.model_validate_json(delivery if isinstance(delivery, str) else "")
    except pydantic.ValidationError as exc:
        log.error("dropping malformed webhook task: %s", str(exc)[:300])
        return {"state": "dropped"}
    outcome = attempt_delivery(current, settings)
    current = current.model_copy(
        update={"attempts": current.attempts + 1, "last_error": outcome.error}
    )
    if outcome.error is None:
        log.info("webhook %s delivered (attempt %d)", current.id, current.attempts)
        return {"id": current.id, "state": "delivered", "attempts": current.attempts}
    if outcome.final or current.attempts >= settings.webhook_max_attempts:
        _dead_letters(settings).add(current, outcome.error)
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
    send_delivery(current, settings.queue, countdown_s=delay_s)
    return {"id": current.id, "state": "retrying", "attempts": current.attempts}
