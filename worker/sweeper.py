"""Crash recovery faster than the broker's: re-enqueue sessions whose worker died.

A worker that dies mid-run leaves its run (marked RUNNING) at the head of the session queue and
its lease to expire. The broker would redeliver the message only after its visibility timeout
(minutes);
instead every worker's main process runs this sweeper, which finds active sessions without
progress for a lease TTL, no lease holder and queued runs, and sends them a drain task. A short
per-session claim key keeps several sweepers from kicking the same session at once.
"""

from __future__ import annotations

import logging
import threading

from shared.errors import TetherError
from worker.runtime import Runtime

log = logging.getLogger(__name__)

#: A session whose next run never started is kicked only after this many lease TTLs: under a
#: backlog its own message is on the way, and kicking it would flood the queue with drains.
#: A run a dead worker had started (status RUNNING) is kicked after one TTL.
BACKLOG_PATIENCE = 5


def sweep_once(rt: Runtime) -> int:
    """One pass; returns how many sessions were kicked."""
    settings = rt.settings
    kicked = 0
    long_idle = set(rt.runbook.stale_sessions(idle_ms=BACKLOG_PATIENCE * settings.lease_ttl_ms))
    for tenant, session_id in rt.runbook.stale_sessions(idle_ms=settings.lease_ttl_ms):
        if rt.leases.holder(tenant, session_id) is not None:
            continue
        head = rt.runbook.pending_head(tenant, session_id)
        if head is None:
            rt.runbook.forget_if_idle(tenant, session_id)
            continue
        view = rt.runbook.get(head)
        if view is not None and view.status == "QUEUED" and (tenant, session_id) not in long_idle:
            # never started: most likely its message is still waiting in a busy queue, not lost
            continue
        claim = rt.keys.kick(tenant, session_id)
        if not rt.redis.set(claim, b"1", nx=True, px=settings.lease_ttl_ms):
            continue
        from worker.tasks import enqueue_drain

        rt.runbook.touch_active(tenant, session_id)
        enqueue_drain(tenant, session_id)
        kicked += 1
        log.info("sweeper re-enqueued %s/%s (lease expired with queued runs)", tenant, session_id)
    return kicked


class Sweeper:
    """A daemon thread calling :func:`sweep_once` every ``sweep_interval_ms``."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tether-sweeper", daemon=True)

    def start(self) -> Sweeper:
        """Start sweeping."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sweeping."""
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        interval_s = self._rt.settings.sweep_interval_ms / 1000
        while not self._stop.wait(interval_s):
            try:
                sweep_once(self._rt)
            except TetherError as exc:  # Redis away: try again next period
                log.warning("sweep failed: %s", exc)
            except Exception:
                log.exception("sweep failed unexpectedly")
