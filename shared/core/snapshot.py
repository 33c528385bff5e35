"""Session snapshots: everything needed to restore a session, in a versioned format.

Schema versions (field ``schema_version``):
- 1: metadata, memory, last compact result, last sequence number, the log (embedded events; empty
  when the log lives in an event archive), and the recent applied-request records.
- 2: version 1 plus ``memory_chunks`` and ``memory_index``: the older memory items live in
  immutable chunk objects beside the head (the oldest chunks named by one immutable index
  object, the newest by the head itself), and ``memory.items`` holds only the newest (unsealed)
  items. Written only when
  there are chunks (so a version-1 reader refuses it rather than seeing part of the memory); every
  generic load returns it materialized, as a version-1 value.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints, model_validator

from tether.core.context import CompactResult
from tether.core.events import AgentEvent, Usage
from tether.core.items import ITEM_ADAPTER, Item
from tether.core.memory import MemorySnapshot

SNAPSHOT_SCHEMA_VERSION = 1
CHUNKED_SNAPSHOT_SCHEMA_VERSION = 2
SUPPORTED_SNAPSHOT_VERSIONS = (1, 2)
MAX_APPLIED_RECORDS = 64
"""How many recent request ids a head remembers, to turn redelivery into a no-op.

The head only has to cover redelivery of runs that committed but whose queue entry was not yet
popped (a crash in between); older duplicates are caught at submit by the Redis request index.
Kept small because every restore loads the head."""


_CHUNK_NAME = r"(\d{12})-(\d{1,6})-([0-9a-f]{16})"
_CHUNK_NAME_RE = re.compile(_CHUNK_NAME)

ChunkName = Annotated[str, StringConstraints(pattern=f"^{_CHUNK_NAME}$")]
_INDEX_NAME = r"i(\d{12})-(\d{1,9})-([0-9a-f]{16})"
_INDEX_NAME_RE = re.compile(_INDEX_NAME)
IndexName = Annotated[str, StringConstraints(pattern=f"^{_INDEX_NAME}$")]
"""A chunk index's object name: ``i<items it covers:012d>-<chunk names in it>-<sha16>``."""
"""A chunk's object name without ``.json``: ``<first item:012d>-<count>-<sha256 of body:16>``.
A plain string (not a model) because a head lists one per chunk and is parsed on every write."""


class ChunkRef(NamedTuple):
    """A parsed :data:`ChunkName`: which items (``first`` .. ``first + size - 1``) and the
    content digest the object's name is derived from."""

    first: int
    size: int
    digest: str

    @property
    def name(self) -> str:
        """The chunk's name (its :data:`ChunkName`)."""
        return f"{self.first:012d}-{self.size}-{self.digest}"

    @classmethod
    def parse(cls, name: str) -> ChunkRef:
        """The parts of ``name`` (already checked by the head's schema)."""
        match = _CHUNK_NAME_RE.fullmatch(name)
        if match is None:
            raise ValueError(f"{name!r} is not a memory chunk name")
        return cls(int(match.group(1)), int(match.group(2)), match.group(3))


def index_items(name: str) -> int:
    """How many memory items the chunks named by index ``name`` hold (from its name)."""
    match = _INDEX_NAME_RE.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not a chunk index name")
    return int(match.group(1))


class SessionMetadata(BaseModel):
    """Identity and bookkeeping of a session."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    tenant: str = "default"
    created_at_ms: int
    updated_at_ms: int
    attributes: dict[str, JsonValue] = Field(default_factory=dict)
    parent_session_id: str | None = None


class RunRecord(BaseModel):
    """The outcome of one applied request, kept in the head for idempotent redelivery."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str
    run_id: str
    status: str
    output: str | None = None
    steps: int = 0
    usage: Usage = Usage()
    error_type: str | None = None
    error_message: str | None = None
    first_seq: int = 0
    last_seq: int = 0
    finished_at_ms: int = 0


class SessionSnapshot(BaseModel):
    """A restorable session.

    ``events`` holds the embedded log when the session has no event archive; with an archive it
    holds only the committed events not yet known to be archived (the outbox), so loading a head
    never costs O(history). ``archive_batch_events`` records the writer's archiving threshold:
    a writer archives its outbox exactly when it holds at least that many events, which tells a
    later reader whether that outbox may already be in the archive (see
    :mod:`tether.persistence.saving`). ``writer_fence`` is the lease fence the head was written
    under (0 outside a lease): rewriting it is how a lease taker fences out a frozen predecessor,
    whose compare-and-set then fails (an additive field: older heads read as 0).
    ``memory_chunks`` (version 2) names the newest chunks holding the memory items before
    ``memory.items``, ``memory_index`` the index object naming the chunks before those; only
    :meth:`SnapshotStore.load_shallow` returns such a head, every other load materializes the
    chunks into ``memory``.
    """

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1, 2] = 1
    metadata: SessionMetadata
    memory: MemorySnapshot = MemorySnapshot()
    memory_chunks: list[ChunkName] = Field(default_factory=list)
    memory_index: IndexName | None = None
    events: list[AgentEvent] = Field(default_factory=list)
    last_seq: int = 0
    archived_seq: int = 0
    archive_batch_events: int = 0
    last_compact: CompactResult | None = None
    applied: list[RunRecord] = Field(default_factory=list)
    writer_fence: int = 0

    @model_validator(mode="after")
    def _chunks_match_the_version(self) -> SessionSnapshot:
        # version 2 exactly when there are chunks, so a reader of version 1 never takes a
        # chunked head for the whole memory
        if self.is_chunked != (self.schema_version == CHUNKED_SNAPSHOT_SCHEMA_VERSION):
            raise ValueError(
                f"schema_version {self.schema_version} with {len(self.memory_chunks)} memory "
                f"chunks and index {self.memory_index!r}: version 2 heads have chunks, "
                "version 1 heads none"
            )
        return self

    @property
    def is_chunked(self) -> bool:
        """Whether some memory items live in chunks (a version-2 head)."""
        return bool(self.memory_chunks) or self.memory_index is not None

    @property
    def chunked_items(self) -> int:
        """How many memory items live in chunks (the index of ``memory.items[0]``)."""
        if self.memory_chunks:
            last = ChunkRef.parse(self.memory_chunks[-1])
            return last.first + last.size
        return 0 if self.memory_index is None else index_items(self.memory_index)

    @property
    def session_id(self) -> str:
        """The session id (from metadata)."""
        return self.metadata.session_id

    @property
    def tenant(self) -> str:
        """The tenant (from metadata)."""
        return self.metadata.tenant

    def find_applied(self, request_id: str) -> RunRecord | None:
        """The record of ``request_id`` if this head already applied it."""
        for record in reversed(self.applied):
            if record.request_id == request_id:
                return record
        return None

    def copy_deep(self) -> SessionSnapshot:
        """A deep, independent copy."""
        return self.model_copy(deep=True)

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON-ready dict (see :mod:`tether.persistence.codec` for bytes with checksums)."""
        return self.model_dump(mode="json", exclude=self.unset_v2_fields())

    def unset_v2_fields(self) -> set[str] | None:
        """The version-2 fields to leave out of a version-1 head, so it is byte for byte what
        earlier releases wrote and read."""
        return None if self.is_chunked else {"memory_chunks", "memory_index"}


class _HeadIdentity(BaseModel):
    model_config = ConfigDict(extra="ignore")

    session_id: str
    tenant: str = "default"


class _RawMemory(BaseModel):
    model_config = ConfigDict(extra="ignore")

    # JSON values: a reader of the newest items validates only those (see newest_items)
    items: list[Any] = Field(default_factory=list)
    summary: str | None = None


class HeadMemory(BaseModel):
    """The memory part of a stored head, parsed without the rest (its outbox, run records...):
    what a reader of memory items needs, at a fraction of the cost of a whole head. Items are
    validated as :meth:`newest_items` reaches them."""

    model_config = ConfigDict(extra="ignore")

    schema_version: Literal[1, 2] = 1
    metadata: _HeadIdentity
    memory: _RawMemory = Field(default_factory=_RawMemory)
    memory_chunks: list[ChunkName] = Field(default_factory=list)
    memory_index: IndexName | None = None

    def newest_items(self) -> Iterator[Item]:
        """The head's own memory items, newest first.

        Raises:
            ValueError: an item does not match the schema (a pydantic ``ValidationError``).
        """
        for value in reversed(self.memory.items):
            yield ITEM_ADAPTER.validate_python(value)
