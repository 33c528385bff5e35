"""The webhook settings (``TETHER_WEBHOOK_*``), a part of :class:`tether.settings.Settings`
kept in its own module (see docs/webhooks.md).

Per-tenant values are JSON objects from tenant to value; the key ``"*"`` applies to every tenant
without its own entry.
"""

from __future__ import annotations

import pydantic
from pydantic import Field, SecretStr
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings

from tether.errors import InvalidId
from tether.ids import validate_tenant
from tether.settings.checks import check_http_url
from tether.settings.json import DuplicateKey, loads_setting

#: The key of a per-tenant map that applies to every tenant without its own entry.
ANY_TENANT = "*"


def _invalid(reason: str) -> PydanticCustomError:
    return PydanticCustomError("tether_setting", "{reason}", {"reason": reason})


def parse_tenant_map(text: str, what: str) -> dict[str, str]:
    """A JSON object from tenant (or ``"*"``) to a non-empty string; ``""`` is no entry.

    Raises:
        ValueError: naming what is wrong (never the values: they may be secrets).
    """
    if not text.strip():
        return {}
    try:
        doc = loads_setting(text)
    except DuplicateKey as exc:
        raise ValueError(f"{what} {exc}") from None
    except ValueError:
        raise ValueError(
            f'{what} is not JSON; use a JSON object from tenant to value, e.g. {{"acme": "..."}}'
        ) from None
    if not isinstance(doc, dict) or not all(isinstance(v, str) and v for v in doc.values()):
        raise ValueError(f"{what} must be a JSON object from tenant to a non-empty string")
    for tenant in doc:
        if tenant != ANY_TENANT:
            try:
                validate_tenant(tenant)
            except InvalidId as exc:
                raise ValueError(f"{what}: {exc}") from None
    return dict(doc)


def for_tenant(values: dict[str, str], tenant: str) -> str | None:
    """The tenant's entry, else the ``"*"`` entry, else None."""
    return values.get(tenant, values.get(ANY_TENANT))


class WebhookSettings(BaseSettings):
    """``TETHER_WEBHOOK_*`` (mixed into :class:`tether.settings.Settings`)."""

    webhook_urls: str = Field(
        default="",
        description='Per-tenant webhook URLs: JSON {"tenant": "https://...", "*": default}; a '
        "run's own webhook option wins.",
    )
    webhook_secrets: SecretStr | None = Field(
        default=None,
        description='Per-tenant webhook signing secrets (secret): JSON {"tenant": "...", "*": '
        "default}; a webhook is only sent signed.",
    )
    webhook_allow_private: bool = Field(
        default=False,
        description="Allow webhooks to loopback, private, link-local and reserved addresses.",
    )
    webhook_max_attempts: int = Field(
        default=6, ge=1, le=50, description="Webhook delivery attempts before the dead letters."
    )
    webhook_backoff_s: float = Field(
        default=2.0,
        gt=0,
        le=3_600,
        description="Delay before the second webhook attempt; doubles each attempt (max 1 h).",
    )
    webhook_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="The whole of one webhook attempt (resolving, connecting, sending, the "
        "answer), in seconds.",
    )

    @pydantic.field_validator("webhook_urls")
    @classmethod
    def _urls(cls, value: str) -> str:
        try:
            urls = parse_tenant_map(value, "TETHER_WEBHOOK_URLS")
        except ValueError as exc:
            raise _invalid(str(exc)) from None
        for tenant, url in urls.items():
            problem = check_http_url(url)
            if problem is not None:
                raise _invalid(f"the URL of {tenant!r} is not valid: {problem}")
        return value

    @pydantic.field_validator("webhook_secrets")
    @classmethod
    def _secrets(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            try:
                parse_tenant_map(value.get_secret_value(), "TETHER_WEBHOOK_SECRETS")
            except ValueError as exc:
                raise _invalid(str(exc)) from None
        return value

    def webhook_url_for(self, tenant: str) -> str | None:
        """The tenant's webhook URL from ``TETHER_WEBHOOK_URLS`` (None: none)."""
        return for_tenant(parse_tenant_map(self.webhook_urls, "TETHER_WEBHOOK_URLS"), tenant)

    def webhook_secret_for(self, tenant: str) -> str | None:
        """The tenant's signing secret from ``TETHER_WEBHOOK_SECRETS`` (None: none)."""
        if self.webhook_secrets is None:
            return None
        text = self.webhook_secrets.get_secret_value()
        return for_tenant(parse_tenant_map(text, "TETHER_WEBHOOK_SECRETS"), tenant)
