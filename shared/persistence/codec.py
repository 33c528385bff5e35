"""The one converter between Tether values and bytes, for the wire and for storage.

JSON only (never pickle). Every document carries a schema version, checked *before* the model
is validated so that an unknown version fails with a message listing the supported ones.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pydantic

from tether.core.events import SUPPORTED_EVENT_VERSIONS, AgentEvent
from tether.core.items import Item
from tether.core.snapshot import SUPPORTED_SNAPSHOT_VERSIONS, HeadMemory, SessionSnapshot
from tether.errors import SnapshotCorrupt, UnsupportedSchemaVersion


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def _check_version(doc: Any, field: str, supported: tuple[int, ...], what: str, where: str) -> None:
    if not isinstance(doc, dict):
        raise SnapshotCorrupt(f"{what} at {where} is not a JSON object; it cannot be restored")
    version = doc.get(field)
    if version not in supported:
        raise UnsupportedSchemaVersion(
            f"{what} at {where} has {field}={version!r}; this build reads versions "
            f"{list(supported)}. Upgrade Tether to a release that knows version {version!r}."
        )


def dumps_snapshot(snapshot: SessionSnapshot) -> bytes:
    """Serialise a snapshot to compact JSON bytes (a version-1 head without the version-2
    field, byte for byte what earlier releases wrote and read)."""
    return snapshot.model_dump_json(exclude=snapshot.unset_v2_fields()).encode()


def loads_snapshot(data: bytes | str, *, where: str = "<memory>") -> SessionSnapshot:
    """Parse snapshot JSON, checking the schema version first.

    Raises:
        SnapshotCorrupt: the bytes are not a valid snapshot.
        UnsupportedSchemaVersion: the version is unknown.
    """
    try:
        # one pass in pydantic's own parser (a head is read before every run); anything it
        # refuses goes the careful way below, which names what is wrong
        snapshot = SessionSnapshot.model_validate_json(data)
    except pydantic.ValidationError:
        pass
    else:
        if snapshot.schema_version in SUPPORTED_SNAPSHOT_VERSIONS:
            return snapshot
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SnapshotCorrupt(f"snapshot at {where} is not valid JSON: {exc}") from exc
    except RecursionError as exc:  # pydantic's parser refused it: nested past any head's depth
        raise SnapshotCorrupt(f"snapshot at {where} is nested too deeply to be a head") from exc
    _check_version(doc, "schema_version", SUPPORTED_SNAPSHOT_VERSIONS, "snapshot", where)
    try:
        return SessionSnapshot.model_validate(doc)
    except pydantic.ValidationError as exc:
        raise SnapshotCorrupt(f"snapshot at {where} does not match schema: {exc}") from exc


def loads_head_memory(data: bytes | str, *, where: str = "<memory>") -> HeadMemory:
    """Parse only the memory of snapshot JSON (see :class:`HeadMemory`); anything it cannot
    read goes through :func:`loads_snapshot`, whose errors name the problem.

    Raises:
        The errors of :func:`loads_snapshot`.
    """
    try:
        return HeadMemory.model_validate_json(data)
    except pydantic.ValidationError:
        snapshot = loads_snapshot(data, where=where)
        doc = snapshot.model_dump(mode="json", include=_HEAD_MEMORY_FIELDS)
        return HeadMemory.model_validate(doc)


_HEAD_MEMORY_FIELDS = {"schema_version", "metadata", "memory", "memory_chunks", "memory_index"}


def newest_head_items(head: HeadMemory, *, where: str = "<memory>") -> Iterator[Item]:
    """:meth:`HeadMemory.newest_items`, an item that does not match the schema reported as
    :class:`SnapshotCorrupt`."""
    try:
        yield from head.newest_items()
    except pydantic.ValidationError as exc:
        raise SnapshotCorrupt(
            f"a memory item of the head at {where} does not match: {exc}"
        ) from exc


def dumps_event(event: AgentEvent) -> str:
    """Serialise one event to a JSON string."""
    return event.model_dump_json()


def loads_event(data: bytes | str, *, where: str = "<memory>") -> AgentEvent:
    """Parse one event, checking its schema version first."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SnapshotCorrupt(f"event at {where} is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise SnapshotCorrupt(f"event at {where} is nested too deeply to be an event") from exc
    return _validate_event(doc, where)


def dumps_events(events: list[AgentEvent]) -> bytes:
    """Serialise a list of events as a JSON array."""
    return ("[" + ",".join(dumps_event(e) for e in events) + "]").encode()


def loads_events(data: bytes | str, *, where: str = "<memory>") -> list[AgentEvent]:
    """Parse a JSON array of events."""
    try:
        docs = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SnapshotCorrupt(f"event list at {where} is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise SnapshotCorrupt(f"event list at {where} is nested too deeply to be events") from exc
    if not isinstance(docs, list):
        raise SnapshotCorrupt(f"event list at {where} is not a JSON array")
    return [_validate_event(d, where) for d in docs]


def _validate_event(doc: Any, where: str) -> AgentEvent:
    _check_version(doc, "v", SUPPORTED_EVENT_VERSIONS, "event", where)
    try:
        return AgentEvent.model_validate(doc)
    except pydantic.ValidationError as exc:
        raise SnapshotCorrupt(f"event at {where} does not match schema: {exc}") from exc


_ITEMS = pydantic.TypeAdapter(tuple[Item, ...])


def dumps_items(items: tuple[Item, ...]) -> bytes:
    """Serialise memory items as a JSON array (the body of a memory chunk)."""
    return _ITEMS.dump_json(items)


def loads_items(data: bytes | str, *, where: str = "<memory>") -> tuple[Item, ...]:
    """Parse a JSON array of memory items (versioned by the head that names the chunk)."""
    try:
        return _ITEMS.validate_json(data)
    except pydantic.ValidationError as exc:
        raise SnapshotCorrupt(f"memory chunk at {where} does not match schema: {exc}") from exc
