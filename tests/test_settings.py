"""Settings: environment with prefix, clear errors naming the variable, secrets masked."""

from __future__ import annotations

import pytest

from tether.errors import ConfigurationError
from tether.settings import load_settings, masked


def test_defaults_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_LEASE_TTL_MS", "2500")
    monkeypatch.setenv("TETHER_BROKER_URL", "redis://127.0.0.1:1/0")
    settings = load_settings(max_attempts=5)
    assert settings.lease_ttl_ms == 2500
    assert settings.max_attempts == 5
    assert settings.effective_redis_url == settings.broker_url
    assert settings.visibility_timeout_s > settings.max_run_s


def test_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_LEASE_TTL_MS", "soon")
    with pytest.raises(ConfigurationError, match="TETHER_LEASE_TTL_MS"):
        load_settings()


def test_unknown_variable_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_LEASE_TTL", "1000")
    with pytest.raises(ConfigurationError, match="TETHER_LEASE_TTL"):
        load_settings()


def test_amqp_broker_needs_a_redis_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_BROKER_URL", "amqp://guest:guest@localhost//")
    with pytest.raises(ConfigurationError, match="TETHER_REDIS_URL"):
        _ = load_settings().effective_redis_url


def test_masked_hides_secrets_and_url_passwords(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_OPENAI_API_KEY", "sk-very-secret")
    monkeypatch.setenv("TETHER_BROKER_URL", "redis://:hunter2@127.0.0.1:6379/0")
    shown = masked(load_settings())
    text = repr(shown)
    assert "sk-very-secret" not in text and "hunter2" not in text
    assert shown["TETHER_OPENAI_API_KEY"] == "********"
