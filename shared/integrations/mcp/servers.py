"""An MCP server as an agent declares it: in Python (:meth:`McpServer.stdio`,
:meth:`McpServer.http`) or by name from ``TETHER_MCP_SERVERS`` (:meth:`McpServer.named`).

A declaration is plain data: building one starts nothing and reads no setting. The process's
pool (:mod:`tether.integrations.mcp.pool`) resolves it at first use and owns the connection.

>>> McpServer.stdio("files", ["python", "-m", "files_server"]).name
'files'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.errors import ConfigurationError
from tether.settings.mcp import SERVERS_VARIABLE, McpServerConfig, McpServers, check_server_name


@dataclass(frozen=True)
class McpServer:
    """A server the tools of an agent come from.

    Attributes:
        name: what the allow-list (``TETHER_MCP_TENANTS``), metrics and errors call it.
        config: its command or URL and limits; None: the entry of ``TETHER_MCP_SERVERS`` named
            ``name``, read where the tools are used (a worker), never stored.
    """

    name: str
    config: McpServerConfig | None = None

    def __post_init__(self) -> None:
        try:
            check_server_name(self.name)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None

    @classmethod
    def stdio(
        cls,
        name: str,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        **limits: Any,
    ) -> McpServer:
        """A server started as ``command`` (no shell), spoken to over its stdin and stdout.

        ``limits``: ``timeout_s``, ``tool_timeouts_s``, ``connect_timeout_s``,
        ``health_timeout_s``, ``max_result_bytes``, ``tools_ttl_s`` (see
        :class:`~tether.settings.mcp.McpServerConfig`).
        """
        fields = {"command": tuple(command), "env": dict(env or {}), "cwd": cwd, **limits}
        return cls(name, _config(name, fields))

    @classmethod
    def http(
        cls, name: str, url: str, *, headers: Mapping[str, str] | None = None, **limits: Any
    ) -> McpServer:
        """A streamable-HTTP server at ``url``, sent ``headers`` with every request (put tokens
        in ``TETHER_MCP_SERVERS`` and use :meth:`named` instead: settings are never stored)."""
        return cls(name, _config(name, {"url": url, "headers": dict(headers or {}), **limits}))

    @classmethod
    def named(cls, name: str) -> McpServer:
        """The server ``name`` of ``TETHER_MCP_SERVERS``, looked up where its tools are used."""
        return cls(name)

    def resolve(self, servers: McpServers) -> McpServerConfig:
        """The server's configuration (``servers``: the parsed ``TETHER_MCP_SERVERS``).

        Raises:
            ConfigurationError: a named server the setting does not hold.
        """
        if self.config is not None:
            return self.config
        found = servers.root.get(self.name)
        if found is None:
            known = ", ".join(sorted(servers.root)) or "none"
            raise ConfigurationError(
                f"no MCP server {self.name!r} in {SERVERS_VARIABLE} (it names: {known}); add it "
                f'there, e.g. {{"{self.name}": {{"command": ["..."]}}}}, or declare it with '
                "McpServer.stdio(...) / McpServer.http(...)"
            )
        return found


def _config(name: str, fields: dict[str, Any]) -> McpServerConfig:
    import pydantic

    try:
        return McpServerConfig.model_validate({k: v for k, v in fields.items() if v is not None})
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        at = "".join(f"{p}: " for p in first["loc"])
        raise ConfigurationError(f"MCP server {name!r}: {at}{first['msg']}") from None
