"""Whose word a run message carries: the registered-only rule (``TETHER_REGISTERED_RUNS_ONLY``).

A run message travels through the broker, which every tenant's producer may write to, so the
tenant named in its body is only a claim. With per-tenant Redis users (docs/trust-model.md),
what a tenant *can* prove is its run record: only its own credential (or the namespace-wide
one) can write keys under ``<ns>:{<tenant>/``, and the producer registers every run there (the
submit script) before it publishes the message. In registered-only mode a worker treats the
message as a wake-up and nothing more: it runs a run only when that run's record already
exists in the named tenant's keyspace, and it never registers a request on delivery. A message
for a run nobody registered is refused here, logged and counted, and nothing is written
(no record, no session, no event).
"""

from __future__ import annotations

import logging

from tether.observability.metrics import message_refused
from tether.runs.contract import RunRef
from tether.runs.queue.base import RunQueue

log = logging.getLogger(__name__)

#: The ``reason`` label of ``tether_messages_refused`` for a run nobody registered.
UNREGISTERED = "unregistered"
#: The ``reason`` label for a message too malformed to name a registered run.
MALFORMED = "malformed"


def registered(runs: RunQueue, ref: RunRef) -> bool:
    """True when ``ref`` has a run record (its tenant's producer registered it); otherwise log
    and count the refusal.

    The message's ids were validated (``parse_wire``), so they are safe to log.
    """
    if runs.get(ref) is not None:
        return True
    refuse(
        UNREGISTERED,
        f"refused run message {ref.run_id} for tenant {ref.tenant!r}, session "
        f"{ref.session_id!r}: no run of that id is registered in that tenant's keyspace "
        "(TETHER_REGISTERED_RUNS_ONLY: a worker acts only for runs a producer of that tenant "
        "submitted with its own credential); nothing was written",
    )
    return False


def refuse(reason: str, message: str) -> None:
    """Log and count one refused message."""
    log.warning(message)
    message_refused(reason)
