"""The ``session_settings`` argument of a :class:`~tether.integrations.openai_agents.TetherSession`
as the SDK's ``SessionSettings``: the forms the SDK's own sessions accept (the object, a dict of
its fields, None for the defaults) and the values they refuse, refused with Tether's messages.

Apart from :mod:`~tether.integrations.openai_agents.session` on purpose: that module owns the
storage (reads, compare-and-set writes, journaled appends), this one the SDK's argument rules,
which follow the SDK's ``SessionSettings`` and never the storage; the session calls its one
function once, in its constructor, and neither module needs the other's internals.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from tether.errors import InvalidInput


def as_session_settings(value: Any) -> Any:
    """``value`` as the SDK's ``SessionSettings`` (a dict converted, None the defaults), as
    ``SQLiteSession`` does; ``Runner.run`` reads its fields as attributes.

    Raises:
        InvalidInput: not ``SessionSettings`` nor a dict of its fields (an unknown field, a
            value of the wrong type), refused as the SDK refuses it.
    """
    # imported here: the SDK is an optional extra, and importing this package must not need it
    from agents.memory import SessionSettings

    if value is None:
        return SessionSettings()
    if isinstance(value, SessionSettings):
        return value
    if not isinstance(value, Mapping):
        raise InvalidInput(
            f"session_settings must be the SDK's SessionSettings or a dict of its fields, got "
            f"{type(value).__name__}; pass SessionSettings(limit=...)"
        )
    known = {f.name for f in dataclasses.fields(SessionSettings)}
    unknown = sorted(str(k) for k in value if k not in known)
    try:
        if unknown:  # the SDK's own conversion refuses these too
            raise TypeError(f"unknown field(s) {', '.join(unknown)}")
        return SessionSettings(**value)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(
            f"session_settings {dict(value)!r} are not the SDK's SessionSettings ({exc}); "
            f"pass SessionSettings(limit=...) or a dict of its fields ({', '.join(sorted(known))})"
        ) from exc
