"""The ``session_settings`` argument of a :class:`~tether.integrations.openai_agents.TetherSession`
as the SDK's ``SessionSettings``: the forms the SDK's own sessions accept (the object, a dict of
its fields, None for the defaults) and the values they refuse, refused with the exception types
they raise (code written for ``SQLiteSession`` catches the same ones), with Tether's messages.

Apart from :mod:`~tether.integrations.openai_agents.session` on purpose: that module owns the
storage (reads, compare-and-set writes, journaled appends), this one the SDK's argument rules,
which follow the SDK's ``SessionSettings`` and never the storage; the session calls its one
function once, in its constructor, and neither module needs the other's internals.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


def as_session_settings(value: Any) -> Any:
    """``value`` as the SDK's ``SessionSettings`` (a dict converted, None the defaults), as
    ``SQLiteSession`` does; ``Runner.run`` reads its fields as attributes.

    Raises:
        TypeError: neither ``SessionSettings`` nor a dict of its fields, or a dict with an
            unknown field (the SDK's sessions raise ``TypeError`` for both).
        pydantic.ValidationError: a field of the wrong type, raised by ``SessionSettings``
            itself, as for the SDK's sessions.
    """
    # imported here: the SDK is an optional extra, and importing this package must not need it
    from agents.memory import SessionSettings

    if value is None:
        return SessionSettings()
    if isinstance(value, SessionSettings):
        return value
    known = {f.name for f in dataclasses.fields(SessionSettings) if f.init}
    if not isinstance(value, Mapping):
        raise TypeError(
            f"session_settings must be the SDK's SessionSettings or a dict of its fields "
            f"({', '.join(sorted(known))}), got {type(value).__name__}; pass "
            "SessionSettings(limit=...)"
        )
    unknown = sorted(str(k) for k in value if k not in known)
    if unknown:
        raise TypeError(
            f"session_settings {dict(value)!r} have unknown field(s) {', '.join(unknown)}; the "
            f"SDK's SessionSettings has {', '.join(sorted(known))}"
        )
    return SessionSettings(**value)  # a bad value: the SDK's own validation error
