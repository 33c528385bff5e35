"""This process's MCP connections: one per server, owned by the process (never by a run), on one
event-loop thread.

The MCP SDK is asyncio; the agent loop is not. So the pool runs its own event loop in a daemon
thread (``tether-mcp``), started at the first use, and a tool call from a run's thread submits
a coroutine to it and waits, with a deadline, for its result. A pool belongs to the process that
made it: a forked child (a Celery prefork pool process) gets a new one at its first use, and the
worker closes it on warm shutdown (:func:`close_process_pool`, hooked to Celery's
``worker_process_shutdown``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import mcp_types

from tether.integrations.mcp.connection import McpConnection, ToolListing
from tether.integrations.mcp.errors import McpTimeout, McpUnavailable
from tether.integrations.mcp.servers import McpServer

if TYPE_CHECKING:
    from tether.settings import Settings
    from tether.settings.mcp import McpServerConfig, McpServers, McpTenants

log = logging.getLogger(__name__)
_T = TypeVar("_T")
#: How much longer than a call's own limit the calling thread waits for its answer (the loop
#: ends the call at its limit; this only covers a loop too busy to say so in time).
_GRACE_S = 2.0


class McpPool:
    """The MCP connections of one process (see the module).

    Args:
        settings: where named servers and the tenants' allow-list come from (default: the
            process's settings, read at the first use).
    """

    def __init__(self, settings: Settings | None = None) -> None:
        self.pid = os.getpid()
        self._settings = settings
        self._servers: McpServers | None = None
        self._allow: McpTenants | None = None
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._connections: dict[tuple[str, str], McpConnection] = {}
        # by the declaration object (kept, so its id is never reused while listed here)
        self._by_declaration: dict[int, tuple[McpServer, McpConnection]] = {}
        self._closed = False

    # --- configuration -------------------------------------------------------------------------

    def _read_settings(self) -> None:
        if self._servers is not None:
            return
        settings = self._settings
        if settings is None:
            from tether.settings import load_settings

            settings = load_settings()
        self._allow = settings.mcp_allow_list()
        self._servers = settings.mcp_server_table()

    def config(self, server: McpServer) -> McpServerConfig:
        """``server``'s configuration (a named one from ``TETHER_MCP_SERVERS``).

        Raises:
            ConfigurationError: a named server the setting does not hold.
        """
        self._read_settings()
        assert self._servers is not None
        return server.resolve(self._servers)

    def allows(self, tenant: str, server: str) -> bool:
        """Whether ``tenant``'s runs may use ``server`` (``TETHER_MCP_TENANTS``)."""
        self._read_settings()
        return self._allow is None or self._allow.allows(tenant, server)

    def connection(self, server: McpServer) -> McpConnection:
        """``server``'s connection (made on first use; it starts at its first call)."""
        known = self._by_declaration.get(id(server))
        if known is not None and known[0] is server and not self._closed:
            return known[1]  # the hot path: no settings lookup, no key to build
        config = self.config(server)
        key = (server.name, config.model_dump_json())
        with self._lock:
            if self._closed:
                raise McpUnavailable(
                    f"MCP server {server.name!r}: this process's MCP connections are closed "
                    "(the worker is shutting down)"
                )
            found = self._connections.get(key)
            if found is None:
                found = McpConnection(server.name, config, on_open=_count_open)
                self._connections[key] = found
            self._by_declaration[id(server)] = (server, found)
            return found

    # --- calls from other threads --------------------------------------------------------------

    def tools(self, server: McpServer) -> ToolListing:
        """``server``'s tools, from the cache while fresh (no hop to the loop then).

        Raises:
            McpCallError: the server could not be listed.
        """
        conn = self.connection(server)
        listing = conn.listing
        if listing is not None and not conn.stale and conn.fresh(listing):
            return listing
        limit_s = conn.config.connect_timeout_s + conn.config.timeout_s
        return self._run(lambda: conn.tools(), limit_s, conn, "listing its tools")

    def call(
        self, server: McpServer, tool: str, arguments: dict[str, Any], *, key: str, timeout_s: float
    ) -> mcp_types.CallToolResult:
        """Call ``tool`` of ``server`` with the idempotency ``key``, within ``timeout_s``
        (starting the server, when it must be, counts against it).

        Raises:
            McpCallError: why there is no result.
        """
        conn = self.connection(server)

        async def call() -> mcp_types.CallToolResult:
            return await conn.call(tool, arguments, key=key, timeout_s=timeout_s)

        return self._run(call, timeout_s, conn, f"calling {tool!r}")

    def _run(
        self,
        make: Callable[[], Awaitable[_T]],
        limit_s: float,
        conn: McpConnection,
        doing: str,
    ) -> _T:
        loop = self._running_loop()
        context = contextvars.copy_context()  # the caller's span: its trace goes in ``_meta``

        async def bounded() -> _T:
            try:
                async with asyncio.timeout(limit_s):
                    return await make()
            except TimeoutError:
                conn.suspect()
                raise McpTimeout(
                    f"MCP server {conn.name!r} did not answer within {limit_s} s while {doing}; "
                    "the call was cancelled (raise timeout_s or tool_timeouts_s of the server)"
                ) from None

        future = _submit(loop, bounded, context)
        try:
            return future.result(timeout=limit_s + _GRACE_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            loop.call_soon_threadsafe(conn.suspect)
            raise McpTimeout(
                f"MCP server {conn.name!r} did not answer within {limit_s} s while {doing}"
            ) from None
        except concurrent.futures.CancelledError:
            raise McpUnavailable(
                f"MCP server {conn.name!r}: the call was cut short, the worker is shutting down"
            ) from None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                if os.getpid() != self.pid:
                    raise RuntimeError("an MCP pool is used in a process it was not made in")
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(
                    target=_serve, args=(loop, ready), name="tether-mcp", daemon=True
                )
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    # --- the end -------------------------------------------------------------------------------

    def connected(self, server: McpServer) -> bool:
        """Whether ``server`` has a live connection (one whose end was seen is not)."""
        return self.connection(server).live

    def opened(self) -> dict[str, int]:
        """Connections started so far, by server name (restarts included)."""
        with self._lock:
            found: dict[str, int] = {}
            for (name, _), conn in self._connections.items():
                found[name] = found.get(name, 0) + conn.opened
            return found

    def close(self, timeout_s: float = 15.0) -> None:
        """Close every connection (stdio servers exit) and stop the loop; later uses fail."""
        with self._lock:
            self._closed = True
            loop, thread = self._loop, self._thread
            connections = list(self._connections.values())
            self._loop = self._thread = None
        if loop is None or thread is None or os.getpid() != self.pid:
            return

        async def close_all() -> None:
            await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(close_all(), loop).result(timeout=timeout_s)
        except Exception as exc:  # shutting down: say so, never hold the exit
            log.warning("MCP connections not all closed: %s", exc)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)


def _serve(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    loop.call_soon(ready.set)
    try:
        loop.run_forever()
    finally:
        loop.close()


def _submit(
    loop: asyncio.AbstractEventLoop,
    make: Callable[[], Awaitable[_T]],
    context: contextvars.Context,
) -> concurrent.futures.Future[_T]:
    """Run ``make()`` as a task of ``loop`` in ``context``; cancelling the future cancels it."""
    result: concurrent.futures.Future[_T] = concurrent.futures.Future()

    async def run() -> _T:
        return await make()

    def start() -> None:
        if result.cancelled():
            return
        task = loop.create_task(run(), context=context)

        def settle(done: asyncio.Task[_T]) -> None:
            if result.done():
                return
            if done.cancelled():
                result.cancel()
            elif done.exception() is not None:
                result.set_exception(done.exception())
            else:
                result.set_result(done.result())

        task.add_done_callback(settle)
        result.add_done_callback(
            lambda f: loop.call_soon_threadsafe(task.cancel) if f.cancelled() else None
        )

    loop.call_soon_threadsafe(start)
    return result


def _count_open(server: str) -> None:
    from tether.observability.metrics import mcp_connection_opened

    mcp_connection_opened(server)


_pool: McpPool | None = None
_pool_lock = threading.Lock()


def process_pool() -> McpPool:
    """This process's pool (a new one after a fork: connections never cross processes)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():
            _pool = McpPool()
        return _pool


def close_process_pool(timeout_s: float = 15.0) -> None:
    """Close this process's pool, if it has one (a warm shutdown; harmless when unused)."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None and pool.pid == os.getpid():
        pool.close(timeout_s)
