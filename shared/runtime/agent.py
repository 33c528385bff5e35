"""The agent: a model, tools, a system prompt, options, and a factory of sessions, which it
wires to the loop and the approvals (:class:`ReactRunner`); the thread pool of ``run_async``.

>>> agent = Agent(ScriptedModel([ModelResponse.final("hi")]))
>>> agent.run("hello").output
'hi'
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from tether.core.events import now_ms
from tether.core.memory import InMemoryMemory, Memory
from tether.core.results import AgentResult, Resolution
from tether.core.snapshot import SessionMetadata, SessionSnapshot
from tether.errors import SessionNotFound, StoreNotConfigured
from tether.ids import new_id, validate_id, validate_tenant
from tether.models.base import ModelClient
from tether.runtime.approvals import resolve_calls
from tether.runtime.loop import Checkpoint, run_loop
from tether.runtime.options import AgentOptions
from tether.runtime.redaction import DEFAULT_REDACTOR, TextRedactor, chain
from tether.runtime.session import AgentSession, CancelCheck, Listener
from tether.runtime.tools import Tool, ToolRegistry, ToolSource

if TYPE_CHECKING:
    from tether.persistence.archives.base import EventArchive
    from tether.persistence.stores.base import SnapshotStore
    from tether.runtime.progress import RunProgress
    from tether.runtime.streaming import RunDeltas


_P = ParamSpec("_P")
_T = TypeVar("_T")
_WorkItem = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonThreadExecutor(Executor):
    """A thread pool whose threads never delay interpreter exit.

    ``ThreadPoolExecutor`` joins its threads at exit, so a process that got the result it
    wanted still waits for every other submitted run. Here the threads are daemons: at exit a
    run still in progress is abandoned, like any daemon thread's work. Wait on the futures whose
    results you need. Threads start on demand, up to ``max_workers``, and are reused.
    """

    def __init__(self, max_workers: int = 8, thread_name_prefix: str = "tether-run") -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers={max_workers} is not allowed; pass 1 or more")
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._work: queue.SimpleQueue[_WorkItem | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._shutdown = False

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        """Schedule ``fn(*args, **kwargs)``; its future."""
        future: Future[_T] = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new runs after shutdown(); make a new executor")
            self._work.put((future, fn, args, kwargs))
            # an idle thread takes the item; otherwise start one, up to max_workers
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._max_workers:
                name = f"{self._prefix}_{len(self._threads)}"
                thread = threading.Thread(target=self._worker, name=name, daemon=True)
                thread.start()
                self._threads.append(thread)
        return future

    def _worker(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                self._work.put(None)  # wake the next thread, which stops too
                return
            future, fn, args, kwargs = item
            del item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # the future carries it to the caller
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del future, fn, args, kwargs
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking work; ``cancel_futures`` cancels queued runs; ``wait`` joins the threads."""
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while True:
                    try:
                        item = self._work.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
            self._work.put(None)
            threads = list(self._threads)
        if wait:
            for thread in threads:
                thread.join()


_shared_pool: DaemonThreadExecutor | None = None
_pool_lock = threading.Lock()


def _default_executor() -> DaemonThreadExecutor:
    """One daemon-thread pool per process for ``run_async`` without an executor (it never
    delays interpreter exit)."""
    global _shared_pool
    with _pool_lock:
        if _shared_pool is None:
            _shared_pool = DaemonThreadExecutor(max_workers=8, thread_name_prefix="tether-run")
        return _shared_pool


class ReactRunner:
    """Runs a session's requests with the ReAct loop (:mod:`tether.runtime.loop`) and settles
    its pending calls (:mod:`tether.runtime.approvals`): the runner every :class:`Agent` hands
    its sessions, which sit below both modules."""

    def run(
        self,
        session: AgentSession,
        input: str | None,
        *,
        run_id: str,
        cancel_check: CancelCheck | None,
        timeout_s: float | None,
        checkpoint: Checkpoint | None,
        resume: RunProgress | None,
        on_delta: RunDeltas | None,
        request_id: str | None,
    ) -> AgentResult:
        """:func:`tether.runtime.loop.run_loop`."""
        return run_loop(
            session,
            input,
            run_id=run_id,
            cancel_check=cancel_check,
            timeout_s=timeout_s,
            checkpoint=checkpoint,
            resume=resume,
            on_delta=on_delta,
            request_id=request_id,
        )

    def resolve(
        self,
        session: AgentSession,
        resolutions: Sequence[Resolution],
        *,
        run_id: str,
        request_id: str | None,
    ) -> None:
        """:func:`tether.runtime.approvals.resolve_calls`."""
        resolve_calls(session, resolutions, run_id=run_id, request_id=request_id)


#: Stateless: one serves every session.
REACT_RUNNER = ReactRunner()


class Agent:
    """An agent definition. Cheap to build; holds no per-session state.

    Args:
        model: the model client.
        model_name: the model name sent with each request.
        tools: tools (``@tool`` functions or :class:`Tool`), and sources of tools that come and
            go (:class:`~tether.runtime.tools.ToolSource`: an MCP server's).
        system_prompt: instructions for the model.
        memory_factory: builds a fresh memory per session.
        options: loop limits and behaviour.
        listeners: called with every event of every session (exceptions are logged).
        store: where sessions are saved and resumed from (None: no persistence).
        archive: where committed events are archived (None: events stay in the snapshot).
        name: the agent's name (registries, logs).
        redact: applied to every text of every event before it is stored or published, and to
            run outputs and error messages (see :mod:`tether.runtime.redaction`), after the
            default patterns for common credentials (``sk-…``, ``AKIA…``, bearer tokens...,
            :data:`~tether.runtime.redaction.SECRET_PATTERNS`), which always apply; ``None``
            turns all redaction off.
    """

    def __init__(
        self,
        model: ModelClient,
        model_name: str = "scripted",
        *,
        tools: Iterable[Tool | ToolSource | Callable[..., Any]] = (),
        system_prompt: str | None = None,
        memory_factory: Callable[[], Memory] = InMemoryMemory,
        options: AgentOptions | None = None,
        listeners: Sequence[Listener] = (),
        store: SnapshotStore | None = None,
        archive: EventArchive | None = None,
        name: str = "agent",
        redact: TextRedactor | None = DEFAULT_REDACTOR,
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
        own = redact is not None and redact is not DEFAULT_REDACTOR
        self.redact = chain(DEFAULT_REDACTOR, redact) if own and redact else redact

    def run(self, input: str, *, cancel_check: CancelCheck | None = None) -> AgentResult:
        """A one-shot run in a throwaway session (nothing is stored)."""
        return self.new_session().run(input, cancel_check=cancel_check)

    def run_async(self, input: str, executor: Executor | None = None) -> Future[AgentResult]:
        """Run in the background; exceptions surface through the future.

        Without ``executor``, runs go to a shared pool of daemon threads (8 at most): they never
        delay interpreter exit, so a run still in progress at exit is abandoned.
        """
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
        return AgentSession(
            self, self.memory_factory(), metadata, runner=REACT_RUNNER, listeners=self.listeners
        )

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
            runner=REACT_RUNNER,
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
