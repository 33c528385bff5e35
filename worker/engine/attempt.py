"""One attempt at a run its drain began: restore the session, let the head answer (a request
it already applied is finished as committed, exactly once), refuse a run that may not execute
(out of attempts, a continuation that settles no pending call), else execute it and commit.

:func:`attempt` returns once the run is finished; a failure it cannot finish the run with is
raised to the drain (:mod:`tether.worker.engine.queued_run`), which decides what it leaves.
"""

from __future__ import annotations

import dataclasses
import logging

from tether.core.events import now_ms
from tether.core.results import RunStatus
from tether.errors import DataError, InfrastructureError, InvalidInput
from tether.observability.tracing import span
from tether.runs.contract import RunRequest, RunResult
from tether.runs.queue.base import RunView
from tether.runs.usage.policy import prices
from tether.runtime.agent import Agent
from tether.runtime.approvals import check_resolutions
from tether.runtime.session import AgentSession
from tether.worker.engine.child_runs import forget_settled, parked_hook
from tether.worker.engine.commit import Commit
from tether.worker.engine.drain_state import DrainState
from tether.worker.engine.execution import execute
from tether.worker.engine.parking import Parking, parking_for
from tether.worker.engine.records import redacted_pending, result_from_record, retries_exhausted
from tether.worker.engine.restore import session_for
from tether.worker.engine.signal_wakes import signals_after_park
from tether.worker.engine.spend import committed, priced
from tether.worker.engine.waiting_runs import pending_in

log = logging.getLogger(__name__)


class RunUnreadable(Exception):
    """The attempt could not read the session's head: it wrote nothing."""

    def __init__(self, cause: InfrastructureError) -> None:
        super().__init__(str(cause))
        self.cause = cause


def attempt(d: DrainState, view: RunView, request: RunRequest, agent: Agent, attempts: int) -> None:
    """Attempt ``request`` (its ``attempts``-th attempt); return once it is finished.

    Raises:
        RunUnreadable: the head could not be read (nothing was written).
        RunHandedBack: the worker is shutting down; the run stopped at a checkpoint.
        InfrastructureError, ConflictError: the attempt failed before or after its commit
            point (the drain tells which from the commit).
    """
    commit = d.commit(request.run_id, request.reply_to)
    session = _restored(d, commit, view, request, agent, attempts)
    if session is None:
        return
    # the head decides before the attempt budget does: a run that committed on its last
    # allowed attempt, then lost its worker before finishing, is finished as committed
    applied = session.find_applied(request.request_id)
    if applied is not None:
        # committed by an attempt that died before its finish: counted here, once
        done = result_from_record(request, applied, duplicate=True, attempts=attempts)
        done = priced(done, agent.model_name, prices(d.services.settings))
        waiting = applied.status == RunStatus.WAITING
        if waiting:  # what it waits on, as its first attempt reported it
            done = done.model_copy(update={"pending": redacted_pending(pending_in(session), agent)})
        commit.repark(_parking(d, session, request, waiting))
        commit.finish(done)
        committed(done, agent.model_name)
        return
    refused = _refused(d, session, view, request, attempts)
    if refused is not None:
        commit.finish(refused)
        return
    _execute_and_commit(d, commit, session, request, agent, attempts)


def _restored(
    d: DrainState, commit: Commit, view: RunView, request: RunRequest, agent: Agent, attempts: int
) -> AgentSession | None:
    """The session to run on; None when the run was finished because its head is unreadable."""
    try:
        return session_for(d, request, agent)
    except InfrastructureError as exc:
        if _out_of_attempts(d, attempts) and view.failed_before_commit >= attempts - 1:
            # every earlier attempt failed before it could write anything, so the run was never
            # applied: the budget may end it although the head cannot be read now
            commit.finish(retries_exhausted(request, attempts, view, exc))
            return None
        raise RunUnreadable(exc) from exc
    except DataError as exc:
        # the stored head is unreadable (corrupt, or a schema version this build does not
        # know): retrying cannot help and writing would destroy it, so fail the run, touch nothing
        log.error("run %s failed: session head unreadable: %s", request.run_id, exc)
        failed = RunResult.failure(
            request, RunStatus.FAILED, exc.error_type, str(exc), attempts=attempts
        )
        commit.finish(failed)
        return None


def _out_of_attempts(d: DrainState, attempts: int) -> bool:
    return attempts > d.services.settings.max_attempts


def _refused(
    d: DrainState, session: AgentSession, view: RunView, request: RunRequest, attempts: int
) -> RunResult | None:
    """The failure of a run that may not execute (before it writes anything: no session is
    saved, no event published): out of attempts, or a continuation that settles no pending
    call; else None."""
    if _out_of_attempts(d, attempts):
        return retries_exhausted(request, attempts, view)
    if not request.resolutions or d.resumed is not None:  # a resumed run settled them already
        return None
    try:
        check_resolutions(session, request.resolutions)
    except InvalidInput as exc:
        log.warning("run %s refused: %s", request.run_id, exc)
        if d.announce is not None:  # restored for this run alone: forget it, unannounced
            d.forget_session()
        return RunResult.failure(
            request, RunStatus.FAILED, exc.error_type, str(exc), attempts=attempts
        )
    return None


def _parking(
    d: DrainState, session: AgentSession, request: RunRequest, waiting: bool
) -> Parking | None:
    """What the commit records of the session's parked calls (see
    :mod:`tether.worker.engine.parking`)."""
    services = d.services
    queue = services.settings.queue
    parking = parking_for(
        services.waits,
        services.marks,
        session,
        request,
        queue,
        waiting=waiting,
        on_parked=parked_hook(services),
    )
    if parking is None:
        return None
    return dataclasses.replace(
        parking,
        after=signals_after_park(services, session),
        on_settled=lambda: forget_settled(services, request.tenant, request.session_id),
    )


def _execute_and_commit(
    d: DrainState,
    commit: Commit,
    session: AgentSession,
    request: RunRequest,
    agent: Agent,
    attempts: int,
) -> None:
    """Execute the run, then commit its session and finish its result."""
    started_ms = now_ms()
    executed = execute(d, session, request, agent)
    result = result_from_record(
        request,
        executed.record,
        duplicate=False,
        attempts=attempts,
        queue_ms=max(0, started_ms - request.submitted_at_ms),
        run_ms=now_ms() - started_ms,
        worker=d.services.worker_id,
    ).model_copy(update={"pending": executed.pending})
    result = priced(result, agent.model_name, prices(d.services.settings))
    parking = _parking(d, session, request, result.status is RunStatus.WAITING)
    with span("tether.commit", run_id=request.run_id):
        commit.run(
            session,
            d.publisher,
            lambda: d.keeper.lost,
            result,
            checkpointed=executed.checkpointed,
            parking=parking,
        )
    committed(result, agent.model_name)
