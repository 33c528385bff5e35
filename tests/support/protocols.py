"""A stricter "implements the protocol" than ``isinstance``.

``isinstance`` against a ``runtime_checkable`` Protocol only checks that attributes with the
member names exist; a method with the wrong parameters passes. :func:`assert_conforms` also
compares every member's parameters (names, kinds, which have defaults) with the Protocol's.
"""

from __future__ import annotations

import inspect
from typing import Any


def _members(protocol: type) -> list[str]:
    return [
        name
        for name, value in vars(protocol).items()
        if callable(value) and not name.startswith("_")
    ]


def _shape(fn: Any) -> list[tuple[str, inspect._ParameterKind, bool]]:
    params = list(inspect.signature(fn).parameters.values())
    if params and params[0].name == "self":
        params = params[1:]
    return [(p.name, p.kind, p.default is not inspect.Parameter.empty) for p in params]


def assert_conforms(obj: object, protocol: type) -> None:
    """``obj`` has every public method of ``protocol`` with the same parameters."""
    assert isinstance(obj, protocol), f"{type(obj).__name__} is not a {protocol.__name__}"
    members = _members(protocol)
    assert members, f"{protocol.__name__} declares no methods"
    for name in members:
        wanted = _shape(getattr(protocol, name))
        got = _shape(getattr(obj, name))
        assert got == wanted, f"{type(obj).__name__}.{name}{got} differs from {wanted}"
