"""An Agents SDK item is copied as the JSON round trip would copy it: the direct copy that
``add_items`` takes for plain values gives exactly what ``json.loads(json.dumps(item))`` gives,
and anything else still goes through JSON (converted or refused as before)."""

from __future__ import annotations

import json
import math
from enum import IntEnum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.errors import InvalidInput
from tether.integrations.openai_agents.items import _plain_json

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=8),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),  # JSON makes a list of it
        st.dictionaries(st.one_of(st.text(max_size=4), st.integers(), st.booleans()), inner),
    ),
    max_leaves=20,
)


def _typed(value: Any) -> Any:
    """``value`` with each node's type beside it (``==`` takes 1 == True == 1.0)."""
    if isinstance(value, dict):
        return ("dict", [(k, _typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [_typed(v) for v in value])
    return (type(value).__name__, value)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=6), _values, max_size=5))
def test_the_copy_is_the_json_round_trip(item: dict[str, Any]) -> None:
    copied = _plain_json(item)
    assert _typed(copied) == _typed(json.loads(json.dumps(item)))


def test_the_copy_is_deep_and_converts_what_json_converts() -> None:
    class Level(IntEnum):
        HIGH = 3

    nested = {"content": [{"text": "a"}]}
    copied = _plain_json(nested)
    nested["content"][0]["text"] = "mutated"  # the caller's later change is not stored
    assert copied == {"content": [{"text": "a"}]}
    assert _plain_json({"n": Level.HIGH, "t": (1, 2), 1: "key"}) == {
        "n": 3,
        "t": [1, 2],
        "1": "key",
    }
    assert type(_plain_json({"n": Level.HIGH})["n"]) is int
    assert math.isnan(_plain_json({"x": float("nan")})["x"])
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(40):  # past the direct copy's depth: the round trip copies it
        node["d"] = node = {}
    assert json.dumps(_plain_json(deep)) == json.dumps(deep)


def test_what_json_refuses_is_refused() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    for bad in ({"x": object()}, {"x": {1, 2}}, loop, {(1, 2): "tuple key"}):
        with pytest.raises(InvalidInput, match="JSON"):
            _plain_json(bad)
