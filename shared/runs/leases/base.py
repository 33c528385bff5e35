"""The lease seam: at most one holder per session, with a fencing token per grant.

A lease is granted with a TTL and renewed by its holder's heartbeat. Each grant increments the
session's fencing token, so writes of a holder that was paused past its TTL can be rejected by the
stream and the store. Implementations live in :mod:`tether.runs.leases` (``memory``, ``redis``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Lease:
    """A granted lease: who holds it and its fencing token.

    ``takeover`` is True when the previous grant was not released but expired: its holder may
    still be running (frozen, or stuck in a tool) and may yet try to commit, so the new holder
    fences the session head before it relies on it (see :func:`tether.worker.engine.cycle.drain`).
    """

    tenant: str
    session_id: str
    owner: str
    fence: int
    takeover: bool = False


@runtime_checkable
class LeaseManager(Protocol):
    """Per-session mutual exclusion with fencing tokens."""

    def acquire(self, tenant: str, session_id: str, owner: str, ttl_ms: int) -> Lease | None:
        """Grant the lease to ``owner`` if free (or expired); None when another holder has it."""

    def renew(self, lease: Lease, ttl_ms: int) -> bool:
        """Extend the lease; False when it was lost (expired and taken, or released)."""

    def release(self, lease: Lease) -> bool:
        """Release the lease if still held by this grant; True when released."""

    def current_fence(self, tenant: str, session_id: str) -> int:
        """The newest fencing token granted for the session (0 when never leased)."""

    def holder(self, tenant: str, session_id: str) -> str | None:
        """The current owner, or None when free."""

    def abandoned(self, tenant: str, session_id: str) -> bool:
        """True when the session's last grant is no longer held and was never released: its
        holder died (or froze) holding it, so whatever it was draining needs a new holder."""
