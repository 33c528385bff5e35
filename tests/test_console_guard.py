"""#29 N4: the console answers only to its own names, takes actions only from its own pages, and
may not be framed. A real ``tether console --actions`` process on the test stack, over HTTP.

Before: any ``Host`` got the pages (and the form key in them), so a DNS-rebinding page could read
the key and post actions; no ``X-Frame-Options`` or CSP, so another site framed the runs page and
one click on the framed button cancelled a run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from tests.support.console import Console
from tests.support.stack import Stack
from tether.producer.ops.console.guard import host_name

CONFIGURED = "console.example.internal"


@pytest.fixture(scope="module")
def console(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    log_dir = tmp_path_factory.mktemp("console-guard")
    with Console(stack.env, log_dir, "--actions", "--allow-host", CONFIGURED) as running:
        yield running


def _get(console: Console, path: str, host: str | None = None) -> httpx.Response:
    headers = {"host": host} if host is not None else {}
    return httpx.get(console.url + path, headers=headers, timeout=10)


def _form_key(console: Console) -> str:
    found = re.search(r'data-form-key="([^"]+)"', _get(console, "/runs").text)
    assert found, "the runs page of a console with actions carries the form key"
    return found.group(1)


def test_a_foreign_host_is_refused_and_sees_no_form_key(console: Console) -> None:
    for host in ("attacker.example", f"attacker.example:{console.port}", "127.0.0.2"):
        refused = _get(console, "/runs", host=host)
        assert refused.status_code == 421, (host, refused.status_code)
        assert "TETHER_CONSOLE_HOSTS" in refused.text  # says how to allow a name
        assert "form_key" not in refused.text and "data-form-key" not in refused.text


def test_loopback_names_the_bind_address_and_configured_names_are_served(
    console: Console,
) -> None:
    for host in (f"127.0.0.1:{console.port}", f"localhost:{console.port}", CONFIGURED):
        assert _get(console, "/runs", host=host).status_code == 200, host


def test_a_cross_origin_post_is_refused(console: Console) -> None:
    key = _form_key(console)
    url = f"{console.url}/runs/run-none/cancel"
    for origin in ("http://attacker.example", "null", f"http://localhost:{console.port + 1}"):
        refused = httpx.post(url, data={"form_key": key}, headers={"origin": origin}, timeout=10)
        assert refused.status_code == 403, (origin, refused.status_code)
        assert "origin" in refused.text
    # the console's own origin passes the guard (and then finds no such run)
    own = httpx.post(url, data={"form_key": key}, headers={"origin": console.url}, timeout=10)
    assert own.status_code == 404


def test_every_response_forbids_framing(console: Console) -> None:
    responses = [
        _get(console, "/"),
        _get(console, "/runs"),
        _get(console, "/static/console.css"),
        _get(console, "/no-such-page"),
        _get(console, "/runs", host="attacker.example"),
        httpx.post(f"{console.url}/runs/x/cancel", headers={"origin": "null"}, timeout=10),
    ]
    for response in responses:
        assert response.headers.get("x-frame-options") == "DENY", response.url
        csp = response.headers.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp, response.url


def test_host_names_lose_their_port() -> None:
    assert host_name("LocalHost:8765") == "localhost"
    assert host_name("[::1]:8765") == "::1"
    assert host_name("::1") == "::1"
    assert host_name("console.example.internal") == "console.example.internal"
