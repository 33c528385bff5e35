"""``tether sessions ...``: read, check, list fork points, fork, delete and purge stored sessions,
and drop a session's cached head.

Reads go through :class:`tether.persistence.reader.SessionLogReader` over the store and archive
named by
the settings (``TETHER_STORE_URL``); only ``delete`` and ``purge`` also need Redis (the live
stream).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tether.errors import InvalidInput, SessionNotFound
from tether.producer.ops.cli.support import (
    EXIT_FAILED,
    EXIT_USAGE,
    JsonOption,
    TenantOption,
    cli_settings,
    open_reader,
    open_store,
)

# `tether --help` imports this module to read the commands' options: the event models
# (pydantic), the renderers (rich, the session reader) and the settings are imported by the
# functions that use them.
if TYPE_CHECKING:
    from tether.core.events import AgentEvent, EventType
    from tether.core.snapshot import SessionSnapshot
    from tether.persistence.reader import SessionLogReader
    from tether.settings import Settings

sessions_app = typer.Typer(
    help="Read, verify, fork, delete and purge stored sessions.", no_args_is_help=True
)
SessionArg = Annotated[str, typer.Argument(metavar="SESSION", help="Session id.")]
TypeOption = Annotated[
    list[str] | None, typer.Option("--type", "-t", help="Event type (repeatable), e.g. ERROR.")
]


def register(app: typer.Typer) -> None:
    """Add ``tether sessions`` to ``app``."""
    app.add_typer(sessions_app, name="sessions")


def _context(tenant: str | None) -> tuple[Settings, str]:
    settings = cli_settings()
    return settings, tenant or settings.tenant


def _event_types(names: list[str] | None) -> set[EventType] | None:
    if not names:
        return None
    from tether.core.events import EventType

    known = {t.value: t for t in EventType}
    wanted = set()
    for name in names:
        key = name.strip().upper()
        if key not in known:
            raise InvalidInput(f"unknown event type {name!r}; use one of {', '.join(known)}")
        wanted.add(known[key])
    return wanted


ParentsOption = Annotated[
    bool,
    typer.Option(
        "--parents",
        help="Also name each child session's parent run (ctx.spawn); reads every head.",
    ),
]


@sessions_app.command("list")
def list_sessions(
    tenant: TenantOption = None, as_json: JsonOption = False, parents: ParentsOption = False
) -> None:
    """List the session ids of a tenant (``--parents``: with each child's parent run)."""
    from tether.producer.ops.render import emit_json, make_console

    settings, tenant = _context(tenant)
    reader = open_reader(settings)
    ids = reader.list_session_ids(tenant)
    found = {s: _parent_of(reader, s, tenant) for s in ids} if parents else {}
    if as_json:
        doc: dict[str, object] = {"tenant": tenant, "sessions": ids}
        if parents:
            doc["parents"] = {s: p for s, p in found.items() if p is not None}
        emit_json(doc)
        return
    for session_id in ids:
        parent = found.get(session_id)
        if parent is None:
            typer.echo(session_id)
        else:
            typer.echo(f"{session_id}  <- {parent['session_id']} run {parent['run_id']}")
    make_console(stderr=True).print(f"[dim]{len(ids)} sessions in tenant {tenant}[/]")


def _parent_of(reader: SessionLogReader, session_id: str, tenant: str) -> dict[str, Any] | None:
    """The parent run a child session was spawned by (None: no child)."""
    from tether.runs.waits.children import PARENT_ATTRIBUTE

    stored = reader.store.load_shallow(tenant, session_id)
    mark = stored.snapshot.metadata.attributes.get(PARENT_ATTRIBUTE) if stored else None
    return mark if isinstance(mark, dict) else None


def _head_summary(head: SessionSnapshot) -> dict[str, object]:
    meta = head.metadata
    return {
        "tenant": meta.tenant,
        "session_id": meta.session_id,
        "created_at_ms": meta.created_at_ms,
        "updated_at_ms": meta.updated_at_ms,
        "parent_session_id": meta.parent_session_id,
        "attributes": meta.attributes,
        "last_seq": head.last_seq,
        "archived_seq": head.archived_seq,
        "memory_items": len(head.memory.items),
        "summary": head.memory.summary,
        "applied_runs": [r.model_dump(mode="json") for r in head.applied],
    }


@sessions_app.command()
def show(session_id: SessionArg, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """Show a session's head: metadata, sequence numbers, memory size and recent runs."""
    from rich.table import Table

    from tether.producer.ops.render import emit_json, make_console

    settings, tenant = _context(tenant)
    reader = open_reader(settings)
    head = reader.read(session_id, tenant=tenant)
    if head is None:
        raise SessionNotFound(
            f"session {tenant}/{session_id} not found; list sessions with "
            f"'tether sessions list --tenant {tenant}'"
        )
    summary = _head_summary(head)
    if as_json:
        emit_json(summary)
        return
    table = Table(title=f"session {tenant}/{session_id}", show_header=False)
    for key, value in summary.items():
        if key != "applied_runs":
            table.add_row(key, "" if value is None else str(value))
    runs = Table("run", "status", "output", "seq", title="recent runs")
    for record in head.applied[-10:]:
        runs.add_row(
            record.run_id,
            record.status,
            (record.output or "")[:60],
            f"{record.first_seq}-{record.last_seq}",
        )
    console = make_console()
    console.print(table)
    console.print(runs)


def _print_events(events: list[AgentEvent], title: str, as_json: bool) -> None:
    from tether.core.events import event_to_dict
    from tether.producer.ops.render import emit_json, events_table, make_console

    if as_json:
        emit_json([event_to_dict(e) for e in events])
    else:
        make_console().print(events_table(events, title=title))


@sessions_app.command()
def events(
    session_id: SessionArg,
    tenant: TenantOption = None,
    after_seq: Annotated[int, typer.Option("--after-seq", min=0)] = 0,
    limit: Annotated[int | None, typer.Option("--limit", min=1)] = None,
    types: TypeOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print a session's committed events (archive plus head), in sequence order."""
    settings, tenant = _context(tenant)
    wanted = _event_types(types)
    history = open_reader(settings).events(session_id, tenant=tenant)
    chosen = [e for e in history if e.seq > after_seq and (wanted is None or e.type in wanted)]
    _print_events(chosen[:limit] if limit else chosen, f"{tenant}/{session_id}", as_json)


@sessions_app.command()
def search(
    session_id: SessionArg,
    tenant: TenantOption = None,
    types: TypeOption = None,
    text: Annotated[str | None, typer.Option("--text", help="Substring of the event JSON.")] = None,
    run_id: Annotated[str | None, typer.Option("--run", help="Only this run's events.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Find events by type, text and/or run id."""
    if not (types or text or run_id):
        raise InvalidInput("give at least one of --type, --text or --run to search")
    settings, tenant = _context(tenant)
    needle = text.lower() if text else None

    def match(event: AgentEvent) -> bool:
        if run_id is not None and event.run_id != run_id:
            return False
        return needle is None or needle in event.model_dump_json().lower()

    predicate: Callable[[AgentEvent], bool] = match
    found = open_reader(settings).search(
        session_id, tenant=tenant, types=_event_types(types), predicate=predicate
    )
    _print_events(found, f"{len(found)} matching events in {tenant}/{session_id}", as_json)


@sessions_app.command()
def project(
    session_id: SessionArg, tenant: TenantOption = None, as_json: JsonOption = False
) -> None:
    """Fold a session's history into the memory it describes."""
    from tether.producer.ops.render import emit_json, make_console, memory_table

    settings, tenant = _context(tenant)
    memory = open_reader(settings).project(session_id, tenant=tenant)
    if as_json:
        emit_json(memory.model_dump(mode="json"))
    else:
        make_console().print(memory_table(memory, title=f"memory of {tenant}/{session_id}"))


@sessions_app.command()
def verify(
    session_ids: Annotated[
        list[str] | None, typer.Argument(metavar="[SESSION]...", help="Default: every session.")
    ] = None,
    tenant: TenantOption = None,
    as_json: JsonOption = False,
) -> None:
    """Check the event contract: gapless sequence, fold equals stored memory. Exits 1 on FAIL."""
    from tether.producer.ops.render import emit_json, make_console, verify_line

    settings, tenant = _context(tenant)
    reader = open_reader(settings)
    names = session_ids or reader.list_session_ids(tenant)
    reports = [reader.verify(s, tenant=tenant) for s in names]
    if as_json:
        emit_json([asdict(r) for r in reports])
    else:
        console = make_console()
        for report in reports:
            console.print(verify_line(report))
    if not all(r.ok for r in reports):
        raise typer.Exit(EXIT_FAILED)


@sessions_app.command()
def history(
    session_id: SessionArg, tenant: TenantOption = None, as_json: JsonOption = False
) -> None:
    """List the points a session can be forked from (`sessions fork --at-seq SEQ`): each user
    input, each run's end, each memory write outside a run."""
    from rich.table import Table

    from tether.producer.ops.render import emit_json, make_console

    settings, tenant = _context(tenant)
    points = open_reader(settings).history(session_id, tenant=tenant)
    if as_json:
        emit_json([asdict(p) for p in points])
        return
    table = Table(
        "seq",
        "time (UTC)",
        "run",
        "kind",
        "what happened",
        title=f"fork points of {tenant}/{session_id}",
    )
    for point in points:
        when = datetime.fromtimestamp(point.ts_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
        text = " | ".join(line for line in point.text.splitlines() if line.strip())
        table.add_row(
            str(point.seq),
            when,
            point.run_id or "-",
            point.kind,
            text if len(text) <= 80 else text[:77] + "...",
        )
    make_console().print(table)


@sessions_app.command()
def fork(
    session_id: SessionArg,
    new_session_id: Annotated[str, typer.Argument(metavar="NEW_SESSION")],
    tenant: TenantOption = None,
    at_seq: Annotated[
        int | None,
        typer.Option(
            "--at-seq",
            min=0,
            help="Fork as the session was right after this event "
            "(see `sessions history`); default: as it is now.",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Copy a session under a new id, now or at an earlier point (refuses an existing id)."""
    from tether.producer.ops.render import emit_json

    settings, tenant = _context(tenant)
    head = open_reader(settings).fork(session_id, new_session_id, tenant=tenant, at_seq=at_seq)
    if as_json:
        emit_json(_head_summary(head))
    else:
        at = "" if at_seq is None else f" at seq {at_seq}"
        typer.echo(f"forked {tenant}/{session_id}{at} -> {tenant}/{new_session_id}")


@sessions_app.command()
def delete(
    session_id: SessionArg,
    tenant: TenantOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Delete a session: its head, archived events, live stream, run records and request ids."""
    from tether.keys import RedisKeys
    from tether.persistence.redis_conn import redis_from_url
    from tether.producer.ops.render import emit_json
    from tether.producer.ops.sessions_admin import delete_session

    settings, tenant = _context(tenant)
    if not yes:
        _confirm_delete(tenant, session_id)
    store, archive = open_store(settings)
    client = redis_from_url(settings.effective_redis_url)
    try:
        report = delete_session(
            store, archive, client, RedisKeys(settings.namespace), tenant, session_id
        )
    finally:
        client.close()
    if as_json:
        emit_json(asdict(report))
    else:
        typer.echo(
            f"deleted {tenant}/{session_id}: head {'yes' if report.head_deleted else 'no'}, "
            f"{report.segments_deleted} archive segments, "
            f"{report.stream_keys_deleted} stream keys, {report.runs_deleted} run records"
        )


def _confirm_delete(tenant: str, session_id: str) -> None:
    """Ask on a terminal; refuse elsewhere (a script, a pipe, cron), as ``purge`` does: a prompt
    nobody can answer only aborted with a bare ``Abort:``, not saying that --yes was missing."""
    import sys

    if not sys.stdin.isatty():
        typer.echo(
            f"refusing to delete session {tenant}/{session_id} without --yes: stdin is not a "
            "terminal to confirm on, nothing was deleted; add --yes to delete it",
            err=True,
        )
        raise typer.Exit(EXIT_USAGE)
    typer.confirm(f"delete session {tenant}/{session_id} and all its events?", abort=True)


@sessions_app.command("drop-cache")
def drop_cache(session_id: SessionArg, tenant: TenantOption = None) -> None:
    """Forget the session's cached head, so its next run reads the store: run it after
    writing the store behind Tether's back (restoring head.json from a backup, say)."""
    from tether.keys import RedisKeys
    from tether.persistence.headcache.redis import RedisHeadCache
    from tether.persistence.redis_conn import redis_from_url

    settings, tenant = _context(tenant)
    client = redis_from_url(settings.effective_redis_url)
    try:
        cache = RedisHeadCache(
            client,
            RedisKeys(settings.namespace),
            ttl_ms=max(1, settings.head_cache_ttl_s) * 1000,
            max_bytes=settings.head_cache_max_bytes,
        )
        cache.drop(tenant, session_id)
    finally:
        client.close()
    typer.echo(f"dropped the cached head of {tenant}/{session_id}; its next run reads the store")


@sessions_app.command()
def purge(
    tenant: Annotated[str, typer.Option("--tenant", help="The tenant to remove entirely.")],
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Delete; without it only show what would go.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Delete every session of a tenant (heads, archived events) and every Redis key under its
    tags. Without --yes: show what would go and exit 2. Exits 1 when busy sessions were kept."""
    from tether.keys import RedisKeys
    from tether.persistence.redis_conn import redis_from_url
    from tether.producer.ops.render import emit_json
    from tether.producer.ops.tenant_purge import purge_tenant, report_lines

    settings = cli_settings()
    store, archive = open_store(settings)
    client = redis_from_url(settings.effective_redis_url)
    try:
        keys = RedisKeys(settings.namespace)
        report = purge_tenant(store, archive, client, keys, tenant, dry_run=not yes)
    finally:
        client.close()
    if as_json:
        emit_json({**asdict(report), "complete": report.complete})
    else:
        typer.echo("\n".join(report_lines(report)))
    if not yes:
        typer.echo(
            f"refusing to purge tenant {tenant} without --yes: nothing was deleted; add --yes "
            "to delete what is listed",
            err=True,
        )
        raise typer.Exit(EXIT_USAGE)
    if report.skipped:
        raise typer.Exit(EXIT_FAILED)
