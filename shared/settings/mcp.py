"""The MCP settings (``TETHER_MCP_*``), a part of :class:`tether.settings.Settings` kept in its own
module (see docs/mcp.md). Plain data and checks: the client that uses them is
:mod:`tether.integrations.mcp`, the server ``tether mcp`` is :mod:`tether.producer.ops.mcp`.

- ``TETHER_MCP_SERVERS``: JSON (or ``@path`` to a JSON file) from server name to a server: a
  command line (stdio) or a URL with headers (streamable HTTP), with its limits. A secret: it
  holds tokens, so it is masked wherever settings are printed.
- ``TETHER_MCP_TENANTS``: JSON (or ``@path``) from tenant (``"*"``: every tenant without its own
  entry) to the names of the servers its runs may use. Unset: every tenant may use every server.
- ``TETHER_MCP_HTTP_TOKEN``: the bearer token ``tether mcp --transport http`` asks of clients.

>>> McpServers.parse('{"files": {"command": ["python", "-m", "files_server"]}}').root["files"].kind
'stdio'
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, RootModel, SecretStr, field_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings

from tether.errors import ConfigurationError, InvalidId
from tether.ids import validate_tenant
from tether.settings.checks import check_http_url
from tether.settings.json import JsonTable, parse_json_setting

SERVERS_VARIABLE = "TETHER_MCP_SERVERS"
TENANTS_VARIABLE = "TETHER_MCP_TENANTS"
#: The key of ``TETHER_MCP_TENANTS`` that applies to every tenant without its own entry.
ANY_TENANT = "*"
#: A server's name: what agents and the allow-list call it (and a metric label).
SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,200}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,200}")
#: Header and variable names holding one of these (lower case, ``-`` read as ``_``) carry a
#: credential: their values are masked wherever a tool's text could show them.
_SECRET_MARKS = (
    "auth", "token", "secret", "key", "password", "passwd", "pwd", "cookie", "credential",
    "signature", "session", "private",
)  # fmt: skip


def _invalid(reason: str) -> PydanticCustomError:
    # a custom error keeps the message exactly ours (no "Value error, " prefix); a ValueError
    return PydanticCustomError("tether_setting", "{reason}", {"reason": reason})


def secret_name(name: str) -> bool:
    """Whether a header or environment variable called ``name`` carries a credential."""
    folded = name.lower().replace("-", "_")
    return any(mark in folded for mark in _SECRET_MARKS)


class McpServerConfig(BaseModel):
    """One MCP server: a command line (stdio) or a URL (streamable HTTP), and its limits.

    Attributes:
        command: the server's command line, for a stdio server (a list: no shell).
        env: variables for the stdio server, on top of a minimal inherited set (PATH, HOME...).
        cwd: the stdio server's working directory.
        url: the endpoint of a streamable-HTTP server.
        headers: HTTP headers sent with every request (``Authorization``...).
        timeout_s: the limit of one call of its tools, unless ``tool_timeouts_s`` names it.
        tool_timeouts_s: limits of single tools, by the server's name for the tool.
        connect_timeout_s: the limit of starting the server (stdio) and the handshake.
        health_timeout_s: after a call that hung, the server must list its tools within this,
            or it is restarted.
        max_result_bytes: a result larger than this (its text, UTF-8) is an error the model sees.
        tools_ttl_s: how long a worker trusts the server's tool list before it asks again (a
            ``listChanged`` notification drops it at once).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: tuple[str, ...] | None = Field(default=None, min_length=1, max_length=256)
    env: dict[str, str] = Field(default_factory=dict, max_length=256, repr=False)
    cwd: str | None = Field(default=None, min_length=1, max_length=4096)
    url: str | None = Field(default=None, max_length=4096)
    headers: dict[str, str] = Field(default_factory=dict, max_length=64, repr=False)
    timeout_s: float = Field(default=60.0, gt=0, le=3_600)
    tool_timeouts_s: dict[str, float] = Field(default_factory=dict, max_length=1024)
    connect_timeout_s: float = Field(default=30.0, gt=0, le=600)
    health_timeout_s: float = Field(default=5.0, gt=0, le=600)
    max_result_bytes: int = Field(default=1_000_000, ge=1, le=64_000_000)
    tools_ttl_s: float = Field(default=300.0, ge=0, le=86_400)

    @field_validator("command")
    @classmethod
    def _command(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and (not value[0].strip() or any("\x00" in a for a in value)):
            raise _invalid("command must start with a program and hold no NUL character")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not _ENV_NAME.fullmatch(name) or "\x00" in text:
                raise _invalid(f"env variable {name!r} is not a valid name (or holds a NUL)")
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not _HEADER_NAME.fullmatch(name) or any(c in text for c in "\r\n\x00"):
                raise _invalid(f"header {name!r} is not a valid header (name or value)")
        return value

    @field_validator("tool_timeouts_s")
    @classmethod
    def _tool_timeouts(cls, value: dict[str, float]) -> dict[str, float]:
        for name, limit in value.items():
            if not 0 < limit <= 3_600:
                raise _invalid(f"tool_timeouts_s of {name!r} must be > 0 and <= 3600")
        return value

    @pydantic.model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise _invalid('give either "command" (a stdio server) or "url" (streamable HTTP)')
        if self.url is not None:
            problem = check_http_url(self.url)
            if problem is not None:
                raise _invalid(f"url: {problem}")
            if self.env or self.cwd:
                raise _invalid('"env" and "cwd" are for stdio servers (a "command")')
        elif self.headers:
            raise _invalid('"headers" are for HTTP servers (a "url")')
        return self

    @property
    def kind(self) -> Literal["stdio", "http"]:
        """The transport: ``stdio`` (a command) or ``http`` (a URL)."""
        return "stdio" if self.command is not None else "http"

    def timeout_for(self, tool: str) -> float:
        """The limit of one call of ``tool``."""
        return self.tool_timeouts_s.get(tool, self.timeout_s)

    def secrets(self) -> list[str]:
        """The credential values this server's settings hold (see :func:`secret_name`): the
        whole value, and for ``Authorization: Bearer x`` also ``x``."""
        found: list[str] = []
        for name, value in [*self.headers.items(), *self.env.items()]:
            if secret_name(name) and value.strip():
                found.append(value)
                scheme, _, credential = value.strip().partition(" ")
                if credential.strip() and scheme.isalpha():
                    found.append(credential.strip())
        return found


class McpServers(JsonTable[McpServerConfig]):
    """MCP servers by name (``TETHER_MCP_SERVERS``)."""

    variable: ClassVar[str] = SERVERS_VARIABLE
    example: ClassVar[str] = '{"files": {"command": ["python", "-m", "my_server"]}}'

    @classmethod
    def check_name(cls, name: str) -> None:
        check_server_name(name)


def check_server_name(name: str) -> str:
    """``name`` when it is a valid server name.

    Raises:
        ValueError: naming the rule.
    """
    if not SERVER_NAME.fullmatch(name):
        raise _invalid(
            f"server name {name[:80]!r} is not valid: use 1-64 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit"
        )
    return name


class McpTenants(RootModel[dict[str, tuple[str, ...]]]):
    """The servers each tenant may use (``TETHER_MCP_TENANTS``); ``"*"`` for the others."""

    model_config = ConfigDict(frozen=True)

    @field_validator("root")
    @classmethod
    def _names(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for tenant, servers in value.items():
            if tenant != ANY_TENANT:
                try:
                    validate_tenant(tenant)
                except InvalidId as exc:
                    raise _invalid(str(exc)) from None
            for server in servers:
                check_server_name(server)
        return value

    @classmethod
    def parse(cls, text: str | None, *, where: str = TENANTS_VARIABLE) -> McpTenants | None:
        """The allow-list, or None when the setting is empty (every tenant, every server).

        Raises:
            ConfigurationError: one line naming the variable and what is wrong.
        """
        if text is None or not text.strip():
            return None
        example = '{"acme": ["files", "github"], "*": []}'
        return parse_json_setting(cls, text, where=where, example=example, empty={})

    def allows(self, tenant: str, server: str) -> bool:
        """Whether ``tenant``'s runs may use ``server``."""
        servers = self.root.get(tenant, self.root.get(ANY_TENANT, ()))
        return server in servers


class McpSettings(BaseSettings):
    """``TETHER_MCP_*`` (mixed into :class:`tether.settings.Settings`)."""

    mcp_servers: SecretStr | None = Field(
        default=None,
        description="MCP servers (secret): JSON (or @path) from name to "
        '{"command": [...], "env": {...}} (stdio) or {"url": ..., "headers": {...}} (HTTP).',
    )
    mcp_tenants: str = Field(
        default="",
        description='Which MCP servers each tenant may use: JSON (or @path) {"acme": ["files"], '
        '"*": []}; unset: every tenant may use every server.',
    )
    mcp_http_token: SecretStr | None = Field(
        default=None,
        description="The bearer token `tether mcp --transport http` asks of its clients (secret).",
    )

    @pydantic.field_validator("mcp_servers")
    @classmethod
    def _servers(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            try:
                # errors unnamed (where=""): the settings name the variable; never the values
                McpServers.parse(value.get_secret_value(), where="")
            except ConfigurationError as exc:
                raise _invalid(str(exc)) from None
        return value

    @pydantic.field_validator("mcp_tenants")
    @classmethod
    def _tenants(cls, value: str) -> str:
        try:
            McpTenants.parse(value, where="")
        except ConfigurationError as exc:
            raise _invalid(str(exc)) from None
        return value

    @pydantic.field_validator("mcp_http_token")
    @classmethod
    def _token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 16:
            raise _invalid("must be at least 16 characters (e.g. `openssl rand -hex 24`)")
        return value

    def mcp_server_table(self) -> McpServers:
        """The parsed ``TETHER_MCP_SERVERS`` (validated when the settings were read)."""
        text = self.mcp_servers.get_secret_value() if self.mcp_servers is not None else None
        return McpServers.parse(text)

    def mcp_allow_list(self) -> McpTenants | None:
        """The parsed ``TETHER_MCP_TENANTS``; None: every tenant may use every server."""
        return McpTenants.parse(self.mcp_tenants)

    def mcp_secret_values(self) -> list[str]:
        """Every credential the MCP settings hold (see :meth:`McpServerConfig.secrets`), and
        the HTTP token: what log redaction masks."""
        values = [s for config in self.mcp_server_table().root.values() for s in config.secrets()]
        if self.mcp_http_token is not None:
            values.append(self.mcp_http_token.get_secret_value())
        return values
