"""Signing webhooks and verifying them: HMAC-SHA256 over ``<timestamp>.<body>``.

Headers of every delivery:

- ``Tether-Webhook-Id``: the delivery's id (the same on every attempt and redelivery: dedupe
  on it),
- ``Tether-Webhook-Timestamp``: Unix seconds of this attempt,
- ``Tether-Webhook-Signature``: ``v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>``.

A receiver recomputes the signature over the raw body and refuses a timestamp older (or newer)
than its tolerance, so a captured delivery cannot be replayed later.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

from tether.errors import InvalidSignature

ID_HEADER = "Tether-Webhook-Id"
TIMESTAMP_HEADER = "Tether-Webhook-Timestamp"
SIGNATURE_HEADER = "Tether-Webhook-Signature"
SCHEME = "v1"
#: What receivers accept by default: five minutes either way.
DEFAULT_TOLERANCE_S = 300.0


def _digest(body: bytes, secret: str, timestamp: int) -> str:
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign_webhook(
    body: bytes, secret: str, delivery_id: str, timestamp: int | None = None
) -> dict[str, str]:
    """The headers of a delivery of ``body`` signed with ``secret`` at ``timestamp`` (now)."""
    stamp = int(time.time()) if timestamp is None else timestamp
    return {
        ID_HEADER: delivery_id,
        TIMESTAMP_HEADER: str(stamp),
        SIGNATURE_HEADER: f"{SCHEME}={_digest(body, secret, stamp)}",
    }


def verify_webhook(
    body: bytes | str,
    headers: Mapping[str, str],
    secret: str,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
) -> dict[str, Any]:
    """Check a delivery and return its JSON body.

    Args:
        body: the request body exactly as received (bytes, or text as UTF-8).
        headers: the request headers (any capitalisation).
        secret: the tenant's secret (``TETHER_WEBHOOK_SECRETS``).
        tolerance_s: the oldest (and most future) timestamp accepted, in seconds.

    Raises:
        InvalidSignature: a header is missing, the timestamp is outside the tolerance, or the
            signature does not match; the message says which.
    """
    raw = body.encode() if isinstance(body, str) else body
    lower = {k.lower(): v for k, v in headers.items()}
    stamp_text = lower.get(TIMESTAMP_HEADER.lower())
    signature = lower.get(SIGNATURE_HEADER.lower())
    if not stamp_text or not signature:
        raise InvalidSignature(
            f"webhook without {TIMESTAMP_HEADER} or {SIGNATURE_HEADER}: not from Tether; refuse it"
        )
    try:
        stamp = int(stamp_text)
    except ValueError:
        raise InvalidSignature(
            f"webhook timestamp {stamp_text[:40]!r} is not Unix seconds"
        ) from None
    age_s = time.time() - stamp
    if abs(age_s) > tolerance_s:
        raise InvalidSignature(
            f"webhook timestamp {stamp} is {age_s:.0f} s from now, outside the tolerance of "
            f"{tolerance_s:g} s: a replay or a wrong clock; refuse it"
        )
    expected = f"{SCHEME}={_digest(raw, secret, stamp)}"
    if not any(hmac.compare_digest(expected, part.strip()) for part in signature.split(",")):
        raise InvalidSignature(
            "webhook signature does not match the body: wrong secret or a changed body; refuse it"
        )
    doc: dict[str, Any] = json.loads(raw)
    return doc
