"""Replay a recorded run offline (``tether replay``): find it, load an agent, compare.

:func:`replay_recorded` finds the run's session (the run record, or the session given), reads the
session's whole event log with the offline reader, and hands the run to
:func:`tether.runtime.replay.replay_run` with the agent: the one given as ``MODULE:NAME`` (a new
version under test) or a registered name, else the agent the run was submitted to. Nothing is
written anywhere: no model is called, no tool runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass

from tether.errors import ConfigurationError, RunNotFound, SessionNotFound, UsageError
from tether.ids import validate_id, validate_tenant
from tether.persistence.reader import SessionLogReader
from tether.producer.client import Producer
from tether.runs.contract import RunRequest
from tether.runtime.agent import Agent
from tether.runtime.registry import AgentRegistry
from tether.runtime.replay import ModelMode, ReplayReport, replay_run
from tether.runtime.replay_recording import RecordedRun, recorded_run


@dataclass(frozen=True)
class FoundRun:
    """A recorded run and the request it was submitted with (None once its record expired)."""

    recorded: RecordedRun
    request: RunRequest | None


def find_run(
    reader: SessionLogReader,
    run_id: str,
    *,
    tenant: str,
    session_id: str | None = None,
    producer: Producer | None = None,
) -> FoundRun:
    """The run ``run_id`` of ``tenant``, in ``session_id`` or where its run record says.

    Raises:
        RunNotFound: no record names the run and no session was given, or the session holds no
            event of the run (deleted, purged, or another session's run).
        InvalidId: a malformed run id, session id or tenant.
    """
    validate_id(run_id, kind="run id")
    validate_tenant(tenant)
    request: RunRequest | None = None
    if producer is not None:
        view = producer.record(run_id, tenant=tenant)
        if view is not None:
            request = view.request
            if session_id is None:
                session_id = view.session_id
    if session_id is None:
        raise RunNotFound(
            f"run {run_id!r} of tenant {tenant!r} is unknown: no run record names it (it never "
            "existed, or its record expired after TETHER_RESULT_TTL_S); pass --session SESSION_ID "
            "to find it in that session's event log"
        )
    try:
        history = reader.events(validate_id(session_id), tenant=tenant)
    except SessionNotFound as exc:
        raise RunNotFound(
            f"run {run_id!r}: its session {tenant}/{session_id} is gone (deleted or purged), so "
            "its events are too; nothing to replay"
        ) from exc
    recorded = recorded_run(history, run_id, where=f"session {tenant}/{session_id}")
    return FoundRun(recorded, request)


def load_agent(spec: str, modules: Sequence[str] = ()) -> Agent:
    """The agent ``spec`` names: ``MODULE:NAME`` (an :class:`Agent`, a factory of one, or a name
    in the module's ``TETHER_AGENTS``), else a registered agent name.

    Raises:
        ConfigurationError: the module does not import, or NAME is not an agent there.
        UnknownAgent: no registered agent has that name.
    """
    if ":" not in spec:
        return AgentRegistry.default(modules).get(spec)
    module_name, _, name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a syntax error or a failing import inside it too
        raise ConfigurationError(
            f"agent {spec!r}: module {module_name!r} does not import "
            f"({type(exc).__name__}: {exc}); check the module path and that it is importable here"
        ) from exc
    found = getattr(module, name, None)
    if found is None:
        found = (getattr(module, "TETHER_AGENTS", None) or {}).get(name)
    try:
        agent = found() if callable(found) and not isinstance(found, Agent) else found
    except Exception as exc:
        raise ConfigurationError(
            f"agent {spec!r}: building it failed ({type(exc).__name__}: {exc})"
        ) from exc
    if not isinstance(agent, Agent):
        raise ConfigurationError(
            f"agent {spec!r}: {module_name!r} has no agent named {name!r} (an Agent, a function "
            "returning one, or a TETHER_AGENTS entry); give MODULE:NAME of one"
        )
    return agent


def replay_recorded(
    reader: SessionLogReader,
    run_id: str,
    *,
    tenant: str = "default",
    session_id: str | None = None,
    producer: Producer | None = None,
    agent: str | None = None,
    agent_modules: Sequence[str] = (),
    model: ModelMode = "recorded",
) -> ReplayReport:
    """Replay run ``run_id`` with ``agent`` (default: the agent it ran with) and compare.

    Raises:
        RunNotFound: the run or its events cannot be found (see :func:`find_run`).
        ConfigurationError, UnknownAgent: the agent cannot be loaded.
        UsageError: no agent is given and the run's record, which names it, expired.
    """
    found = find_run(reader, run_id, tenant=tenant, session_id=session_id, producer=producer)
    name = agent or (found.request.agent if found.request is not None else None)
    if name is None:
        raise UsageError(
            f"run {run_id!r}: its record, which names its agent, expired; pass --agent NAME or "
            "--agent MODULE:NAME"
        )
    return replay_run(load_agent(name, agent_modules), found.recorded, model=model)
