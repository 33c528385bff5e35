"""Webhooks: a signed JSON call when a run completes, fails or waits for a person (see
docs/webhooks.md). No Celery here: the deliveries' retries are Celery tasks in
:mod:`tether.worker.webhooks`.

Receivers need only :func:`verify_webhook` (``from tether.runs.webhooks import verify_webhook``).
"""

from tether.runs.webhooks.signing import (
    ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    sign_webhook,
    verify_webhook,
)

__all__ = [
    "ID_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "sign_webhook",
    "verify_webhook",
]
