"""Child runs on the fleet after their spawn: a child's end told to its parent, the parent's
wake when its wait on children is over (also after Redis lost the records), and a cancelled
parent's children cancelled.

- **Spawn**: :mod:`tether.worker.engine.spawner` (behind ``ctx.spawn``).
- **End** (the commit's ``children`` step, :func:`family_hook`, before its ``finish``): a child
  whose run ended (not ``WAITING``: a child that parks goes on in a continuation, whose end is
  the child's) records its :class:`~tether.core.children.ChildEnd` in the parent's record (once
  per child), then wakes the parent if its wait is over. A crash before the finish repeats the
  step (the run is finished as found), and the record and the wake's request id make the repeat
  harmless.
- **Park** (:func:`parked_hook`, in the parent's ``wait_index`` step): children that ended
  before their parent parked are found there, so the wake is never missed. A child's end and
  the parent's park each write, then read the other's record (both in the parent's slot): at
  least one of them sees both, and if both do, the wake's request id makes the second a
  duplicate.
- **Cancel**: a run that ends ``CANCELLED`` cancels the children it spawned (and those of the
  calls a cancel continuation settled), unless spawned ``detached``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import pydantic

from tether.core.children import ChildEnd, children_output, children_ready
from tether.core.events import now_ms
from tether.core.results import STOPPING_ACTIONS, Resolution, RunStatus
from tether.core.waits import ChildRef
from tether.runs.contract import RunRef, RunRequest, RunResult
from tether.runs.queue.base import CancelOutcome, SubmitState
from tether.runs.waits.base import WaitRecord, settle_request
from tether.runs.waits.children import (
    PARENT_ATTRIBUTE,
    ChildLink,
    cancellable,
)
from tether.runs.waits.wakes import due_output
from tether.runtime.session import AgentSession
from tether.worker.engine.services import EngineServices

log = logging.getLogger(__name__)


# --- a run's end, told to its family ------------------------------------------------------


def family_hook(
    services: EngineServices,
    request: RunRequest | None,
    session: Callable[[], AgentSession | None] = lambda: None,
) -> Callable[[RunResult], None] | None:
    """What the commit's ``children`` step does for ``request``'s end (None: nothing: the run
    is no child, no child's continuation, and could not be cancelled with children);
    ``session``: the session the run committed (its head names a child session's parent)."""
    if services.children is None or request is None:
        return None
    return lambda result: _tell_family(services, request, result, session())


def _tell_family(
    services: EngineServices,
    request: RunRequest,
    result: RunResult,
    session: AgentSession | None = None,
) -> None:
    book = services.children
    assert book is not None
    if result.status is RunStatus.CANCELLED:
        cancel_children(services, request)
    if result.status is RunStatus.WAITING:
        return  # the child goes on in a continuation: its end is that one's
    link = _link(request, session)
    if link is None:
        return
    end = ChildEnd(
        run_id=link.child_run_id,
        status=result.status.value,
        output=result.output,
        error_type=result.error_type,
        error_message=result.error_message,
        ended_at_ms=now_ms(),
    )
    tenant, parent = request.tenant, link.parent_session_id
    assert services.waits is not None
    known = book.ended(tenant, parent, end)
    records = services.waits.records(tenant, parent)  # read after the end is written: see parked
    if not known:
        # the parent's wait, rebuilt from its head when Redis lost the family record, vouches
        if end.run_id not in _waited_on(records) or not book.ended(
            tenant, parent, end, vouched=True
        ):
            return
        records = services.waits.records(tenant, parent)  # again: the wake may have settled it
    wake_ready(services, tenant, parent, records)
    # nothing waits on it (any more: the parent's wake settled the call, and forgot the ends it
    # read; this one, written after, is forgotten here)
    if end.run_id not in _waited_on(records) and _run_ended(services, tenant, link):
        book.forget(tenant, parent, [end.run_id])


def _waited_on(records: Sequence[WaitRecord]) -> set[str]:
    """The children the session's parked calls wait on."""
    return {c.run_id for r in records if r.wait_for.kind == "children" for c in r.wait_for.children}


def _run_ended(services: EngineServices, tenant: str, link: ChildLink) -> bool:
    """Whether the parent's run finished, so it parked every call it will: a child it does not
    wait on now is one it never waited on, or waits on no more. A run with no record is not
    running (Redis lost it, or it expired)."""
    view = services.runs.get(RunRef(tenant, link.parent_session_id, link.parent_run_id))
    return view is None or view.result is not None


def forget_settled(services: EngineServices, tenant: str, session_id: str) -> int:
    """After a commit that settled parked calls of the session: forget its ended children that
    no call waits on any more (the family record would otherwise keep them forever); how many.
    Children still running stay: their end is recorded, then forgotten, when it comes."""
    book, index = services.children, services.waits
    if book is None or index is None:
        return 0
    ended = book.family(tenant, session_id).ended
    if not ended:
        return 0
    waited = _waited_on(index.records(tenant, session_id))
    done = [run_id for run_id in ended if run_id not in waited]
    book.forget(tenant, session_id, done)
    return len(done)


def _link(request: RunRequest, session: AgentSession | None) -> ChildLink | None:
    """The parent of the child ``request`` ends: its own, or, for a continuation of a child
    that parked, as its session's head names it (:data:`PARENT_ATTRIBUTE`, which a Redis
    flushed or rolled back keeps; None: no child)."""
    if request.parent is not None:
        p = request.parent
        return ChildLink(
            parent_session_id=p.session_id,
            parent_run_id=p.run_id,
            call_id=p.call_id,
            child_run_id=request.run_id,
            depth=p.depth,
            detached=p.detached,
        )
    if not request.resolutions or session is None:
        return None
    return _link_in(session)


def _link_in(session: AgentSession) -> ChildLink | None:
    """The link to its parent a child session's head holds (None: none, or unreadable)."""
    mark = session.metadata.attributes.get(PARENT_ATTRIBUTE)
    if not isinstance(mark, dict):
        return None
    try:
        return ChildLink(
            parent_session_id=str(mark["session_id"]),
            parent_run_id=str(mark["run_id"]),
            call_id=str(mark["call_id"]),
            child_run_id=str(mark["child_run_id"]),
            depth=int(str(mark["depth"])),
        )
    except (KeyError, ValueError, pydantic.ValidationError):
        return None


def wake_ready(
    services: EngineServices,
    tenant: str,
    session_id: str,
    records: Sequence[WaitRecord] | None = None,
) -> int:
    """Submit the wake of each of the session's calls parked on children whose wait is over
    (``records``: those just parked; None: read them); how many were queued."""
    book, index = services.children, services.waits
    if book is None or index is None:
        return 0
    if records is None:
        records = index.records(tenant, session_id)
    waiting = [r for r in records if r.wait_for.kind == "children"]
    if not waiting:
        return 0
    ended = book.family(tenant, session_id).ended
    ready = [r for r in waiting if children_ready(r.wait_for, ended)]
    requests = [_wake_request(r, children_output(r.wait_for, ended)) for r in ready]
    return _submit_wakes(services, ready, requests)


def _wake_request(record: WaitRecord, output: str) -> RunRequest:
    """The continuation that gives ``record``'s call ``output`` (its id: the call's wake id)."""
    resolution = Resolution(call_id=record.call_id, action="output", text=output)
    return settle_request(
        record.tenant, record.session_id, record.agent, resolution, reply_to=record.reply_to
    )


def _submit_wakes(
    services: EngineServices, records: Sequence[WaitRecord], requests: Sequence[RunRequest]
) -> int:
    queued = 0
    for record, request in zip(records, requests, strict=True):
        (outcome,) = services.runs.submit_many([request], queue=record.queue)
        if outcome.state is SubmitState.QUEUED:
            queued += 1
            services.wake(request.tenant, request.session_id)
    return queued


def parked_hook(services: EngineServices) -> Callable[[Sequence[WaitRecord]], None] | None:
    """What the parent's ``wait_index`` step does once its calls are parked: wake those whose
    children all (or one) ended already."""
    if services.children is None:
        return None

    def parked(records: Sequence[WaitRecord]) -> None:
        by_session = {(r.tenant, r.session_id) for r in records}
        for tenant, session_id in by_session:
            mine = [r for r in records if (r.tenant, r.session_id) == (tenant, session_id)]
            recover_ends(services, tenant, session_id, mine)
            wake_ready(services, tenant, session_id, mine)

    return parked


def recover_ends(
    services: EngineServices, tenant: str, session_id: str, records: Sequence[WaitRecord]
) -> int:
    """Record the ends of waited-on children that the family record lacks along with their
    spawn (Redis lost it: a flush, a rollback), read from the children's heads; how many."""
    book = services.children
    assert book is not None
    family = book.family(tenant, session_id)
    lost = {
        c.run_id: c
        for r in records
        if r.wait_for.kind == "children"
        for c in r.wait_for.children
        if c.run_id not in family.ended and c.run_id not in family.spawned
    }
    found = 0
    for child in lost.values():
        end = _end_in_head(services, child)
        if end is not None and book.ended(tenant, session_id, end, vouched=True):
            found += 1
    return found


def _end_in_head(services: EngineServices, child: ChildRef) -> ChildEnd | None:
    """How a child ended, as its session's head records it (None: not ended, or unknown):
    its own run's record, or, when it parked, the last finished record after it."""
    stored = services.store.load_shallow(child.tenant, child.session_id)
    applied = stored.snapshot.applied if stored is not None else []
    request_id = child.run_id.removeprefix("run-")
    at = next((i for i, r in enumerate(applied) if r.request_id == request_id), None)
    if at is None:
        return None
    ended = [r for r in applied[at:] if r.status != RunStatus.WAITING.value]
    if not ended:
        return None
    last = ended[-1]
    return ChildEnd(
        run_id=child.run_id,
        status=last.status,
        output=last.output,
        error_type=last.error_type,
        error_message=last.error_message,
        ended_at_ms=now_ms(),
    )


def timeout_output(services: EngineServices, record: WaitRecord) -> str | None:
    """The output of a call parked on children whose timeout passed (None: not such a call)."""
    if record.wait_for.kind != "children" or services.children is None:
        return None
    return due_output(record, services.children.family(record.tenant, record.session_id).ended)


# --- cancelling children with their parent --------------------------------------------------


def cancel_children(services: EngineServices, request: RunRequest) -> int:
    """Cancel the children ``request``'s run spawned, and those of the calls it cancelled,
    that are not detached and have not ended; how many were asked to stop."""
    book = services.children
    assert book is not None
    family = book.family(request.tenant, request.session_id)
    calls = [r.call_id for r in request.resolutions if r.action in STOPPING_ACTIONS]
    children = cancellable(family, run_ids=[request.run_id], call_ids=calls)
    for child in children:
        try:
            cancel_child(services, child)
        except Exception as exc:  # one child's failure must not keep the others running
            log.warning("could not cancel child %s: %s", child.run_id, exc)
    return len(children)


def cancel_child(services: EngineServices, child: ChildRef) -> None:
    """Stop one child: queued or running, it is asked to stop; parked on the fleet, a
    continuation cancels its parked calls (its wake's id: whichever comes first applies)."""
    ref = RunRef(child.tenant, child.session_id, child.run_id)
    runs = services.runs
    if runs.request_cancel(ref) is not CancelOutcome.FINISHED:
        return
    view = runs.get(ref)
    result = view.result if view is not None else None
    if result is None or result.status is not RunStatus.WAITING or child.agent == "":
        return
    for pending in result.pending:
        if pending.wait_for is None:
            continue
        cancel = settle_request(
            child.tenant,
            child.session_id,
            child.agent,
            Resolution(call_id=pending.call_id, action="cancel", text="its parent was cancelled"),
        )
        (outcome,) = runs.submit_many([cancel], queue=view.queue if view else None)
        if outcome.state is SubmitState.QUEUED:
            services.wake(child.tenant, child.session_id)
        elif outcome.state is SubmitState.DUPLICATE:
            runs.request_cancel(cancel.ref._replace(run_id=outcome.run_id))
