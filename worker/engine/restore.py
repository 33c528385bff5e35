"""The session a run executes on: restored once per lease (the committed head, fenced after a
takeover, or the run's last checkpoint replayed onto it), then held between the drain's runs
(:class:`~tether.worker.engine.drain_state.DrainState`)."""

from __future__ import annotations

from tether.observability.tracing import span
from tether.runs.contract import RunRequest
from tether.runtime.agent import Agent
from tether.runtime.session import AgentSession
from tether.worker.engine.drain_state import DrainState
from tether.worker.engine.fencing import load_head
from tether.worker.engine.resume import ASK, resume_point


def session_for(d: DrainState, request: RunRequest, agent: Agent) -> AgentSession:
    """The session to run ``request`` on: restored when the drain holds none, else the held
    one (rebuilt from it when ``request`` is for another agent).

    Not a session replayed for a run that then did not execute (out of attempts): its steps
    were never committed, so the next run starts at the head.
    """
    if d.resumed is not None:
        d.forget_session()
    held = d.session
    if held is None:
        return _restored(d, request, agent)
    d.base_seq = held.last_seq
    if d.agent_name == request.agent:
        return held
    session = agent.session_from_snapshot(held.snapshot(), version=held.version, by_reference=True)
    session.mark_archived(held.archived_seq)
    return d.hold(session, request.agent)


def _restored(d: DrainState, request: RunRequest, agent: Agent) -> AgentSession:
    """Restore the committed head (at the run's last checkpoint, when it has one) and hold it."""
    with span("tether.restore", session_id=request.session_id):
        stored = load_head(d.services, d.lease, agent, request, d.applying)
    d.base_seq = stored.snapshot.last_seq if stored is not None else 0
    known = d.applying.checkpoint if d.applying is not None else ASK
    resumed = resume_point(d.services, agent, request, stored, checkpoint=known)
    if resumed is not None:
        return d.hold(resumed.session, request.agent, resumed=resumed)
    if stored is None:
        fresh = agent.new_session(request.session_id, tenant=request.tenant)
        return d.hold(fresh, request.agent)
    session = agent.session_from_snapshot(
        stored.snapshot, version=stored.version, by_reference=True, copy=False
    )
    session.mark_archived(stored.snapshot.archived_seq)
    return d.hold(session, request.agent)
