"""An MCP server's tools as Tether tools: :class:`McpToolset` is what an agent lists among its
tools, and each of the server's tools becomes an :class:`McpTool` the model sees like a Python
tool, with the server's JSON schema.

>>> agent = Agent(model, tools=[add, McpToolset(McpServer.named("github"))])  # doctest: +SKIP

A call goes through the same path as a Python tool's: the agent's approvals
(``require_approval`` names the tool as the model sees it), the loop's span and step
checkpoints, the agent's redaction. On top of that, an MCP call

- carries its idempotency key (:attr:`~tether.runtime.tools.ToolContext.idempotency_key`) in the
  request's ``_meta`` under ``tether/idempotency-key``;
- is refused, without a byte sent, when the run's tenant may not use the server
  (``TETHER_MCP_TENANTS``), whose tools that tenant's model never sees either;
- ends at its limit (the server's ``timeout_s``, or its ``tool_timeouts_s`` entry) and fails
  when its text is over ``max_result_bytes``;
- has the server's own credentials masked in its text and errors;
- parks the run ``WAITING`` when the result's ``_meta`` says ``tether/waiting`` (the output comes
  later, like a Python tool returning :class:`~tether.runtime.tools.Waiting`);
- is counted in ``tether_mcp_call_seconds{server,tool,status}`` and traced as ``tether.mcp``.

Every way it can fail (a crash, a hang, an error, a malformed or oversized answer) is a
``TOOL_ERROR`` result the model sees, never a failed run.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from tether.errors import ConfigurationError
from tether.integrations.mcp.errors import McpCallError
from tether.integrations.mcp.pool import McpPool, process_pool
from tether.integrations.mcp.results import as_text, masker, too_large
from tether.integrations.mcp.servers import McpServer
from tether.models.base import ToolSpec
from tether.observability.metrics import mcp_call
from tether.observability.tracing import span
from tether.runtime.tools import WAITING_OUTPUT, Tool, ToolContext, ToolOutcome, failed

if TYPE_CHECKING:
    import mcp_types

    from tether.core.items import ToolCall
    from tether.integrations.mcp.connection import ToolListing

log = logging.getLogger(__name__)
#: A result whose ``_meta`` holds this key (true) parks the call like a Python tool's
#: :class:`~tether.runtime.tools.Waiting`: its output comes later (``tether answer``).
WAITING_META_KEY = "tether/waiting"
#: What model APIs accept as a function name; other characters become ``_``.
_BAD_NAME_CHARS = re.compile(r"[^A-Za-z0-9_\-]")
_MAX_NAME = 64
_STATUS = {
    "McpTimeout": "timeout",
    "McpConnectionLost": "lost",
    "McpUnavailable": "unavailable",
    "McpMalformedResult": "malformed",
    "McpServerError": "protocol",
    "McpNotAllowed": "refused",
}


class McpToolset:
    """The tools of one MCP server, for one agent.

    Args:
        server: an :class:`McpServer`, or the name of one in ``TETHER_MCP_SERVERS``.
        prefix: put before each tool's name (``"gh_"``), so two servers' tools cannot clash;
            a name still taken (by a Python tool, or an earlier source) is skipped.
        include: only these tools of the server (its names for them); None: all.
        pool: the connections to use (default: the process's, :func:`process_pool`).
    """

    def __init__(
        self,
        server: McpServer | str,
        *,
        prefix: str = "",
        include: Collection[str] | None = None,
        pool: McpPool | None = None,
    ) -> None:
        self.server = server if isinstance(server, McpServer) else McpServer.named(server)
        self.prefix = prefix
        self.include = frozenset(include) if include is not None else None
        self._pool = pool
        self._built: tuple[int, tuple[McpTool, ...]] | None = None
        self._warned_at_s = 0.0

    @property
    def pool(self) -> McpPool:
        """The connections this toolset uses."""
        return self._pool if self._pool is not None else process_pool()

    def tools_for(self, tenant: str) -> Sequence[Tool]:
        """The server's tools, for a tenant allowed to use it (none for another); the server's
        listing is cached (see :class:`~tether.settings.mcp.McpServerConfig`)."""
        pool = self.pool
        if not pool.allows(tenant, self.server.name):
            return ()
        try:
            listing = pool.tools(self.server)
        except ConfigurationError:
            raise  # a server the settings do not name: the operator's to fix, loudly
        except Exception as exc:  # this step goes on without them; the next asks again
            self._warn(exc)
            built = self._built
            return built[1] if built is not None else ()
        built = self._built
        if built is None or built[0] != listing.version:
            built = (listing.version, self._build(listing))
            self._built = built
        return built[1]

    def _build(self, listing: ToolListing) -> tuple[McpTool, ...]:
        config = self.pool.config(self.server)
        mask = masker(config.secrets())
        tools: dict[str, McpTool] = {}
        for remote in listing.tools:
            if self.include is not None and remote.name not in self.include:
                continue
            name = _model_name(self.prefix + remote.name)
            if name in tools:
                log.warning("MCP server %r: tool %r skipped (%r is taken)", self.server.name,
                            remote.name, name)  # fmt: skip
                continue
            limit_s = config.timeout_for(remote.name)
            tools[name] = McpTool(self, remote, name, limit_s, config.max_result_bytes, mask)
        return tuple(tools.values())

    def _warn(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._warned_at_s > 60:  # once a minute, not once a step
            self._warned_at_s = now
            log.warning("MCP server %r: its tools are not offered now: %s", self.server.name, exc)


class McpTool(Tool):
    """One tool of an MCP server (see the module): its name as the model sees it, the server's
    description and JSON schema; calling it calls the server."""

    def __init__(
        self,
        toolset: McpToolset,
        remote: mcp_types.Tool,
        name: str,
        limit_s: float,
        max_result_bytes: int,
        mask: Any,
    ) -> None:
        # not Tool.__init__: that derives a tool from a Python function
        self.fn = self._call_remote
        self.toolset = toolset
        self.remote_name = remote.name
        self.name = name
        self.description = (remote.description or remote.title or remote.name).strip()
        schema = dict(remote.input_schema) if remote.input_schema else {}
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        self.parameters: dict[str, Any] = schema
        self.context_param = None
        # the loop's own thread-and-join limit is the agent's tool_timeout_s; this tool ends its
        # call at its own limit inside the pool, where the call can be cancelled on the server
        self.isolated = False
        self.timeout_s = None
        self.limit_s = limit_s
        self.max_result_bytes = max_result_bytes
        self._mask = mask
        self._validator: Any = None
        self._spec: ToolSpec | None = None

    @property
    def spec(self) -> ToolSpec:
        """What the model is told about this tool (built once: asked at every step)."""
        if self._spec is None:
            self._spec = ToolSpec(
                name=self.name, description=self.description, parameters=self.parameters
            )
        return self._spec

    def _call_remote(self, **_: Any) -> str:  # pragma: no cover - execute() calls the server
        raise NotImplementedError("an MCP tool runs through execute()")

    def parse(self, call: ToolCall) -> dict[str, Any] | ToolOutcome:
        """The call's arguments, checked against the server's JSON schema."""
        try:
            raw = json.loads(call.arguments) if call.arguments.strip() else {}
        except (ValueError, RecursionError) as exc:
            return failed(call, "InvalidArguments", f"arguments are not valid JSON: {exc}")
        if not isinstance(raw, dict):
            return failed(call, "InvalidArguments", "arguments must be a JSON object")
        problem = self._schema_problem(raw)
        if problem is not None:
            return failed(call, "InvalidArguments", f"arguments do not match schema: {problem}")
        return raw

    def _schema_problem(self, arguments: dict[str, Any]) -> str | None:
        import jsonschema

        if self._validator is None:
            try:
                cls = jsonschema.validators.validator_for(self.parameters)
                cls.check_schema(self.parameters)
                self._validator = cls(self.parameters)
            except jsonschema.SchemaError:  # the server's schema is its business: pass it on
                self._validator = False
        if self._validator is False:
            return None
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(arguments))
        if error is None:
            return None
        where = ".".join(str(p) for p in error.absolute_path) or "arguments"
        return f"{where}: {error.message[:500]}"

    def execute(self, call: ToolCall, context: ToolContext | None = None) -> ToolOutcome:
        """Validate, call the server, and turn its answer (or its failure) into an outcome."""
        parsed = self.parse(call)
        if isinstance(parsed, ToolOutcome):
            return parsed
        if context is None:  # a direct call outside a run: still a usable, unique key
            context = ToolContext("default", None, "no-run", 0, call.id)
        server = self.toolset.server.name
        attributes = {"mcp.server": server, "mcp.tool": self.remote_name}
        started = time.perf_counter()
        with span("tether.mcp", attributes) as current:
            outcome, status = self._outcome(call, parsed, context)
            current.set_attribute("tether.mcp.status", status)
        mcp_call(server, self.remote_name, status, time.perf_counter() - started)
        return outcome

    def _outcome(
        self, call: ToolCall, arguments: dict[str, Any], context: ToolContext
    ) -> tuple[ToolOutcome, str]:
        server = self.toolset.server.name
        pool = self.toolset.pool
        if not pool.allows(context.tenant, server):
            message = (
                f"tenant {context.tenant!r} may not use MCP server {server!r}; nothing was sent "
                "(add the server to the tenant's entry of TETHER_MCP_TENANTS)"
            )
            return failed(call, "McpNotAllowed", message), "refused"
        try:
            result = pool.call(
                self.toolset.server,
                self.remote_name,
                arguments,
                key=context.idempotency_key,
                timeout_s=self.limit_s,
            )
        except McpCallError as exc:
            name = type(exc).__name__
            return failed(call, name, self._mask(str(exc))), _STATUS.get(name, "unavailable")
        except ConfigurationError:
            raise
        except Exception as exc:  # whatever else the SDK raises is the model's news, not the run's
            message = self._mask(f"MCP server {server!r}: {type(exc).__name__}: {exc}")
            return failed(call, "McpError", message), "unavailable"
        text = self._mask(as_text(result))
        size = too_large(text, self.max_result_bytes)
        if size is not None:
            message = (
                f"the result of tool {self.remote_name!r} of MCP server {server!r} is {size} "
                f"bytes, over its max_result_bytes of {self.max_result_bytes}; ask for less (a "
                "page, a filter) or raise the server's max_result_bytes"
            )
            return failed(call, "McpResultTooLarge", message), "too_large"
        if result.is_error:
            return failed(call, "McpToolError", text or "the tool reported an error"), "error"
        if result.meta and result.meta.get(WAITING_META_KEY):
            return ToolOutcome(call=call, output=WAITING_OUTPUT, ok=True, status="WAITING"), "ok"
        return ToolOutcome(call=call, output=text, ok=True, status="COMPLETED"), "ok"


def _model_name(name: str) -> str:
    """``name`` as a function name every model API accepts."""
    cleaned = _BAD_NAME_CHARS.sub("_", name)[:_MAX_NAME]
    return cleaned or "tool"


def mcp_tools(
    server: McpServer | str,
    *,
    prefix: str = "",
    include: Collection[str] | None = None,
) -> McpToolset:
    """``McpToolset(server, prefix=..., include=...)``: the tools of ``server`` for an agent."""
    return McpToolset(server, prefix=prefix, include=include)
