"""The SDK transport of one server, watched: a stdio subprocess or a streamable-HTTP endpoint,
whose end (the server exited, the HTTP session died) is reported the moment the SDK reads it.

Without the watch a dead stdio server is only noticed by the next call, which then fails: with
it, the pool knows before sending anything that the connection must be started again, so a
server that crashed between two calls costs the second call nothing but the restart.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any, TextIO

import anyio
import httpx2
from mcp import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage

from tether.settings.mcp import McpServerConfig

Streams = tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]
#: An HTTP server may hold a response open for a long call; the call's own limit ends it.
_HTTP_READ_TIMEOUT_S = 3_600.0


class _EndWatch:
    """A read stream that calls ``on_end`` when it ends (end of stream or closed)."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], on_end: Callable[[], None]):
        self._inner = inner
        self._on_end = on_end

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _EndWatch:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self._inner.__anext__()
        except (StopAsyncIteration, anyio.ClosedResourceError):
            self._on_end()
            raise

    async def __aenter__(self) -> _EndWatch:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        self._on_end()
        return await self._inner.__aexit__(exc_type, exc_val, exc_tb)

    def __getattr__(self, name: str) -> Any:  # the SDK reads ``last_context`` when present
        return getattr(self._inner, name)


@contextlib.asynccontextmanager
async def open_transport(config: McpServerConfig, on_end: Callable[[], None]) -> AsyncIterator[Any]:
    """The transport streams of ``config``'s server; ``on_end`` is called when they end."""
    if config.command is not None:
        params = StdioServerParameters(
            command=config.command[0], args=list(config.command[1:]), env=config.env or None,
            cwd=config.cwd,
        )  # fmt: skip
        async with stdio_client(params, errlog=_errlog()) as (read, write):
            yield _EndWatch(read, on_end), write
        return
    assert config.url is not None
    timeout = httpx2.Timeout(config.connect_timeout_s, read=_HTTP_READ_TIMEOUT_S)
    # JSON escapes may grow a text six-fold; past this the SDK refuses the event outright
    limit = 6 * config.max_result_bytes + (1 << 20)
    async with (
        httpx2.AsyncClient(headers=config.headers, timeout=timeout) as http,
        streamable_http_client(config.url, http_client=http, max_sse_event_size=limit) as (
            read,
            write,
        ),
    ):
        yield _EndWatch(read, on_end), write


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: this process's (the worker's log), through a real
    file descriptor even when ``sys.stderr`` is replaced (pytest's capture has none)."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, io.UnsupportedOperation):
            continue
    return open(os.devnull, "w")  # it lives as long as the process
