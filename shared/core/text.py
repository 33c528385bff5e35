"""Text from outside a run (a model's answer, a tool's output) made storable as UTF-8.

A Python ``str`` may hold lone surrogates (U+D800 to U+DFFF: a JSON ``"\\ud800"`` without its
pair, a careless decode) that no UTF-8 encoder accepts, so an event holding one could never be
stored: its commit would fail on every attempt, repeating the step's model call and tool side
effects. The agent loop passes what a model or a tool hands it through :func:`valid_strings`,
which puts U+FFFD in place of each lone surrogate and leaves everything else as it was.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TypeVar, cast

from pydantic import BaseModel

_T = TypeVar("_T")


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (``text`` itself when it has none)."""
    if text.isascii():  # O(1) for a str: the common case costs nothing
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # through UTF-16, not UTF-8: a surrogate pair joins into its character and each lone
        # surrogate becomes one U+FFFD (UTF-8's decoder would put three)
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def valid_strings(value: _T) -> _T:
    """``value`` with :func:`valid_text` applied to every string in it: the fields of pydantic
    models and dataclasses, tuples, lists, dict keys and values, at any depth.

    Objects are copied only where something changed, so a clean value comes back as itself.
    """
    return cast(_T, _valid(value))


def _valid(value: object) -> object:
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, BaseModel):
        update = _changed_fields(value, type(value).model_fields)
        return value.model_copy(update=update) if update else value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = [f.name for f in dataclasses.fields(value) if f.init]
        changed = _changed_fields(value, names)
        return dataclasses.replace(value, **changed) if changed else value
    if isinstance(value, tuple | list):
        items = [_valid(v) for v in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        pairs = [(_valid(k), _valid(v)) for k, v in value.items()]
        if all(nk is k and nv is v for (nk, nv), (k, v) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    return value


def _changed_fields(value: object, names: Iterable[str]) -> dict[str, object]:
    """The fields of ``value`` (among ``names``) whose valid form differs, with that form."""
    changed: dict[str, object] = {}
    for name in names:
        old = getattr(value, name)
        new = _valid(old)
        if new is not old:
            changed[name] = new
    return changed
