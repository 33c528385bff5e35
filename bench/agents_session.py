"""P13: the Agents SDK session, ``TetherSession`` against the SDK's own ``SQLiteSession``.

    python -m bench.agents_session              # writes bench/results/p13.md / p13.json
    python -m bench.agents_session --quick      # a smoke run (numbers mean nothing)

Both sides run in this process on local disk, side by side in one run, calls alternating so
load hits both alike: ``TetherSession`` on a ``file://`` store (head + event archive), and
``SQLiteSession`` on a database file. Rows (Tether / SQLite, target ≤ 1.0x at the median and
at the p95, #51):

- **P13** ``add_items`` of one item on a session of 100 items, **P13b** on one of 10,000 (the
  ``extra`` gives Tether's own 10,000 / 100 ratio: flat is 1.0);
- **P13g** ``get_items()`` and **P13l** ``get_items(limit=20)`` on 10,000 items;
- **P13L**, **P13bL**, **P13gL**, **P13lL**: P13, P13b, P13g, P13l with every call in one event
  loop, as an application runs ``Runner.run`` (the rows above run each call in its own
  ``asyncio.run``, as a script does; there ``SQLiteSession`` opens a connection per call, since
  each call runs on a new thread);
- **P13fL** (information): ``BareAppend``, the fewest steps of a durable append in Python,
  against SQLite's ``add_items`` in the same loop: how much room Python leaves above its floor;
- **P13u** and **P13bu**: P13 and P13b on a local store with ``update_log=True``: every head
  update appended to the head's log and synced once, as SQLite's write-ahead log commits,
  instead of a replaced file synced twice (the file, then its directory). By default only
  chunked heads (past 128 items, so P13b but not P13) are logged.

Both are measured at their steady state: before any row, SQLite's write-ahead log is grown until
its first checkpoint wraps it (``settled_sqlite``), as in an application that has run for a while;
a new log that still grows makes SQLite's commits slower, by a third here.

Durability, compared honestly ("fsync for fsync"; openai-agents 0.25.0 read, both sides traced
with ``strace -f -e trace=fsync,fdatasync``): ``SQLiteSession`` opens one connection per worker
thread (thread-local, a process-wide lock per database file) and runs each call through
``asyncio.to_thread``; it sets ``journal_mode=WAL`` and leaves ``synchronous`` at the build's
default, 2 (FULL; this Python's SQLite is built with ``DEFAULT_WAL_SYNCHRONOUS=2``), so each
``add_items`` commit writes its pages to the ``-wal`` file (three, 12 KiB) and ``fdatasync``s it
once; every 1,000 log pages (about 330 such commits) a checkpoint also syncs the log and the
database file. Tether's local store (the ``file://`` store, its journal; no option weakens it)
``fdatasync``s its head's journal once per one-item append (a patch record of about 450 bytes)
and, on two appends in ``CHUNK_ITEMS`` (64), also writes a chunk and/or an archive segment as new
files (``fsync`` of the file, then of its directory) and the head whole (one more ``fdatasync``
each). Both survive a power cut after each acknowledged call, so the rows compare them as they
are; SQLite's ``synchronous=NORMAL`` (a WAL that syncs at checkpoints only) would be a weaker
guarantee that ``SQLiteSession`` offers no setting for. The one-loop add rows count Tether's syncs
(``os.fsync`` and ``os.fdatasync`` calls, per append) and read SQLite's mode from the database
(:func:`sqlite_durability`) in their notes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.core import Measure, Stats, Target
from bench.report import PACKAGES as REPORT_PACKAGES
from bench.report import _cell, _verdict, dump_json, host_info, now_iso, to_json

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
NAME = "p13"
#: the packages every benchmark document lists (its header names them), and the SDK
PACKAGES = (*REPORT_PACKAGES, "matplotlib", "openai-agents")
TARGET = Target("<=", 1.0)


def _item(n: int) -> dict[str, Any]:
    return {"role": "user", "content": f"message number {n} of a long conversation"}


def _sessions(
    root: Path, session_id: str, size: int, *, update_log: bool = False
) -> tuple[Any, Any]:
    """A TetherSession and a SQLiteSession, each holding ``size`` items."""
    from agents.memory import SQLiteSession

    from tether.integrations.openai_agents import TetherSession
    from tether.persistence.storage_url import open_storage
    from tether.persistence.stores import LocalSnapshotStore

    store, archive = open_storage(f"file://{root / 'tether'}")
    if update_log:
        store = LocalSnapshotStore(root / "tether", update_log=True)
    tether = TetherSession(session_id, store=store, archive=archive)
    sqlite = SQLiteSession(session_id, db_path=root / "sqlite.db")
    items = [_item(n) for n in range(size)]
    for session in (tether, sqlite):
        asyncio.run(session.add_items(items))
    return tether, sqlite


#: a bound on the warm-up commits (SQLite checkpoints its log every 1,000 pages by default; a
#: one-row commit writes one or two)
SETTLE_COMMITS_MAX = 5_000


@contextlib.contextmanager
def settled_sqlite(db_path: Path, *, checkpoint_pages: int | None = None) -> Iterator[int]:
    """Hold ``db_path``'s write-ahead log at its steady state while the rows are measured; give
    how many warm-up commits it took.

    A new database's log grows with every commit until SQLite's first automatic checkpoint;
    from then on commits overwrite the log from its start, and a sync that commits no new file
    size is faster (one-item appends here: 0.34-0.39 ms steady against 0.48-0.54 ms while
    growing). Rows measured while the log grows would flatter Tether, and which rows do would
    depend on what ran before them. So commit one-row writes on a connection of its own until a
    commit leaves the log's size as it was (a checkpoint has wrapped it), and keep that
    connection open: SQLite deletes the log when its last connection closes, which the rows
    that run each call in its own ``asyncio.run`` (a thread, so a connection, per call) would
    otherwise do between calls. ``checkpoint_pages`` (``--quick`` only, whose numbers mean
    nothing) wraps the log sooner, on this connection's checkpoints alone."""
    connection = sqlite3.connect(db_path)
    log = db_path.with_name(db_path.name + "-wal")
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        if checkpoint_pages is not None:
            connection.execute(f"PRAGMA wal_autocheckpoint={int(checkpoint_pages)}")
        connection.execute("CREATE TABLE IF NOT EXISTS p13_settle (n INTEGER)")
        size = -1
        for commits in range(1, SETTLE_COMMITS_MAX + 1):
            connection.execute("INSERT INTO p13_settle VALUES (?)", (commits,))
            connection.commit()
            now = log.stat().st_size
            if now == size:
                break
            size = now
        else:
            raise RuntimeError(
                f"SQLite's log at {log} still grew after {SETTLE_COMMITS_MAX} commits: is "
                "wal_autocheckpoint off in this build? The rows would compare against a "
                "growing log"
            )
        yield commits
    finally:
        connection.close()


def sqlite_durability(db_path: Path) -> tuple[str, int]:
    """The journal mode of the database at ``db_path`` and the ``synchronous`` level a new
    connection gets (``SQLiteSession`` never sets it, so its connections run at this one)."""
    connection = sqlite3.connect(db_path)
    try:
        mode = connection.execute("PRAGMA journal_mode").fetchone()[0]
        level = connection.execute("PRAGMA synchronous").fetchone()[0]
    finally:
        connection.close()
    return str(mode), int(level)


@contextlib.contextmanager
def counted_syncs() -> Iterator[list[int]]:
    """Count the ``os.fsync`` and ``os.fdatasync`` calls made meanwhile (``[n]``): Tether's
    syncs, since SQLite syncs from C and is not counted."""
    count = [0]
    fsync, fdatasync = os.fsync, os.fdatasync

    def counted(function: Callable[[Any], None]) -> Callable[[Any], None]:
        def call(fd: Any) -> None:
            count[0] += 1
            function(fd)

        return call

    # setattr: the wrappers take what the originals take (a descriptor or a file object)
    setattr(os, "fsync", counted(fsync))  # noqa: B010
    setattr(os, "fdatasync", counted(fdatasync))  # noqa: B010
    try:
        yield count
    finally:
        setattr(os, "fsync", fsync)  # noqa: B010
        setattr(os, "fdatasync", fdatasync)  # noqa: B010


class BareAppend:
    """The floor under any durable session written in Python: ``add_items`` as the fewest steps
    that still make an append durable and safe between processes (the items to JSON, an
    exclusive ``flock``, a header read, one ``pwrite`` into room written beforehand, one
    ``fdatasync``) in a thread, handed over as ``TetherSession`` hands over its calls (the
    cheaper of the two sessions' ways: ``SQLiteSession`` uses ``asyncio.to_thread`` and waits
    for it in a task of its own). No event, no compare-and-set, no
    redaction and nothing that reads the items back: row P13fL, information for P13L (what is
    left above it is Tether's own Python)."""

    def __init__(self, directory: Path, room_bytes: int = 1 << 24) -> None:
        directory.mkdir()
        self._lock = directory / ".lock"
        self._log = directory / "items.log"
        fd = os.open(self._log, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.pwrite(fd, bytes(room_bytes), 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        self._end = 64

    def append(self, items: list[dict[str, Any]]) -> None:
        data = json.dumps(items).encode() + b"\n"
        lock = os.open(self._lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            fd = os.open(self._log, os.O_RDWR)
            try:
                os.pread(fd, 64, 0)
                os.pwrite(fd, data, self._end)
                os.fdatasync(fd)
            finally:
                os.close(fd)
            self._end += len(data)
        finally:
            os.close(lock)

    async def add_items(self, items: list[dict[str, Any]]) -> None:
        # here, not at the top: the package imports the SDK (about 2 s), as _sessions does
        from tether.integrations.openai_agents.offload import call_in_thread

        await call_in_thread(self.append, items, settle=True)


def _timed(call: Callable[[], Any], loop: asyncio.AbstractEventLoop | None) -> float:
    """One call in ``loop`` (its threads and each session's per-thread state reused, as in an
    application's event loop), or in a fresh ``asyncio.run`` when None (a script's call)."""
    started = time.perf_counter()
    if loop is None:
        asyncio.run(call())
    else:
        loop.run_until_complete(call())
    return (time.perf_counter() - started) * 1000


def _side_by_side(
    tether: Any,
    sqlite: Any,
    call: Callable[[Any], Callable[[], Any]],
    samples: int,
    loop: asyncio.AbstractEventLoop | None = None,
) -> tuple[list[float], list[float]]:
    """``samples`` timings (ms) of ``call(session)`` on each, alternating; two warm-ups."""
    ours, theirs = [], []
    for n in range(samples + 2):
        first, second = (tether, sqlite) if n % 2 == 0 else (sqlite, tether)
        times = {id(first): _timed(call(first), loop), id(second): _timed(call(second), loop)}
        if n >= 2:
            ours.append(times[id(tether)])
            theirs.append(times[id(sqlite)])
    return ours, theirs


def _row(
    id_: str,
    name: str,
    ours: list[float],
    theirs: list[float],
    note: str,
    target: Target | None = TARGET,
    **extra: Any,
) -> Measure:
    tether, sqlite = Stats.of(ours), Stats.of(theirs)
    return Measure(
        tail_target=None if target is None else TARGET,
        tail_percentile=95,
        id=id_,
        name=name,
        unit="ms",
        tether=tether,
        baseline=sqlite,
        baseline_name="the SDK's SQLiteSession (file), the same call, alternating",
        value=tether.median / sqlite.median,
        value_of="median ratio (and the p95 ratio, its own target)",
        target=target,
        note=note,
        extra=extra,
    )


def measures(root: Path, small: int, large: int, samples: int, settled: int) -> list[Measure]:
    """The rows (sessions of ``small`` and ``large`` items), SQLite's log held at its
    steady state (``settled``: the warm-up commits :func:`settled_sqlite` took)."""
    counter = iter(range(10**9))

    def add_one(session: Any) -> Callable[[], Any]:
        return lambda: session.add_items([_item(next(counter))])

    rows = []
    t_small, s_small = _sessions(root, "p13-small", small)
    add_small = _side_by_side(t_small, s_small, add_one, samples)
    t_large, s_large = _sessions(root, "p13-large", large)
    add_large = _side_by_side(t_large, s_large, add_one, samples)
    growth = Stats.of(add_large[0]).median / Stats.of(add_small[0]).median
    rows.append(
        _row(
            "P13",
            f"add_items of 1 item, session of {small} items",
            *add_small,
            f"{samples} appends after 2 warm-ups; before any row, SQLite's log was brought to "
            f"its steady state ({settled} one-row commits, see settled_sqlite)",
            sqlite_settle_commits=settled,
        )
    )
    rows.append(
        _row(
            "P13b",
            f"add_items of 1 item, session of {large} items",
            *add_large,
            f"{samples} appends; Tether's {large}/{small} median ratio {growth:.2f} (flat: 1.0)",
            tether_growth=round(growth, 3),
        )
    )
    read_all = _side_by_side(t_large, s_large, lambda s: lambda: s.get_items(), samples)
    rows.append(
        _row("P13g", f"get_items(), session of {large} items", *read_all, f"{samples} reads")
    )
    read_20 = _side_by_side(t_large, s_large, lambda s: lambda: s.get_items(limit=20), samples)
    rows.append(
        _row("P13l", f"get_items(limit=20), session of {large} items", *read_20, f"{samples} reads")
    )
    rows += _one_loop_rows(root, small, large, samples, add_one)
    t_small, s_small = _sessions(root, "p13u-small", small, update_log=True)
    add_small = _side_by_side(t_small, s_small, add_one, samples)
    t_large, s_large = _sessions(root, "p13u-large", large, update_log=True)
    add_large = _side_by_side(t_large, s_large, add_one, samples)
    growth = Stats.of(add_large[0]).median / Stats.of(add_small[0]).median
    rows.append(
        _row(
            "P13u",
            f"add_items of 1 item, session of {small} items, update_log=True",
            *add_small,
            f"{samples} appends after 2 warm-ups, on LocalSnapshotStore(update_log=True)",
        )
    )
    rows.append(
        _row(
            "P13bu",
            f"add_items of 1 item, session of {large} items, update_log=True",
            *add_large,
            f"{samples} appends on LocalSnapshotStore(update_log=True); Tether's "
            f"{large}/{small} median ratio {growth:.2f} (flat: 1.0)",
            tether_growth=round(growth, 3),
        )
    )
    return rows


def _one_loop_rows(
    root: Path,
    small: int,
    large: int,
    samples: int,
    add_one: Callable[[Any], Callable[[], Any]],
) -> list[Measure]:
    """P13, P13b, P13g and P13l again with every call in one event loop (rows ``…L``), as an
    application calls ``Runner.run``: the loop's worker threads are reused, so SQLiteSession
    keeps its per-thread connection instead of opening one per call, and neither side pays
    ``asyncio.run``'s thread start and join."""
    loop = asyncio.new_event_loop()
    try:
        t_small, s_small = _sessions(root, "p13L-small", small)
        with counted_syncs() as syncs_small:
            add_small = _side_by_side(t_small, s_small, add_one, samples, loop)
        t_large, s_large = _sessions(root, "p13L-large", large)
        with counted_syncs() as syncs_large:
            add_large = _side_by_side(t_large, s_large, add_one, samples, loop)
        read_all = _side_by_side(t_large, s_large, lambda s: lambda: s.get_items(), samples, loop)
        read_20 = _side_by_side(
            t_large, s_large, lambda s: lambda: s.get_items(limit=20), samples, loop
        )
        floor = _side_by_side(BareAppend(root / "p13fL"), s_small, add_one, samples, loop)
    finally:
        loop.close()
    growth = Stats.of(add_large[0]).median / Stats.of(add_small[0]).median
    above_us = (Stats.of(add_small[0]).median - Stats.of(floor[0]).median) * 1000
    note = "in one event loop"
    mode, level = sqlite_durability(root / "sqlite.db")
    appends = samples + 2
    per_small, per_large = syncs_small[0] / appends, syncs_large[0] / appends
    durability = (
        f"equal durability: SQLite journal_mode={mode}, synchronous={level} (2: FULL, the log "
        "synced at every commit); Tether {:.2f} syncs per append (1: its journal; more on the "
        "appends that write a chunk or a segment)"
    )
    return [
        _row(
            "P13L",
            f"add_items of 1 item, session of {small} items, one event loop",
            *add_small,
            f"{samples} appends after 2 warm-ups, {note}; {durability.format(per_small)}",
            tether_syncs_per_append=round(per_small, 3),
            sqlite_journal_mode=mode,
            sqlite_synchronous=level,
        ),
        _row(
            "P13bL",
            f"add_items of 1 item, session of {large} items, one event loop",
            *add_large,
            f"{samples} appends {note}; Tether's {large}/{small} median ratio {growth:.2f} "
            f"(flat: 1.0); {durability.format(per_large)}",
            tether_growth=round(growth, 3),
            tether_syncs_per_append=round(per_large, 3),
        ),
        _row(
            "P13gL",
            f"get_items(), session of {large} items, one event loop",
            *read_all,
            f"{samples} reads {note}",
        ),
        _row(
            "P13lL",
            f"get_items(limit=20), session of {large} items, one event loop",
            *read_20,
            f"{samples} reads {note}",
        ),
        _row(
            "P13fL",
            "floor: a bare durable append in Python (BareAppend), one event loop",
            *floor,
            f"{samples} appends {note}, against SQLite's on the session of {small} items: "
            "the least any session in Python pays (information, no target); Tether's P13L "
            f"median is {above_us:.0f} µs above it",
            target=None,
            tether_above_floor_us=round(above_us, 1),
        ),
    ]


def markdown(rows: list[Measure], meta: dict[str, Any]) -> str:
    """The table with its date, command and machine, and one note per row."""
    machine = meta["machine"]
    pkgs = machine["packages"]
    lines = [
        f"# P13: the Agents SDK session ({meta['date']})",
        "",
        f"`{meta['command']}` in {meta['duration_s']} s on {machine['cpu_count']} CPUs "
        f"({machine['cpu_model']}), load {meta['load_average_1m_start']} at the start; "
        f"tether {pkgs['tether']} ({machine['git_commit']}), openai-agents "
        f"{pkgs['openai-agents']}. Cells are median / p95; the ratios are Tether / SQLite.",
        "",
        "| id | measure | Tether | SQLiteSession | median ratio | p95 ratio | target | |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in rows:
        p95 = m.tether.p95 / m.baseline.p95 if m.baseline and m.baseline.p95 > 0 else None
        lines.append(
            f"| {m.id} | {m.name} | {_cell(m.tether, m.unit)} | {_cell(m.baseline, m.unit)} "
            f"| {m.value:.2f}x | {'-' if p95 is None else f'{p95:.2f}x'} | {m.target_text} "
            f"| {_verdict(m)} |"
        )
    lines += ["", *(f"- **{m.id}**: {m.note}" for m in rows), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure, print and write ``p13.md`` / ``p13.json``."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.agents_session")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke run)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    small, large, samples = (10, 200, 5) if args.quick else (100, 10_000, 300)
    out = args.out or (
        Path(tempfile.gettempdir()) / "tether-bench-quick" if args.quick else DEFAULT_OUT
    )
    load_start = round(os.getloadavg()[0], 2)
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="tether-p13-") as root,
        settled_sqlite(
            Path(root) / "sqlite.db", checkpoint_pages=50 if args.quick else None
        ) as settled,
    ):
        rows = measures(Path(root), small, large, samples, settled)
    meta = {
        "date": now_iso(),
        "command": " ".join(["python -m bench.agents_session", *argv]),
        "quick": args.quick,
        "sizes": {"p13_small": small, "p13_large": large, "p13_samples": samples},
        "duration_s": round(time.monotonic() - started, 1),
        "load_average_1m_start": load_start,
        "machine": host_info(PACKAGES, redis_server="not used"),
        "errors": {},
    }
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(rows, meta)
    (out / f"{NAME}.md").write_text(text)
    (out / f"{NAME}.json").write_text(dump_json(to_json(rows, meta)))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
