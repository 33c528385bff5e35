"""Tether as an MCP server: the tools ``tether mcp`` offers an MCP client (a desktop assistant, an
IDE) to start, watch and steer one tenant's runs, built with the ``mcp`` SDK's ``MCPServer``.

Every tool acts for the one tenant the server was started for (``--tenant``, with that tenant's
credential in the settings: its Redis user); none takes a tenant, and another tenant's run or
session is "not found", as it is for the producer. In read-only mode the writing tools
(:data:`WRITING_TOOLS`) are not offered, and a call naming one is refused.

The tools are plain functions over a :class:`~tether.producer.client.Producer`; the SDK runs
each in a worker thread, so a tool that waits (``get_run`` with ``wait_s``) holds no other call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from tether.core.results import Resolution, RunStatus
from tether.errors import TetherError
from tether.runs.queue.record import RunState

if TYPE_CHECKING:
    from tether.producer.client import Producer
    from tether.runs.queue.base import RunView
    from tether.settings import Settings

_T = TypeVar("_T")
#: The tools that change something: left out in read-only mode.
WRITING_TOOLS = frozenset({"start_run", "approve", "reject", "answer", "cancel_run"})
#: The longest a tool waits for a run or for events (an MCP client has its own timeouts).
MAX_WAIT_S = 120.0
MAX_EVENTS = 500
_INSTRUCTIONS = (
    "Tether runs long-lived agent sessions on a fleet of workers. start_run queues a run on a "
    "session and returns at once; get_run (wait_s to wait) gives its status and result. A run "
    "that ends WAITING lists its pending calls: approve or reject a call waiting for approval, "
    "answer one waiting for an output; each returns the run that goes on. tail_events shows a "
    "session's events as they happen."
)


class TetherTools:
    """The tools, for one tenant (see the module)."""

    def __init__(self, producer: Producer, settings: Settings, tenant: str) -> None:
        self.producer = producer
        self.settings = settings
        self.tenant = tenant

    def start_run(
        self,
        session_id: str,
        input: str,
        agent: str,
        request_id: str | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """Queue a run of ``agent`` on session ``session_id`` with ``input``; returns its run id
        at once (follow it with get_run). A request_id makes a retry harmless: the same request
        is applied once."""
        handle = self._act(
            lambda: self.producer.run_async(
                session_id,
                input,
                agent=agent,
                tenant=self.tenant,
                request_id=request_id,
                timeout_s=timeout_s,
            )
        )
        return {"run_id": handle.run_id, "session_id": session_id, "status": RunState.QUEUED.value}

    def get_run(self, run_id: str, wait_s: float = 0.0) -> dict[str, Any]:
        """A run's status, and its result once it finished (waiting up to ``wait_s`` seconds,
        at most 120, for it to finish). A WAITING run lists its pending calls."""
        view = self._record(run_id)
        if view.result is None and wait_s > 0:
            handle = self.producer.handle(run_id, tenant=self.tenant)
            try:
                handle.result(timeout=min(wait_s, MAX_WAIT_S))
            except TimeoutError:
                pass
            except TetherError:
                pass  # a failed run: its record says how
            view = self._record(run_id)
        return _run_doc(view)

    def tail_events(
        self, session_id: str, after_seq: int = 0, limit: int = 100, wait_s: float = 1.0
    ) -> dict[str, Any]:
        """The session's events after ``after_seq`` (at most ``limit``), waiting up to
        ``wait_s`` seconds for new ones; call again with the returned ``last_seq`` to follow."""
        limit = max(1, min(limit, MAX_EVENTS))
        idle_s = max(0.05, min(wait_s, MAX_WAIT_S))
        events: list[dict[str, Any]] = []
        stream = self._act(
            lambda: self.producer.tail(session_id, self.tenant, after_seq, idle_timeout_s=idle_s)
        )
        last_seq = after_seq
        for event in stream:
            events.append(event.model_dump(mode="json"))
            last_seq = event.seq
            if len(events) >= limit:
                break
        return {"session_id": session_id, "events": events, "last_seq": last_seq}

    def list_sessions(self) -> dict[str, Any]:
        """The ids of this tenant's stored sessions."""
        from tether.persistence.reader import SessionLogReader
        from tether.persistence.storage_url import storage_from_settings

        def listed() -> list[str]:
            store, archive = storage_from_settings(self.settings)
            return SessionLogReader(store, archive).list_session_ids(self.tenant)

        ids = self._act(listed)
        return {"tenant": self.tenant, "sessions": ids}

    def approve(self, session_id: str, call_id: str, agent: str) -> dict[str, Any]:
        """Approve a call a WAITING run waits on: the tool runs and the run goes on, as the
        run this returns."""
        return self._resolve(session_id, agent, Resolution(call_id=call_id, action="approve"))

    def reject(
        self, session_id: str, call_id: str, agent: str, reason: str = "rejected by a person"
    ) -> dict[str, Any]:
        """Reject a call waiting for approval: the model is told ``reason``; the run goes on."""
        resolution = Resolution(call_id=call_id, action="reject", text=reason)
        return self._resolve(session_id, agent, resolution)

    def answer(self, session_id: str, call_id: str, agent: str, output: str) -> dict[str, Any]:
        """Give the output of a call that waits for one; the run goes on."""
        resolution = Resolution(call_id=call_id, action="output", text=output)
        return self._resolve(session_id, agent, resolution)

    def cancel_run(self, run_id: str) -> dict[str, Any]:
        """Ask a run to stop: a queued run never starts, a running one stops at its next step."""
        outcome = self._act(lambda: self.producer.cancel(run_id, tenant=self.tenant))
        return {"run_id": run_id, "outcome": str(outcome)}

    def _resolve(self, session_id: str, agent: str, resolution: Resolution) -> dict[str, Any]:
        handle = self._act(
            lambda: self.producer.resolve(session_id, [resolution], agent=agent, tenant=self.tenant)
        )
        return {"run_id": handle.run_id, "session_id": session_id, "status": RunState.QUEUED.value}

    def _record(self, run_id: str) -> RunView:
        view = self._act(lambda: self.producer.record(run_id, tenant=self.tenant))
        if view is None:
            raise ToolError(
                f"no run {run_id!r} in tenant {self.tenant!r} (or its record expired); "
                "start_run returns the ids of new runs"
            )
        return view

    @staticmethod
    def _act(do: Callable[[], _T]) -> _T:
        """``do()``, its Tether errors (bad input, unknown agent...) as the tool's error."""
        try:
            return do()
        except TetherError as exc:
            raise ToolError(f"{exc.error_type}: {exc}") from None


def _run_doc(view: RunView) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "run_id": view.run_id,
        "session_id": view.session_id,
        "status": view.status,
    }
    result = view.result
    if result is not None:
        doc["status"] = str(result.status)
        doc["output"] = result.output
        doc["attempts"] = result.attempts
        if result.error_type is not None:
            doc["error"] = f"{result.error_type}: {result.error_message}"
        if result.status is RunStatus.WAITING:
            doc["pending"] = [p.model_dump(mode="json") for p in result.pending]
    elif view.waiting:
        doc["waiting_for"] = view.waiting
    return doc


class TetherMcpServer(MCPServer):
    """The SDK's server, refusing the writing tools by name in read-only mode (they are not
    listed either: a client that asks anyway gets an error saying why)."""

    def __init__(self, tools: TetherTools, *, read_only: bool) -> None:
        super().__init__("tether", instructions=_INSTRUCTIONS, log_level="WARNING")
        self.read_only = read_only
        for name in ("start_run", "get_run", "tail_events", "list_sessions"):
            self._offer(tools, name)
        for name in ("approve", "reject", "answer", "cancel_run"):
            self._offer(tools, name)

    def _offer(self, tools: TetherTools, name: str) -> None:
        if self.read_only and name in WRITING_TOOLS:
            return
        writes = name in WRITING_TOOLS
        hints = ToolAnnotations(read_only_hint=not writes, destructive_hint=name == "cancel_run")
        self.add_tool(getattr(tools, name), name=name, annotations=hints)

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        if self.read_only and name in WRITING_TOOLS:
            raise ToolError(
                f"{name!r} is refused: this server is read-only (tether mcp --read-only); "
                "start one without --read-only to change runs"
            )
        return await super().call_tool(name, arguments, context)


def build_server(
    producer: Producer, settings: Settings, tenant: str, *, read_only: bool
) -> MCPServer:
    """The MCP server of ``tenant``'s runs (see the module)."""
    return TetherMcpServer(TetherTools(producer, settings, tenant), read_only=read_only)
