"""Head patches: an append to a session's memory stored as the events it adds, not a new head.

A store that keeps a journal beside a head (the local store, see
:mod:`tether.persistence.blobs.local_log`) takes an ``add_items`` as one small patch record
instead of rewriting the head: the Agents SDK session appends one item per call, and writing
and syncing that item alone costs what SQLite's write-ahead log does. A patch is::

    {"patch":1,"updated_at_ms":1733450000000,"events":[<MEMORY_ITEMS_APPENDED event>, ...]}

and the head it makes is the head before it with the events appended to its outbox, their
items to its memory, ``last_seq`` moved to the last event and ``updated_at_ms`` to the patch's:
exactly the head a full save of the same session writes (the fold-equivalence test checks it).
Only events that append items are patched; any other write stores the whole head.

A journaled head's object file carries envelope version 2 (the same body): a build that does
not read journals refuses it ("upgrade Tether") instead of taking it for the current head.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

import pydantic
from pydantic import BaseModel, ConfigDict

from tether.core.events import AgentEvent, ItemsAppendedPayload
from tether.core.memory import MemorySnapshot
from tether.core.snapshot import HeadMemory, SessionSnapshot
from tether.errors import SnapshotCorrupt, UnsupportedSchemaVersion
from tether.persistence.codec import dumps_event, dumps_snapshot, loads_snapshot
from tether.persistence.objects import HEAD_KIND, JOURNALED_ENVELOPE_VERSION, seal, unseal

PATCH_VERSION = 1
SUPPORTED_PATCH_VERSIONS = (1,)

_PLAIN_HEAD = b'{"tether":"head","envelope":1,'
_JOURNALED_HEAD = b'{"tether":"head","envelope":%d,' % JOURNALED_ENVELOPE_VERSION


class HeadPatch(BaseModel):
    """One patch of a head (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    patch: Literal[1]
    updated_at_ms: int
    events: list[AgentEvent]


def encode_patch(events: Sequence[AgentEvent], updated_at_ms: int) -> bytes:
    """The patch appending ``events`` (each a ``MEMORY_ITEMS_APPENDED``) to a head.

    Raises:
        ValueError: an event does not append items (store the whole head instead).
    """
    for event in events:
        if not isinstance(event.payload, ItemsAppendedPayload):
            raise ValueError(f"event {event.seq} ({event.type}) cannot be patched onto a head")
    body = ",".join(dumps_event(event) for event in events)
    return b'{"patch":%d,"updated_at_ms":%d,"events":[%s]}' % (
        PATCH_VERSION,
        updated_at_ms,
        body.encode(),
    )


def decode_patch(data: bytes, *, where: str) -> HeadPatch:
    """Parse one patch, checking its version first.

    Raises:
        SnapshotCorrupt: not a patch.
        UnsupportedSchemaVersion: a patch version this build does not know.
    """
    try:
        return HeadPatch.model_validate_json(data)
    except pydantic.ValidationError as exc:
        try:
            version = json.loads(data).get("patch")
        except (ValueError, AttributeError, RecursionError):
            version = None
        if isinstance(version, int) and version not in SUPPORTED_PATCH_VERSIONS:
            raise UnsupportedSchemaVersion(
                f"a patch of the head at {where} has version {version}; this build reads "
                f"{list(SUPPORTED_PATCH_VERSIONS)}. Upgrade Tether to read it."
            ) from exc
        raise SnapshotCorrupt(
            f"a patch of the head at {where} does not parse: {exc}. To recover, restore the "
            "session's directory from a backup"
        ) from exc


def _appended(head_seq: int | None, session_id: str, patch: HeadPatch, where: str) -> int | None:
    """The sequence number after ``patch``'s events, checked to append items to the head of
    ``session_id`` and to continue ``head_seq`` (when known)."""
    for event in patch.events:
        if (
            (head_seq is not None and event.seq != head_seq + 1)
            or event.session_id != session_id
            or not isinstance(event.payload, ItemsAppendedPayload)
        ):
            raise SnapshotCorrupt(
                f"a patch of the head at {where} holds event {event.seq} ({event.type}) of "
                f"{event.session_id!r}, which does not append items to the head of "
                f"{session_id!r} at seq {head_seq}. To recover, restore the session's "
                "directory from a backup"
            )
        head_seq = None if head_seq is None else event.seq
    return head_seq


def fold_snapshot(
    head: SessionSnapshot, patches: Sequence[bytes], *, where: str
) -> SessionSnapshot:
    """The head ``patches`` (oldest first) make of ``head``."""
    if not patches:
        return head
    items = list(head.memory.items)
    events = list(head.events)
    last_seq, updated_at_ms = head.last_seq, head.metadata.updated_at_ms
    for data in patches:
        patch = decode_patch(data, where=where)
        seq = _appended(last_seq, head.session_id, patch, where)
        assert seq is not None
        last_seq = seq
        for event in patch.events:
            assert isinstance(event.payload, ItemsAppendedPayload)
            items.extend(event.payload.items)
            events.append(event)
        updated_at_ms = max(updated_at_ms, patch.updated_at_ms)
    memory = MemorySnapshot.model_construct(items=tuple(items), summary=head.memory.summary)
    metadata = head.metadata.model_copy(update={"updated_at_ms": updated_at_ms})
    update = {"memory": memory, "events": events, "last_seq": last_seq, "metadata": metadata}
    return head.model_copy(update=update)


def fold_memory(head: HeadMemory, patches: Sequence[bytes], *, where: str) -> HeadMemory:
    """The memory ``patches`` (oldest first) make of ``head``'s."""
    if not patches:
        return head
    items = list(head.memory.items)
    for data in patches:
        patch = decode_patch(data, where=where)
        _appended(None, head.metadata.session_id, patch, where)
        for event in patch.events:
            assert isinstance(event.payload, ItemsAppendedPayload)
            items.extend(event.payload.items)
    memory = head.memory.model_copy(update={"items": items})
    return head.model_copy(update={"memory": memory})


class HeadJournal:
    """The :class:`tether.persistence.blobs.local.JournalFormat` of session heads."""

    def journaled(self, data: bytes) -> bool:
        return data.startswith(_JOURNALED_HEAD)

    def mark(self, data: bytes, *, where: str) -> bytes:
        # the checksum covers the body only, so the header's version can change in place
        if data.startswith(_JOURNALED_HEAD):
            return data
        if not data.startswith(_PLAIN_HEAD):
            raise SnapshotCorrupt(
                f"the head at {where} is not a head of envelope version 1, so it cannot be "
                "journaled. To recover, restore head.json from a backup"
            )
        return _JOURNALED_HEAD + data[len(_PLAIN_HEAD) :]

    def fold(self, full: bytes, patches: tuple[bytes, ...], *, where: str) -> bytes:
        head = loads_snapshot(unseal(full, HEAD_KIND, where=where).body, where=where)
        return seal(HEAD_KIND, dumps_snapshot(fold_snapshot(head, patches, where=where)))
