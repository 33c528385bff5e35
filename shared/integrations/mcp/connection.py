"""One MCP server's connection in a process: started on first use, restarted after a crash
(spaced by a backoff), health-checked after a call that hung, closed on shutdown; its tool list
cached for ``tools_ttl_s`` and dropped when the server says it changed.

Everything here runs in the pool's event loop (:mod:`tether.integrations.mcp.pool`). The SDK's
``Client`` is an async context manager whose task groups must be left by the task that entered
them, so each connection is held open by an *owner* task that enters it, hands the client over
and waits to be told to close; calls are tasks of their own that share the client (the protocol
multiplexes requests on one connection).

A list change reaches us either way the server speaks: as a ``notifications/tools/list_changed``
(protocol versions up to 2025-11-25) or as an event of a ``subscriptions/listen`` stream the owner
opens (2026-07-28 on).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import mcp_types
import mcp_types.version
from mcp import Client, MCPError
from pydantic import ValidationError

from tether.integrations.mcp.errors import (
    McpConnectionLost,
    McpMalformedResult,
    McpServerError,
    McpTimeout,
    McpUnavailable,
)
from tether.integrations.mcp.transport import open_transport
from tether.settings.mcp import McpServerConfig

log = logging.getLogger(__name__)

#: The call's ``_meta`` key of its idempotency key (see docs/mcp.md, for server authors).
IDEMPOTENCY_META_KEY = "tether/idempotency-key"
#: Restart backoff: the n-th failed start in a row waits ``min(BASE * 2**(n-1), MAX)`` seconds.
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 30.0
#: How long closing waits for a server to exit before the SDK's own kill escalation ends it.
CLOSE_TIMEOUT_S = 8.0


@dataclass(frozen=True)
class ToolListing:
    """A server's tools as listed once (``version`` grows with every listing of a process)."""

    version: int
    tools: tuple[mcp_types.Tool, ...]
    fetched_at_s: float


def backoff_s(failures: int) -> float:
    """The wait before the next start after ``failures`` failed starts in a row."""
    return 0.0 if failures <= 0 else min(BACKOFF_BASE_S * 2 ** (failures - 1), BACKOFF_MAX_S)


class McpConnection:
    """The connection to one server (see the module)."""

    _versions = 0

    def __init__(
        self, name: str, config: McpServerConfig, *, on_open: Callable[[str], None] | None = None
    ) -> None:
        self.name = name
        self.config = config
        self.opened = 0
        """Connections started so far (1 while the first lives; a restart adds one)."""
        self._on_open = on_open
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lost = False
        self._checking: asyncio.Task[None] | None = None
        self._retiring: set[asyncio.Task[None]] = set()
        self._lock: asyncio.Lock | None = None
        self._failures = 0
        self._retry_at_s = 0.0
        self._last_error = ""
        self.listing: ToolListing | None = None
        """The last tool listing (read from other threads: it is replaced, never changed)."""
        self.stale = False
        """The server said its tools changed since :attr:`listing`."""

    # --- the connection ------------------------------------------------------------------------

    async def client(self) -> Client:
        """The live client, started (again) when there is none or it ended.

        Raises:
            McpUnavailable: the server could not be started, or it is waiting out its backoff.
        """
        checking = self._checking
        if checking is not None and not checking.done():
            await asyncio.wait({checking})  # bounded: the check has its own limit
        if self._usable():
            assert self._client is not None
            return self._client
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._usable():
                assert self._client is not None
                return self._client
            self._retire()
            wait_s = self._retry_at_s - time.monotonic()
            if wait_s > 0:
                raise McpUnavailable(
                    f"MCP server {self.name!r} failed to start {self._failures} time(s) in a row "
                    f"({self._last_error}); the next attempt is in {wait_s:.1f} s"
                )
            return await self._start()

    def _usable(self) -> bool:
        return self._client is not None and not self._lost

    @property
    def live(self) -> bool:
        """Whether a connection is open and not known to have ended."""
        return self._usable()

    async def _start(self) -> Client:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Client] = loop.create_future()
        ready.add_done_callback(_retrieved)
        stop = asyncio.Event()
        self._stop, self._lost = stop, False
        self.listing, self.stale = None, False
        self._owner = loop.create_task(self._own(ready, stop), name=f"tether-mcp-{self.name}")
        try:
            async with asyncio.timeout(self.config.connect_timeout_s):
                client = await asyncio.shield(ready)
        except BaseException as exc:
            self._failures += 1
            self._retry_at_s = time.monotonic() + backoff_s(self._failures)
            self._last_error = _describe(exc, self.config.connect_timeout_s)
            self._retire(now=True)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise McpUnavailable(
                f"MCP server {self.name!r} could not be started: {self._last_error}"
            ) from None
        self._failures, self._client = 0, client
        self.opened += 1
        if self._on_open is not None:
            self._on_open(self.name)
        return client

    async def _own(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """Hold one connection open until ``stop`` (or until it ends by itself)."""
        try:
            async with Client(
                open_transport(self.config, lambda: self._ended(stop)),
                message_handler=self._on_message,
                cache=None,  # our own cache: one listing per TTL, dropped on listChanged
                client_info=mcp_types.Implementation(name="tether", version="1"),
            ) as client:
                ready.set_result(client)
                listener = asyncio.create_task(self._listen(client, stop))
                try:
                    await stop.wait()
                finally:
                    listener.cancel()
                    with contextlib.suppress(BaseException):
                        await listener
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else McpUnavailable("closed"))
            elif not stop.is_set():
                log.warning("MCP server %r: connection ended: %s", self.name, _describe(exc, 0))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._ended(stop)

    def _ended(self, stop: asyncio.Event) -> None:
        if stop is self._stop:  # not a connection closed earlier
            self._lost = True

    async def _listen(self, client: Client, stop: asyncio.Event) -> None:
        """Follow the 2026-07-28 change events (an earlier server notifies instead)."""
        if client.protocol_version in mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS:
            return
        tools = client.server_capabilities.tools
        if tools is None or not tools.list_changed:
            return
        try:
            async with client.listen(tools_list_changed=True) as events:
                async for _event in events:
                    self.stale = True
        except Exception as exc:  # no stream: listings still expire with their TTL
            if not stop.is_set():
                log.info("MCP server %r: no change events (%s)", self.name, _describe(exc, 0))

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self.stale = True
        elif isinstance(message, Exception):
            log.warning("MCP server %r: transport error: %s", self.name, _describe(message, 0))

    def suspect(self) -> None:
        """A call on it hung: check, in the background, that the server still answers (a tool
        listing within its ``health_timeout_s``); the next call waits for the verdict, and a
        server that fails it is restarted. Called in the loop."""
        if self._client is None or (self._checking is not None and not self._checking.done()):
            return
        self._checking = asyncio.get_running_loop().create_task(self._check_health(self._client))

    async def _check_health(self, client: Client) -> None:
        limit_s = self.config.health_timeout_s
        try:
            async with asyncio.timeout(limit_s):
                await client.list_tools()
        except Exception as exc:
            if client is self._client:
                log.warning(
                    "MCP server %r failed its health check (%s); restarting it",
                    self.name,
                    _describe(exc, limit_s),
                )
                self._lost = True

    def _retire(self, *, now: bool = False) -> None:
        """Let go of the current connection; it closes in the background (a stdio server is
        given its grace period, then killed), so a restart never waits for it. ``now``: a
        connection that never started, cancelled at once."""
        owner, stop = self._owner, self._stop
        self._owner, self._client = None, None
        if stop is not None:
            stop.set()
        if owner is not None and not owner.done():
            if now:
                owner.cancel()
            retiring = asyncio.get_running_loop().create_task(_closed(owner))
            self._retiring.add(retiring)
            retiring.add_done_callback(self._retiring.discard)

    async def close(self) -> None:
        """Close the connection (a stdio server gets its stdin closed, then is ended) and wait
        for the ones being closed."""
        self._retire()
        if self._retiring:
            await asyncio.wait(set(self._retiring))

    # --- calls ---------------------------------------------------------------------------------

    async def tools(self) -> ToolListing:
        """The server's tools: the cached listing while fresh, else listed again."""
        listing = self.listing
        if listing is not None and not self.stale and self._usable() and self.fresh(listing):
            return listing
        client = await self.client()
        self.stale = False
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(100):  # a paginator that never ends cannot hang a step
            page = await self._guard(client.list_tools(cursor=cursor), "listing tools")
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        McpConnection._versions += 1
        self.listing = ToolListing(McpConnection._versions, tuple(tools), time.monotonic())
        return self.listing

    def fresh(self, listing: ToolListing) -> bool:
        """Whether ``listing`` is younger than the server's ``tools_ttl_s``."""
        return time.monotonic() - listing.fetched_at_s < self.config.tools_ttl_s

    async def call(
        self, tool: str, arguments: dict[str, Any], *, key: str, timeout_s: float
    ) -> mcp_types.CallToolResult:
        """Call ``tool`` with the idempotency ``key`` in the request's ``_meta``.

        Raises:
            McpCallError: a subclass saying why there is no result (see its module).
        """
        client = await self.client()
        meta = cast(mcp_types.RequestParamsMeta, {IDEMPOTENCY_META_KEY: key})
        request = client.call_tool(tool, arguments, read_timeout_seconds=timeout_s, meta=meta)
        result: mcp_types.CallToolResult = await self._guard(
            request, f"calling {tool!r}", timeout_s=timeout_s
        )
        return result

    async def _guard(self, request: Any, doing: str, *, timeout_s: float | None = None) -> Any:
        """Await ``request``, turning the SDK's failures into :class:`McpCallError` s."""
        try:
            return await request
        except MCPError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED:
                self._lost = True
                raise McpConnectionLost(
                    f"MCP server {self.name!r} closed the connection while {doing} (it crashed "
                    "or exited); the next call starts it again"
                ) from None
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                self.suspect()
                raise McpTimeout(
                    f"MCP server {self.name!r} did not answer within {timeout_s} s while {doing}; "
                    "the call was cancelled (raise timeout_s or tool_timeouts_s of the server)"
                ) from None
            raise McpServerError(f"MCP server {self.name!r} refused {doing}: {exc}") from None
        except ValidationError as exc:
            raise McpMalformedResult(
                f"MCP server {self.name!r} answered {doing} with a malformed result "
                f"({exc.error_count()} problem(s), first: {exc.errors()[0]['msg']})"
            ) from None


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Mark a start's failure as seen (its caller may have stopped waiting for it)."""
    if not future.cancelled():
        future.exception()


async def _closed(owner: asyncio.Task[None]) -> None:
    """Wait for ``owner`` to leave its connection; cancel it when that takes too long."""
    done, _ = await asyncio.wait({owner}, timeout=CLOSE_TIMEOUT_S)
    if not done:
        owner.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait({owner}, timeout=CLOSE_TIMEOUT_S)


def _describe(exc: BaseException, timeout_s: float) -> str:
    """One line about ``exc`` (the first leaf of an exception group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout_s} s"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__
