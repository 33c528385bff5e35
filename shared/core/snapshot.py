"""Session snapshots: everything needed to restore a session, in a versioned format.

Schema versions (field ``schema_version``):
- 1: metadata, memory, last compact result, last sequence number, the log (embedded events; empty
  when the log lives in an event archive), and the recent applied-request records.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from tether.core.context import CompactResult
from tether.core.events import AgentEvent, Usage
from tether.core.memory import MemorySnapshot

SNAPSHOT_SCHEMA_VERSION = 1
SUPPORTED_SNAPSHOT_VERSIONS = (1,)
MAX_APPLIED_RECORDS = 64
"""How many recent request ids a head remembers, to turn redelivery into a no-op.

The head only has to cover redelivery of runs that committed but whose queue entry was not yet
popped (a crash in between); older duplicates are caught at submit by the Redis request index.
Kept small because every restore loads the head."""


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
    """

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    metadata: SessionMetadata
    memory: MemorySnapshot = MemorySnapshot()
    events: list[AgentEvent] = Field(default_factory=list)
    last_seq: int = 0
    archived_seq: int = 0
    archive_batch_events: int = 0
    last_compact: CompactResult | None = None
    applied: list[RunRecord] = Field(default_factory=list)
    writer_fence: int = 0

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
        return self.model_dump(mode="json")
