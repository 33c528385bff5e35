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
from tether.runs.contract import RunRef, RunRequest
from tether.runs.queue.base import RunQueue, RunView

log = logging.getLogger(__name__)

#: The ``reason`` label of ``tether_messages_refused`` for a run nobody registered.
UNREGISTERED = "unregistered"
#: The ``reason`` label for a message too malformed to name a registered run.
MALFORMED = "malformed"
#: The ``reason`` label for a run record whose request names another run than its key does.
MISMATCHED = "mismatched"


def registered(runs: RunQueue, ref: RunRef, *, request_id: str | None = None) -> bool:
    """True when ``ref`` has a run record (its tenant's producer registered it), and, when
    ``request_id`` is given, one registered under that request id; otherwise log and count the
    refusal.

    ``request_id`` is for messages that name a run only through an id of their own (a canvas
    task's ``run-<task id>``): another tenant could give its task the id of a run it read from
    the broker, and have it treated as its own (its result published to the shared result
    backend). The message's ids were validated (``parse_wire``), so they are safe to log.
    """
    view = runs.get(ref)
    if view is not None:
        if view.request is None:
            return True
        if request_id is not None and view.request.request_id != request_id:
            refuse(
                MISMATCHED,
                f"refused task for run {ref.run_id} of tenant {ref.tenant!r}: that run was "
                f"registered as request {view.request.request_id!r}, not {request_id!r} (a "
                "task given the id of someone else's run); nothing was run or written",
            )
            return False
        return matches(ref, view.request)
    refuse_unregistered(ref)
    return False


def refuse_unregistered(ref: RunRef) -> None:
    """Log and count a message for a run nobody registered in its tenant's keyspace."""
    refuse(
        UNREGISTERED,
        f"refused run message {ref.run_id} for tenant {ref.tenant!r}, session "
        f"{ref.session_id!r}: no run of that id is registered in that tenant's keyspace "
        "(TETHER_REGISTERED_RUNS_ONLY: a worker acts only for runs a producer of that tenant "
        "submitted with its own credential; hand-made messages register theirs with "
        "tether.producer.Producer.register_message); nothing was written",
    )


def matches(ref: RunRef, request: RunRequest) -> bool:
    """True when the request a run record holds is the run its key names; otherwise log and
    count the refusal.

    A tenant writes its own run records (the submit script runs on its credential), so the
    request in one is that tenant's word about *its* sessions only: a record under
    ``{acme/s-x}`` whose request says ``tenant: "bob"`` would have the worker load bob's head,
    run bob's tools and stream bob's memory to acme. The key is what the tenant's credential
    proves; the request must agree with it, field for field."""
    named = RunRef(request.tenant, request.session_id, request.run_id)
    if named == ref:
        return True
    refuse(
        MISMATCHED,
        f"refused run {ref.run_id} of tenant {ref.tenant!r}, session {ref.session_id!r}: its "
        f"record holds a request for tenant {named.tenant!r}, session {named.session_id!r}, "
        f"run {named.run_id!r}. A run record may only name the run its key does (someone wrote "
        "it by hand, or tried to act for another tenant); nothing was run or written",
    )
    return False


def applicable(ref: RunRef, view: RunView | None) -> bool:
    """Whether a queued run ``ref`` can be applied: it has a record, and the request in it is
    the run its key names (never act on another session's, or tenant's, behalf: :func:`matches`
    logs and counts a mismatch)."""
    if view is None or view.request is None:
        log.warning("dropping queued run %s without a record", ref.run_id)
        return False
    return matches(ref, view.request)


def refuse(reason: str, message: str) -> None:
    """Log and count one refused message."""
    log.warning(message)
    message_refused(reason)
