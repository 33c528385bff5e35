"""Webhooks without workers: signing and verifying, refused destinations, the run option and
its checks at submit (nothing written), the settings, the body, the dead letters on Redis."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from tether.core.events import Usage
from tether.core.results import RunStatus
from tether.errors import ConfigurationError, InvalidInput, InvalidSignature, SettingsError
from tether.keys import RedisKeys
from tether.producer.client import Producer
from tether.runs.contract import RunResult
from tether.runs.webhooks import sign_webhook, verify_webhook
from tether.runs.webhooks.addresses import check_destination, embedded_ipv4, refused_address
from tether.runs.webhooks.dead import WebhookDeadLetters
from tether.runs.webhooks.delivery import _destination, delivery_for
from tether.settings import Settings, load_settings, masked

SECRET = "s3cret"
BODY = b'{"run_id":"run-1","status":"COMPLETED"}'


def test_a_signed_body_verifies_and_returns_its_json() -> None:
    headers = sign_webhook(BODY, SECRET, "wh-1")
    lower = {k.lower(): v for k, v in headers.items()}  # receivers see any capitalisation
    assert verify_webhook(BODY, lower, SECRET) == {"run_id": "run-1", "status": "COMPLETED"}
    assert verify_webhook(BODY.decode(), headers, SECRET)["run_id"] == "run-1"


@pytest.mark.parametrize(
    ("body", "secret", "age_s", "needle"),
    [
        (BODY.replace(b"COMPLETED", b"FAILED"), SECRET, 0, "does not match"),
        (BODY, "another-secret", 0, "does not match"),
        (BODY, SECRET, 301, "outside the tolerance"),  # a replay of an old delivery
        (BODY, SECRET, -301, "outside the tolerance"),
    ],
)
def test_a_changed_body_wrong_secret_or_old_timestamp_is_refused(
    body: bytes, secret: str, age_s: int, needle: str
) -> None:
    headers = sign_webhook(BODY, SECRET, "wh-1", timestamp=int(time.time()) - age_s)
    with pytest.raises(InvalidSignature, match=needle):
        verify_webhook(body, headers, secret, tolerance_s=300)


def test_a_delivery_without_the_headers_is_refused() -> None:
    with pytest.raises(InvalidSignature, match="not from Tether"):
        verify_webhook(BODY, {"Content-Type": "application/json"}, SECRET)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://10.0.0.7/hook",
        "http://192.168.1.1/hook",
        "http://169.254.169.254/latest/meta-data",  # cloud metadata: link-local
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://0.0.0.0/hook",
    ],
)
def test_loopback_private_and_reserved_addresses_are_refused_unless_allowed(url: str) -> None:
    with pytest.raises(InvalidInput, match="TETHER_WEBHOOK_ALLOW_PRIVATE"):
        check_destination(url, allow_private=False)
    check_destination(url, allow_private=True)


@pytest.mark.parametrize(
    ("address", "embedded"),
    [
        ("2002:7f00:1::", "127.0.0.1"),  # 6to4: the IPv4 address follows 2002:
        ("2002:a00:1::1", "10.0.0.1"),
        ("2002:a9fe:a9fe::", "169.254.169.254"),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "127.0.0.1"),  # Teredo: the client, inverted
        ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "10.0.0.1"),
        ("64:ff9b::7f00:1", "127.0.0.1"),  # NAT64: the last 32 bits
        ("64:ff9b::a9fe:a9fe", "169.254.169.254"),
        ("::ffff:10.0.0.1", "10.0.0.1"),  # IPv4-mapped
        ("::ffff:169.254.169.254", "169.254.169.254"),
        ("::127.0.0.1", "127.0.0.1"),  # IPv4-compatible
        ("::10.0.0.1", "10.0.0.1"),
    ],
)
def test_ipv6_forms_of_a_refused_ipv4_address_are_refused(address: str, embedded: str) -> None:
    """6to4 forms of private addresses passed the check (W2): an IPv6 address is now judged by
    the IPv4 address it carries too, whatever the standard library's tables say of the IPv6
    prefix."""
    parsed = ipaddress.IPv6Address(address)
    assert ipaddress.IPv4Address(embedded) in embedded_ipv4(parsed)
    assert refused_address(parsed)
    with pytest.raises(InvalidInput, match="TETHER_WEBHOOK_ALLOW_PRIVATE"):
        check_destination(f"http://[{address}]:8080/hook", allow_private=False)


def test_local_use_nat64_is_refused_and_public_embeddings_are_not() -> None:
    assert refused_address(ipaddress.IPv6Address("64:ff9b:1::5db8:d822"))  # 64:ff9b:1::/48
    for address in ("2002:5db8:d822::1", "::ffff:93.184.216.34"):  # 93.184.216.34 is public
        assert not refused_address(ipaddress.IPv6Address(address)), address
        check_destination(f"http://[{address}]/hook", allow_private=False)


def test_a_public_address_is_allowed_and_other_schemes_are_not() -> None:
    check_destination("https://93.184.216.34/hook", allow_private=False)
    with pytest.raises(InvalidInput, match=re.escape("'ftp://93.184.216.34/x'")):
        check_destination("ftp://93.184.216.34/x", allow_private=True)


def _settings(redis_url: str, **extra: object) -> Settings:
    return load_settings(broker_url=redis_url, redis_url=redis_url, store_url="memory://", **extra)


@pytest.mark.parametrize(
    ("webhook", "extra", "error", "needle"),
    [
        ("ftp://hooks.example/x", {}, InvalidInput, "'ftp://hooks.example/x'"),
        ("not a url", {}, InvalidInput, "'not a url'"),
        ("http://127.0.0.1:9/x", {"webhook_secrets": '{"*": "x"}'}, InvalidInput, "127.0.0.1"),
        ("http://127.0.0.1:9/x", {"webhook_allow_private": True}, ConfigurationError, "secret"),
        # a credential in a run's own URL would be stored with the run: refused, shown masked
        ("https://u:pw-Secret1@hooks.example/x", {}, InvalidInput, "carries a credential"),
        ("https://hooks.example/x?code=pw-Secret1", {}, InvalidInput, "'code'"),
    ],
)
def test_a_bad_webhook_refuses_the_run_and_writes_nothing(
    redis_url: str, webhook: str, extra: dict[str, object], error: type[Exception], needle: str
) -> None:
    with Producer(_settings(redis_url, **extra)) as producer, pytest.raises(error) as info:
        producer.run_async("s-1", "hi", agent="echo", webhook=webhook)
    assert needle in str(info.value) and "pw-Secret1" not in str(info.value)
    assert redis.Redis.from_url(redis_url).keys("*") == []


def test_the_webhook_settings_are_checked_and_the_secrets_masked() -> None:
    with pytest.raises(SettingsError, match="TETHER_WEBHOOK_URLS"):
        load_settings(webhook_urls='{"acme": "gopher://x"}')
    with pytest.raises(SettingsError, match="TETHER_WEBHOOK_SECRETS"):
        load_settings(webhook_secrets="not json")
    settings = load_settings(
        webhook_urls='{"acme": "https://hooks.example/a", "*": "https://hooks.example/any"}',
        webhook_secrets='{"acme": "very-secret"}',
    )
    assert settings.webhook_url_for("acme") == "https://hooks.example/a"
    assert settings.webhook_url_for("other") == "https://hooks.example/any"
    assert settings.webhook_secret_for("acme") == "very-secret"
    assert settings.webhook_secret_for("other") is None
    assert "very-secret" not in json.dumps(masked(settings)) + repr(settings)


def _result(status: RunStatus = RunStatus.COMPLETED) -> RunResult:
    return RunResult(
        run_id="run-1",
        request_id="req-1",
        session_id="s-1",
        tenant="acme",
        status=status,
        output="x" * 5000,
        steps=2,
        usage=Usage(input_tokens=3, output_tokens=4, total_tokens=7),
    )


def test_the_body_names_the_run_and_summarises_its_output() -> None:
    delivery = delivery_for(_result(), "https://hooks.example/a")
    body = json.loads(delivery.body)
    assert delivery.id == body["id"] == "wh-run-1-completed"
    assert (body["run_id"], body["session_id"], body["tenant"]) == ("run-1", "s-1", "acme")
    assert body["status"] == "COMPLETED" and body["type"] == "run.completed"
    assert len(body["output_summary"]) == 1000
    assert body["usage"] == {
        "kind": "usage",
        "input_tokens": 3,
        "output_tokens": 4,
        "total_tokens": 7,
    }


def test_dead_letters_round_trip_on_redis(redis_url: str) -> None:
    letters = WebhookDeadLetters(redis.Redis.from_url(redis_url), RedisKeys("tether"))
    first = delivery_for(_result(), "https://hooks.example/a")
    second = delivery_for(_result(RunStatus.FAILED), "https://hooks.example/a")
    letters.add(first, "HTTP 500")
    letters.add(second, "timed out after 10 s")
    assert [d.id for d in letters.list()] == [second.id, first.id]  # newest first
    assert letters.list(tenant="other") == []
    stored = letters.get(first.id)
    assert stored is not None and stored.last_error == "HTTP 500" and stored.body == first.body
    assert letters.remove(first.id) and not letters.remove(first.id)
    assert [d.id for d in letters.list()] == [second.id]


def test_the_cli_refuses_a_bad_webhook_with_one_line_and_exit_2(redis_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env.update({"TETHER_BROKER_URL": redis_url, "TETHER_REDIS_URL": redis_url})
    script = Path(sys.executable).parent / "tether"
    argv = [str(script), "submit", "s-1", "hi", "--agent", "echo", "--webhook", "http://10.0.0.7/h"]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=90)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "10.0.0.7" in lines[0] and "Traceback" not in result.stderr
    assert redis.Redis.from_url(redis_url).keys("*") == []


def test_a_url_is_stored_byte_for_byte_unless_it_holds_a_credential() -> None:
    """Every delivery's URL went through the masking, which re-encodes a query
    (``?path=a%2Fb&flag`` was posted as ``?path=a/b&flag=``), and one holding ``***`` was
    taken for a masked credential and given up. Only a URL with a credential is masked at rest,
    and an attempt takes that one back from the settings."""
    for url in ("https://hooks.example/h?path=a%2Fb&flag", "https://hooks.example/h?note=***"):
        delivery = delivery_for(_result(), url)
        assert delivery.url == url
        assert _destination(delivery, load_settings(store_url="memory://")) == url
    secret = "https://hooks:pw-hook-1@hooks.example/t"
    masked = delivery_for(_result(), secret)
    assert masked.url == "https://hooks:***@hooks.example/t"
    settings = load_settings(store_url="memory://", webhook_urls=json.dumps({"acme": secret}))
    assert _destination(masked, settings) == secret
