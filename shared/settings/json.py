"""How the JSON settings are read (``TETHER_MODEL_LIMITS``, ``TETHER_MODEL_PRICES``,
``TETHER_TENANT_BUDGETS``): a JSON object, or ``@path`` to a JSON file, validated by a pydantic
model into one line naming the variable and what is wrong. :class:`JsonTable` is what each
table (:mod:`~tether.settings.limits`, :mod:`~tether.settings.prices`,
:mod:`~tether.settings.budgets`) builds on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar, Generic, Self, TypeVar

from pydantic import BaseModel, ConfigDict, RootModel, ValidationError, field_validator

from tether.errors import ConfigurationError

_M = TypeVar("_M", bound=BaseModel)


class DuplicateKey(ValueError):
    """A JSON object of a setting names one key twice (JSON keeps the later silently)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"has the key {key!r} twice; give each key once (the later would win)")
        self.key = key


def _unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def loads_setting(raw: str) -> object:
    """``raw`` parsed as JSON, refusing an object that names a key twice.

    Raises:
        DuplicateKey: an object names a key twice.
        json.JSONDecodeError: not JSON.
    """
    return json.loads(raw, object_pairs_hook=_unique)


def parse_json_setting(
    cls: type[_M], text: str | None, *, where: str, example: str, empty: object
) -> _M:
    """``text`` (JSON, ``@path`` to a JSON file, or empty: ``empty``) validated as ``cls``.

    Args:
        cls: the setting's model.
        text: the setting's value.
        where: what to call it in messages ("": the settings' own errors name the variable).
        example: a valid value, shown when the text is not JSON.
        empty: what an empty value means (validated as ``cls``).

    Raises:
        ConfigurationError: one line naming ``where`` and what is wrong.
    """
    if text is None or not text.strip():
        return cls.model_validate(empty)
    raw = text.strip()
    if raw.startswith("@"):
        path = Path(raw[1:]).expanduser()
        where = f"{where} file {str(path)!r}".strip()
        try:
            raw = path.read_text()
        except OSError as exc:
            raise ConfigurationError(_said(where, f"cannot be read: {exc.strerror}")) from None
    try:
        return cls.model_validate(loads_setting(raw))
    except DuplicateKey as exc:
        raise ConfigurationError(_said(where, str(exc))) from None
    except json.JSONDecodeError as exc:
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


_V = TypeVar("_V", bound=BaseModel)


class JsonTable(RootModel[dict[str, _V]], Generic[_V]):
    """A JSON setting that maps names (models, tenants) to entries; subclasses name their
    variable, an example, and how a name is checked (:meth:`check_name`)."""

    model_config = ConfigDict(frozen=True)
    variable: ClassVar[str] = ""
    example: ClassVar[str] = "{}"

    @field_validator("root")
    @classmethod
    def _names(cls, value: dict[str, _V]) -> dict[str, _V]:
        for name in value:
            cls.check_name(name)
        return value

    @classmethod
    def check_name(cls, name: str) -> None:
        """Raise ``ValueError`` (or a configuration error) for a name the table refuses."""

    @classmethod
    def parse(cls, text: str | None, *, where: str | None = None) -> Self:
        """Read the setting: JSON, ``@path`` to a JSON file, or empty (an empty table).

        Args:
            text: the setting's value.
            where: what to call it in messages (default: the variable; "": the settings' own
                errors name the variable).

        Raises:
            ConfigurationError: one line naming ``where`` and what is wrong.
        """
        named = cls.variable if where is None else where
        return parse_json_setting(cls, text, where=named, example=cls.example, empty={})
