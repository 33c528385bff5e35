"""Reading the settings and printing them: :func:`load_settings` (precedence in
:mod:`tether.settings.core`) refuses unknown ``TETHER_*`` variables and turns every problem into
one :class:`~tether.errors.SettingsError` line naming the variable, its value with secrets
masked, and the fix, instead of a traceback from deep inside Redis, boto3 or Celery later;
:func:`show_value` and :func:`masked` print values safely.
"""

from __future__ import annotations

import difflib
import json
import os
from typing import Any

import pydantic
from pydantic import SecretStr
from pydantic_settings.exceptions import SettingsError as SourceError

from tether.errors import SettingsError
from tether.settings.checks import mask_url
from tether.settings.core import Settings
from tether.settings.files import ENV_PREFIX, LOCAL_ENV_FILE

_SECRET = "********"


def variable(field: str) -> str:
    """The variable of a settings field (``lease_ttl_ms`` -> ``TETHER_LEASE_TTL_MS``)."""
    return ENV_PREFIX + field.upper()


def _unknown_variables() -> list[str]:
    known = {variable(name) for name in Settings.model_fields}
    return sorted(k for k in os.environ if k.startswith(ENV_PREFIX) and k not in known)


def load_settings(**overrides: Any) -> Settings:
    """Read and validate every setting (see the module docstring for the precedence).

    Raises:
        SettingsError: one line naming each bad or unknown variable, its value with secrets
            masked, and the fix.
    """
    unknown = _unknown_variables()
    if unknown:
        raise SettingsError(_unknown_message(unknown), variables=tuple(unknown))
    try:
        return Settings(**overrides)
    except pydantic.ValidationError as exc:
        raise _invalid(exc) from None
    except (SourceError, ValueError) as exc:
        raise SettingsError(f"invalid settings: {exc}") from None


def _unknown_message(unknown: list[str]) -> str:
    known = [variable(n) for n in Settings.model_fields]
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1)
        hints.append(f"{name} (did you mean {close[0]}?)" if close else name)
    return (
        f"unknown setting(s) {', '.join(hints)}: fix the name or unset it; known settings: "
        + ", ".join(known)
    )


def _invalid(exc: pydantic.ValidationError) -> SettingsError:
    problems: list[str] = []
    names: list[str] = []
    for error in exc.errors():
        field = "_".join(map(str, error["loc"][:1]))
        if not field:  # a check across fields names its variables itself
            problems.append(error["msg"])
            continue
        name = variable(field)
        names.append(name)
        shown = show_value(field, error.get("input"))
        if error["type"] == "extra_forbidden":
            problems.append(f"unknown setting {name} in .env or {LOCAL_ENV_FILE}: remove it")
        elif error["type"] == "tether_setting":
            problems.append(f"{name}={shown} is not valid: {error['msg']}")
        else:
            problems.append(f"{name}={shown} is not valid: {error['msg']}; {_default_hint(field)}")
    return SettingsError("; ".join(problems), variables=tuple(names))


def _default_hint(field: str) -> str:
    info = Settings.model_fields.get(field)
    default = None if info is None else info.get_default(call_default_factory=True)
    if default in (None, [], ""):
        return "fix the value or unset it"
    return f"fix the value or unset it for the default {default}"


def show_value(field: str, value: Any) -> str:
    """``value`` of a settings field as safe to print: secrets and URL passwords masked."""
    info = Settings.model_fields.get(field)
    if info is not None and info.annotation in (SecretStr, SecretStr | None):
        return _SECRET if value else "''"
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if ":" in text:
        text = mask_url(text)
    return repr(text)


def masked(settings: Settings) -> dict[str, Any]:
    """The effective settings with secrets and URL passwords masked (for printing)."""
    out: dict[str, Any] = {}
    for name in Settings.model_fields:
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            value = _SECRET if value.get_secret_value() else ""
        elif isinstance(value, str) and "://" in value:
            value = mask_url(value)
        out[variable(name)] = value
    return out
