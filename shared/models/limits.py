"""The model limits setting: ``TETHER_MODEL_LIMITS``, a JSON object (or ``@path`` to a JSON file)
from model name to its limits, validated once at start-up.

>>> ModelLimits.parse('{"gpt-4o-mini": {"requests_per_minute": 300, "concurrent_requests": 8}}')
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError, field_validator

from tether.errors import ConfigurationError
from tether.ids import validate_model_name

#: The variable the limits come from, for messages.
VARIABLE = "TETHER_MODEL_LIMITS"


class ModelLimit(BaseModel):
    """One model's fleet-wide limits; a limit left out (or 0) is no limit.

    Attributes:
        requests_per_minute: calls admitted per minute, over every worker.
        tokens_per_minute: input + output tokens per minute (a call is admitted on an estimate
            of its tokens and settled with what it really used).
        concurrent_requests: calls in flight at once, over every worker.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests_per_minute: int = Field(default=0, ge=0, le=10_000_000)
    tokens_per_minute: int = Field(default=0, ge=0, le=10_000_000_000)
    concurrent_requests: int = Field(default=0, ge=0, le=100_000)

    @property
    def us_per_request(self) -> int:
        """The requests GCRA's emission interval (0: unlimited)."""
        return 60_000_000 // self.requests_per_minute if self.requests_per_minute else 0

    @property
    def us_per_token(self) -> float:
        """The tokens GCRA's emission interval, per token (0: unlimited)."""
        return 60_000_000 / self.tokens_per_minute if self.tokens_per_minute else 0.0

    @property
    def limited(self) -> bool:
        """Whether any limit is set (an unlimited model costs no Redis round trip)."""
        return bool(self.requests_per_minute or self.tokens_per_minute or self.concurrent_requests)


class ModelLimits(RootModel[dict[str, ModelLimit]]):
    """Limits by model name."""

    model_config = ConfigDict(frozen=True)

    @field_validator("root")
    @classmethod
    def _names(cls, value: dict[str, ModelLimit]) -> dict[str, ModelLimit]:
        for name in value:
            validate_model_name(name)
        return value

    def for_model(self, model: str) -> ModelLimit | None:
        """The limits of ``model``, or None when it has none."""
        found = self.root.get(model)
        return found if found is not None and found.limited else None

    @classmethod
    def parse(cls, text: str | None, *, where: str = VARIABLE) -> ModelLimits:
        """Read the setting: JSON, ``@path`` to a JSON file, or empty (no limits).

        Args:
            text: the setting's value.
            where: what to call it in messages ("": the settings' own errors name the variable).

        Raises:
            ConfigurationError: one line naming ``where`` and what is wrong.
        """
        if text is None or not text.strip():
            return cls({})
        raw = text.strip()
        if raw.startswith("@"):
            path = Path(raw[1:]).expanduser()
            where = f"{where} file {str(path)!r}".strip()
            try:
                raw = path.read_text()
            except OSError as exc:
                raise ConfigurationError(_said(where, f"cannot be read: {exc.strerror}")) from None
        try:
            return cls.model_validate(json.loads(raw))
        except json.JSONDecodeError as exc:
            example = '{"gpt-4o-mini": {"requests_per_minute": 300}}'
            problem = f"is not JSON ({exc.msg} at line {exc.lineno}); use e.g. {example}"
            raise ConfigurationError(_said(where, problem)) from None
        except ValidationError as exc:
            first = exc.errors()[0]
            at = ".".join(str(p) for p in first["loc"]) or "top"
            raise ConfigurationError(_said(where, f"is invalid at {at}: {first['msg']}")) from None
        except ConfigurationError as exc:
            raise ConfigurationError(_said(where, str(exc))) from None


def _said(where: str, problem: str) -> str:
    return f"{where} {problem}" if where else problem
