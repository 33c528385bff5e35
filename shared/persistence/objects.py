"""Storage layout and object formats shared by every snapshot store and event archive.

Written once here, used by the memory, local-directory and S3 backends alike:

- Key layout (relative to a backend's root or prefix)::

      v1/<tenant>/<session>/head.json                          the session head
      v1/<tenant>/<session>/events/<first:020d>-<last:020d>.json  archived event segments
      v1/<tenant>/<session>/events/items/<first:012d>-<count>-<sha16>.json  memory chunks
      v1/<tenant>/<session>/events/items/i<items:012d>-<chunks>-<sha16>.json  chunk indexes

  Memory chunks (heads of schema version 2) are immutable and content-addressed: the name holds
  the index of their first item, how many they hold and the first 16 hex digits of their
  body's sha256, so writing one twice writes the same bytes. A chunk index (a JSON array of
  chunk names) is named alike, by the items its chunks hold and how many it names. They sit
  under ``events/`` so that head listings skip them with the segments, and in their own folder
  so that segment listings never see them.

- The envelope: every stored object is one JSON document whose header carries the kind, the
  envelope format version, the body length and its sha256, followed by the body itself
  (the snapshot object or the event array, exactly as :mod:`tether.persistence.codec` wrote it)::

      {"tether":"head","envelope":1,"bytes":1234,"sha256":"<hex>","body":{...}}

  The body is written last and verbatim, so the checksum covers exactly the codec's bytes, the
  header can be read from a small prefix, and the object still parses with any JSON tool.

- Listing order: session ids are listed in the byte order of ``<id>/`` (the order of their keys
  in S3). It equals plain string order except where one id is a prefix of another followed by
  ``-`` or ``.`` (those sort before ``/``); all backends use the same order so paging with
  ``after=page[-1]`` is consistent everywhere.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from tether.core.events import AgentEvent
from tether.errors import InvalidInput, SnapshotCorrupt, UnsupportedSchemaVersion
from tether.ids import validate_id, validate_tenant
from tether.persistence.codec import sha256_hex

LAYOUT_VERSION = "v1"
HEAD_NAME = "head.json"
EVENTS_DIR = "events"
ENVELOPE_VERSION = 1
JOURNALED_ENVELOPE_VERSION = 2
"""A head whose object file has a journal beside it (the same body; see
:mod:`tether.persistence.journal`): builds that do not read journals refuse it."""
SUPPORTED_ENVELOPE_VERSIONS = (1, 2)
ITEMS_DIR = "items"
HEAD_KIND = "head"
SEGMENT_KIND = "segment"
CHUNK_KIND = "chunk"
INDEX_KIND = "chunk-index"

_BODY_MARK = b',"body":'
_MAGIC = b'{"tether":'
MAX_HEADER_BYTES = 1024
"""The header (everything before the body) is always shorter than this."""

_SEGMENT_RE = re.compile(r"(\d{20})-(\d{20})\.json")


# --- keys -------------------------------------------------------------------------------------


def tenant_dir(tenant: str) -> str:
    """The key prefix (ending in ``/``) under which a tenant's sessions live."""
    return f"{LAYOUT_VERSION}/{validate_tenant(tenant)}/"


def session_dir(tenant: str, session_id: str) -> str:
    """The key prefix (ending in ``/``) of one session."""
    return f"{tenant_dir(tenant)}{validate_id(session_id)}/"


def head_key(tenant: str, session_id: str) -> str:
    """The key of a session head."""
    return session_dir(tenant, session_id) + HEAD_NAME


def events_dir(tenant: str, session_id: str) -> str:
    """The key prefix (ending in ``/``) of a session's archived segments."""
    return f"{session_dir(tenant, session_id)}{EVENTS_DIR}/"


def items_dir(tenant: str, session_id: str) -> str:
    """The key prefix (ending in ``/``) of a session's memory chunks."""
    return f"{events_dir(tenant, session_id)}{ITEMS_DIR}/"


def chunk_key(tenant: str, session_id: str, name: str) -> str:
    """The key of the memory chunk ``name`` (a :data:`tether.core.snapshot.ChunkName`)."""
    return f"{items_dir(tenant, session_id)}{name}.json"


def listing_order(session_id: str) -> str:
    """The sort key of session ids in listings (see the module docstring)."""
    return session_id + "/"


def check_limit(limit: int) -> int:
    """Validate a page size.

    Raises:
        InvalidInput: ``limit`` is not a positive integer.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidInput(f"limit must be a positive integer, got {limit!r}")
    return limit


# --- segments ---------------------------------------------------------------------------------


class SegmentRange(NamedTuple):
    """The inclusive sequence range of one archived segment."""

    first_seq: int
    last_seq: int


def segment_name(first_seq: int, last_seq: int) -> str:
    """The object name of a segment holding ``first_seq..last_seq``."""
    return f"{first_seq:020d}-{last_seq:020d}.json"


def parse_segment_name(name: str) -> SegmentRange | None:
    """The range encoded in a segment name, or None when ``name`` is not a segment."""
    match = _SEGMENT_RE.fullmatch(name)
    if match is None:
        return None
    first, last = int(match.group(1)), int(match.group(2))
    if first < 1 or last < first:
        return None
    return SegmentRange(first, last)


def segment_names(names: Sequence[str]) -> list[str]:
    """The segment names among ``names``, in their given order."""
    return [name for name in names if parse_segment_name(name) is not None]


def check_segment_events(
    tenant: str, session_id: str, events: Sequence[AgentEvent]
) -> SegmentRange:
    """Validate events about to be archived as one segment and return their range.

    Raises:
        InvalidInput: no events, sequence numbers not contiguous from >= 1, or an event of
            another session or tenant.
    """
    if not events:
        raise InvalidInput(
            f"cannot archive an empty segment for session {session_id!r}; pass at least one event"
        )
    first = events[0].seq
    if first < 1:
        raise InvalidInput(
            f"archived events need sequence numbers >= 1; session {session_id!r} got seq {first}"
        )
    for offset, event in enumerate(events):
        if event.seq != first + offset:
            raise InvalidInput(
                f"events of session {session_id!r} are not contiguous: expected seq "
                f"{first + offset}, got {event.seq}; archive consecutive committed events only"
            )
        if event.tenant != tenant or (
            event.session_id is not None and event.session_id != session_id
        ):
            raise InvalidInput(
                f"event seq {event.seq} belongs to tenant {event.tenant!r} session "
                f"{event.session_id!r}, not to tenant {tenant!r} session {session_id!r}"
            )
    return SegmentRange(first, events[-1].seq)


def plan_segments(
    names: Sequence[str], *, after_seq: int, where: str
) -> list[tuple[str, SegmentRange]]:
    """Order segment names, check that they tile the sequence without gaps or overlaps, and
    return the ones holding events after ``after_seq``.

    Names that are not segment names are ignored. The archive may start at any sequence number
    (only the joints between segments are checked).

    Raises:
        SnapshotCorrupt: two segments overlap or leave a gap.
    """
    parsed = sorted(
        ((name, rng) for name in names if (rng := parse_segment_name(name)) is not None),
        key=lambda pair: pair[1],
    )
    for (prev_name, prev), (name, cur) in itertools.pairwise(parsed):
        if cur.first_seq != prev.last_seq + 1:
            problem = "a gap" if cur.first_seq > prev.last_seq + 1 else "an overlap"
            raise SnapshotCorrupt(
                f"event archive at {where} has {problem} between segments {prev_name} and "
                f"{name} (expected the next segment to start at seq {prev.last_seq + 1}). "
                "A segment was lost or written outside Tether; restore the missing segment "
                "from a backup or delete the session's archive."
            )
    return [(name, rng) for name, rng in parsed if rng.last_seq > after_seq]


# --- envelope ---------------------------------------------------------------------------------


class Unsealed(NamedTuple):
    """A verified envelope: its header fields and body bytes."""

    header: dict[str, Any]
    body: bytes


def seal(kind: str, body: bytes, **fields: int) -> bytes:
    """Wrap ``body`` (a JSON document) in a checksummed envelope of ``kind``.

    Args:
        kind: what the body is (``"head"`` or ``"segment"``).
        body: the JSON bytes written by :mod:`tether.persistence.codec`.
        **fields: extra integer header fields (such as a segment's range).
    """
    header: dict[str, Any] = {"tether": kind, "envelope": ENVELOPE_VERSION, **fields}
    header["bytes"] = len(body)
    header["sha256"] = sha256_hex(body)
    prefix = json.dumps(header, separators=(",", ":")).encode()
    return prefix[:-1] + _BODY_MARK + body + b"}"


def unseal(data: bytes, kind: str, *, where: str) -> Unsealed:
    """Verify an envelope of ``kind`` and return its header and body.

    Raises:
        SnapshotCorrupt: not an envelope, the wrong kind, a wrong length or a checksum mismatch.
        UnsupportedSchemaVersion: the envelope format version is unknown.
    """
    if not data.startswith(_MAGIC):
        raise corrupt(kind, where, "it is not a Tether object (no envelope header)")
    mark = data.find(_BODY_MARK, 0, MAX_HEADER_BYTES)
    if mark < 0 or not data.endswith(b"}"):
        raise corrupt(kind, where, "its envelope is truncated or malformed")
    try:
        header = json.loads(data[:mark] + b"}")
    except ValueError as exc:
        raise corrupt(kind, where, f"its envelope header does not parse ({exc})") from exc
    if not isinstance(header, dict):
        raise corrupt(kind, where, "its envelope header is not a JSON object")
    version = header.get("envelope")
    if version not in SUPPORTED_ENVELOPE_VERSIONS:
        raise UnsupportedSchemaVersion(
            f"{_label(kind)} at {where} uses envelope={version!r}; this build reads envelope "
            f"versions {list(SUPPORTED_ENVELOPE_VERSIONS)}. Upgrade Tether to read it."
        )
    if header.get("tether") != kind:
        raise corrupt(kind, where, f"it holds a {header.get('tether')!r} object instead")
    body = data[mark + len(_BODY_MARK) : -1]
    if header.get("bytes") != len(body):
        raise corrupt(
            kind, where, f"its body has {len(body)} bytes, the header says {header.get('bytes')!r}"
        )
    actual = sha256_hex(body)
    if header.get("sha256") != actual:
        raise corrupt(
            kind,
            where,
            f"its sha256 checksum does not match (stored {header.get('sha256')}, "
            f"computed {actual})",
        )
    return Unsealed(header, body)


def corrupt(kind: str, where: str, reason: str) -> SnapshotCorrupt:
    """A :class:`SnapshotCorrupt` naming the object, its location, the problem and the fix."""
    fix = (
        "restore head.json from a backup or an earlier object version, or delete the session "
        "(its stored state is lost)"
        if kind == HEAD_KIND
        else "restore the chunk from a backup or an earlier object version, or delete the "
        "session (its stored state is lost)"
        if kind in (CHUNK_KIND, INDEX_KIND)
        else "restore the segment from a backup, or delete the session's event archive"
    )
    return SnapshotCorrupt(f"{_label(kind)} at {where} is corrupt: {reason}. To recover, {fix}.")


def _label(kind: str) -> str:
    if kind == CHUNK_KIND:
        return "memory chunk"
    if kind == INDEX_KIND:
        return "memory chunk index"
    return "session head" if kind == HEAD_KIND else f"event {kind}"
