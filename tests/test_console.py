"""``tether console`` over HTTP (no browser): tenant scoping, the token, the bind rule, and the
guards on actions. Real console processes on the test stack."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from tests.support.console import Console
from tests.support.stack import Stack, unique
from tether.core.results import RunStatus
from tether.keys import RedisKeys

TOKEN = "a-test-token-of-enough-length"


@pytest.fixture(scope="module")
def other_tenant_console(
    stack: Stack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Console]:
    """A console of tenant ``other`` with a token and actions on."""
    log_dir = tmp_path_factory.mktemp("console-auth")
    with Console(stack.env, log_dir, "--tenant", "other", "--token", TOKEN, "--actions") as c:
        yield c


@pytest.fixture(scope="module")
def acme_console(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """A console of tenant ``acme`` with actions, started by an operator whose own tenant
    (``TETHER_TENANT``) is ``default``."""
    env = dict(stack.env, TETHER_TENANT="default")
    log_dir = tmp_path_factory.mktemp("console-acme")
    with Console(env, log_dir, "--tenant", "acme", "--actions") as c:
        yield c


def _get(console: Console, path: str, **kwargs: object) -> httpx.Response:
    return httpx.get(console.url + path, timeout=10, **kwargs)  # type: ignore[arg-type]


def _act(console: Console, path: str, **fields: str) -> str:
    """POST an action with the console's form key; the one-line message it redirects with."""
    found = re.search(r'data-form-key="([^"]+)"', _get(console, "/runs").text)
    assert found, "a console with actions carries its form key"
    answer = httpx.post(console.url + path, data={"form_key": found.group(1), **fields})
    assert answer.status_code == 303, (path, answer.status_code, answer.text)
    return httpx.URL(answer.headers["location"]).params["message"]


def test_every_view_is_tenant_scoped(live_stack: Stack, other_tenant_console: Console) -> None:
    sid = unique("scoped")
    result = live_stack.producer.run(sid, "hi", agent="echo", wait_s=60)  # tenant "default"
    assert result.status is RunStatus.COMPLETED
    auth = {"Authorization": f"Bearer {TOKEN}"}
    listing = _get(other_tenant_console, f"/sessions?q={sid}", headers=auth)
    assert listing.status_code == 200 and f'data-session-id="{sid}"' not in listing.text
    assert "0 session(s) match" in listing.text
    assert _get(other_tenant_console, f"/sessions/{sid}", headers=auth).status_code == 404
    assert _get(other_tenant_console, f"/runs/{result.run_id}", headers=auth).status_code == 404
    assert result.run_id not in _get(other_tenant_console, "/runs", headers=auth).text
    # an action on another tenant's run finds nothing either
    form = {"form_key": "whatever"}
    cancel = httpx.post(
        f"{other_tenant_console.url}/runs/{result.run_id}/cancel", data=form, headers=auth
    )
    assert cancel.status_code == 403  # a foreign form key is refused before anything is read


def test_the_token_is_required_by_header_or_by_the_cookie_it_sets(
    other_tenant_console: Console,
) -> None:
    assert _get(other_tenant_console, "/sessions").status_code == 401
    assert _get(other_tenant_console, "/metrics").status_code == 401
    bad = {"Authorization": "Bearer not-the-token-at-all-no"}
    assert _get(other_tenant_console, "/sessions", headers=bad).status_code == 401
    assert _get(other_tenant_console, "/sessions?token=wrong").status_code == 401
    with httpx.Client(base_url=other_tenant_console.url, timeout=10) as browser:
        opened = browser.get(f"/sessions?token={TOKEN}&q=x")
        assert opened.status_code == 303
        assert opened.headers["location"] == "/sessions?q=x"  # the token leaves the address bar
        assert "httponly" in opened.headers["set-cookie"].lower()
        assert browser.get("/sessions").status_code == 200  # the cookie carries it
    metrics = _get(other_tenant_console, "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert metrics.status_code == 200 and 'tether_queue_depth{tenant="other"}' in metrics.text


def test_actions_are_off_unless_asked(
    stack: Stack, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with Console(stack.env, tmp_path_factory.mktemp("console-ro")) as console:
        page = _get(console, "/runs")
        assert page.status_code == 200 and "data-cancel" not in page.text
        refused = httpx.post(f"{console.url}/runs/run-x/cancel", data={"form_key": "k"})
        assert refused.status_code == 403 and "--actions" in refused.text


def test_binding_beyond_loopback_needs_a_token(stack: Stack) -> None:
    command = [sys.executable, "-m", "tether.producer.ops.cli", "console", "--host", "0.0.0.0"]
    done = subprocess.run(command, env=stack.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--token" in lines[0] and "0.0.0.0" in lines[0], done.stderr
    short = subprocess.run(
        [*command, "--token", "short"], env=stack.env, capture_output=True, text=True, timeout=60
    )
    assert short.returncode == 2 and "at least 16" in short.stderr


def test_actions_act_in_the_consoles_tenant_not_in_tether_tenants(
    live_stack: Stack, acme_console: Console
) -> None:
    """C4: before, cancel went through the Producer's own tenant (``TETHER_TENANT``): acme's
    console answered "unknown run" for acme's queued run (and would have acted on a run of the
    same id of ``default``). Every action must act in ``--tenant``'s."""
    producer = live_stack.producer
    sid = unique("acme-actions")
    slow = producer.run_async(sid, "sleep 3", agent="sleepy", tenant="acme")
    queued = producer.run_async(sid, "after the sleep", agent="echo", tenant="acme")
    message = _act(acme_console, f"/runs/{queued.run_id}/cancel")
    assert message == f"run {queued.run_id}: cancelled: it will never start"
    assert queued.run_result(timeout=30).status is RunStatus.CANCELLED
    assert slow.run_result(timeout=30).status is RunStatus.COMPLETED

    for verb in ("approve", "reject"):
        waiting_sid = unique(f"acme-{verb}")
        waiting = producer.run(
            waiting_sid, "transfer 50", agent="approver", tenant="acme", wait_s=60
        )
        assert waiting.status is RunStatus.WAITING
        call_id = waiting.pending[0].call_id
        path = f"/sessions/{waiting_sid}/calls/{verb}"
        message = _act(acme_console, path, call_id=call_id, agent="approver")
        assert message.startswith(f"{verb}: sent for call {call_id} as run "), message
        run_id = message.split(" as run ", 1)[1].split(";", 1)[0]
        done = producer.handle(run_id, tenant="acme").run_result(timeout=60)
        assert done.status is RunStatus.COMPLETED, (verb, done)

    message = _act(acme_console, f"/sessions/{sid}/signal", name="go", payload='{"ok": true}')
    assert message.startswith("signal go ") and message.endswith("kept until a run waits"), message
    refused = _act(acme_console, f"/sessions/{sid}/signal", name="go", payload="{not json")
    assert refused.startswith("InvalidInput:") and "not JSON" in refused, refused
    mailbox = RedisKeys(live_stack.settings.namespace).session_waits("acme", sid, "signals")
    assert live_stack.redis.client().xlen(mailbox) == 1  # the refused one wrote nothing

    copy = unique("acme-fork")
    assert _act(acme_console, f"/sessions/{sid}/fork", new_session_id=copy) == (
        f"forked {sid} to {copy}"
    )
    assert live_stack.reader().read(copy, tenant="acme") is not None
    assert live_stack.reader().read(copy, tenant="default") is None
