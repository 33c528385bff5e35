"""Ids derived from a batch and its cases: stable across runs, which makes a batch resumable.

The session of a case is ``<batch>:<case>`` (unless the case names its own ``session_id``) and
the request id (idempotency key) of its turn ``n`` is ``<batch>:<case>:<n>``. A case id that
cannot be part of an id (characters outside :mod:`tether.ids`' alphabet, or too long) is replaced
by ``h-<sha256 prefix>`` of it. Batch ids leave out ``:``, so ids of two batches never collide.
"""

from __future__ import annotations

import hashlib
import re

from tether.errors import InvalidId
from tether.ids import validate_id
from tether.producer.ops.batch.cases import BatchCase

_BATCH_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def check_batch_id(batch_id: str) -> str:
    """Validate a batch id: 1-64 characters from ``[A-Za-z0-9_-]``.

    The alphabet leaves out ``:``, which separates the batch id from the case id in derived
    ids, so two batches can never derive the same session or request id.
    """
    if not isinstance(batch_id, str) or not _BATCH_ID_RE.fullmatch(batch_id):
        raise InvalidId(
            f"batch id {batch_id!r} is not allowed; use 1-64 characters of [A-Za-z0-9_-]"
        )
    return batch_id


def derive_batch_id(content_sha256: str, default_agent: str | None) -> str:
    """The batch id of a cases file when none is given: stable for the same file and agent."""
    digest = hashlib.sha256(f"{content_sha256}\0{default_agent or ''}".encode()).hexdigest()
    return f"batch-{digest[:16]}"


def _case_part(case_id: str) -> str:
    """The case id itself when it can be part of an id, else ``h-<hash>``."""
    try:
        return validate_id(case_id)
    except InvalidId:
        return "h-" + hashlib.sha256(case_id.encode()).hexdigest()[:32]


def _fit(candidate: str, batch_id: str, case_id: str, suffix: str) -> str:
    try:
        return validate_id(candidate)
    except InvalidId:  # too long: hash the case part
        hashed = "h-" + hashlib.sha256(case_id.encode()).hexdigest()[:32]
        return validate_id(f"{batch_id}:{hashed}{suffix}")


def case_session_id(batch_id: str, case: BatchCase) -> str:
    """The session a case runs in: its own ``session_id``, else ``<batch>:<case>``."""
    if case.session_id is not None:
        return case.session_id
    return _fit(f"{batch_id}:{_case_part(case.id)}", batch_id, case.id, "")


def case_request_id(batch_id: str, case: BatchCase, turn: int) -> str:
    """The idempotency key of turn ``turn`` of a case: ``<batch>:<case>:<turn>``."""
    suffix = f":{turn}"
    return _fit(f"{batch_id}:{_case_part(case.id)}{suffix}", batch_id, case.id, suffix)


__all__ = ["case_request_id", "case_session_id", "check_batch_id", "derive_batch_id"]
