"""What every delta channel shares: validation, the entry fields, and the current-step walk."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from tether.errors import InvalidInput
from tether.persistence.deltas.base import LiveDelta

C = TypeVar("C")

_KIND_CODES = {"text": "t", "tool_arguments": "a"}
_KINDS = {code: kind for kind, code in _KIND_CODES.items()}
#: The kind code of a run's end mark: ``finish.lua`` appends ``k=e`` with the run id in ``e``
#: to a session's channel when it finishes a run there, so a follower blocked on the channel
#: wakes at the commit (see :func:`end_of`). Its other fields (``r`` empty, fence 0) make a
#: reader from before the mark take it for an empty piece of no run, which no handle gives.
END_KIND = "e"


def validate_bounds(max_len: int, ttl_ms: int) -> None:
    """A channel keeps at least one entry and lives at least 1 ms."""
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise InvalidInput(
            f"delta channel max_len {max_len!r} is not allowed; pass an int >= 1 "
            "(TETHER_DELTA_MAX_LEN, 0 there turns streaming off)"
        )
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms < 1:
        raise InvalidInput(
            f"delta channel ttl_ms {ttl_ms!r} is not allowed; pass an int >= 1 "
            "(TETHER_DELTA_TTL_S is in seconds)"
        )


def validate_deltas(deltas: Iterable[LiveDelta]) -> None:
    """Each piece is well formed before any I/O."""
    for d in deltas:
        if d.kind not in _KIND_CODES:
            raise InvalidInput(
                f"delta kind {d.kind!r} is not allowed; use 'text' or 'tool_arguments'"
            )
        if min(d.fence, d.step, d.index, d.call_index) < 0:
            raise InvalidInput(
                f"delta of run {d.run_id!r} has a negative fence/step/index/call_index "
                f"({d.fence}/{d.step}/{d.index}/{d.call_index}); they count from 0"
            )


def to_fields(d: LiveDelta) -> list[str]:
    """The stream fields of one piece, as field/value pairs (see :mod:`tether.keys`)."""
    fields = [
        "r", d.run_id, "f", str(d.fence), "s", str(d.step), "i", str(d.index),
        "k", _KIND_CODES[d.kind], "c", str(d.call_index), "t", d.text,
    ]  # fmt: skip
    if d.call_id is not None:
        fields += ["id", d.call_id]
    if d.tool_name is not None:
        fields += ["n", d.tool_name]
    return fields


def end_of(fields: dict[bytes, bytes]) -> str | None:
    """The run id of an end mark (None: the entry is a piece)."""
    if fields.get(b"k") != END_KIND.encode():
        return None
    return fields.get(b"e", b"").decode()


def from_fields(fields: dict[bytes, bytes]) -> LiveDelta:
    """A piece back from its stream fields."""
    call_id = fields.get(b"id")
    tool_name = fields.get(b"n")
    return LiveDelta(
        run_id=fields[b"r"].decode(),
        fence=int(fields[b"f"]),
        step=int(fields[b"s"]),
        index=int(fields[b"i"]),
        kind="text" if _KINDS.get(fields[b"k"].decode()) == "text" else "tool_arguments",
        text=fields[b"t"].decode(),
        call_index=int(fields[b"c"]),
        call_id=None if call_id is None else call_id.decode(),
        tool_name=None if tool_name is None else tool_name.decode(),
    )


def current_step(newest_first: Iterable[tuple[C, LiveDelta]]) -> tuple[list[LiveDelta], C | None]:
    """The newest step's pieces, oldest first, and the newest entry's cursor.

    Walks back from the newest entry while the pieces belong to the same attempt's step, and
    stops at its first piece (index 0): an earlier attempt of the same step is not included.
    """
    group: list[LiveDelta] = []
    top: C | None = None
    for cursor, delta in newest_first:
        if top is None:
            top = cursor
        elif not delta.same_step(group[0]) or delta.index >= group[-1].index:
            break
        group.append(delta)
        if delta.index == 0:
            break
    group.reverse()
    return group, top
