"""One webhook delivery: its body (built once from the run's result, so every attempt and a
redelivery send the same bytes), one attempt at it (resolved, checked, and sent to the checked
addresses, all within ``TETHER_WEBHOOK_TIMEOUT_S``), and the delay before the next.

Persisted (on its way, :mod:`tether.runs.webhooks.pending`, and in the dead letters) as JSON,
its URL masked (:func:`delivery_for`). Versions:

- 1: ``id``, ``url``, ``tenant``, ``session_id``, ``run_id``, ``status``, ``body``,
  ``attempts``, ``last_error``, ``died_at_ms``. Golden file:
  ``tests/fixtures/webhook_delivery_v1.json``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Literal

import httpcore
from pydantic import BaseModel, ConfigDict

from tether.core.results import RunStatus
from tether.errors import InfrastructureError, InvalidInput
from tether.runs.contract import RunResult
from tether.runs.webhooks.addresses import Resolver, check_destination, system_resolver
from tether.runs.webhooks.signing import sign_webhook
from tether.runs.webhooks.transport import post
from tether.settings import Settings
from tether.settings.checks import mask_url, url_credential

#: The Celery task that makes one attempt (``tether.worker.webhooks``).
WEBHOOK_TASK = "tether.webhook"
#: The statuses a webhook is sent for: the run ended, or it waits for a person.
NOTIFIED = frozenset(
    {
        RunStatus.COMPLETED,
        RunStatus.FAILED,
        RunStatus.WAITING,
        RunStatus.CANCELLED,
        RunStatus.INTERRUPTED,
    }
)
#: The output summary: the first characters of the output (or the error message).
SUMMARY_CHARS = 1_000
#: The longest delay between two attempts (s).
MAX_BACKOFF_S = 3_600.0


class Delivery(BaseModel):
    """A webhook to deliver (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Literal[1] = 1
    id: str
    url: str
    tenant: str
    session_id: str
    run_id: str
    status: str
    body: str
    attempts: int = 0
    last_error: str | None = None
    died_at_ms: int | None = None


def delivery_for(result: RunResult, url: str) -> Delivery:
    """The delivery announcing ``result`` to ``url``; its id is the same for the same run and
    status, so a receiver dedupes a repeated announcement on ``Tether-Webhook-Id``."""
    delivery_id = f"wh-{result.run_id}-{result.status.value.lower()}"
    text = result.output if result.output is not None else result.error_message
    body = {
        "id": delivery_id,
        "type": f"run.{result.status.value.lower()}",
        "run_id": result.run_id,
        "request_id": result.request_id,
        "session_id": result.session_id,
        "tenant": result.tenant,
        "status": result.status.value,
        "output_summary": None if text is None else text[:SUMMARY_CHARS],
        "error_type": result.error_type,
        "usage": result.usage.model_dump(mode="json"),
        "steps": result.steps,
        "pending": [call.model_dump(mode="json") for call in result.pending],
        "created_at_ms": int(time.time() * 1000),
    }
    return Delivery(
        id=delivery_id,
        # at rest without its credential (a TETHER_WEBHOOK_URLS entry may hold one; a run's own
        # URL may not): each attempt takes it from the settings again (_destination). A URL
        # without one is kept byte for byte (masking re-encodes its query)
        url=url if url_credential(url) is None else mask_url(url),
        tenant=result.tenant,
        session_id=result.session_id,
        run_id=result.run_id,
        status=result.status.value,
        body=json.dumps(body, separators=(",", ":")),
    )


@dataclass(frozen=True)
class Attempt:
    """How one attempt went: ``error`` None when delivered; ``final`` when retrying is
    pointless (a refused address, no secret)."""

    error: str | None
    final: bool = False


def attempt_delivery(
    delivery: Delivery, settings: Settings, *, resolve: Resolver = system_resolver
) -> Attempt:
    """POST ``delivery`` once, signed with its tenant's secret; any 2xx is delivered.

    The whole attempt (resolving the host, connecting, sending, reading the answer) has
    ``TETHER_WEBHOOK_TIMEOUT_S``, one monotonic deadline. The host is resolved
    and checked again here (DNS may have changed since the run was submitted) with ``resolve``,
    and the connection goes to the very addresses checked. Redirects are not followed (they
    could lead to a refused address), and at most a few KiB of the answer's body are read.
    """
    timeout_s = settings.webhook_timeout_s
    deadline = time.monotonic() + timeout_s
    url = _destination(delivery, settings)
    try:
        destination = check_destination(
            url, allow_private=settings.webhook_allow_private, resolve=resolve, timeout_s=timeout_s
        )
    except InvalidInput as exc:
        return Attempt(str(exc), final=True)
    except InfrastructureError as exc:  # DNS may come back: retry
        return Attempt(str(exc))
    secret = settings.webhook_secret_for(delivery.tenant)
    if secret is None:
        return Attempt(
            f"no webhook secret for tenant {delivery.tenant!r}: set TETHER_WEBHOOK_SECRETS on "
            "the workers, then redeliver",
            final=True,
        )
    body = delivery.body.encode()
    headers = {"Content-Type": "application/json", "User-Agent": "tether-webhooks/1"}
    headers.update(sign_webhook(body, secret, delivery.id))
    try:
        status = post(url, body, headers, destination.addresses, deadline)
    except httpcore.TimeoutException:
        return Attempt(
            f"timed out after {timeout_s:g} s (TETHER_WEBHOOK_TIMEOUT_S, the whole attempt)"
        )
    except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
        return Attempt(f"{type(exc).__name__}: {exc}"[:500])
    if 200 <= status < 300:
        return Attempt(None)
    return Attempt(f"HTTP {status}")


def _destination(delivery: Delivery, settings: Settings) -> str:
    """Where ``delivery`` goes: the tenant's ``TETHER_WEBHOOK_URLS`` entry when its URL is that
    entry with the credential masked, else its URL as stored (one whose credential the settings
    no longer give is sent masked, and the receiver's refusal says so in the dead letter)."""
    configured = settings.webhook_url_for(delivery.tenant)
    if (
        configured is not None
        and url_credential(configured) is not None
        and mask_url(configured) == delivery.url
    ):
        return configured
    return delivery.url


def backoff_s(settings: Settings, attempts: int) -> float:
    """The delay after the ``attempts``-th failed attempt: ``TETHER_WEBHOOK_BACKOFF_S``,
    doubling, at most an hour."""
    return float(min(MAX_BACKOFF_S, settings.webhook_backoff_s * 2 ** max(0, attempts - 1)))


def webhook_url(settings: Settings, request_webhook: str | None, tenant: str) -> str | None:
    """Where a run's webhook goes: its own option, else its tenant's setting, else nowhere."""
    return request_webhook or settings.webhook_url_for(tenant)
