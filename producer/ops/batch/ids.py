"""Ids derived from a batch and its cases: stable across runs, which makes a batch resumable.

The session of a case is ``<batch>:<case>`` (unless the case names its own ``session_id``) and
the request id (idempotency key) of its turn ``n`` is ``<batch>:<case>:<n>``. Epoch ``k > 0`` of
a case runs in its own fresh session ``<batch>:<case>:e<k>`` with request ids
``<batch>:<case>:e<k>:<n>``, and a retry (``tether batch retry``, attempt ``a > 0``) in
``...:e<k>r<a>``: epoch 0 keeps the ids of a batch run once, so a batch run with ``--epochs 1``
and then ``--epochs 3`` adds two epochs and re-runs nothing. A case id that
cannot be part of an id (characters outside :mod:`tether.ids`' alphabet, or too long), or that
holds ``:``, is replaced by ``h-<sha256 prefix>`` of it. Batch ids leave out ``:``, so ids of two
batches never collide; case parts leave it out too, so a case part never spells another case's
suffixed id (case ``x:e1`` would otherwise run in epoch 1 of case ``x``'s session, with its
request ids). Case ids without ``:`` keep the ids they always had.
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
    """The case id itself when it can be part of an id and holds no ``:``, else ``h-<hash>``.

    ``:`` separates the suffixes (epoch, retry, turn): a case part holding it could spell
    another case's suffixed id (``x:e1`` is epoch 1 of ``x``), so it is hashed like an id that
    is not allowed at all.
    """
    if ":" not in case_id:
        try:
            return validate_id(case_id)
        except InvalidId:
            pass
    return "h-" + hashlib.sha256(case_id.encode()).hexdigest()[:32]


def _fit(candidate: str, batch_id: str, case_id: str, suffix: str) -> str:
    try:
        return validate_id(candidate)
    except InvalidId:  # too long: hash the case part
        hashed = "h-" + hashlib.sha256(case_id.encode()).hexdigest()[:32]
        return validate_id(f"{batch_id}:{hashed}{suffix}")


def _unit(epoch: int, attempt: int) -> str:
    """The id suffix of an epoch and retry attempt (empty for the first run of epoch 0)."""
    if epoch == 0 and attempt == 0:
        return ""
    return f":e{epoch}" + (f"r{attempt}" if attempt else "")


def case_session_id(batch_id: str, case: BatchCase, epoch: int = 0, attempt: int = 0) -> str:
    """The session a case runs in: its own ``session_id``, else ``<batch>:<case>``; other
    epochs and retries add ``:e<epoch>[r<attempt>]`` (a fresh session each)."""
    unit = _unit(epoch, attempt)
    if case.session_id is not None:
        return validate_id(case.session_id + unit)
    return _fit(f"{batch_id}:{_case_part(case.id)}{unit}", batch_id, case.id, unit)


def case_request_id(
    batch_id: str, case: BatchCase, turn: int, epoch: int = 0, attempt: int = 0
) -> str:
    """The idempotency key of turn ``turn`` of a case: ``<batch>:<case>[:e<k>[r<a>]]:<turn>``."""
    suffix = f"{_unit(epoch, attempt)}:{turn}"
    return _fit(f"{batch_id}:{_case_part(case.id)}{suffix}", batch_id, case.id, suffix)


__all__ = ["case_request_id", "case_session_id", "check_batch_id", "derive_batch_id"]
