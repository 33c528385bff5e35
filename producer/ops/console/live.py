"""Live updates for the pages, as server-sent events.

Three feeds: a session's events (its live Redis stream, tailed with ``XREAD BLOCK``, with the
pieces of a model answer a worker is streaming as ``delta`` messages) and the
tenant's run updates (the completion feed, plus a short poll of in-flight runs so a run going
from queued to running shows too), and a parent session's tree of children (a poll each second,
sent when it changed). Redis clients block, so each open feed has one daemon thread
that hands what it reads to the event loop; it stops within a second of the page closing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from tether.core.events import AgentEvent
from tether.errors import TetherError
from tether.persistence.deltas.base import LiveDelta
from tether.producer.ops.console.backends import Backends
from tether.producer.ops.console.family_view import family_tree
from tether.producer.ops.console.fmt import fmt_time
from tether.producer.ops.console.runs_view import RunRow, active_sessions, queued_run_ids, read_runs
from tether.producer.ops.console.timeline import SUMMARY_CHARS
from tether.producer.ops.live_tokens import delta_doc
from tether.producer.ops.render import event_summary

log = logging.getLogger(__name__)

#: Open feeds per console process; one more is refused (each holds a thread and a connection).
MAX_FEEDS = 32
BLOCK_MS = 500
IN_FLIGHT_POLL_S = 1.0
#: How often an open session page's tree of children is read again (s).
FAMILY_POLL_S = 1.0

Put = Callable[[dict[str, Any]], None]
Pump = Callable[[Put, threading.Event], None]


class TooManyFeeds(TetherError):
    """Every live-feed slot is taken."""


def event_doc(event: AgentEvent) -> dict[str, Any]:
    """What a page gets for one event."""
    summary = " ".join(event_summary(event).split())[:SUMMARY_CHARS]
    return {
        "seq": event.seq,
        "type": event.type.value,
        "run_id": event.run_id,
        "step": event.step,
        "ts_ms": event.ts_ms,
        "summary": summary,
    }


def run_doc(row: RunRow) -> dict[str, Any]:
    """What a page gets for one run update."""
    return {
        "run_id": row.run_id,
        "session_id": row.session_id,
        "agent": row.agent,
        "status": row.status,
        "worker": row.worker,
        "attempts": row.attempts,
        "submitted": fmt_time(row.submitted_at_ms),
        "cancel_requested": row.cancel_requested,
        "waiting": row.waiting,
        "parked": row.parked,
    }


class LiveFeeds:
    """The feeds of one console (one tenant)."""

    def __init__(self, backends: Backends, tenant: str, max_feeds: int = MAX_FEEDS) -> None:
        self._b = backends
        self._tenant = tenant
        self._max_feeds = max_feeds
        self._open = 0
        self._lock = threading.Lock()

    def session_events(self, session_id: str, after_seq: int) -> AsyncIterator[dict[str, Any]]:
        """``event`` messages for the session's events after ``after_seq``, as they happen."""
        b, tenant = self._b, self._tenant

        def pump(put: Put, stop: threading.Event) -> None:
            for item in b.live.follow(
                tenant, session_id, after_seq=after_seq, block_ms=BLOCK_MS, stop=stop.is_set
            ):
                if isinstance(item, LiveDelta):
                    put({"event": "delta", "data": json.dumps(delta_doc(item))})
                else:
                    data = json.dumps(event_doc(item))
                    put({"event": "event", "data": data, "id": str(item.seq)})
                if stop.is_set():
                    return

        return self._feed(pump)

    def run_updates(self, after: bytes | None = None) -> AsyncIterator[dict[str, Any]]:
        """``run`` messages whenever one of the tenant's runs changes status; completions after
        the completion-feed position ``after`` (the page's, so none is missed between the page
        and its feed), else from now."""
        b, tenant = self._b, self._tenant

        def pump(put: Put, stop: threading.Event) -> None:
            nonlocal after
            if after is None:
                after = b.runs.done_last_id()
            known: dict[str, str] = {}
            next_poll_s = 0.0
            while not stop.is_set():
                entries = b.runs.read_done(after, block_ms=BLOCK_MS)
                if entries:
                    after = entries[-1][0]
                finished = [ref for _position, ref in entries]
                for row in read_runs(b, tenant, finished):
                    known[row.run_id] = row.status
                    put({"event": "run", "data": json.dumps(run_doc(row))})
                if time.monotonic() >= next_poll_s:
                    next_poll_s = time.monotonic() + IN_FLIGHT_POLL_S
                    for row in _in_flight(b, tenant):
                        shown = f"{row.status}:{row.cancel_requested}"
                        if known.get(row.run_id) != shown:
                            known[row.run_id] = shown
                            put({"event": "run", "data": json.dumps(run_doc(row))})

        return self._feed(pump)

    def family(self, session_id: str) -> AsyncIterator[dict[str, Any]]:
        """``family`` messages with the session's tree of children
        (:func:`~tether.producer.ops.console.family_view.family_tree`), read every
        :data:`FAMILY_POLL_S` and sent when it changed (the first at once)."""
        b, tenant = self._b, self._tenant

        def pump(put: Put, stop: threading.Event) -> None:
            last: dict[str, Any] | None = None
            while not stop.is_set():
                doc = family_tree(b, tenant, session_id, b.settings.max_child_depth).doc()
                if doc != last:
                    last = doc
                    put({"event": "family", "data": json.dumps(doc)})
                stop.wait(FAMILY_POLL_S)

        return self._feed(pump)

    def _feed(self, pump: Pump) -> AsyncIterator[dict[str, Any]]:
        with self._lock:  # checked now, so the page gets a 503 instead of an empty feed
            if self._open >= self._max_feeds:
                raise TooManyFeeds(
                    f"{self._max_feeds} live feeds are open on this console; close some pages "
                    "and reload"
                )
        return self._pumped(pump)

    async def _pumped(self, pump: Pump) -> AsyncIterator[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[dict[str, Any] | BaseException] = asyncio.Queue()
        stop = threading.Event()

        def put(item: dict[str, Any] | BaseException) -> None:
            if not stop.is_set():
                loop.call_soon_threadsafe(queue.put_nowait, item)

        def run() -> None:
            try:
                pump(put, stop)
            except Exception as exc:  # the page gets an error message, the console goes on
                log.warning("live feed stopped: %s", exc)
                put(exc)
            finally:
                with self._lock:
                    self._open -= 1

        with self._lock:
            self._open += 1
        threading.Thread(target=run, name="console-feed", daemon=True).start()
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    yield {"event": "failed", "data": json.dumps({"error": str(item)[:300]})}
                    return
                yield item
        finally:
            stop.set()


def _in_flight(b: Backends, tenant: str) -> list[RunRow]:
    return read_runs(b, tenant, queued_run_ids(b, tenant, active_sessions(b, tenant)))
