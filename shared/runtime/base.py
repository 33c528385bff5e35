"""The seams between an agent, its sessions and the loop that runs them, as Protocols below all
three: a session reads its agent through :class:`AgentSpec` and runs through the
:class:`SessionRunner` its agent hands it, so :mod:`tether.runtime.session` imports neither the
agent (which builds sessions) nor the loop and the approvals (which work on them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from tether.core.results import AgentResult, Resolution
    from tether.models.base import ModelClient
    from tether.persistence.archives.base import EventArchive
    from tether.persistence.stores.base import SnapshotStore
    from tether.runtime.options import AgentOptions
    from tether.runtime.progress import RunProgress
    from tether.runtime.redaction import TextRedactor
    from tether.runtime.streaming import RunDeltas
    from tether.runtime.tools import ToolRegistry

_Session = TypeVar("_Session", contravariant=True)


class AgentSpec(Protocol):
    """What a session and its runs read of their agent (:class:`tether.runtime.agent.Agent`)."""

    model: ModelClient
    model_name: str
    system_prompt: str | None
    tools: ToolRegistry
    options: AgentOptions
    redact: TextRedactor | None
    store: SnapshotStore | None
    archive: EventArchive | None


class SessionRunner(Protocol[_Session]):
    """How a session's runs go (the ReAct loop and the approvals, wired in by the agent)."""

    def run(
        self,
        session: _Session,
        input: str | None,
        *,
        run_id: str,
        cancel_check: Callable[[], bool] | None,
        timeout_s: float | None,
        checkpoint: Callable[[], None] | None,
        resume: RunProgress | None,
        on_delta: RunDeltas | None,
        request_id: str | None,
    ) -> AgentResult:
        """Run one request on ``session`` (the caller holds its lock); see
        :meth:`tether.runtime.session.AgentSession.run`."""

    def resolve(
        self,
        session: _Session,
        resolutions: Sequence[Resolution],
        *,
        run_id: str,
        request_id: str | None,
    ) -> None:
        """Settle pending calls of ``session`` (the caller holds its lock); see
        :meth:`tether.runtime.session.AgentSession.resolve`."""
