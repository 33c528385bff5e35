"""Validation of tenant and session ids, done once, before any I/O.

Ids become parts of S3 keys, file names and Redis keys, so they are restricted to a small,
unambiguous alphabet: ASCII letters, digits, ``-``, ``_``, ``.`` and ``:``; 1 to 128 characters;
not starting with ``.``; no ``..``. Unicode look-alikes, ``/``, whitespace and control characters
are refused rather than normalised, so two different strings can never name one session.
"""

from __future__ import annotations

import re
import uuid

from tether.errors import ConfigurationError, InvalidId

MAX_ID_LENGTH = 128
_ID_RE = re.compile(r"[A-Za-z0-9_\-.:]{1,128}")
ALLOWED_DESCRIPTION = (
    "1-128 ASCII letters, digits, '_', '-', '.' and ':', not starting with '.', without '..'"
)


def validate_id(value: object, *, kind: str = "session id") -> str:
    """Return ``value`` if it is a valid id, else raise :class:`InvalidId` saying what is allowed.

    Args:
        value: the candidate id.
        kind: what the id names, for the message (``"session id"``, ``"tenant"``...).
    """
    if not isinstance(value, str):
        raise InvalidId(
            f"{kind} must be a string, got {type(value).__name__}; use {ALLOWED_DESCRIPTION}"
        )
    shown = value if len(value) <= 40 else value[:40] + "..."
    if not is_valid_id(value):
        raise InvalidId(f"{kind} {shown!r} is not allowed; use {ALLOWED_DESCRIPTION}")
    return value


def is_valid_id(value: object) -> bool:
    """Whether ``value`` passes :func:`validate_id` (for names read back from storage, where
    one that does not is skipped, not an error)."""
    return (
        isinstance(value, str)
        and bool(_ID_RE.fullmatch(value))
        and not (value.startswith(".") or ".." in value)
    )


def validate_tenant(value: object) -> str:
    """Validate a tenant id (same rules as session ids)."""
    return validate_id(value, kind="tenant")


def new_id(prefix: str) -> str:
    """A fresh random id such as ``s-3f2a...`` (valid under :func:`validate_id`)."""
    return f"{prefix}-{uuid.uuid4().hex}"


_MODEL_RE = re.compile(r"[A-Za-z0-9_\-.:/@+]{1,200}")


def validate_model_name(name: object) -> str:
    """``name`` if it can name a model's keys (provider names such as ``meta-llama/Llama-3-8B``
    or ``azure:gpt-4o@eu`` included; no braces, spaces or control characters).

    Raises:
        ConfigurationError: the name has other characters, or is empty or over 200 long.
    """
    if not isinstance(name, str) or not _MODEL_RE.fullmatch(name):
        raise ConfigurationError(
            f"model name {name!r} is not allowed; use 1-200 characters from "
            "[A-Za-z0-9_-.:/@+] (e.g. 'gpt-4o-mini' or 'meta-llama/Llama-3-8B')"
        )
    return name
