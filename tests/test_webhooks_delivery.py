"""One webhook attempt against hostile receivers and resolvers, in this process (#47 W2, W4):
the attempt ends at its one deadline (``TETHER_WEBHOOK_TIMEOUT_S``) whatever the receiver or the
name server does, reads a few KiB of a huge answer, and connects to the address it checked.
The same receivers on a real worker: ``tests/test_webhooks_bounds_workers.py``."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.webhook_receiver import (
    HUGE,
    SILENT,
    TRICKLE,
    Receiver,
    tls_for,
    webhook_receiver,
)
from tether.core.results import RunStatus
from tether.runs.contract import RunResult
from tether.runs.webhooks import verify_webhook
from tether.runs.webhooks.delivery import Attempt, Delivery, attempt_delivery, delivery_for
from tether.settings import Settings, load_settings

SECRET = "whsec-delivery-test"
TIMEOUT_S = 1.0
#: Far above the deadline, far below what the receivers would hold an attempt without it.
HELD_BOUND_S = 10.0
#: A public address the check accepts (connecting to it fails, or times out, in a sandbox).
PUBLIC = "93.184.216.34"


def _settings(**extra: Any) -> Settings:
    fields: dict[str, Any] = {
        "store_url": "memory://",
        "webhook_secrets": json.dumps({"*": SECRET}),
        "webhook_allow_private": True,
        "webhook_timeout_s": TIMEOUT_S,
    }
    return load_settings(**{**fields, **extra})


def _delivery(url: str) -> Delivery:
    result = RunResult(
        run_id="run-1",
        request_id="req-1",
        session_id="s-1",
        tenant="acme",
        status=RunStatus.COMPLETED,
        output="done",
    )
    return delivery_for(result, url)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with webhook_receiver() as started:
        yield started


def _timed(delivery: Delivery, settings: Settings, **kwargs: Any) -> tuple[Attempt, float]:
    started = time.monotonic()
    outcome = attempt_delivery(delivery, settings, **kwargs)
    return outcome, time.monotonic() - started


def test_a_trickling_receiver_holds_an_attempt_no_longer_than_its_deadline(
    receiver: Receiver,
) -> None:
    """A byte every half second never trips a per-read timeout: the attempt was held for as
    long as the receiver trickled (60 s here; 39 s in the red-team's run)."""
    receiver.default["/slow"] = TRICKLE
    outcome, took_s = _timed(_delivery(f"{receiver.url}/slow"), _settings())
    assert outcome.error is not None and "timed out after 1 s" in outcome.error
    assert took_s < HELD_BOUND_S
    held = receiver.on("/slow")[0]
    assert held.ended.wait(HELD_BOUND_S) and held.held_s is not None
    assert held.held_s < HELD_BOUND_S  # the sender hung up; the receiver did not finish


def test_a_receiver_that_never_answers_ends_the_attempt_at_its_deadline(
    receiver: Receiver,
) -> None:
    receiver.default["/mute"] = SILENT
    outcome, took_s = _timed(_delivery(f"{receiver.url}/mute"), _settings())
    assert outcome.error is not None and "timed out" in outcome.error
    assert TIMEOUT_S * 0.9 <= took_s < HELD_BOUND_S
    assert receiver.on("/mute")[0].ended.wait(HELD_BOUND_S)


def test_a_huge_answer_is_not_read(receiver: Receiver) -> None:
    """A 400 MB body was read whole; now the status counts and a few KiB are read: the
    receiver gets to send only what the sockets' buffers take before the sender hangs up."""
    receiver.default["/big"] = HUGE
    outcome = attempt_delivery(_delivery(f"{receiver.url}/big"), _settings())
    assert outcome.error is None  # 200: delivered
    answered = receiver.on("/big")[0]
    assert answered.ended.wait(30)
    assert answered.sent_bytes < 64 << 20, answered.sent_bytes
    assert receiver.huge_bytes == 400 << 20


def test_the_connection_goes_to_the_address_that_was_checked(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: the name answers a public address when checked and loopback after. The
    check passed, then the HTTP client resolved the name again and reached the loopback
    receiver. Now the name is resolved once and the connection goes to that public address:
    the receiver sees nothing."""
    real = socket.getaddrinfo
    asked: list[str] = []

    def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "rebind.example":
            return real(host, port, *args, **kwargs)
        asked.append(host)
        return real(PUBLIC if len(asked) == 1 else "127.0.0.1", port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    port = receiver.url.rsplit(":", 1)[1]
    url = f"http://rebind.example:{port}/hook"
    outcome = attempt_delivery(_delivery(url), _settings(webhook_allow_private=False))
    assert receiver.on("/hook") == []
    assert outcome.error is not None  # the public address does not answer here
    assert asked == ["rebind.example"]  # resolved once


def test_a_slow_name_server_ends_the_attempt_at_its_deadline(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tenant's own name server can answer as slowly as the system resolver waits (tens of
    seconds): the deadline covers resolving too."""
    release = threading.Event()
    real = socket.getaddrinfo

    def slow(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "slow-dns.example":
            release.wait(60)
            host = "127.0.0.1"
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    port = receiver.url.rsplit(":", 1)[1]
    try:
        outcome, took_s = _timed(_delivery(f"http://slow-dns.example:{port}/dns"), _settings())
    finally:
        release.set()
    assert outcome.error is not None and "did not resolve within 1 s" in outcome.error
    assert took_s < HELD_BOUND_S
    assert not outcome.final  # DNS may come back: retried


def test_tls_to_a_pinned_address_names_the_url_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connecting to the checked address keeps HTTPS whole: the server name (SNI), the
    certificate checked and the Host header are the URL's host; a certificate for another
    name is refused."""
    context, ca_file = tls_for("hooks.test", tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    with webhook_receiver(tls=context) as tls_receiver:
        port = int(tls_receiver.url.rsplit(":", 1)[1])

        def loopback(host: str, _port: int) -> list[str]:
            return ["127.0.0.1"]

        delivery = _delivery(f"https://hooks.test:{port}/tls")
        assert attempt_delivery(delivery, _settings(), resolve=loopback).error is None
        wrong = attempt_delivery(
            _delivery(f"https://other.test:{port}/wrong"), _settings(), resolve=loopback
        )
    got = tls_receiver.on("/tls")[0]
    assert got.server_name == "hooks.test"
    assert got.headers["Host"] == f"hooks.test:{port}"
    assert verify_webhook(got.body, got.headers, SECRET)["run_id"] == "run-1"
    assert wrong.error is not None and "CERTIFICATE_VERIFY_FAILED" in wrong.error
    assert tls_receiver.on("/wrong") == []
