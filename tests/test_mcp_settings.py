"""#49: the MCP settings (``TETHER_MCP_SERVERS``, ``TETHER_MCP_TENANTS``,
``TETHER_MCP_HTTP_TOKEN``): one line naming the variable when one is wrong, never its secrets;
the allow-list's rules; which values are credentials (masked in results, errors and logs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.errors import ConfigurationError, SettingsError
from tether.integrations.mcp import McpServer
from tether.runtime.redaction import settings_redactor
from tether.settings import Settings, load_settings, masked
from tether.settings.mcp import McpServers, McpTenants, secret_name

TOKEN = "ghp_" + "Z9" * 18
SERVERS = {
    "files": {
        "command": ["python", "-m", "files"],
        "env": {"API_KEY": "k-0123456789", "MODE": "fast"},
    },
    "gh": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": f"Bearer {TOKEN}"}},
}


def test_servers_parse_from_json_or_a_file(tmp_path: Path) -> None:
    settings = Settings(mcp_servers=json.dumps(SERVERS))
    table = settings.mcp_server_table().root
    assert table["files"].kind == "stdio" and table["gh"].kind == "http"
    assert table["gh"].timeout_for("anything") == 60.0
    path = tmp_path / "servers.json"
    path.write_text(json.dumps(SERVERS))
    assert Settings(mcp_servers=f"@{path}").mcp_server_table() == settings.mcp_server_table()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("{not json", "is not JSON"),
        ('{"x": {"command": ["a"], "url": "http://h/mcp"}}', 'either "command"'),
        ('{"x": {}}', 'either "command"'),
        ('{"x": {"url": "ftp://h/mcp"}}', "scheme 'ftp://' is not supported"),
        ('{"x": {"url": "http://h/mcp", "env": {"A": "b"}}}', '"env" and "cwd" are for stdio'),
        ('{"bad name": {"command": ["a"]}}', "server name 'bad name' is not valid"),
        ('{"x": {"command": ["a"], "timeout_s": 0}}', "greater than 0"),
        ('{"x": {"command": ["a"], "typo": 1}}', "Extra inputs are not permitted"),
        ('{"x": {"command": ["a"]}, "x": {"command": ["b"]}}', "has the key 'x' twice"),
    ],
)
def test_a_wrong_server_is_one_line_naming_the_variable(
    value: str, problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_MCP_SERVERS", value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert "TETHER_MCP_SERVERS=********" in message and problem in message
    assert "\n" not in message


def test_a_wrong_entry_never_shows_the_secret_beside_it(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = {"gh": {"url": "https://h/mcp", "headers": {"Authorization": f"Bearer {TOKEN}\n"}}}
    monkeypatch.setenv("TETHER_MCP_SERVERS", json.dumps(bad))
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "header 'Authorization' is not a valid header" in str(caught.value)
    assert TOKEN not in str(caught.value)


def test_servers_are_masked_when_settings_are_printed() -> None:
    shown = masked(Settings(mcp_servers=json.dumps(SERVERS)))
    assert shown["TETHER_MCP_SERVERS"] == "********"
    assert TOKEN not in repr(Settings(mcp_servers=json.dumps(SERVERS)))


def test_credentials_are_told_by_their_names() -> None:
    assert secret_name("Authorization") and secret_name("X-Api-Key") and secret_name("GH_TOKEN")
    assert not secret_name("Accept") and not secret_name("MODE")
    values = Settings(mcp_servers=json.dumps(SERVERS)).mcp_secret_values()
    assert set(values) == {f"Bearer {TOKEN}", TOKEN, "k-0123456789"}  # not MODE's "fast"


def test_the_workers_log_redaction_masks_them() -> None:
    redact = settings_redactor(Settings(mcp_servers=json.dumps(SERVERS)))
    assert redact(f"sent {TOKEN} and k-0123456789, mode fast") == "sent *** and ***, mode fast"


def test_the_allow_list() -> None:
    assert Settings().mcp_allow_list() is None  # unset: every tenant, every server
    allow = McpTenants.parse('{"acme": ["files", "gh"], "*": ["files"], "solo": []}')
    assert allow is not None
    assert allow.allows("acme", "gh") and allow.allows("other", "files")
    assert not allow.allows("other", "gh") and not allow.allows("solo", "files")
    without_default = McpTenants.parse('{"acme": ["gh"]}')
    assert without_default is not None and not without_default.allows("other", "gh")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ('{"acme": "files"}', "valid tuple"),
        ('{"bad tenant!": []}', "tenant"),
        ('{"a": ["no way"]}', "server name"),
    ],
)
def test_a_wrong_allow_list_is_refused(value: str, problem: str) -> None:
    with pytest.raises(SettingsError, match=problem):
        load_settings(mcp_tenants=value)


def test_the_http_token_must_be_long() -> None:
    with pytest.raises(SettingsError, match="at least 16 characters"):
        load_settings(mcp_http_token="short")


def test_a_named_server_missing_from_the_settings_says_which_exist() -> None:
    servers = McpServers.parse(json.dumps(SERVERS))
    assert McpServer.named("gh").resolve(servers).url == "https://mcp.example.com/mcp"
    with pytest.raises(
        ConfigurationError,
        match=r"no MCP server 'nope' in TETHER_MCP_SERVERS \(it names: files, gh\)",
    ):
        McpServer.named("nope").resolve(servers)


def test_a_server_declared_in_python_is_checked_at_once() -> None:
    with pytest.raises(ConfigurationError, match="MCP server 'x': url"):
        McpServer.http("x", "not a url")
    with pytest.raises(ConfigurationError, match="server name"):
        McpServer.stdio("no spaces", ["a"])
    assert "Bearer" not in repr(
        McpServer.http("x", "http://h/mcp", headers={"Authorization": "Bearer 0123456789abcdef"})
    )
