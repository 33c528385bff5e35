"""Argument checks shared by the lease managers (done before any I/O)."""

from __future__ import annotations

from tether.errors import InvalidInput
from tether.ids import validate_id, validate_tenant

MAX_OWNER_LENGTH = 200


def validate_acquire(tenant: str, session_id: str, owner: str, ttl_ms: int) -> None:
    """Validate ids, owner (1-200 printable characters) and ``ttl_ms >= 1``."""
    validate_tenant(tenant)
    validate_id(session_id)
    if (
        not isinstance(owner, str)
        or not 0 < len(owner) <= MAX_OWNER_LENGTH
        or not owner.isprintable()
    ):
        raise InvalidInput(
            f"lease owner {owner!r} is not allowed; use 1-{MAX_OWNER_LENGTH} printable "
            "characters, e.g. '<worker>:<pid>:<run_id>'"
        )
    validate_ttl(ttl_ms)


def validate_ttl(ttl_ms: int) -> None:
    """A TTL is an int of milliseconds >= 1."""
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms < 1:
        raise InvalidInput(f"ttl_ms {ttl_ms!r} is not allowed; pass an int of milliseconds >= 1")
