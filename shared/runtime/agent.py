"""The agent: a model, tools, a system prompt, options, and a factory of sessions.

>>> agent = Agent(ScriptedModel([ModelResponse.final("hi")]))
>>> agent.run("hello").output
'hi'
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tether.core.events import now_ms
from tether.core.memory import InMemoryMemory, Memory
from tether.core.results import AgentResult
from tether.core.snapshot import SessionMetadata, SessionSnapshot
from tether.errors import SessionNotFound, StoreNotConfigured
from tether.ids import new_id, validate_id, validate_tenant
from tether.models.base import ModelClient
from tether.runtime.session import AgentSession, CancelCheck, Listener
from tether.runtime.tools import Tool, ToolRegistry

if TYPE_CHECKING:
    from tether.core.context import ContextBudget
    from tether.persistence.archives.base import EventArchive
    from tether.persistence.stores.base import SnapshotStore
    from tether.runtime.compaction import CompactPolicy
    from tether.runtime.projection import ContextProjector
    from tether.runtime.redaction import TextRedactor


Durability = Literal["run", "step"]
"""When a distributed run records progress: only at its end, or at every step boundary."""


@dataclass(frozen=True)
class AgentOptions:
    """Limits and behaviour of the agent loop.

    Attributes:
        max_steps: model calls per run before ``CONTINUATION_REQUIRED`` (0: unlimited).
        timeout_s: wall-clock limit per run, checked between steps (0: none).
        token_budget: stop a run once it used this many tokens (None: unlimited).
        parallel_tool_calls: run a step's tool calls concurrently.
        max_parallel_tool_calls: at most this many at once.
        tool_timeout_s: a call running longer becomes a failed result (None: no limit).
        context_budget: shape each prompt with the projector (None: send all memory).
        projector: the projector (None: :class:`tether.runtime.projection.DefaultContextProjector`).
        compact_policy: checked before every step; compacts memory when it says so.
        require_approval: names of tools that run only once a person approved the call: the
            run ends ``WAITING`` with the call pending, and goes on when it is approved
            (the tool runs then) or rejected (the model sees why).
        durability: on a worker, ``"step"`` records a checkpoint at every step boundary so a
            run cut short (crash, lost lease) resumes there on another worker instead of being
            redone; ``"run"`` only commits at the end. A request may override it.
    """

    max_steps: int = 20
    timeout_s: float = 300.0
    token_budget: int | None = None
    parallel_tool_calls: bool = False
    max_parallel_tool_calls: int = 4
    tool_timeout_s: float | None = None
    context_budget: ContextBudget | None = None
    projector: ContextProjector | None = None
    compact_policy: CompactPolicy | None = None
    # the default: a resumed run never asks the model again for a step it answered nor reruns
    # a recorded tool call, and it costs nothing for runs that end in their first step
    durability: Durability = "step"
    require_approval: frozenset[str] = frozenset()


_shared_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _default_executor() -> ThreadPoolExecutor:
    """One daemon-thread pool per process for ``run_async`` without an executor."""
    global _shared_pool
    with _pool_lock:
        if _shared_pool is None:
            _shared_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="tether-run")
            atexit.register(_shared_pool.shutdown, wait=False, cancel_futures=True)
        return _shared_pool


class Agent:
    """An agent definition. Cheap to build; holds no per-session state.

    Args:
        model: the model client.
        model_name: the model name sent with each request.
        tools: tools (``@tool`` functions or :class:`Tool`).
        system_prompt: instructions for the model.
        memory_factory: builds a fresh memory per session.
        options: loop limits and behaviour.
        listeners: called with every event of every session (exceptions are logged).
        store: where sessions are saved and resumed from (None: no persistence).
        archive: where committed events are archived (None: events stay in the snapshot).
        name: the agent's name (registries, logs).
        redact: applied to every text of every event before it is stored or published, and to
            run outputs and error messages (see :mod:`tether.runtime.redaction`); None: no
            redaction.
    """

    def __init__(
        self,
        model: ModelClient,
        model_name: str = "scripted",
        *,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        system_prompt: str | None = None,
        memory_factory: Callable[[], Memory] = InMemoryMemory,
        options: AgentOptions | None = None,
        listeners: Sequence[Listener] = (),
        store: SnapshotStore | None = None,
        archive: EventArchive | None = None,
        name: str = "agent",
        redact: TextRedactor | None = None,
    ) -> None:
        self.model = model
        self.model_name = model_name
        self.tools = ToolRegistry(tools)
        self.system_prompt = system_prompt
        self.memory_factory = memory_factory
        self.options = options or AgentOptions()
        self.listeners = tuple(listeners)
        self.store = store
        self.archive = archive
        self.name = name
        self.redact = redact

    def run(self, input: str, *, cancel_check: CancelCheck | None = None) -> AgentResult:
        """A one-shot run in a throwaway session (nothing is stored)."""
        return self.new_session().run(input, cancel_check=cancel_check)

    def run_async(self, input: str, executor: Executor | None = None) -> Future[AgentResult]:
        """Run in the background; exceptions surface through the future."""
        return (executor or _default_executor()).submit(self.run, input)

    def new_session(self, session_id: str | None = None, tenant: str = "default") -> AgentSession:
        """A fresh session with its own memory (not stored until :meth:`AgentSession.save`)."""
        sid = validate_id(session_id) if session_id is not None else new_id("s")
        created = now_ms()
        metadata = SessionMetadata(
            session_id=sid,
            tenant=validate_tenant(tenant),
            created_at_ms=created,
            updated_at_ms=created,
        )
        return AgentSession(self, self.memory_factory(), metadata, listeners=self.listeners)

    def session_from_snapshot(
        self,
        snapshot: SessionSnapshot,
        *,
        version: str | None = None,
        by_reference: bool = False,
        copy: bool = True,
        announce: bool = True,
    ) -> AgentSession:
        """A session restored from ``snapshot`` (emits ``SESSION_RESTORED``).

        ``copy=False`` skips the defensive copy when the caller owns ``snapshot`` and drops it
        (a worker restoring a head it just parsed). ``announce=False`` emits nothing: the caller
        replays recorded events that hold the restore (a worker resuming a run).
        """
        session = AgentSession(
            self,
            self.memory_factory(),
            snapshot.metadata if not copy else snapshot.metadata.model_copy(deep=True),
            listeners=self.listeners,
        )
        session.restore(snapshot, by_reference=by_reference, copy=copy, announce=announce)
        session.set_version(version)
        return session

    def resume_session(self, session_id: str, tenant: str = "default") -> AgentSession:
        """Load a stored session.

        Raises:
            StoreNotConfigured: the agent has no store.
            SessionNotFound: no such session in the store.
        """
        validate_id(session_id)
        validate_tenant(tenant)
        if self.store is None:
            raise StoreNotConfigured(
                f"cannot resume session {session_id!r}: the agent has no snapshot store; pass "
                "store=... to Agent(...)"
            )
        stored = self.store.load(tenant, session_id)
        if stored is None:
            raise SessionNotFound(
                f"session {tenant}/{session_id} does not exist in the store; create it with "
                "agent.new_session(...) and save() it first"
            )
        return self.session_from_snapshot(
            stored.snapshot, version=stored.version, by_reference=True
        )
