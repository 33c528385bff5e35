"""Remove everything one tenant stored: session heads and archive segments, and every Redis key
under the tenant's hash tags (``<ns>:{<tenant>/...}``).

Each session goes through :func:`tether.producer.ops.sessions_admin.delete_session`, so it is taken
with a new lease fence and a busy session is skipped, never forced. A SCAN of the tenant's tag
then removes what the per-session delete keeps on purpose (the fence counter and the last
released fence) and whatever else lives under the tag (run records, the tenant's run-id index),
so nothing of the tenant is left for a new session with the same id to inherit.

Run it while the tenant sends no more work: with the fence counters gone, a worker frozen in
the middle of one of the tenant's runs is no longer fenced out of the (new, empty) stream.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import redis

from tether.errors import SessionBusy, SessionNotFound
from tether.ids import is_valid_id, validate_tenant
from tether.keys import RedisKeys
from tether.persistence.archives.base import EventArchive
from tether.persistence.archives.blob import BlobEventArchive
from tether.persistence.lua import load
from tether.persistence.objects import events_dir, segment_names
from tether.persistence.redis_conn import describe_client, translate_errors
from tether.persistence.stores.base import SnapshotStore, iter_session_ids
from tether.producer.ops.sessions_admin import delete_session

_SCAN_BATCH = 500
#: Session ids the text report names; --json names every one.
_LISTED_SESSIONS = 50
SWEEP = load("purge_sweep")
_GLOB_SPECIAL = re.compile(r"([\\*?\[\]])")


_BUSY = "running or has queued runs"
_REVIVED = "a run was queued on it while the purge ran"


@dataclass(frozen=True)
class SkippedSession:
    """A session the purge left in place, and why."""

    session_id: str
    reason: str


@dataclass(frozen=True)
class PurgeReport:
    """What :func:`purge_tenant` removed, or with ``dry_run`` what it would remove.

    ``redis_keys`` counts keys under the tenant's hash tags; run records kept elsewhere (older
    key schemas) are counted in ``runs`` only.
    """

    tenant: str
    dry_run: bool
    sessions: tuple[str, ...]
    """Sessions deleted (or that would be)."""
    skipped: tuple[SkippedSession, ...]
    heads: int
    segments: int | None
    """Archive segments; None on a dry run over an archive that cannot list its segments."""
    redis_keys: int
    runs: int
    """Run records deleted by the per-session deletes (0 on a dry run)."""
    redis_keys_left: int = 0
    """Keys still under the tenant's tags afterwards: the skipped sessions' keys and their runs'
    index entries, and keys of a shape the purge does not know."""
    next_step: str | None = field(default=None)
    """What the operator should do next, when the purge is not complete."""

    @property
    def complete(self) -> bool:
        """True when no session was skipped."""
        return not self.skipped


@dataclass
class _TenantKeys:
    """The tenant's Redis keys from one SCAN, grouped by what they belong to."""

    sessions: dict[str, set[bytes]] = field(default_factory=lambda: defaultdict(set))
    tenant_level: dict[bytes, str | None] = field(default_factory=dict)
    """Keys whose tag starts ``{<tenant>/~`` (the tenant's own indexes, no session's), each with
    the session its value names (a run-id index entry names its run's session), if any."""
    unknown: set[bytes] = field(default_factory=set)

    def all(self) -> set[bytes]:
        out = set(self.tenant_level) | self.unknown
        for names in self.sessions.values():
            out |= names
        return out

    def tenant_level_of(self, sessions: Iterable[str]) -> set[bytes]:
        """The tenant-level keys naming one of ``sessions`` (their runs' index entries)."""
        wanted = set(sessions)
        return {name for name, owner in self.tenant_level.items() if owner in wanted}


def tenant_key_pattern(keys: RedisKeys, tenant: str) -> str:
    """The SCAN glob matching every key under ``tenant``'s hash tags: ``<ns>:{<tenant>/*``."""
    # ids allow no glob characters today; escaping keeps the match exact if that ever changes
    escaped = _GLOB_SPECIAL.sub(r"\\\1", validate_tenant(tenant))
    return f"{keys.prefix}:{{{escaped}/*"


def purge_tenant(
    store: SnapshotStore,
    archive: EventArchive,
    client: redis.Redis,
    keys: RedisKeys,
    tenant: str,
    *,
    dry_run: bool,
) -> PurgeReport:
    """Delete every session of ``tenant`` (store listing plus sessions only Redis knows) and then
    every Redis key left under the tenant's tags.

    A busy session (a worker holds it, or runs are queued on it) is skipped and reported; its
    keys and its runs' entries in the tenant's run-id index stay, the other tenant-level keys
    go. Re-run after the skipped sessions' runs are done or cancelled to finish. With
    ``dry_run`` nothing is written: the report lists what would go.
    """
    validate_tenant(tenant)
    where = describe_client(client)
    with translate_errors(where):
        before = _scan(client, keys, tenant)
    with_head = set(iter_session_ids(store, tenant))
    session_ids = sorted(with_head | set(before.sessions))
    if dry_run:
        return _dry_run(archive, client, keys, tenant, session_ids, with_head, before)

    done = _delete_sessions(store, archive, client, keys, tenant, session_ids)
    with translate_errors(where):
        after = _scan(client, keys, tenant)
        redis_keys = _sweep(client, keys, tenant, done.deleted, done.skipped, before, after)
        left = len(_scan(client, keys, tenant).all())
    return PurgeReport(
        tenant=tenant,
        dry_run=False,
        sessions=tuple(s for s in done.deleted if s not in done.skipped),
        skipped=_skipped(done.skipped),
        heads=done.heads,
        segments=done.segments,
        redis_keys=redis_keys,
        runs=done.runs,
        redis_keys_left=left,
        next_step=_next_step(tenant, done.skipped, dry_run=False),
    )


@dataclass
class _Deleted:
    """What the per-session deletes did: the sessions gone, those skipped and why, and the
    heads, archive segments and run records they removed."""

    deleted: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    heads: int = 0
    segments: int = 0
    runs: int = 0


def _delete_sessions(
    store: SnapshotStore,
    archive: EventArchive,
    client: redis.Redis,
    keys: RedisKeys,
    tenant: str,
    session_ids: list[str],
) -> _Deleted:
    done = _Deleted()
    for session_id in session_ids:
        try:
            report = delete_session(store, archive, client, keys, tenant, session_id)
        except SessionBusy:
            done.skipped[session_id] = _BUSY
            continue
        except SessionNotFound:
            pass  # only the fence/released keys of an earlier delete: the sweep takes them
        else:
            done.heads += int(report.head_deleted)
            done.segments += report.segments_deleted
            done.runs += report.runs_deleted
        done.deleted.append(session_id)
    return done


def _dry_run(
    archive: EventArchive,
    client: redis.Redis,
    keys: RedisKeys,
    tenant: str,
    session_ids: list[str],
    with_head: set[str],
    found: _TenantKeys,
) -> PurgeReport:
    skipped = {s: _BUSY for s in _busy(client, keys, tenant, session_ids, describe_client(client))}
    chosen = [s for s in session_ids if s not in skipped]
    segments: int | None = 0
    for session_id in chosen:
        count = _count_segments(archive, tenant, session_id)
        segments = None if count is None or segments is None else segments + count
    kept = found.tenant_level_of(skipped)
    redis_keys = len(found.tenant_level) - len(kept)
    redis_keys += sum(len(found.sessions.get(s, ())) for s in chosen)
    return PurgeReport(
        tenant=tenant,
        dry_run=True,
        sessions=tuple(chosen),
        skipped=_skipped(skipped),
        heads=sum(1 for s in chosen if s in with_head),
        segments=segments,
        redis_keys=redis_keys,
        runs=0,
        redis_keys_left=len(found.unknown)
        + len(kept)
        + sum(len(found.sessions.get(s, ())) for s in skipped),
        next_step=_next_step(tenant, skipped, dry_run=True),
    )


def _skipped(skipped: dict[str, str]) -> tuple[SkippedSession, ...]:
    return tuple(SkippedSession(s, reason) for s, reason in sorted(skipped.items()))


def _next_step(tenant: str, skipped: dict[str, str], *, dry_run: bool) -> str | None:
    if not skipped:
        return None
    kept = "would be kept" if dry_run else "were kept"
    return (
        f"{len(skipped)} sessions of tenant {tenant} are busy and {kept}; wait for their runs "
        "or cancel them (`tether cancel RUN_ID`), then run `tether sessions purge --tenant "
        f"{tenant} --yes`{' again' if not dry_run else ''}"
    )


def report_lines(report: PurgeReport) -> list[str]:
    """The report as lines of text for the CLI."""
    verb = "would delete" if report.dry_run else "deleted"
    segments = "?" if report.segments is None else str(report.segments)
    lines = [
        f"tenant {report.tenant}: {verb} {_count(len(report.sessions), 'session')}, "
        f"{_count(report.heads, 'head')}, {segments} archive segments, "
        f"{_count(report.redis_keys, 'Redis key')}, {_count(report.runs, 'run record')}"
    ]
    lines += [f"  {verb} {s}" for s in report.sessions[:_LISTED_SESSIONS]]
    if len(report.sessions) > _LISTED_SESSIONS:
        more = len(report.sessions) - _LISTED_SESSIONS
        lines.append(f"  ... and {more} more (--json lists them all)")
    lines += [f"  skipped {s.session_id}: {s.reason}" for s in report.skipped]
    if report.redis_keys_left:
        lines.append(f"  {report.redis_keys_left} Redis keys left under the tenant's tags")
    if report.next_step:
        lines.append(report.next_step)
    return lines


def _scan(client: redis.Redis, keys: RedisKeys, tenant: str) -> _TenantKeys:
    """Every key under the tenant's tags, grouped by session (tag ``{<tenant>/<session>}``)."""
    head = f"{keys.prefix}:{{{tenant}/"
    found = _TenantKeys()
    for raw in client.scan_iter(match=tenant_key_pattern(keys, tenant), count=_SCAN_BATCH):
        name = raw if isinstance(raw, bytes) else str(raw).encode()
        text = name.decode(errors="replace")
        inner, closed, _ = text[len(head) :].partition("}")
        if not text.startswith(head) or not closed:
            found.unknown.add(name)
        elif inner.startswith("~"):  # "~" is refused in ids: never a session
            found.tenant_level[name] = None
        elif is_valid_id(inner):
            found.sessions[inner].add(name)
        else:
            found.unknown.add(name)
    for batch in _batches(found.tenant_level):
        # MGET answers nil for keys that are not strings: they name no session
        for name, value in zip(batch, client.mget(batch), strict=True):
            found.tenant_level[name] = _session_named(value)
    return found


def _session_named(value: object) -> str | None:
    """The session id a tenant-level key's value names, if it is one."""
    text = value.decode(errors="replace") if isinstance(value, bytes) else value
    return text if isinstance(text, str) and is_valid_id(text) else None


def _sweep(
    client: redis.Redis,
    keys: RedisKeys,
    tenant: str,
    deleted: list[str],
    skipped: dict[str, str],
    before: _TenantKeys,
    after: _TenantKeys,
) -> int:
    """Delete the leftovers of ``deleted`` sessions and the tenant-level keys (but the kept
    sessions' index entries); return how many tag keys the purge removed in all. A deleted
    session that a new run took meanwhile, and a session that appeared during the purge, move
    to ``skipped``."""
    sweep = client.register_script(SWEEP.source)
    still_there = after.all()
    # the per-session deletes drop their runs' entries in the tenant's run-id index
    removed = len(set(before.tenant_level) - still_there)
    for session_id in deleted:
        removed += len(before.sessions.get(session_id, set()) - still_there)
        names = sorted(after.sessions.get(session_id, set()))
        lease, pending = keys.lease(tenant, session_id), keys.pending(tenant, session_id)
        for batch in _batches(names) if names else [[]]:
            result = int(sweep(keys=SWEEP.keys(batch, lease=lease, pending=pending)))
            if result < 0:
                skipped[session_id] = _REVIVED
                break
            removed += result
    for session_id in after.sessions:
        if session_id not in skipped and session_id not in deleted:
            skipped[session_id] = _REVIVED
    # the index entries of the kept sessions' runs stay: `tether wait RUN_ID` still finds them
    doomed = set(after.tenant_level) - after.tenant_level_of(skipped)
    for batch in _batches(sorted(doomed)):
        removed += int(client.delete(*batch))
    return removed


def _busy(
    client: redis.Redis, keys: RedisKeys, tenant: str, session_ids: list[str], where: str
) -> list[str]:
    """The sessions :func:`delete_session` would refuse now (lease held or runs queued)."""
    pipe = client.pipeline(transaction=False)
    for session_id in session_ids:
        pipe.exists(keys.lease(tenant, session_id), keys.pending(tenant, session_id))
    with translate_errors(where):
        replies = pipe.execute()
    return [s for s, n in zip(session_ids, replies, strict=True) if int(n) > 0]


def _count_segments(archive: EventArchive, tenant: str, session_id: str) -> int | None:
    """How many segments a delete would remove; None when the archive cannot list them."""
    if not isinstance(archive, BlobEventArchive):
        return None
    return len(segment_names(archive.blobs.list_names(events_dir(tenant, session_id))))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _batches(names: Iterable[bytes]) -> list[list[bytes]]:
    items = list(names)
    return [items[i : i + _SCAN_BATCH] for i in range(0, len(items), _SCAN_BATCH)]
